import Capture
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing

@testable import ListenServer
@testable import Recognition

@Suite("The local /v1/listen server against a fake engine", .timeLimit(.minutes(2)))
struct ListenServerProtocolTests {
    static let key = "server-key-0123456789"

    @Test func refusesWrongQueryParametersWithDeepgramsErrorAndIgnoresUnknownOnes() async throws {
        try await withServer(recognizer: FakeRecognizer()) { server in
            for query in [
                "sample_rate=8000", "sample_rate=sixteen", "channels=2", "encoding=opus", "interim_results=True",
                "vad_events=yes", "endpointing=soon", "utterance_end_ms=-5",
            ] {
                let response = try await rawHTTP(port: server.port, upgradeRequest("/v1/listen?\(query)"))
                #expect(response.status == 400, "\(query)")
                #expect(response.headers["dg-error"]?.isEmpty == false, "\(query): \(response.headers)")
                #expect(response.headers["dg-request-id"]?.isEmpty == false)
                let body = try #require(
                    try JSONSerialization.jsonObject(with: Data(response.body.utf8)) as? [String: Any], "\(query)")
                #expect(body["err_code"] as? String == "Bad Request")
                #expect((body["err_msg"] as? String)?.isEmpty == false)
                #expect(body["request_id"] as? String == response.headers["dg-request-id"])
            }
            let sampleRate = try await rawHTTP(port: server.port, upgradeRequest("/v1/listen?sample_rate=44100"))
            #expect(sampleRate.headers["dg-error"]?.contains("16000") == true)
            // Unknown parameters, a foreign model, keyterms and the rest are accepted.
            let accepted = try await rawHTTP(
                port: server.port,
                upgradeRequest(
                    "/v1/listen?encoding=linear16&sample_rate=16000&channels=1&model=nova-3&language=en-US&keyterm=sttd&keyterm=moonshine&punctuate=true&smart_format=true&endpointing=300&utterance_end_ms=1000&vad_events=true&made_up=1"
                ))
            #expect(accepted.status == 101)
            #expect(accepted.headers["dg-request-id"]?.isEmpty == false)
            #expect(try await rawHTTP(port: server.port, upgradeRequest("/v2/other")).status == 404)
            // A plain GET is told to upgrade.
            let plain = try await rawHTTP(port: server.port, "GET /v1/listen HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            #expect(plain.status == 426)
        }
    }

    @Test func authenticatesExactlyAsDeepgram() async throws {
        let settings = ListenServerSettings(host: "127.0.0.1", port: 0, key: APIKey(Self.key))
        try await withServer(settings, recognizer: FakeRecognizer()) { server in
            let target = "/v1/listen?sample_rate=16000"
            for headers in [
                [], ["Authorization: Token wrong-key"], ["Authorization: Bearer \(Self.key)"],
                ["Authorization: \(Self.key)"], ["Sec-WebSocket-Protocol: token, wrong-key"],
                ["Sec-WebSocket-Protocol: bearer, \(Self.key)"],
            ] {
                let response = try await rawHTTP(port: server.port, upgradeRequest(target, headers: headers))
                #expect(response.status == 401, "\(headers)")
                let body = try JSONSerialization.jsonObject(with: Data(response.body.utf8)) as? [String: Any]
                #expect(body?["err_code"] as? String == "INVALID_AUTH", "\(headers)")
                #expect(!response.body.contains(Self.key), "the key never comes back")
                #expect(response.headers["dg-error"]?.isEmpty == false)
            }
            let header = try await rawHTTP(
                port: server.port, upgradeRequest(target, headers: ["Authorization: Token \(Self.key)"]))
            #expect(header.status == 101)
            let subprotocol = try await rawHTTP(
                port: server.port, upgradeRequest(target, headers: ["Sec-WebSocket-Protocol: token, \(Self.key)"]))
            #expect(subprotocol.status == 101)
            #expect(subprotocol.headers["sec-websocket-protocol"] == "token")
            // And through a real WebSocket client with each form.
            let client = try await ListenClient.connect(server, headers: [("Authorization", "Token \(Self.key)")])
            client.connection.close()
            let other = try await ListenClient.connect(
                server, headers: [("Sec-WebSocket-Protocol", "token, \(Self.key)")])
            other.connection.close()
            await #expect(throws: HandshakeRefusal.self) {
                _ = try await ListenClient.connect(server, headers: [("Authorization", "Token nope")])
            }
        }
    }

    @Test func oneStreamMoreThanMaxStreamsGets429AndAClosedStreamsSlotIsFreeAtOnce() async throws {
        let settings = ListenServerSettings(host: "127.0.0.1", port: 0, maxStreams: 2)
        try await withServer(settings, recognizer: FakeRecognizer()) { server in
            let first = try await ListenClient.connect(server)
            let second = try await ListenClient.connect(server)
            let refusal = await #expect(throws: HandshakeRefusal.self) { _ = try await ListenClient.connect(server) }
            #expect(refusal?.status == 429)
            #expect(refusal?.header("dg-error")?.isEmpty == false)
            #expect(refusal?.body.contains("TOO_MANY_REQUESTS") == true)
            first.connection.send(text: #"{"type":"CloseStream"}"#)
            #expect(await first.connection.end == .closed(code: 1000, reason: ""))
            // The slot is free before the close frame goes out: a client may reconnect at once.
            #expect(server.openStreams == 1)
            let third = try await ListenClient.connect(server)
            second.connection.abort()
            third.connection.abort()
        }
    }

    @Test func finalizeIsAnsweredByExactlyOneFromFinalizeFinal() async throws {
        try await withServer(recognizer: FakeRecognizer()) { server in
            let client = try await ListenClient.connect(server)
            client.sendAudio(seconds: 1.2)
            try await client.waitForMessage { $0["type"] as? String == "Results" && $0["is_final"] as? Bool == false }
            client.connection.send(text: #"{"type":"Finalize"}"#)
            try await client.waitForMessage { $0["from_finalize"] as? Bool == true }
            // Nothing pending: still exactly one, empty.
            client.connection.send(text: #"{"type":"Finalize"}"#)
            try await client.messages.wait { texts in
                texts.filter { $0.contains(#""from_finalize":true"#) }.count == 2
            }
            try await Task.sleep(for: .milliseconds(300))
            let fromFinalize = client.finals().filter { $0["from_finalize"] as? Bool == true }
            #expect(fromFinalize.count == 2)
            #expect(fromFinalize.map { transcript($0) } == ["w1 w2 w3", ""])
            #expect(fromFinalize.allSatisfy { $0["speech_final"] as? Bool == false })
            client.connection.abort()
        }
    }

    @Test func resultsFollowDeepgramsSchema() async throws {
        try await withServer(recognizer: FakeRecognizer()) { server in
            let client = try await ListenClient.connect(
                server,
                query: "sample_rate=16000&interim_results=true&vad_events=true&utterance_end_ms=1000&model=nova-3")
            client.sendAudio(seconds: 2.0)
            try await client.waitForMessage { $0["type"] as? String == "UtteranceEnd" }
            let types = client.objects.compactMap { $0["type"] as? String }
            #expect(types.first == "SpeechStarted")
            let final = try #require(client.finals().first)
            #expect(transcript(final) == "w1 w2 w3 w4")
            #expect(final["speech_final"] as? Bool == true)
            #expect(final["from_finalize"] as? Bool == false)
            #expect(final["channel_index"] as? [Int] == [0, 1])
            #expect(final["start"] as? Double == 0)
            #expect(final["duration"] as? Double == 2)
            let alternative = try #require(
                ((final["channel"] as? [String: Any])?["alternatives"] as? [[String: Any]])?.first)
            let words = try #require(alternative["words"] as? [[String: Any]])
            #expect(words.map { $0["word"] as? String } == ["w1", "w2", "w3", "w4"])
            #expect(words.last?["end"] as? Double == 2)
            #expect(words.first?["start"] as? Double == 0)
            let metadata = try #require(final["metadata"] as? [String: Any])
            #expect((metadata["request_id"] as? String)?.isEmpty == false)
            #expect((metadata["model_info"] as? [String: Any])?["name"] as? String == "sttd-local")
            // UtteranceEnd comes after the utterance's final.
            let finalIndex = try #require(client.objects.firstIndex { $0["is_final"] as? Bool == true })
            let endIndex = try #require(types.firstIndex(of: "UtteranceEnd"))
            #expect(endIndex > finalIndex)
            #expect(client.results().contains { $0["is_final"] as? Bool == false })
            client.connection.abort()

            // Without interim_results (Deepgram's default) only finals come.
            let quiet = try await ListenClient.connect(server, query: "sample_rate=16000")
            quiet.sendAudio(seconds: 2.0)
            try await quiet.waitForMessage { $0["is_final"] as? Bool == true }
            #expect(quiet.results().allSatisfy { $0["is_final"] as? Bool == true })
            #expect(!quiet.objects.contains { $0["type"] as? String == "SpeechStarted" })
            quiet.connection.abort()
        }
    }

    @Test func closeStreamSendsTheLastFinalsThenMetadataThenCloses1000() async throws {
        let recognizer = FakeRecognizer()
        try await withServer(recognizer: recognizer) { server in
            let client = try await ListenClient.connect(server)
            client.sendAudio(seconds: 3.0)
            client.connection.send(text: #"{"type":"CloseStream"}"#)
            #expect(await client.connection.end == .closed(code: 1000, reason: ""))
            let objects = client.objects
            #expect(objects.last?["type"] as? String == "Metadata")
            let metadata = try #require(objects.last)
            #expect(metadata["duration"] as? Double == 3)
            #expect(metadata["channels"] as? Int == 1)
            #expect(
                metadata["request_id"] as? String == (client.finals().first?["metadata"] as? [String: Any])?[
                    "request_id"] as? String)
            #expect(client.finals().compactMap(transcript) == ["w1 w2 w3 w4", "w5 w6"])
            try await recognizer.stats.wait { $0.finished == 1 && $0.running == 0 }
        }
    }

    @Test func aStreamWithoutAudioOrKeepAliveIsClosed1011NET0001() async throws {
        let settings = ListenServerSettings(host: "127.0.0.1", port: 0, idleTimeout: .seconds(1))
        try await withServer(settings, recognizer: FakeRecognizer()) { server in
            let started = ContinuousClock.now
            let client = try await ListenClient.connect(server)
            // KeepAlive keeps it open past the timeout.
            for _ in 0..<6 {
                client.connection.send(text: #"{"type":"KeepAlive"}"#)
                try await Task.sleep(for: .milliseconds(300))
            }
            let end = await client.connection.end
            guard case .closed(let code, let reason) = end else {
                Issue.record("expected a close frame, got \(end)")
                return
            }
            #expect(code == 1011)
            #expect(reason.hasPrefix("NET-0001"), "\(reason)")
            #expect(ContinuousClock.now - started >= .milliseconds(2_500))
            try await waitFor { server.openStreams == 0 }
        }
    }

    @Test func badInputIsHandledAsDeepgramDoesAndTheStreamGoesOn() async throws {
        let recognizer = FakeRecognizer()
        try await withServer(recognizer: recognizer) { server in
            let client = try await ListenClient.connect(server)
            // Odd-length frames: the odd byte waits for the next frame.
            client.connection.send(bytes: [1, 2, 3])
            client.connection.send(bytes: [4, 5, 6, 7, 8])
            client.connection.send(bytes: [9])
            // Garbage is audio to a linear16 stream.
            client.connection.send(bytes: (0..<3201).map { _ in UInt8.random(in: 0...255) })
            client.connection.send(text: "this is not json")
            client.connection.send(text: #"{"type":"Shout","volume":11}"#)
            client.connection.send(text: #"["an","array"]"#)
            try await client.messages.wait { $0.filter { $0.contains(#""variant":"SchemaError""#) }.count == 3 }
            let errors = client.objects.filter { $0["type"] as? String == "Error" }
            #expect(errors.first?["message"] as? String == "this is not json")
            #expect((errors[1]["description"] as? String)?.contains("Shout") == true)
            // Still serving.
            client.sendAudio(seconds: 1.0)
            client.connection.send(text: #"{"type":"CloseStream"}"#)
            #expect(await client.connection.end == .closed(code: 1000, reason: ""))
            // (3 + 5 + 1 + 3201) bytes = 3210 = 1605 samples, plus 16 000.
            #expect(recognizer.stats.value.samples == [1605 + 16_000])
            #expect(client.objects.last?["type"] as? String == "Metadata")
        }
    }

    @Test func aClientVanishingMidUtteranceCancelsItsSessionAndFreesTheSlot() async throws {
        let recognizer = FakeRecognizer()
        let settings = ListenServerSettings(host: "127.0.0.1", port: 0, maxStreams: 1)
        try await withServer(settings, recognizer: recognizer) { server in
            let client = try await ListenClient.connect(server)
            client.sendAudio(seconds: 1.0)
            try await client.waitForMessage { $0["type"] as? String == "Results" }
            client.connection.abort()
            try await recognizer.stats.wait { $0.cancelled == 1 && $0.running == 0 }
            try await waitFor { server.openStreams == 0 }
            // A client that closes without CloseStream: the same.
            let next = try await ListenClient.connect(server)
            next.sendAudio(seconds: 0.5)
            next.connection.close(code: 1000)
            #expect(await next.connection.end == .closed(code: 1000, reason: ""))
            try await recognizer.stats.wait { $0.cancelled == 2 && $0.running == 0 }
            try await waitFor { server.openStreams == 0 }
            let last = try await ListenClient.connect(server)
            last.connection.abort()
        }
    }

    @Test func streamsAreIndependentSessions() async throws {
        let recognizer = FakeRecognizer()
        let settings = ListenServerSettings(host: "127.0.0.1", port: 0, maxStreams: 4)
        try await withServer(settings, recognizer: recognizer) { server in
            try await withThrowingTaskGroup(of: [String].self) { group in
                for index in 0..<4 {
                    group.addTask {
                        let client = try await ListenClient.connect(server)
                        client.sendAudio(seconds: Double(index + 1))
                        client.connection.send(text: #"{"type":"CloseStream"}"#)
                        _ = await client.connection.end
                        return client.finals().compactMap(transcript)
                    }
                }
                var all: [[String]] = []
                for try await finals in group { all.append(finals) }
                #expect(
                    Set(all.map { $0.joined(separator: " ") })
                        == ["w1 w2", "w1 w2 w3 w4", "w1 w2 w3 w4 w5 w6", "w1 w2 w3 w4 w5 w6 w7 w8"])
            }
            #expect(recognizer.stats.value.started == 4)
        }
    }

    @Test func gracefulShutdownFlushesStreamsAndCloses1001() async throws {
        let recognizer = FakeRecognizer()
        var logger = Logger(label: "shutdown-test")
        logger.logLevel = .debug
        let server = try await ListenServer.bind(
            settings: ListenServerSettings(host: "127.0.0.1", port: 0), recognizer: recognizer, logger: logger)
        let group = ServiceGroupBox(server: server, logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask { try await group.run() }
            let client = try await ListenClient.connect(server)
            client.sendAudio(seconds: 1.5)
            // All of it received (audio still in the socket at shutdown is not the server's yet).
            try await recognizer.stats.wait { $0.samples == [24_000] }
            await group.shutDown()
            #expect(await client.connection.end == .closed(code: 1001, reason: ""))
            #expect(client.finals().compactMap(transcript) == ["w1 w2 w3"])
            #expect(client.objects.last?["type"] as? String == "Metadata")
            try await tasks.waitForAll()
            // No longer accepting.
            await #expect(throws: (any Error).self) { _ = try await ListenClient.connect(server) }
        }
    }
}

@Suite("The local /v1/listen server to sttd's own Deepgram client", .timeLimit(.minutes(2)))
struct ListenServerClientTests {
    /// Collects a session's events.
    final class Events: RecognitionEventSink {
        let events = Watched<[RecognitionEvent]>([])
        func deliver(_ event: RecognitionEvent) { events.update { $0.append(event) } }
        var finals: [String] {
            events.value.compactMap { event in
                if case .result(let result) = event, result.isFinal, !result.text.isEmpty { return result.text }
                return nil
            }
        }
    }

    /// wss:// with a certificate from a test CA and an API key, both subprotocol and header
    /// auth: sttd's streaming client gets every final, with Finalize on finish.
    @Test(arguments: [false, true])
    func servesWSSToSttdsStreamingClient(subprotocol: Bool) async throws {
        let certificates = try TestCertificates(hosts: ["localhost"])
        defer { try? FileManager.default.removeItem(atPath: certificates.directory) }
        let key = "tls-key-0123456789"
        var settings = ListenServerSettings(host: "127.0.0.1", port: 0, key: APIKey(key))
        try settings.useTLS(
            certificateFile: certificates.certificate("localhost"), keyFile: certificates.key("localhost"))
        let recognizer = FakeRecognizer()
        try await withServer(settings, recognizer: recognizer) { server in
            #expect(server.address.hasPrefix("wss://127.0.0.1:"))
            let client = DeepgramRecognizer(
                settings: DeepgramSettings(
                    url: "\(server.address)/v1/listen", useSubprotocol: subprotocol,
                    caFile: certificates.caCertificate, backoff: Backoff(maxAttempts: 0)),
                environment: ["STTD_API_KEY": key], logger: Logger(label: "client"))
            #expect(await client.authorize().0 == .authorized)
            let events = Events()
            let session = try await client.startStream(StreamOptions(), events: events)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await session.run() }
                for _ in 0..<25 { session.send(AudioChunk(samples: [Int16](repeating: 1000, count: 1600))) }
                session.finish()
                try await group.waitForAll()
            }
            #expect(events.finals == ["w1 w2 w3 w4", "w5"])
            // A wrong key is refused as Deepgram would.
            let wrong = DeepgramRecognizer(
                settings: DeepgramSettings(
                    url: "\(server.address)/v1/listen", useSubprotocol: subprotocol,
                    caFile: certificates.caCertificate, backoff: Backoff(maxAttempts: 0)),
                environment: ["STTD_API_KEY": "nope"], logger: Logger(label: "client"))
            let (status, error) = await wrong.authorize()
            #expect(status == .denied)
            #expect(error?.message.contains("401") == true, "\(error?.message ?? "")")
        }
    }
}
