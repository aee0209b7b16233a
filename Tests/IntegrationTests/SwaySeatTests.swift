import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// Issue 41: sttd and sway's seat — one input method per seat, the input method ends with
    /// sttd and comes back with sway, and push-to-talk through sway's own key bindings.
    @Suite("sttd's Wayland input method and sway's seat", .serialized)
    struct SwaySeatTests {
        /// Another input method (fcitx5 here is a test client) holds the seat: sttd says so in
        /// its log, `WaylandInputMethod` and `sttctl doctor`, and types with wtype.
        @Test func anotherInputMethodOnTheSeatLeavesSttdToTheTools() async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let other = try sway.bindInputMethod()
            defer { other.close() }
            var environment = SwayDesktop.sttdEnvironment
            environment["PATH"] = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
            let sttd = try await SttdFixture(environment: environment)
            // sttd's runtime folder gets the socket only now: it connects when it appears.
            #expect(symlink(sway.socketPath, "\(sttd.environment["XDG_RUNTIME_DIR"]!)/\(SwayDesktop.display)") == 0)
            try await waitFor("sttd to find the seat taken", timeout: .seconds(20)) {
                try await sttd.property("WaylandInputMethod") == .string("unavailable:seat0")
            }
            #expect(sttd.log.contains("another input method holds seat0"), "\(sttd.log.suffix(2000))")
            let doctor = try sttd.sttctl(["doctor"])
            #expect(doctor.stdout.contains("another input method"), "\(doctor)")

            let field = try await sway.openField(.foot)
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let stop = try sttd.sttctl(["stop"])
            let reply = stop.stdout.trimmingCharacters(in: .newlines)
            #expect(reply.split(separator: " ").count > 5, "\(stop)")
            try await field.waitForText(reply, timeout: .seconds(30), context: sway.log)
            #expect(!other.isUnavailable, "the test's input method kept the seat")
        }

        /// The input method lives in sttd's process: when sttd is killed, sway frees the seat at
        /// once and another input method gets it.
        @Test func theInputMethodDoesNotOutliveSttd() async throws {
            let (sttd, sway) = try await SwayInputMethodTests.start()
            defer { sway.close() }
            let taken = try sway.bindInputMethod()
            #expect(taken.isUnavailable, "sttd held the seat")
            taken.close()
            sttd.sttd.signal(SIGKILL)
            try await waitFor("the seat free after sttd was killed", timeout: .seconds(20)) {
                let next = try sway.bindInputMethod()
                defer { next.close() }
                return !next.isUnavailable
            }
        }

        /// sway ends and starts again behind the same socket name (a new login): sttd lets go,
        /// then holds the new seat and types into it.
        @Test func sttdHoldsTheSeatAgainWhenSwayComesBack() async throws {
            let (server, config, environment) = try await InputMethodTests.streamingServer()
            let (sttd, sway) = try await SwayInputMethodTests.start(config: config, environment: environment)
            defer { sway.close() }
            sway.stop()
            try await waitFor("sttd to see sway gone", timeout: .seconds(20)) {
                try await sttd.property("WaylandInputMethod") == .string("disconnected")
            }
            #expect(try await sttd.property("InputMethod") == .string(""))
            try await sway.restart()
            try await waitFor("sttd to hold the new seat", timeout: .seconds(20)) {
                try await sttd.property("WaylandInputMethod") == .string("seat0")
            }
            let field = try await sway.openField(.gtk3)
            try await GnomeInputMethodTests.dictate(into: field, sttd, context: sway.log)
            _ = server
        }

        /// Push-to-talk with sway's bindings, as docs/desktop.md gives them: keypad + held starts
        /// a session typed into the focused field, its release stops it, and no "+" is typed.
        @Test func swayBindingsStartAndStopASession() async throws {
            let sttctl = try builtExecutable("sttctl")
            // sway's `exec` runs as sway's user: what sttctl says goes to a file it may write.
            let folder = try makeTemporaryDirectory("sttd-sway-binding")
            defer { try? FileManager.default.removeItem(atPath: folder) }
            chmod(folder, 0o777)
            // sttd answers only its own user: it runs as sway's, as in a real session.
            let (sttd, sway) = try await SwayInputMethodTests.start(
                runAs: try await LoginUser.withFreshHome(named: "sttd-desktop"),
                swayConfig: """
                    bindsym --no-repeat KP_Add exec \(sttctl) start --output type >>\(folder)/sttctl.log 2>&1
                    bindsym --release KP_Add exec \(sttctl) stop >>\(folder)/sttctl.log 2>&1
                    """)
            defer { sway.close() }
            func log() -> String {
                "sttctl: " + ((try? String(contentsOfFile: "\(folder)/sttctl.log", encoding: .utf8)) ?? "") + "\n" + sway.log
            }
            let field = try await sway.openField(.gtk3)
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: sway.log)
            let key = try await sway.pressKey(keysym: 0xffab)
            try await waitFor("the binding to start a session: \(log())", timeout: .seconds(20)) {
                try await sttd.property("State") == .string("listening")
            }
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            try await key.release()
            try await waitFor("the release to stop the session", timeout: .seconds(30)) {
                try await sttd.property("State") == .string("idle")
            }
            let text = try #require(try await sttd.property("Transcript")?.string)
            #expect(text.split(separator: " ").count > 5, "\(text)")
            try await field.waitForText(text, timeout: .seconds(30), context: sway.log)
            #expect(!field.text.contains("+"), "\(field.text)")
        }
    }
}
