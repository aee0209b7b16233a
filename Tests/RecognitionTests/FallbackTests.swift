import Capture
import Dictation
import Foundation
import Logging
import Recognition
import TestSupport
import Testing

/// The streaming client with pocketsphinx behind it, against the loopback test server. The seam
/// is checked exactly: the server's finals are words computed from the audio it got, and the
/// offline engine's part is compared with that engine's own decode of the same samples.
@Suite("Fallback to the offline engine", .serialized, .timeLimit(.minutes(2)))
struct FallbackTests {
    let recording: [Int16]
    let logs = LogRecorder()

    init() throws {
        recording = try wavSamples(try LibriVox.recordings()[0].path)  // 7.1 s
    }

    func offline() throws -> PocketSphinxRecognizer {
        _ = try requireFile(PocketSphinxTests.modelDirectory, package: "pocketsphinx-en-us")
        return PocketSphinxRecognizer(modelDirectory: PocketSphinxTests.modelDirectory, logger: logs.logger())
    }

    func fallback(
        url: String, key: String = DeepgramTestServer.Script().key, offline: any Recognizer,
        after: Duration = .milliseconds(300), environment: [String: String] = [:], caFile: String = ""
    ) -> FallbackRecognizer {
        let streaming = DeepgramRecognizer(
            settings: DeepgramSettings(
                url: url, caFile: caFile,
                backoff: Backoff(
                    base: .milliseconds(20), cap: .milliseconds(100), maxAttempts: 50, maxTotal: .seconds(30)),
                connectTimeout: .seconds(1)),
            environment: environment.merging(["STTD_API_KEY": key]) { $1 }, logger: logs.logger())
        return FallbackRecognizer(primary: streaming, fallback: offline, after: after, logger: logs.logger())
    }

    /// The offline engine's finals for `samples`, fed in the hand-over's 100 ms chunks.
    func offlineFinals(_ samples: ArraySlice<Int16>, with recognizer: any Recognizer) async throws -> [String] {
        let finals = FinalsSink()
        try await recognize(samples, with: recognizer, events: finals)
        return finals.texts
    }

    /// Streams the recording (all of it queued at once: the client paces it out), finishing
    /// either at once or only after the offline engine took over.
    func dictate(_ recognizer: FallbackRecognizer, finishEarly: Bool) async throws -> EventCollector {
        let collector = EventCollector()
        let session = try await recognizer.startStream(StreamOptions(), events: collector)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await session.run() }
            send(recording, to: session, chunk: 1600)
            if !finishEarly {
                try await collector.events.wait(
                    "the offline engine to take over while audio was still coming", timeout: .seconds(20)
                ) { $0.contains(where: isFallback) }
            }
            session.finish()
            try await group.waitForAll()
        }
        return collector
    }

    /// Kill the server mid-utterance: its finals up to the kill, then the offline engine's
    /// decode of exactly the audio after the last of them; nothing lost or doubled at the seam.
    @Test(arguments: [false, true])
    func aKilledServerHandsItsUnfinalizedAudioToTheOfflineEngine(finishEarly: Bool) async throws {
        var script = DeepgramTestServer.Script()
        script.dieAfterBytes = 113_600  // 3.55 s of audio: mid-word, mid-interim
        let server = try await DeepgramTestServer(script: script)
        let offline = try offline()
        let collector = try await dictate(fallback(url: server.url(), offline: offline), finishEarly: finishEarly)

        let serverFinals = server.finalsSent.filter { !$0.isEmpty }
        // The server finalizes whole seconds: its last final ends at the seam.
        let seam = server.finalsSent.count * AudioFormat.sampleRate
        #expect(seam == 3 * AudioFormat.sampleRate, "\(server.finalsSent.count) finals before the kill")
        #expect(
            serverFinals.joined(separator: " ").split(separator: " ").map(String.init)
                == DeepgramTestServer.words(for: wireBytes(Array(recording[..<seam]))),
            "the server answered for exactly the audio before the seam")
        let offlinePart = try await offlineFinals(recording[seam...], with: offline)
        #expect(!offlinePart.isEmpty)
        #expect(collector.finals.map(Transcript.normalized) == serverFinals + offlinePart)
        let reasons = collector.events.value.compactMap { event -> RecognitionError? in
            guard case .fellBack(let reason) = event else { return nil }
            return reason
        }
        #expect(reasons.count == 1 && reasons.first?.unreachable == true, "\(reasons)")
        // Down, then up again once the offline engine took over; no server event after it.
        #expect(collector.reconnects.first == true && collector.reconnects.last == false, "\(collector.reconnects)")
        let fellBackAt = try #require(collector.events.value.firstIndex(where: isFallback))
        #expect(collector.events.value[fellBackAt...].filter { $0 == .reconnecting(true) }.isEmpty)
    }

    /// Nothing listens at the URL: the session runs on the offline engine from its first sample,
    /// and says so before any result.
    @Test func anUnreachableServerAtTheStartRunsTheSessionOffline() async throws {
        let refusing = try RefusingPort()
        defer { withExtendedLifetime(refusing) {} }  // held: nobody else gets the port meanwhile
        let url = refusing.url
        let offline = try offline()
        let collector = try await dictate(fallback(url: url, offline: offline), finishEarly: true)
        #expect(collector.events.value.first.map(isFallback) == true, "\(collector.events.value.prefix(2))")
        #expect(collector.finals.map(Transcript.normalized) == (try await offlineFinals(recording[...], with: offline)))
    }

    /// A refused key (401) falls back too, and the reason says `denied` so the user learns it.
    @Test func aRefusedKeyRunsTheSessionOfflineAndSaysDenied() async throws {
        let server = try await DeepgramTestServer()
        let offline = try offline()
        let collector = try await dictate(
            fallback(url: server.url(), key: "wrong-key-4242", offline: offline), finishEarly: true)
        guard case .fellBack(let reason)? = collector.events.value.first else {
            Issue.record("no fallback first: \(collector.events.value.prefix(2))")
            return
        }
        #expect(reason.kind == .notAuthorized && reason.authorization == .denied)
        #expect(!reason.message.contains("wrong-key-4242"))
        #expect(server.connections.count == 1 && !server.connections.contains(where: \.upgraded))
        #expect(!collector.finals.isEmpty)
    }

    /// What the user has to fix never falls back: a 400, no key, a key file others can read,
    /// a certificate that does not verify.
    @Test func configurationErrorsNeverFallBack() async throws {
        let offline = try offline()
        var script = DeepgramTestServer.Script()
        script.refusals = [400]
        let refusing = try await DeepgramTestServer(script: script)
        let certificates = try TestCertificates(hosts: ["localhost"])
        let tlsServer = try await DeepgramTestServer(
            tls: (certificates.certificate("localhost"), certificates.key("localhost")))
        let keyFile = try makeTemporaryDirectory("sttd-key") + "/key"
        try "a-key-others-can-read".write(toFile: keyFile, atomically: true, encoding: .utf8)
        try FileManager.default.setAttributes([.posixPermissions: 0o644], ofItemAtPath: keyFile)
        let plain = try await DeepgramTestServer()

        let cases: [(String, FallbackRecognizer, RecognitionError.Kind)] = [
            ("HTTP 400", fallback(url: refusing.url(), offline: offline), .invalidConfiguration),
            ("no key", fallback(url: plain.url(), key: "", offline: offline), .notAuthorized),
            ("unverified certificate", fallback(url: tlsServer.url(tls: true), offline: offline), .backendUnavailable),
        ]
        for (what, recognizer, kind) in cases {
            let error = await #expect(throws: RecognitionError.self, "\(what)") {
                _ = try await recognizer.startStream(StreamOptions(), events: EventCollector())
            }
            #expect(error?.kind == kind, "\(what): \(error?.message ?? "")")
        }
        let readable = DeepgramRecognizer(
            settings: DeepgramSettings(url: plain.url(), apiKeyFile: keyFile), environment: [:], logger: logs.logger())
        let recognizer = FallbackRecognizer(
            primary: readable, fallback: offline, after: .seconds(1), logger: logs.logger())
        await #expect(throws: RecognitionError.self, "a key file others can read") {
            _ = try await recognizer.startStream(StreamOptions(), events: EventCollector())
        }
    }
}

func isFallback(_ event: RecognitionEvent) -> Bool {
    if case .fellBack = event { true } else { false }
}
