import Foundation
import TestSupport
import Testing

extension Integration {
    /// Issue 38: a GNOME user who is not root runs `make install PREFIX=~/.local`, logs in, finds
    /// Dictation among the input sources, and dictates into a GTK field; `make uninstall` takes
    /// everything back. The suite's build is installed: the checkout's install inputs (Makefile,
    /// scripts, unit, bus and packaging files, engine and model) and its binaries are copied to a folder the
    /// user owns, and `make install BUILD_DIR=…` runs there as the user. `sudo` and `dpkg-query`
    /// are stand-ins that report every package missing and record what install asks for.
    @Suite("From a checkout to Dictation in GNOME, as a user who is not root", .serialized)
    struct NewcomerInstallTests {
        static let checkout = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .deletingLastPathComponent().deletingLastPathComponent().path
        /// What only the tests use: `make install` must ask for none of it.
        static let testOnlyPackages = [
            "gnome-shell", "sway", "foot", "xvfb", "xterm", "python3-dbusmock", "tk", "bubblewrap", "pulseaudio",
            "pocketsphinx-testdata", "xdg-desktop-portal", "ydotool", "wtype", "xdotool", "python3-venv",
            "kwin-wayland", "python3-pyqt5", "python3-pyqt6",
        ]

        @Test(arguments: [false, true])
        func makeInstallListsDictationInGnomeAndTextArrives(homeHoldsAnOlderIBusCache: Bool) async throws {
            let user = try await LoginUser.withFreshHome()
            defer { try? FileManager.default.removeItem(atPath: user.home) }
            let copy = try Self.copyCheckout(for: user)
            let cache = "\(user.home)/.cache/ibus/bus/registry"
            if homeHoldsAnOlderIBusCache {
                // What ibus-daemon leaves at an earlier login: a cache of the system folder only.
                let ibus = try requireTool("ibus", package: "ibus")
                let written = try await user.run(ibus, ["write-cache"], environment: ["HOME": user.home])
                try #require(written.status == 0 && !Self.cache(cache).isEmpty, "\(written)")
                #expect(!Self.cache(cache).contains("io.github.sttd.IBus"))
            }

            let installed = try await Self.make("install", in: copy, as: user)
            try #require(installed.status == 0, "\(installed)")
            let asked = Self.packagesAsked(user)
            #expect(asked.contains("ibus") && asked.contains("libpulse0"), "asked for: \(asked)")
            #expect(Set(asked).isDisjoint(with: Self.testOnlyPackages), "asked for: \(asked)")
            #expect(Self.cache(cache).contains("io.github.sttd.IBus"), "install refreshed ibus's registry cache")
            let installedFiles = Self.files(under: "\(user.home)/.local")
            #expect(installedFiles.contains("\(user.home)/.local/share/ibus/component/sttd.xml"), "\(installedFiles)")

            let login = try await user.loginEnvironment()
            #expect(
                login["IBUS_COMPONENT_PATH"] == "/usr/share/ibus/component:\(user.home)/.local/share/ibus/component")
            // The whole login is the user's: sttd answers only its own user as the host.
            let sttd = try await SttdFixture(environment: GnomeDesktop.sttdEnvironment, runAs: user)
            let desktop = try await GnomeDesktop.start(for: sttd, login: .init(user: user, environment: login))
            defer { desktop.close() }
            let listed = try await desktop.eval(
                """
                const manager = imports.ui.status.keyboard.getInputSourceManager();
                Object.values(manager.inputSources).filter(s => s.type === 'ibus').map(s => s.displayName).join()
                """)
            // GNOME shows an engine by its language and name.
            #expect(listed == "\"English (Dictation)\"")
            try await GnomeInputMethodTests.dictateIntoAField(sttd, desktop)
            let pgrep = try requireTool("pgrep", package: "procps")
            let engine = try await run(pgrep, ["-u", "\(user.uid)", "-f", "\(user.home)/.local/bin/sttd-ibus"])
            #expect(engine.status == 0, "the installed sttd-ibus runs as the user: \(desktop.log)")
            desktop.close()

            let uninstalled = try await Self.make("uninstall", in: copy, as: user)
            try #require(uninstalled.status == 0, "\(uninstalled)")
            let left = installedFiles.filter { FileManager.default.fileExists(atPath: $0) }
            #expect(left == [], "make uninstall left \(left)")
            #expect(!FileManager.default.fileExists(atPath: "\(user.home)/.config/environment.d/60-sttd-ibus.conf"))
            #expect(!FileManager.default.fileExists(atPath: "\(user.home)/.config/systemd/user/sttd.service"))
            #expect(!Self.cache(cache).contains("io.github.sttd.IBus"), "uninstall refreshed ibus's registry cache")
        }

        /// `make TARGET PREFIX=~/.local` in the copy, as the user on a GNOME Wayland desktop.
        static func make(_ target: String, in copy: String, as user: LoginUser) async throws -> CommandResult {
            let make = try requireTool("make", package: "make")
            return try await user.run(
                make, ["-C", copy, target, "PREFIX=\(user.home)/.local", "BUILD_DIR=.build/prebuilt"],
                environment: [
                    "HOME": user.home, "PATH": "\(user.home)/stand-ins:/usr/local/bin:/usr/bin:/bin",
                    "XDG_CURRENT_DESKTOP": "GNOME", "XDG_SESSION_TYPE": "wayland", "LANG": "C.UTF-8",
                ], timeout: 300)
        }

        /// The install inputs and the suite's binaries, in a folder the user owns, with the
        /// stand-ins for `sudo` and `dpkg-query` beside them.
        static func copyCheckout(for user: LoginUser) throws -> String {
            let copy = "\(user.home)/sttd"
            let build = "\(copy)/.build"
            try FileManager.default.createDirectory(atPath: "\(build)/prebuilt", withIntermediateDirectories: true)
            for item in ["Makefile", "scripts", "systemd", "dbus", "packaging"] {
                try FileManager.default.copyItem(atPath: "\(checkout)/\(item)", toPath: "\(copy)/\(item)")
            }
            for item in ["engines", "models"] {
                try FileManager.default.copyItem(atPath: "\(checkout)/.build/\(item)", toPath: "\(build)/\(item)")
            }
            for name in ["sttd", "sttctl", "sttd-ibus"] {
                try FileManager.default.copyItem(atPath: try builtExecutable(name), toPath: "\(build)/prebuilt/\(name)")
            }
            let standIns = "\(user.home)/stand-ins"
            try FileManager.default.createDirectory(atPath: standIns, withIntermediateDirectories: true)
            let script = { (body: String) in "#!/bin/sh\n\(body)\n" }
            try script("printf '%s\\n' \"$*\" >> \"$HOME/asked.log\"").write(
                toFile: "\(standIns)/sudo", atomically: true, encoding: .utf8)
            try script("exit 1").write(toFile: "\(standIns)/dpkg-query", atomically: true, encoding: .utf8)
            for file in ["sudo", "dpkg-query"] { chmod("\(standIns)/\(file)", 0o755) }
            let chown = try requireTool("chown", package: "coreutils")
            let owned = try TestSupport.run(chown, ["-R", "\(user.uid):\(user.gid)", copy, standIns])
            guard owned.status == 0 else { throw MissingPrerequisite(description: "chown: \(owned.stderr)") }
            return copy
        }

        /// The packages `scripts/setup` asked `sudo apt-get install` for.
        static func packagesAsked(_ user: LoginUser) -> [String] {
            let log = (try? String(contentsOfFile: "\(user.home)/asked.log", encoding: .utf8)) ?? ""
            return log.split(whereSeparator: \.isNewline)
                .filter { $0.contains("apt-get install") }
                .flatMap { line in
                    line.split(separator: " ").drop { $0 != "install" }.dropFirst().filter { !$0.hasPrefix("-") }
                        .map(String.init)
                }
        }

        /// ibus's registry cache as text (its strings are readable in it).
        static func cache(_ path: String) -> String {
            FileManager.default.contents(atPath: path).map { String(decoding: $0, as: UTF8.self) } ?? ""
        }

        /// The files (not folders) under `folder`, with their full paths.
        static func files(under folder: String) -> [String] {
            (FileManager.default.enumerator(atPath: folder)?.compactMap { $0 as? String } ?? [])
                .map { "\(folder)/\($0)" }
                .filter { path in
                    var directory: ObjCBool = false
                    return FileManager.default.fileExists(atPath: path, isDirectory: &directory) && !directory.boolValue
                }
        }
    }
}
