import Foundation
import TestSupport
import Testing

extension Integration {
    /// `sttctl` and `sttd-ibus` are links to the one `sttd` binary, which runs the command named.
    @Suite("One binary, three commands")
    struct MulticallTests {
        @Test func eachNameRunsItsCommand() throws {
            let commands = [
                ("sttd", "--print-introspection"), ("sttctl", "toggle"), ("sttd-ibus", "--component-xml"),
            ]
            for (name, own) in commands {
                let help = try run(try builtExecutable(name), ["--help"])
                #expect(help.status == 0, "\(name) --help: \(help.stderr)")
                #expect(help.stdout.contains("USAGE: \(name) "), "\(name) --help: \(help.stdout)")
                #expect(help.stdout.contains(own), "\(name) --help: \(help.stdout)")
                // generate-manual writes the man pages from this: the page must be the command's.
                let dump = try run(try builtExecutable(name), ["--experimental-dump-help"])
                let tool = try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any]
                let command = tool?["command"] as? [String: Any]
                #expect(command?["commandName"] as? String == name, "\(name) --experimental-dump-help")
            }
            let zsh = try run(try builtExecutable("sttctl"), ["--generate-completion-script", "zsh"])
            #expect(zsh.stdout.hasPrefix("#compdef sttctl"), "\(zsh.stdout.prefix(80))")
            #expect(try FileManager.default.destinationOfSymbolicLink(atPath: try builtExecutable("sttctl")) == "sttd")
        }

        /// ibus-daemon must run the `sttd-ibus` link: the binary itself would run as `sttd`.
        @Test func theComponentRunsTheLinkItWasWrittenBy() throws {
            let ibus = try builtExecutable("sttd-ibus")
            let own = try run(ibus, ["--component-xml"])
            #expect(own.stdout.contains("<exec>\(ibus) --ibus</exec>"), "\(own.stdout)")

            let directory = try makeTemporaryDirectory("sttd-links")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try FileManager.default.createSymbolicLink(
                atPath: "\(directory)/sttd-ibus", withDestinationPath: try builtExecutable("sttd"))
            let elsewhere = try run("\(directory)/sttd-ibus", ["--component-xml"])
            #expect(elsewhere.stdout.contains("<exec>\(directory)/sttd-ibus --ibus</exec>"), "\(elsewhere.stdout)")
            let given = try run(ibus, ["--component-xml", "--exec", "/usr/bin/sttd-ibus"])
            #expect(given.stdout.contains("<exec>/usr/bin/sttd-ibus --ibus</exec>"), "\(given.stdout)")
        }
    }
}
