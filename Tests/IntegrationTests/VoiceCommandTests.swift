import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// Issue 29: finals carrying voice commands, from the streaming test server, through real
    /// windows: the window, the transcript, history and the signals agree.
    @Suite("Voice commands into real windows", .serialized)
    struct VoiceCommandTests {
        /// One final per second of audio, in turn.
        static let finals = [
            "Dear team, new line.",
            "This goes away.",
            "Scratch that.",
            "We need a new line of products.",
            "Please read it before you submit.",
            "Can you delete that?",
            "Thanks, new paragraph.",
            "Bye.",
            "Press enter.",
            "Stop listening.",
        ]
        /// The transcript: line breaks are `\n`, the scratched final and the commands are gone;
        /// a sentence that ends in a command word is text (issue 37).
        static let transcript =
            "Dear team\nWe need a new line of products. Please read it before you submit. Can you delete that? Thanks\n\nBye."
        /// The window also got the Enter that "press enter" pressed.
        static let windowText = transcript + "\n"

        static func streamingServer(_ finals: [String]) async throws -> (DeepgramTestServer, String, [String: String]) {
            var script = DeepgramTestServer.Script()
            script.finals = finals
            let server = try await DeepgramTestServer(script: script)
            return (
                server, "backend = \"deepgram\"\n[deepgram]\nurl = \"\(server.url())\"\n", ["STTD_API_KEY": script.key]
            )
        }

        /// Plays speech until the session ends by itself ("stop listening").
        static func dictateUntilStopped(_ sttd: SttdFixture) async throws {
            for recording in try LibriVox.recordings() {
                try await sttd.pulse.play(recording.path)
                if try await sttd.property("State") == .string("idle") { return }
            }
        }

        @Test(arguments: [(DesktopKind.x11, WindowApp.terminal), (.x11, .textField), (.wayland, .terminal)])
        func commandsEditTheWindowAndTheTranscriptAlike(_ kind: DesktopKind, _ app: WindowApp) async throws {
            let (server, config, environment) = try await Self.streamingServer(Self.finals)
            let window = try await ReceivingWindow.open(kind, app)
            defer { window.close() }
            let sttd = try await DesktopDictationTests.sttd(on: window, config: config, environment: environment)
            let recorder = try await sttd.record()
            let directory = try makeTemporaryDirectory("voice-commands")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let watch = try ChildProcess(
                try builtExecutable("sttctl"), ["watch", "--json"], environment: sttd.environment,
                stdout: "\(directory)/watch")
            defer { watch.stop() }
            func watched() -> String { (try? String(contentsOfFile: "\(directory)/watch", encoding: .utf8)) ?? "" }
            // watch listens once a reset (an empty final) reaches it.
            try await waitFor("sttctl watch to print a reset", timeout: .seconds(20)) {
                _ = try? await sttd.speech.call(Speech1.resetTranscript)
                return !watched().isEmpty
            }
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
            try await Self.dictateUntilStopped(sttd)

            try await waitFor("\"stop listening\" to end the session", timeout: .seconds(20)) {
                (try? await sttd.property("State")) == .string("idle")
            }
            try await window.waitForText(Self.windowText)
            #expect(try await sttd.property("Transcript") == .string(Self.transcript))
            let retracted = recorder.signals(named: "TranscriptRetracted")
            #expect(
                retracted.map(\.arguments) == [[.string("Dear team\n"), .string("This goes away.")]],
                "\(retracted)")
            let history = try await sttd.speech.call(Speech1.getHistory, 1)
            guard let entry = history.first else {
                throw MissingPrerequisite(description: "GetHistory gave \(history)")
            }
            #expect(entry.text == Self.transcript, "history: \(entry)")
            #expect(
                watched().contains(#"{"transcript":"Dear team\n","retracted":"This goes away."}"#),
                "watch: \(watched())")
            _ = server
        }

        @Test(arguments: DesktopKind.allCases)
        func theClipboardGetsTheTextAfterCommands(_ kind: DesktopKind) async throws {
            let (server, config, environment) = try await Self.streamingServer(Self.finals)
            let window = try await ReceivingWindow.open(kind)
            defer { window.close() }
            let sttd = try await DesktopDictationTests.sttd(on: window, config: config, environment: environment)
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "clipboard"))
            try await Self.dictateUntilStopped(sttd)
            try await waitFor("\"stop listening\" to end the session", timeout: .seconds(20)) {
                (try? await sttd.property("State")) == .string("idle")
            }
            #expect(try DesktopClipboard.clipboard(kind) == Self.transcript)
            #expect(window.text.isEmpty, "clipboard output types nothing, and presses no key")
            _ = server
        }

        @Test func replacementsAndSpokenPunctuationApplyToWhatIsTyped() async throws {
            let (server, config, environment) = try await Self.streamingServer([
                "we are gonna win comma said cap john period", "um, see you all caps asap", "stop listening",
            ])
            let window = try await ReceivingWindow.open(.x11, .textField)
            defer { window.close() }
            let sttd = try await DesktopDictationTests.sttd(
                on: window,
                config: config + """
                    [text]
                    spoken_punctuation = true
                    replacements = { "gonna" = "going to", "um" = "" }
                    vocabulary = ["PipeWire", "sttd"]
                    """, environment: environment)
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
            try await Self.dictateUntilStopped(sttd)
            let expected = "we are going to win, said John. see you ASAP"
            try await window.waitForText(expected)
            #expect(try await sttd.property("Transcript") == .string(expected))
            let keyterms = server.connections.first?.query.filter { $0.0 == "keyterm" }.map(\.1)
            #expect(keyterms == ["PipeWire", "sttd"], "the vocabulary reaches the server as keyterms")
        }

        /// Issue 37: "…before you" ends without `speech_final`, so "submit." ends that utterance
        /// and is text: a terminal gets no Enter.
        @Test func aCommandWordEndingAStreamingUtterancePressesNoKey() async throws {
            var script = DeepgramTestServer.Script()
            script.finals = ["Please read it before you", "submit.", "Stop listening."]
            script.continuing = [0]
            let server = try await DeepgramTestServer(script: script)
            let window = try await ReceivingWindow.open(.x11, .terminal)
            defer { window.close() }
            let sttd = try await DesktopDictationTests.sttd(
                on: window, config: "backend = \"deepgram\"\n[deepgram]\nurl = \"\(server.url())\"\n",
                environment: ["STTD_API_KEY": script.key])
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
            try await Self.dictateUntilStopped(sttd)
            let expected = "Please read it before you submit."
            #expect(try await sttd.property("Transcript") == .string(expected))
            try await window.waitForText(expected, context: "window: \(window.text.debugDescription)")
            _ = server
        }

        @Test func commandsOffTypeEveryWord() async throws {
            let (server, config, environment) = try await Self.streamingServer(["Hello, new line.", "scratch that"])
            let window = try await ReceivingWindow.open(.x11, .terminal)
            defer { window.close() }
            let sttd = try await DesktopDictationTests.sttd(
                on: window, config: config + "[text]\ncommands = false\n", environment: environment)
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let reply = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(reply == "Hello, new line. scratch that")
            try await window.waitForText(reply)
            _ = server
        }
    }
}
