import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// sttd typing and copying into real windows: Xvfb with xterm and xdotool, headless sway with
    /// foot and wtype (scripts/desktop-env starts both).
    @Suite("Dictation into real windows", .serialized)
    struct DesktopDictationTests {
        /// sttd for a desktop: its environment names the desktop, nothing else of the test's. These
        /// tests are about the typing tools, so on sway sttd is not the input method
        /// (SwayInputMethodTests test that).
        static func sttd(
            on window: ReceivingWindow, config: String? = nil, environment extra: [String: String] = [:]
        ) async throws -> SttdFixture {
            var environment = ["DISPLAY": "", "WAYLAND_DISPLAY": "", "XDG_CURRENT_DESKTOP": ""]
            environment.merge(window.environment) { $1 }
            environment.merge(extra) { $1 }
            return try await SttdFixture(config: (config ?? "") + toolsOnSway, environment: environment)
        }

        /// The config lines that leave sway's seat to the typing tools.
        static let toolsOnSway = "\n[wayland]\ninput_method = false\n"

        @Test(arguments: DesktopKind.allCases)
        func everyFinalIsTypedAndTheWindowHoldsTheStopReply(_ kind: DesktopKind) async throws {
            let window = try await ReceivingWindow.open(kind)
            defer { window.close() }
            let sttd = try await Self.sttd(on: window)
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
            let recordings = try LibriVox.recordings()
            try await sttd.pulse.play(recordings[0].path)
            // Finals are typed as they arrive, while listening goes on.
            try await waitFor("a final", timeout: .seconds(20)) {
                recorder.signals(named: "TranscriptChanged").contains { $0.arguments.last == .boolean(true) }
            }
            try await waitFor("the final typed before Stop") { !window.text.isEmpty }
            for recording in recordings.dropFirst() { try await sttd.pulse.play(recording.path) }
            let reply = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(reply.split(separator: " ").count > 40, "\(reply)")
            try await window.waitForText(reply)
            let history = try sttd.sttctl(["history", "--json"]).stdout
            #expect(history.contains(reply), "the history entry is the same text")
        }

        /// A plain terminal and a GUI field on X11, a terminal on Wayland.
        @Test(arguments: [(DesktopKind.x11, WindowApp.terminal), (.x11, .textField), (.wayland, .terminal)])
        func nonASCIIFromTheStreamingBackendArrivesIntact(_ kind: DesktopKind, _ app: WindowApp) async throws {
            var script = DeepgramTestServer.Script()
            script.vocabulary = ["café", "Straße", "✓", "naïve", "😀"]
            let server = try await DeepgramTestServer(script: script)
            let window = try await ReceivingWindow.open(kind, app)
            defer { window.close() }
            let sttd = try await Self.sttd(
                on: window, config: "backend = \"deepgram\"\n[deepgram]\nurl = \"\(server.url())\"\n",
                environment: ["STTD_API_KEY": script.key])
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
            try await sttd.pulse.play(try LibriVox.recordings()[1].path)
            let reply = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(reply.hasPrefix("café Straße ✓ naïve 😀 café"), "\(reply)")
            try await window.waitForText(reply)
        }

        @Test(arguments: DesktopKind.allCases)
        func clipboardOutputCopiesAtStopAndLeavesPrimaryAlone(_ kind: DesktopKind) async throws {
            let window = try await ReceivingWindow.open(kind)
            defer { window.close() }
            try DesktopClipboard.set("before", on: kind)
            try DesktopClipboard.set("primary stays", on: kind, primary: true)
            let sttd = try await Self.sttd(on: window)
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "clipboard"))
            try await sttd.pulse.play(try LibriVox.recordings()[2].path)
            let reply = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(!reply.isEmpty)
            #expect(try DesktopClipboard.clipboard(kind) == reply, "on the clipboard when Stop replies")
            #expect(try DesktopClipboard.primary(kind) == "primary stays")
            #expect(window.text.isEmpty, "clipboard output types nothing")
        }

        @Test(arguments: DesktopKind.allCases)
        func pasteLandsInTheWindowAndTheClipboardComesBack(_ kind: DesktopKind) async throws {
            // Pasting is ctrl+v, which GUI fields take and terminals do not.
            let window = try await ReceivingWindow.open(kind, .textField)
            defer { window.close() }
            try DesktopClipboard.set("what I had copied", on: kind)
            let sttd = try await Self.sttd(on: window, config: "output = \"clipboard\"\npaste = true\n")
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(try LibriVox.recordings()[3].path)
            let reply = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(!reply.isEmpty)
            try await window.waitForText(reply)
            #expect(try DesktopClipboard.clipboard(kind) == "what I had copied")
        }

        @Test func autoStopEndsTheSessionWithTheWholeText() async throws {
            let window = try await ReceivingWindow.open(.x11)
            defer { window.close() }
            let sttd = try await Self.sttd(on: window)
            let recorder = try await sttd.record()
            let recording = try LibriVox.recordings()[0]
            try await sttd.speech.call(
                Speech1.startTranscribing, StartRequest(autoStopMilliseconds: 1000, output: "type"))
            try await sttd.pulse.play(recording.path)
            // The virtual microphone is silent once the file ends.
            try await waitFor("the session to stop by itself", timeout: .seconds(30)) {
                (try? await sttd.property("State")) == .string("idle")
            }
            let text = try await sttd.property("Transcript")?.string ?? ""
            #expect(wordErrorRate(reference: recording.reference, hypothesis: normalizedWords(text)) < 50, "\(text)")
            try await window.waitForText(text)
            #expect(recorder.signals(named: "SessionFailed").isEmpty, "an auto-stop is not a failure")
            #expect(try sttd.sttctl(["history", "--json"]).stdout.contains(text))
        }

        @Test func aSessionWithNoSpeechEndsByItself() async throws {
            let sttd = try await SttdFixture(config: "auto_stop_no_speech_ms = 1500\n")
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(autoStopMilliseconds: 800))
            try await waitFor("the session to end by itself", timeout: .seconds(20)) {
                (try? await sttd.property("State")) == .string("idle")
            }
            #expect(recorder.signals(named: "SessionFailed").isEmpty)
            #expect(try await sttd.property("LastError") == .string(""))
            #expect(sttd.log.contains("auto-stop: nobody spoke"))
        }

        @Test func withoutATypingToolTheStartFailsNamingThePackage() async throws {
            let window = try await ReceivingWindow.open(.x11)
            defer { window.close() }
            let sttd = try await Self.sttd(on: window, environment: ["PATH": "/nonexistent"])
            let error = await #expect(throws: DBusError.self) {
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
            }
            #expect(error?.name == SpeechAPI.errorName("InvalidConfiguration"))
            #expect(error?.message.contains("apt install xdotool") == true, "\(error?.message ?? "")")
            #expect(try await sttd.property("State") == .string("idle"))

            let headless = try await SttdFixture(environment: ["DISPLAY": "", "WAYLAND_DISPLAY": ""])
            let noDisplay = await #expect(throws: DBusError.self) {
                try await headless.speech.call(Speech1.startTranscribing, StartRequest(output: "clipboard"))
            }
            #expect(noDisplay?.name == SpeechAPI.errorName("InvalidConfiguration"))
            #expect(noDisplay?.message.contains("import-environment") == true, "\(noDisplay?.message ?? "")")
        }

        @Test func aToolThatFailsKeepsListeningAndLosesNothing() async throws {
            // xdotool is installed, but the display it is told to use does not exist.
            let sttd = try await SttdFixture(environment: ["DISPLAY": ":97", "WAYLAND_DISPLAY": ""])
            let notifications = try await NotificationServer(busAddress: sttd.bus.address)
            defer { notifications.stop() }
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
            try await sttd.pulse.play(try LibriVox.recordings()[1].path)
            try await waitFor("LastError to show the tool's failure", timeout: .seconds(30)) {
                (try? await sttd.property("LastError")) == .string(SpeechAPI.errorName("InvalidConfiguration"))
            }
            #expect(try await sttd.property("State") == .string("listening"), "the session goes on")
            let reply = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(!reply.isEmpty)
            #expect(recorder.signals(named: "SessionFailed").isEmpty)
            #expect(try sttd.sttctl(["history", "--json"]).stdout.contains(reply))
            try await waitFor("the notification") {
                notifications.notifications.contains { $0.summary == "Dictated text was not typed" }
            }
            #expect(sttd.log.contains("desktop output failed"))
        }
    }
}
