import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// sttd's input method on a real desktop: Xvfb, a private ibus-daemon with the `sttd` engine
    /// (`sttd-ibus`, from its `--component-xml`) selected, and GTK 3 windows using the ibus IM
    /// module, as IBus's own `src/tests/ibus-keypress.c` sets it up.
    @Suite("Dictation through the input method", .serialized)
    struct InputMethodTests {
        /// sttd whose environment names the X11 desktop but finds no typing tool (its PATH holds
        /// none), so text in a field came through the engine.
        static func sttd(config: String = "", environment extra: [String: String] = [:]) async throws -> SttdFixture {
            var environment = try DesktopKind.x11.environment()
            environment["WAYLAND_DISPLAY"] = ""
            environment["XDG_CURRENT_DESKTOP"] = ""
            environment["PATH"] = "/nonexistent"
            environment.merge(extra) { $1 }
            return try await SttdFixture(config: config, environment: environment)
        }

        /// sttd, the IBus desktop and a GTK field with the focus, the engine on it: the field
        /// closes with the desktop.
        static func focusedField(config: String = "", environment: [String: String] = [:]) async throws -> (
            SttdFixture, IBusDesktop, IBusField
        ) {
            let sttd = try await Self.sttd(config: config, environment: environment)
            let desktop = try await IBusDesktop.start(for: sttd)
            do {
                let field = try await desktop.openField()
                try await Self.waitForInputMethod(sttd, "focused")
                return (sttd, desktop, field)
            } catch {
                desktop.close()
                throw error
            }
        }

        static func waitForInputMethod(
            _ sttd: SttdFixture, _ expected: String, context: @autoclosure () -> String = ""
        ) async throws {
            let reached = try await happens(within: .seconds(15)) {
                try await sttd.property("InputMethod") == .string(expected)
            }
            let now = try await sttd.property("InputMethod")
            try #require(reached, "InputMethod is \(String(describing: now)), not \(expected)\n\(context())")
        }

        static func streamingServer() async throws -> (DeepgramTestServer, String, [String: String]) {
            var script = DeepgramTestServer.Script()
            script.vocabulary = ["café", "Straße", "✓", "😀"]
            let server = try await DeepgramTestServer(script: script)
            return (
                server, "backend = \"deepgram\"\n[deepgram]\nurl = \"\(server.url())\"\n",
                ["STTD_API_KEY": script.key]
            )
        }

        @Test func dictatedSpeechLandsInTheFieldAsTheStopReplyWithPreeditWhileSpeaking() async throws {
            let (sttd, desktop, field) = try await Self.focusedField()
            defer { desktop.close() }
            let recorder = try await sttd.record()

            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            for recording in try LibriVox.recordings().prefix(3) { try await sttd.pulse.play(recording.path) }
            let stop = try sttd.sttctl(["stop"])
            #expect(stop.status == 0, "\(stop)")
            let reply = stop.stdout.trimmingCharacters(in: .newlines)
            #expect(reply.split(separator: " ").count > 30, "\(reply)")
            try await field.waitForText(reply, context: desktop.log)
            // The words being spoken were shown at the cursor before they were final.
            let interims = recorder.signals(named: "TranscriptChanged").filter {
                $0.arguments.last == .boolean(false) && $0.arguments[1] != .string("")
            }
            #expect(!interims.isEmpty, "the engine reported words in progress")
            #expect((field.record?.preedits ?? 0) > 0, "preedit shown: \(String(describing: field.record))")
            // The commit and the preedit's end reach the window in separate updates.
            let cleared = try await happens(within: .seconds(10)) { field.record?.preedit == "" }
            #expect(cleared, "no preedit left after Stop: \(String(describing: field.record))")
        }

        @Test func nonASCIIFinalsArriveExactlyAndInterimsShowAsPreedit() async throws {
            let (server, config, environment) = try await Self.streamingServer()
            let (sttd, desktop, field) = try await Self.focusedField(config: config, environment: environment)
            defer { desktop.close() }

            let start = try sttd.sttctl(["toggle", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await sttd.pulse.play(try LibriVox.recordings()[1].path)
            let stop = try sttd.sttctl(["toggle"])
            #expect(stop.status == 0, "\(stop)")
            let reply = try #require(try await sttd.property("Transcript")?.string)
            #expect(reply.hasPrefix("café Straße ✓ 😀 café"), "\(reply)")
            try await field.waitForText(reply, context: desktop.log)
            let seen = field.record?.preedit_seen ?? []
            #expect(
                !seen.isEmpty && seen.allSatisfy { reply.contains($0.trimmingCharacters(in: .whitespaces)) }, "\(seen)")
            _ = server
        }

        /// Issue 29: line breaks committed as text, "scratch that" as `DeleteSurroundingText`,
        /// "press enter" as a forwarded key, "stop listening" ends the session.
        @Test func voiceCommandsEditTheFieldAsTheTranscript() async throws {
            let (server, config, environment) = try await VoiceCommandTests.streamingServer(VoiceCommandTests.finals)
            let (sttd, desktop, field) = try await Self.focusedField(config: config, environment: environment)
            defer { desktop.close() }
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await VoiceCommandTests.dictateUntilStopped(sttd)
            try await waitFor("\"stop listening\" to end the session", timeout: .seconds(20)) {
                (try? await sttd.property("State")) == .string("idle")
            }
            #expect(try await sttd.property("Transcript") == .string(VoiceCommandTests.transcript))
            try await field.waitForText(VoiceCommandTests.windowText, context: desktop.log)
            _ = server
        }

        @Test func keysPassThroughUnchanged() async throws {
            let (sttd, desktop, field) = try await Self.focusedField()
            defer { desktop.close() }
            try await field.xdotool(["type", "--delay", "20", "Pass through: 123, OK?"])
            try await field.waitForText("Pass through: 123, OK?")
            #expect(try await sttd.property("InputMethod") == .string("focused"), "the engine had the keys")
            #expect(try await sttd.property("State") == .string("idle"))
        }

        @Test func aPasswordFieldNeverReceivesDictation() async throws {
            let (server, config, environment) = try await Self.streamingServer()
            let sttd = try await Self.sttd(config: config, environment: environment)
            let desktop = try await IBusDesktop.start(for: sttd)
            defer { desktop.close() }

            // Started there: refused, and nothing listens.
            let password = try await desktop.openField(password: true)
            defer { password.close() }
            try await Self.waitForInputMethod(sttd, "secret")
            let refused = try sttd.sttctl(["toggle", "--output", "type"])
            #expect(refused.status == 4 && refused.stderr.contains("NotAuthorized"), "\(refused)")
            #expect(refused.stderr.contains("password"), "\(refused)")
            #expect(try await sttd.property("State") == .string("idle"))

            // Started in an ordinary field, then the focus moves to the password field: the words
            // that arrive there go nowhere (they are in the reply and history).
            let ordinary = try await desktop.openField()
            defer { ordinary.close() }
            try await Self.waitForInputMethod(sttd, "focused")
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await password.focus()
            try await Self.waitForInputMethod(sttd, "secret")
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let stop = try sttd.sttctl(["stop"])
            let reply = stop.stdout.trimmingCharacters(in: .newlines)
            #expect(reply.hasPrefix("café Straße"), "\(stop)")
            // Give any stray commit the time it would need to land.
            try await ordinary.focus()
            try await field(ordinary, settlesAfter: .milliseconds(500))
            #expect(password.text == "", "password field: \(password.text)")
            #expect((password.record?.preedits ?? -1) == 0, "\(String(describing: password.record))")
            #expect(ordinary.text == "", "ordinary field: \(ordinary.text)")
            #expect(try await sttd.property("LastError") == .string(SpeechAPI.errorName("InvalidConfiguration")))
            _ = server
        }

        @Test func pushToTalkStartsOnPressStopsOnReleaseAndTheKeyNeverReachesTheField() async throws {
            // A key that types "+" if it got through.
            let (sttd, desktop, field) = try await Self.focusedField(config: "[ibus]\npush_to_talk = \"KP_Add\"\n")
            defer { desktop.close() }

            try await field.xdotool(["keydown", "KP_Add"])
            try await waitFor("pressing the key to start a session: \(desktop.log)", timeout: .seconds(30)) {
                try await sttd.property("State") == .string("listening")
            }
            try await sttd.pulse.play(try LibriVox.recordings()[2].path)
            try await field.xdotool(["keyup", "KP_Add"])
            try await waitFor("releasing it to stop the session", timeout: .seconds(30)) {
                try await sttd.property("State") == .string("idle")
            }
            let transcript = try #require(try await sttd.property("Transcript")?.string)
            #expect(!transcript.isEmpty)
            try await field.waitForText(transcript)
            #expect(!field.text.contains("+"))
            let history = try sttd.sttctl(["history", "--json"]).stdout
            #expect(history.split(separator: "\n").count == 1, "one session: \(history)")

            // A session somebody else started is not the key's to stop.
            #expect(try sttd.sttctl(["start"]).status == 0)
            try await field.xdotool(["keydown", "KP_Add"])
            try await field.xdotool(["keyup", "KP_Add"])
            try await waitFor("the engine to leave the session alone: \(desktop.log)", timeout: .seconds(15)) {
                desktop.log.contains("push-to-talk: a session is running already")
            }
            #expect(try await sttd.property("State") == .string("listening"))
            #expect(try sttd.sttctl(["stop"]).status == 0)
        }

        @Test func theEngineTellsARestartedSttdItsState() async throws {
            let (server, config, environment) = try await Self.streamingServer()
            let (sttd, desktop, field) = try await Self.focusedField(config: config, environment: environment)
            defer { desktop.close() }
            try await sttd.restartService()
            try await Self.waitForInputMethod(sttd, "focused")
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await sttd.pulse.play(try LibriVox.recordings()[3].path)
            let reply = try sttd.sttctl(["stop"]).stdout.trimmingCharacters(in: .newlines)
            #expect(!reply.isEmpty)
            try await field.waitForText(reply)
            _ = server
        }

        /// Waits until the field's record has not changed for `quiet`.
        func field(_ field: IBusField, settlesAfter quiet: Duration) async throws {
            var last = field.text
            var stableSince = ContinuousClock.now
            while ContinuousClock.now - stableSince < quiet {
                try await Task.sleep(for: .milliseconds(50))
                if field.text != last {
                    last = field.text
                    stableSince = .now
                }
            }
        }
    }
}
