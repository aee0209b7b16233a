import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// Issue 37, rules 3 to 5, on the IBus desktop of ``InputMethodTests``: push-to-talk never
    /// leaves the microphone on, "scratch that" deletes only what sttd delivered to the focused
    /// field, and a program posing as the input method cannot cut `sttd-ibus` off.
    @Suite("The input method keeps the user in control", .serialized)
    struct InputMethodTrustTests {
        static let pushToTalk = "[ibus]\npush_to_talk = \"KP_Add\"\n"

        static func waitForState(_ sttd: SttdFixture, _ state: String) async throws {
            try await waitFor("State \(state): \(sttd.log.suffix(2000))", timeout: .seconds(20)) {
                try await sttd.property("State") == .string(state)
            }
        }

        @Test func pushToTalkStopsWhenTheEngineDiesWithTheKeyHeld() async throws {
            let (sttd, desktop, field) = try await InputMethodTests.focusedField(config: Self.pushToTalk)
            defer { desktop.close() }
            try await field.xdotool(["keydown", "KP_Add"])
            try await Self.waitForState(sttd, "listening")
            try await sttd.pulse.play(try LibriVox.recordings()[2].path)
            try await desktop.killEngine()
            try await Self.waitForState(sttd, "idle")
            try await field.xdotool(["keyup", "KP_Add"])
            #expect(sttd.log.contains("the input method left the bus; stopping the push-to-talk session"))
            let transcript = try #require(try await sttd.property("Transcript")?.string)
            #expect(!transcript.isEmpty, "the words before the crash are kept")
            let history = try sttd.sttctl(["history", "--json"]).stdout
            #expect(history.contains(transcript))
        }

        @Test func pushToTalkStopsWhenTheFocusMovesToAWindowWithoutTheInputMethod() async throws {
            let (sttd, desktop, field) = try await InputMethodTests.focusedField(config: Self.pushToTalk)
            defer { desktop.close() }
            try await field.xdotool(["keydown", "KP_Add"])
            try await Self.waitForState(sttd, "listening")
            try await desktop.focusWindowWithoutInputMethod()
            // The release goes to the xterm; the engine never sees it.
            try await field.xdotool(["keyup", "KP_Add"])
            try await Self.waitForState(sttd, "idle")
            #expect(try await sttd.property("InputMethod") == .string("active"))
        }

        /// Issue 39: Dictation is selected before any window exists. IBus 1.5.27 gives the new
        /// engine its fake context's focus without a client: that is no field, so a final is not
        /// typed anywhere and sttd says so (before, the engine took it for a field).
        @Test func theFocusIBusGivesANewEngineBeforeAnyWindowIsNoField() async throws {
            var script = DeepgramTestServer.Script()
            script.finals = ["Nowhere to go."]
            script.gatedFinals = true
            let server = try await DeepgramTestServer(script: script)
            let sttd = try await InputMethodTests.sttd(
                config: "backend = \"deepgram\"\n[deepgram]\nurl = \"\(server.url())\"\n",
                environment: ["STTD_API_KEY": script.key])
            let notifications = try await NotificationServer(busAddress: sttd.bus.address)
            defer { notifications.stop() }
            let desktop = try await IBusDesktop.start(for: sttd)
            defer { desktop.close() }
            try await InputMethodTests.waitForInputMethod(sttd, "active")
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            server.permitFinals()
            try await waitFor("the notice that the final was not typed", timeout: .seconds(30)) {
                notifications.notifications.contains {
                    $0.summary == "Dictated text was not typed" && $0.body.contains("no text field")
                }
            }
            #expect(try await sttd.property("InputMethod") == .string("active"))
            let stop = try sttd.sttctl(["stop"])
            #expect(stop.stdout.contains("Nowhere to go."), "\(stop)")
        }

        /// A final arrives while no field has the focus; the focus then goes to a field holding the
        /// user's own text; "scratch that" removes the final from the transcript but deletes nothing.
        @Test func scratchThatDeletesNothingItDidNotDeliverToTheFocusedField() async throws {
            var script = DeepgramTestServer.Script()
            script.finals = ["Lost words.", "Scratch that.", "Done."]
            script.gatedFinals = true
            let server = try await DeepgramTestServer(script: script)
            let (sttd, desktop, field) = try await InputMethodTests.focusedField(
                config: "backend = \"deepgram\"\n[deepgram]\nurl = \"\(server.url())\"\n",
                environment: ["STTD_API_KEY": script.key])
            defer { desktop.close() }
            try await field.xdotool(["type", "--delay", "20", "Keep this."])
            try await field.waitForText("Keep this.", context: "field: \(field.text)")

            try await desktop.focusWindowWithoutInputMethod()
            try await InputMethodTests.waitForInputMethod(sttd, "active")
            let recorder = try await sttd.record()
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            server.permitFinals()
            try await recorder.wait("the first final, while no field has the focus") {
                $0.contains { $0.member == "TranscriptChanged" && $0.arguments.last == .boolean(true) }
            }

            try await field.focus()
            try await InputMethodTests.waitForInputMethod(sttd, "focused")
            server.permitFinals()
            try await recorder.wait("TranscriptRetracted") { $0.contains { $0.member == "TranscriptRetracted" } }
            #expect(try await sttd.property("Transcript") == .string(""))
            // The next final lands after the deletion would have: the field shows what happened.
            server.permitFinals()
            try await field.waitForText("Keep this.Done.", context: "field: \(field.text.debugDescription)\n\(desktop.log)")
            _ = try sttd.sttctl(["stop"])
            let history = try sttd.sttctl(["history", "--json"]).stdout
            #expect(!history.contains("Lost words"), "\(history)")
        }

        /// Issue 37: `InputMethod` says when a password field has the focus: it is not broadcast,
        /// and an app in a sandbox reads it as empty.
        @Test func anAppCannotTellWhenAPasswordFieldHasTheFocus() async throws {
            let sttd = try await InputMethodTests.sttd(config: "consent = \"allow\"\n")
            let desktop = try await IBusDesktop.start(for: sttd)
            defer { desktop.close() }
            let recorder = try await sttd.record()
            let app = try FlatpakSandbox(appID: "org.example.Notes", busAddress: sttd.bus.address).launchApp()
            let password = try await desktop.openField(password: true)
            try await InputMethodTests.waitForInputMethod(sttd, "secret")
            let read = try await app.get("InputMethod")
            #expect(read.error == nil && read.value == "", "\(read)")
            let all = try await app.request(["get_all": true])
            let shown = try #require(
                try JSONSerialization.jsonObject(with: Data((all.value ?? "").utf8)) as? [String: Any], "\(all)")
            #expect(shown["InputMethod"] as? String == "", "\(all)")
            #expect(recorder.changes(of: "InputMethod").isEmpty, "broadcast: \(recorder.changes(of: "InputMethod"))")
            password.close()
        }

        /// A host program reports itself as the input method and exits: `sttd-ibus`, still on the
        /// bus, takes over again at once, so dictation keeps going through it (and its checks).
        @Test func aProgramThatPosesAsTheInputMethodAndExitsCannotCutItOff() async throws {
            let (sttd, desktop, field) = try await InputMethodTests.focusedField()
            defer { desktop.close() }
            let gdbus = try requireTool("gdbus", package: "libglib2.0-bin")
            let impostor = try await run(
                gdbus,
                [
                    "call", "--address", sttd.bus.address, "--dest", SpeechAPI.busName, "--object-path",
                    SpeechAPI.objectPath, "--method", "\(SpeechAPI.interface).SetInputMethodState", "{'active': <false>}",
                ], timeout: 20)
            #expect(impostor.status == 0, "\(impostor)")
            try await InputMethodTests.waitForInputMethod(sttd, "focused")
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await sttd.pulse.play(try LibriVox.recordings()[3].path)
            let reply = try sttd.sttctl(["stop"]).stdout.trimmingCharacters(in: .newlines)
            #expect(!reply.isEmpty)
            try await field.waitForText(reply, context: "field: \(field.text)\nreply: \(reply)")
        }
    }
}
