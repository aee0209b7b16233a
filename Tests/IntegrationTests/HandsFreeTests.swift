import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// Hands-free dictation end to end: espeak-ng says the wake phrase into the virtual microphone,
    /// a LibriVox clip follows, and sttd (real engine) starts a session on the phrase.
    @Suite("Hands-free dictation", .serialized)
    struct HandsFreeTests {
        /// Moonshine hears espeak-ng say it right in every voice tried (docs/performance.md, row 21).
        static let phrase = "wake up computer"
        static let config = "[hands_free]\nwake_phrase = \"\(phrase)\"\nauto_stop_ms = 2000\n"

        /// A second of silence, the phrase, half a second of silence, then `clip`. The silence
        /// first is the room before the user speaks: the headless server's microphone delivers
        /// nothing while nothing plays, and Moonshine hears nothing in a phrase that begins with
        /// the stream's very first sample.
        static func phraseThen(_ clip: [Int16]) async throws -> [Int16] {
            let spoken = try await SpokenAudio.synthesize(phrase, voice: "en-us", wordsPerMinute: 160)
            return SpokenAudio.concatenate([
                SpokenAudio.silence(seconds: 1), spoken, SpokenAudio.silence(seconds: 0.5), clip,
            ])
        }

        static func captureStreams(_ sttd: SttdFixture) async throws -> String {
            let pactl = try requireTool("pactl", package: "pulseaudio-utils")
            return try await run(pactl, ["list", "source-outputs"], environment: sttd.environment).stdout
        }

        static func handsFree(_ recorder: SignalRecorder) -> [String] {
            recorder.changes(of: "HandsFree").compactMap(\.string)
        }

        /// How many of the reference's words the text holds, in percent.
        static func wordsFound(_ reference: [String], in text: String) -> Double {
            let said = Set(normalizedWords(text))
            return 100 * Double(reference.filter(said.contains).count) / Double(max(1, reference.count))
        }

        /// What the listener logged (segment lengths, never words): for a wake that did not come.
        static func listenerLog(_ sttd: SttdFixture) -> String {
            sttd.log.split(separator: "\n").filter { $0.contains("wake") || $0.contains("hands-free") }
                .joined(separator: "\n")
        }

        @Test func thePhraseStartsASessionThatTypesTheClipAndRearms() async throws {
            let window = try await ReceivingWindow.open(.x11)
            defer { window.close() }
            let sttd = try await DesktopDictationTests.sttd(on: window, config: Self.config)
            let recorder = try await sttd.record()
            let on = try sttd.sttctl(["hands-free", "on"])
            #expect(on.status == 0 && on.stdout.contains("armed — say “wake up computer”"), "\(on)")
            #expect(try await sttd.property("HandsFree") == .string("armed"))
            #expect(try await sttd.property("State") == .string("idle"), "armed is not listening")
            #expect(try await Self.captureStreams(sttd).contains("hands-free: waiting for the wake phrase"))

            let clip = try LibriVox.recordings()[0]
            try await sttd.pulse.play(try await Self.phraseThen(try wavSamples(clip.path)))
            try await recorder.wait(
                "a session by the phrase, ended by auto-stop; the listener's log:\n\(Self.listenerLog(sttd))",
                timeout: .seconds(60)
            ) { _ in
                recorder.changes(of: "State").compactMap(\.string).suffix(2) == ["stopping", "idle"]
            }
            let signals = recorder.signals
            let started = try #require(
                signals.firstIndex { $0.member == "PropertiesChanged" && "\($0.arguments)".contains("starting") })
            #expect(
                !signals[..<started].contains {
                    ["TranscriptChanged", "AudioLevel", "SpeechActivity"].contains($0.member)
                }, "nothing heard while waiting is signalled")
            let transcript = try #require(try await sttd.property("Transcript")?.string)
            #expect(Self.wordsFound(clip.reference, in: transcript) >= 80, "\(transcript) / \(clip.reference)")
            #expect(!transcript.lowercased().contains("computer"), "the phrase is not dictated: \(transcript)")
            try await window.waitForText(transcript)
            try await recorder.wait("armed again") { _ in Self.handsFree(recorder).suffix(2) == ["dictating", "armed"] }
            let history = try sttd.sttctl(["history", "--json"]).stdout
            #expect(history.contains(transcript) && history.components(separatedBy: "\"id\"").count == 2, "\(history)")

            let off = try sttd.sttctl(["hands-free", "off"])
            #expect(off.status == 0, "\(off)")
            #expect(try await sttd.property("HandsFree") == .string("off"))
            try await waitFor("the hands-free capture closed") {
                try await !Self.captureStreams(sttd).contains("hands-free")
            }
        }

        @Test func withTheCloudBackendTheServerHearsNothingUntilThePhrase() async throws {
            var script = DeepgramTestServer.Script()
            script.vocabulary = ["cloud"]
            let server = try await DeepgramTestServer(script: script)
            let sttd = try await SttdFixture(
                config: "backend = \"deepgram\"\n[deepgram]\nurl = \"\(server.url())\"\n" + Self.config
                    + "output = \"none\"\n",
                environment: ["STTD_API_KEY": script.key])
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.setHandsFree, true)
            let recordings = try LibriVox.recordings()
            try await sttd.pulse.play(try wavSamples(recordings[1].path) + SpokenAudio.silence(seconds: 1))
            try await waitFor("the wake check of the clip without the phrase", timeout: .seconds(30)) {
                sttd.log.contains("wake segment: no match")
            }
            #expect(server.connections.isEmpty, "no connection while waiting")
            #expect(!sttd.log.lowercased().contains("dashwood"), "no words heard while waiting are logged")

            let clip = try wavSamples(recordings[2].path)
            try await sttd.pulse.play(try await Self.phraseThen(clip))
            try await recorder.wait(
                "a session by the phrase, ended by auto-stop; the listener's log:\n\(Self.listenerLog(sttd))",
                timeout: .seconds(60)
            ) { _ in
                Self.handsFree(recorder).suffix(2) == ["dictating", "armed"]
            }
            #expect(server.connections.count == 1)
            let heard = try #require(server.connections.first).audio.samples
            let phrase = try await SpokenAudio.synthesize(Self.phrase, voice: "en-us", wordsPerMinute: 160)
            // The clip is in what the server heard, beginning sooner than the phrase lasts: had
            // the phrase been sent, the clip would begin after it.
            let clipMatch = SpokenAudio.envelopeCorrelation(of: clip, in: heard)
            let phraseFrames = phrase.count / SpokenAudio.envelopeFrame
            #expect(clipMatch.correlation >= 0.9, "the server heard the clip: \(clipMatch)")
            #expect(
                (0..<phraseFrames).contains(clipMatch.lag),
                "from the phrase's end on, not the phrase (\(phraseFrames) frames): \(clipMatch)")
            let transcript = try #require(try await sttd.property("Transcript")?.string)
            #expect(transcript.contains("cloud"), "the session's text is the server's: \(transcript)")
        }

        @Test func aSandboxedAppCanNeitherArmNorHear() async throws {
            let sttd = try await SttdFixture(config: "consent = \"allow\"\n" + Self.config)
            let notes = try FlatpakSandbox(appID: "org.example.Notes", busAddress: sttd.bus.address)
            let arm = try await notes.callSttd("SetHandsFree", ["true"])
            #expect(arm.status != 0 && arm.stderr.contains("NotAuthorized"), "\(arm)")
            #expect(arm.stderr.contains("sttctl hands-free"), "\(arm)")
            let phrase = try await notes.getSttdProperty("WakePhrase")
            #expect(phrase.status == 0 && phrase.stdout.contains("''"), "\(phrase)")
            #expect(try await sttd.property("HandsFree") == .string("off"))

            try await sttd.speech.call(Speech1.setHandsFree, true)
            let app = try notes.launchApp()
            let recordings = try LibriVox.recordings()
            try await sttd.pulse.play(recordings[1].path)
            try await waitFor("the wake check", timeout: .seconds(30)) { sttd.log.contains("wake segment: no match") }
            // The app's own session gets its own capture, from its start on.
            let started = try await app.call("StartTranscribing")
            #expect(started.error == nil, "\(started)")
            #expect(try await sttd.property("HandsFree") == .string("dictating"))
            try await sttd.pulse.play(recordings[2].path)
            let stopped = try await app.call("StopTranscribing")
            let text = stopped.value ?? ""
            #expect(!text.isEmpty, "\(stopped)")
            let clip1 = Set(recordings[1].reference)
            let clip2 = Set(recordings[2].reference)
            let onlyBefore = clip1.subtracting(clip2).filter { $0.count > 4 }
            #expect(Set(normalizedWords(text)).isDisjoint(with: onlyBefore), "no word from before its start: \(text)")
            try await waitFor("armed again") { try await sttd.property("HandsFree") == .string("armed") }
        }

        @Test func armAtStartArmsWhenSttdStarts() async throws {
            let sttd = try await SttdFixture(config: Self.config + "arm_at_start = true\n")
            try await waitFor("armed at start") { try await sttd.property("HandsFree") == .string("armed") }
            #expect(try await sttd.property("WakePhrase") == .string(Self.phrase))
            let status = try sttd.sttctl(["hands-free", "status", "--json"])
            #expect(status.stdout.contains("\"state\":\"armed\""), "\(status)")
        }

        @Test(arguments: [
            ("", "InvalidConfiguration", "wake_phrase"),
            ("[hands_free]\nwake_phrase = \"go\"\n", "InvalidConfiguration", "single short word"),
            (HandsFreeTests.config + "[local]\nengine = \"pocketsphinx\"\n", "BackendUnavailable", "sherpa-onnx"),
            (
                HandsFreeTests.config + "[local]\nsherpa_model_dir = \"/nonexistent\"\n", "BackendUnavailable",
                "scripts/setup"
            ),
        ])
        func armingIsRefusedClearly(config: String, error: String, naming: String) async throws {
            let sttd = try await SttdFixture(config: config)
            let on = try sttd.sttctl(["hands-free", "on"])
            #expect(on.status == 4, "\(on)")
            #expect(on.stderr.contains(error) && on.stderr.contains(naming), "\(on.stderr)")
            #expect(try await sttd.property("HandsFree") == .string("off"))
        }
    }
}
