import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

/// `sttctl watch` prints what sttd sends, and nothing another peer sends it.
@Suite("sttctl watch", .serialized, .timeLimit(.minutes(2)))
struct WatchTests {
    /// The unique name of the connection process `pid` holds on the fixture's bus.
    static func uniqueName(of pid: pid_t, on fixture: SttdFixture) async throws -> String? {
        let names =
            try await fixture.client.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "ListNames"
            ).first?.strings ?? []
        for name in names where name.hasPrefix(":") {
            let owner = try? await fixture.client.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetConnectionUnixProcessID", arguments: [.string(name)])
            if owner?.first?.uint32 == UInt32(pid) { return name }
        }
        return nil
    }

    @Test func watchPrintsOnlySttdsSignalsAndFollowsARestart() async throws {
        let fixture = try await SttdFixture()
        let directory = try makeTemporaryDirectory("sttctl-watch")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let output = "\(directory)/out"
        let watch = try ChildProcess(
            try builtExecutable("sttctl"), ["watch", "--json"], environment: fixture.environment, stdout: output)
        defer { watch.stop() }
        func lines() -> [String] {
            ((try? String(contentsOfFile: output, encoding: .utf8)) ?? "").split(separator: "\n").map(String.init)
        }
        // Listening once a reset of sttd's (an empty final) reaches it.
        try await waitFor("sttctl watch to print a reset", timeout: .seconds(20)) {
            _ = try? await fixture.speech.call(Speech1.resetTranscript)
            return !lines().isEmpty
        }
        let name = try #require(try await Self.uniqueName(of: watch.pid, on: fixture))

        // Another peer sends watch a TranscriptChanged of its own, to it alone; then sttd sends one.
        let dbusSend = try requireTool("dbus-send", package: "dbus-bin")
        let forged = try await run(
            dbusSend,
            [
                "--bus=\(fixture.bus.address)", "--type=signal", "--dest=\(name)", SpeechAPI.objectPath,
                "\(SpeechAPI.interface).TranscriptChanged", "string:injected", "string:injected", "boolean:true",
            ])
        #expect(forged.status == 0, "\(forged.stderr)")
        let before = lines().count
        try await fixture.speech.call(Speech1.resetTranscript)
        try await waitFor("sttctl watch to print sttd's reset", timeout: .seconds(20)) { lines().count > before }
        #expect(!lines().joined().contains("injected"), "\(lines())")
        #expect(lines().allSatisfy { $0 == #"{"transcript":"","segment":"","is_final":true}"# }, "\(lines())")

        // sttd restarts under a new unique name: watch follows it.
        try await fixture.restartService()
        let count = lines().count
        try await waitFor("sttctl watch to follow the restarted sttd", timeout: .seconds(20)) {
            _ = try? await fixture.speech.call(Speech1.resetTranscript)
            return lines().count > count
        }
        #expect(watch.isRunning)
    }
}
