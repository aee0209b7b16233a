import DBus
import Foundation
import Logging
import Recognition
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// `[deepgram] fallback`: sttd with the streaming backend and pocketsphinx behind it.
    @Suite("Offline fallback of the streaming backend", .serialized)
    struct FallbackTests {
        static func config(url: String, fallback: String? = nil, extra: String = "") -> String {
            """
            backend = "deepgram"
            \(extra)
            [local]
            engine = "pocketsphinx"
            [deepgram]
            url = "\(url)"
            reconnect_attempts = 50
            \(fallback.map { "fallback = \"\($0)\"" } ?? "")
            """
        }

        /// The server dies mid-utterance (no close frame, later connections refused): the Stop
        /// reply is the server's finals up to the kill, then pocketsphinx's decode of exactly
        /// the captured audio after the last of them, once each.
        @Test func aServerKilledMidUtteranceLosesAndDoublesNoWord() async throws {
            var script = DeepgramTestServer.Script()
            script.dieAfterBytes = 3 * 32_000 + 17_600  // 3.55 s into the session: mid-utterance
            let server = try await DeepgramTestServer(script: script)
            let audioDirectory = try makeTemporaryDirectory("sttd-audio")
            defer { try? FileManager.default.removeItem(atPath: audioDirectory) }
            let sttd = try await SttdFixture(
                config: Self.config(url: server.url(), extra: "[debug]\naudio_dir = \"\(audioDirectory)\"\n"),
                environment: ["STTD_API_KEY": script.key])
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            #expect(try await sttd.property("ActiveBackend") == .string("deepgram"))
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)  // 7.1 s
            let reply = try await sttd.speech.call(Speech1.stopTranscribing)

            try #require(server.diedAt != nil, "the server was killed while dictating")
            let serverFinals = server.finalsSent.filter { !$0.isEmpty }
            let seam = server.finalsSent.count * 16_000  // the server finalizes whole seconds
            #expect(seam == 3 * 16_000)
            let file = try #require(try FileManager.default.contentsOfDirectory(atPath: audioDirectory).first)
            let captured = try wavSamples("\(audioDirectory)/\(file)")
            let offlinePart = try await pocketsphinxFinals(Array(captured[seam...]))
            #expect(!offlinePart.isEmpty, "the offline engine recognized words after the kill")
            #expect(reply == (serverFinals + offlinePart).joined(separator: " "))
            try await recorder.wait("ActiveBackend \"\" after the session", timeout: .seconds(30)) { _ in
                recorder.changes(of: "ActiveBackend").last == .string("")
            }
            #expect(signalledFinals(recorder) == serverFinals + offlinePart, "every final is signalled once, in order")
            #expect(try await history(sttd).first?.text == reply)
            #expect(recorder.changes(of: "ActiveBackend") == [.string("deepgram"), .string("local"), .string("")])
            #expect(recorder.signals(named: "SessionFailed").isEmpty)
            #expect(try await sttd.property("LastError") == .string(""), "losing the network needs no fixing")
            #expect(sttd.log.contains("dictation continues offline"))
        }

        /// Nothing listens at the URL: the start succeeds on the offline engine.
        @Test func anUnreachableServerStartsOffline() async throws {
            let refusing = try RefusingPort()
            defer { withExtendedLifetime(refusing) {} }  // held: nobody else gets the port meanwhile
            let url = refusing.url
            let sttd = try await SttdFixture(
                config: Self.config(url: url) + "fallback_after_ms = 1000\n", environment: ["STTD_API_KEY": "k-123"])
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            #expect(try await sttd.property("ActiveBackend") == .string("local"))
            #expect(try await sttd.property("State") == .string("listening"))
            try await sttd.pulse.play(try LibriVox.recordings()[4].path)
            let reply = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(!reply.isEmpty)
            #expect(try await sttd.property("ActiveBackend") == .string(""))
            try await recorder.wait("two ActiveBackend changes", timeout: .seconds(30)) { _ in
                recorder.changes(of: "ActiveBackend").count >= 2
            }
            #expect(recorder.changes(of: "ActiveBackend") == [.string("local"), .string("")])
            #expect(try await sttd.property("LastError") == .string(""))
        }

        /// 401: offline, but the user learns the key is wrong; the cloud never gets audio from
        /// that session, and the next session asks the server again.
        @Test func aRefusedKeyStartsOfflineAndSaysNotAuthorized() async throws {
            let server = try await DeepgramTestServer()
            let wrong = "not-the-right-key-77"
            let sttd = try await SttdFixture(
                config: Self.config(url: server.url()), environment: ["STTD_API_KEY": wrong])
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            #expect(try await sttd.property("ActiveBackend") == .string("local"))
            #expect(try await sttd.property("AuthorizationStatus") == .string("denied"))
            #expect(try await sttd.property("LastError") == .string(SpeechAPI.errorName("NotAuthorized")))
            try await sttd.pulse.play(try LibriVox.recordings()[4].path)
            #expect(try await sttd.speech.call(Speech1.stopTranscribing).isEmpty == false)
            // Kept after the offline session, until the next one opens.
            #expect(try await sttd.property("AuthorizationStatus") == .string("denied"))
            #expect(try await sttd.property("LastError") == .string(SpeechAPI.errorName("NotAuthorized")))
            #expect(server.connections.count == 1 && !server.connections.contains(where: \.upgraded))

            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            #expect(server.connections.count == 2, "the next session tries the network again")
            try await sttd.speech.call(Speech1.stopTranscribing)
            sttd.sttd.stop()
            #expect(!sttd.log.contains(wrong))
        }

        /// `fallback = "none"`: today's failure.
        @Test func fallbackNoneFailsAsBefore() async throws {
            let refusing = try RefusingPort()
            defer { withExtendedLifetime(refusing) {} }  // held: nobody else gets the port meanwhile
            let url = refusing.url
            let sttd = try await SttdFixture(
                config: Self.config(url: url, fallback: "none"), environment: ["STTD_API_KEY": "k-123"])
            let error = await #expect(throws: DBusError.self) {
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            }
            #expect(error?.name == SpeechAPI.errorName("BackendUnavailable"))
            #expect(try await sttd.property("State") == .string("idle"))
            #expect(try await sttd.property("ActiveBackend") == .string(""))
        }
    }
}

/// pocketsphinx's own finals for `samples`, in the 100 ms chunks sttd feeds it.
func pocketsphinxFinals(_ samples: [Int16]) async throws -> [String] {
    let model = try requireFile("/usr/share/pocketsphinx/model/en-us", package: "pocketsphinx-en-us")
    let finals = FinalsSink()
    try await recognize(
        samples[...], with: PocketSphinxRecognizer(modelDirectory: model, logger: Logger(label: "test")),
        events: finals)
    return finals.texts
}
