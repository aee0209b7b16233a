import Capture
import Foundation
import Logging
import TestSupport
import Testing

@testable import Recognition

/// Keeps a session's events in order; tests wait on them instead of sleeping.
final class EventCollector: RecognitionEventSink {
    let events = Watched<[RecognitionEvent]>([])

    func deliver(_ event: RecognitionEvent) { events.update { $0.append(event) } }

    /// Non-empty finals.
    var finals: [String] {
        events.value.compactMap {
            guard case .result(let result) = $0, result.isFinal, !result.text.isEmpty else { return nil }
            return result.text
        }
    }
    var interims: [String] {
        events.value.compactMap {
            guard case .result(let result) = $0, !result.isFinal else { return nil }
            return result.text
        }
    }
    var reconnects: [Bool] {
        events.value.compactMap {
            guard case .reconnecting(let down) = $0 else { return nil }
            return down
        }
    }
}

/// Streams audio through a session (its run() a child task) and collects what comes back.
func stream(
    _ samples: [Int16], to recognizer: DeepgramRecognizer, options: StreamOptions = StreamOptions()
) async throws -> (finals: [String], interims: [String], reconnects: [Bool]) {
    let collector = EventCollector()
    try await recognize(samples[...], with: recognizer, options: options, events: collector)
    return (collector.finals, collector.interims, collector.reconnects)
}

/// How long `body` took.
func elapsed(_ body: () async throws -> Void) async rethrows -> Duration {
    let started = ContinuousClock.now
    try await body()
    return ContinuousClock.now - started
}

/// Little-endian bytes of samples, as sent on the wire.
func wireBytes(_ samples: [Int16]) -> [UInt8] {
    samples.flatMap { [UInt8(truncatingIfNeeded: $0), UInt8(truncatingIfNeeded: $0 >> 8)] }
}

@Suite("Deepgram streaming against a loopback server", .timeLimit(.minutes(2)))
struct DeepgramStreamingTests {
    let recording: [Int16]
    let logs = LogRecorder()

    init() throws {
        recording = try wavSamples(try LibriVox.recordings()[0].path)  // 7.1 s
    }

    func recognizer(
        _ server: DeepgramTestServer, key: String? = nil, subprotocol: Bool = false, url: String? = nil,
        caFile: String = "",
        backoff: Backoff = Backoff(
            base: .milliseconds(20), cap: .milliseconds(200), maxAttempts: 5, maxTotal: .seconds(5)),
        replayCapacity: Duration = .seconds(60), connectTimeout: Duration = .seconds(10),
        keepAliveInterval: Duration = .seconds(4), environment: [String: String] = [:]
    ) -> DeepgramRecognizer {
        DeepgramRecognizer(
            settings: DeepgramSettings(
                url: url ?? server.url(), useSubprotocol: subprotocol, model: "nova-3", caFile: caFile,
                parameters: ["smart_format": "true"], backoff: backoff, replayCapacity: replayCapacity,
                connectTimeout: connectTimeout, keepAliveInterval: keepAliveInterval),
            environment: environment.merging(["STTD_API_KEY": key ?? server.script.key]) { $1 },
            logger: logs.logger())
    }

    @Test func headerAuthQueryAndOrderedStop() async throws {
        let server = try await DeepgramTestServer()
        let audio = Array(recording.prefix(40_000))  // 2.5 s
        let (finals, interims, _) = try await stream(
            audio, to: recognizer(server), options: StreamOptions(language: "en-GB", keyterms: ["sttd", "D-Bus"]))
        let connection = try #require(server.connections.first)
        #expect(connection.header("Authorization") == "Token \(server.script.key)")
        let query = connection.query
        for pair in [
            ("encoding", "linear16"), ("sample_rate", "16000"), ("channels", "1"), ("model", "nova-3"),
            ("language", "en-GB"), ("interim_results", "true"), ("smart_format", "true"),
        ] {
            #expect(query.contains { $0 == pair }, "\(pair) in \(query)")
        }
        #expect(query.filter { $0.0 == "keyterm" }.map(\.1) == ["sttd", "D-Bus"])
        // Finalize, then CloseStream, both after every audio byte; no empty frames.
        #expect(connection.controls.map(\.type).suffix(2) == ["Finalize", "CloseStream"])
        // (A KeepAlive may go out mid-stream on a slow machine; it only has to keep its place.)
        #expect(
            connection.controls.filter { $0.type != "KeepAlive" }.allSatisfy { $0.atByte == audio.count * 2 },
            "\(connection.controls)")
        #expect(connection.audioBytes == audio.count * 2)
        #expect(connection.audio.samples == audio)
        #expect(connection.emptyBinaryFrames == 0)
        #expect(finals == server.finalsSent.filter { !$0.isEmpty })
        #expect(
            finals.joined(separator: " ").split(separator: " ").map(String.init)
                == DeepgramTestServer.words(for: wireBytes(audio)))
        #expect(!interims.isEmpty)
    }

    @Test func subprotocolAuthMetadataFirstAndOddMessages() async throws {
        var script = DeepgramTestServer.Script()
        script.subprotocolAuth = true
        script.metadataFirst = true
        script.tupleWords = true
        script.extraMessages = [
            #"{"type":"SomethingNew","x":1}"#, "this is not json", #"{"type":"Results"}"#, #"{"type":"SomethingNew"}"#,
        ]
        let server = try await DeepgramTestServer(script: script)
        let audio = Array(recording.prefix(24_000))
        let (finals, _, _) = try await stream(audio, to: recognizer(server, subprotocol: true))
        #expect(server.connections.first?.header("Sec-WebSocket-Protocol") == "token, \(script.key)")
        #expect(server.connections.first?.header("Authorization") == nil)
        #expect(
            finals.joined(separator: " ").split(separator: " ").map(String.init)
                == DeepgramTestServer.words(for: wireBytes(audio)))
        #expect(
            logs.all.filter { $0.contains("unknown server message type") }.count == 1, "unknown types are logged once")
        #expect(logs.all.contains { $0.contains("malformed") })
    }

    @Test func refusedKeyIsDeniedWithoutShowingIt() async throws {
        let server = try await DeepgramTestServer()
        let wrong = "wrong-key-abcdef"
        let error = await #expect(throws: RecognitionError.self) {
            _ = try await recognizer(server, key: wrong).startStream(StreamOptions(), events: EventCollector())
        }
        #expect(error?.kind == .notAuthorized)
        #expect(error?.authorization == .denied)
        #expect(error?.message.contains("401") == true)
        #expect(error?.message.contains(wrong) == false)
        #expect(server.connections.count == 1, "401 is not retried")
        #expect(logs.all.contains { $0.contains("status=401") && $0.contains("dg-request-id=req-0") })
        let (status, _) = await recognizer(server, key: wrong).authorize()
        #expect(status == .denied)
        #expect(await recognizer(server).authorize().0 == .authorized)
        #expect(!logs.all.joined().contains(wrong))
        #expect(!logs.all.joined().contains(server.script.key))
    }

    @Test func paymentRequiredIsRestricted() async throws {
        var script = DeepgramTestServer.Script()
        script.refusals = [402]
        let server = try await DeepgramTestServer(script: script)
        let error = await #expect(throws: RecognitionError.self) {
            _ = try await recognizer(server).startStream(StreamOptions(), events: EventCollector())
        }
        #expect(error?.authorization == .restricted)
        #expect(error?.message.contains("scripted 402") == true, "the provider's reason: \(error?.message ?? "")")
    }

    @Test func noKeyIsRestricted() async throws {
        let server = try await DeepgramTestServer()
        let recognizer = DeepgramRecognizer(
            settings: DeepgramSettings(url: server.url()), environment: [:], logger: logs.logger())
        let (status, error) = await recognizer.authorize()
        #expect(status == .restricted)
        #expect(error?.message.contains("STTD_API_KEY") == true)
        #expect(server.connections.isEmpty)
    }

    @Test func tooManyRequestsThenSuccess() async throws {
        var script = DeepgramTestServer.Script()
        script.refusals = [429]
        let server = try await DeepgramTestServer(script: script)
        let audio = Array(recording.prefix(20_000))
        let (finals, _, _) = try await stream(audio, to: recognizer(server))
        #expect(server.connections.count == 2)
        #expect(!finals.isEmpty)
    }

    @Test func serviceUnavailableGivesUpAfterBoundedRetries() async throws {
        var script = DeepgramTestServer.Script()
        script.refusals = Array(repeating: 503, count: 20)
        let server = try await DeepgramTestServer(script: script)
        let error = await #expect(throws: RecognitionError.self) {
            // The largest connect timeout (15 s), far beyond what four refusals take: the attempt
            // count ends it, however slowly a busy machine answers (a loaded run fit 3 in 10 s).
            _ = try await recognizer(
                server,
                backoff: Backoff(
                    base: .milliseconds(10), cap: .milliseconds(50), maxAttempts: 3, maxTotal: .seconds(5)),
                connectTimeout: .seconds(15)
            ).startStream(StreamOptions(), events: EventCollector())
        }
        #expect(error?.kind == .backendUnavailable)
        #expect(server.connections.count == 4, "one try and three retries: \(error?.message ?? "")")
    }

    @Test func serverTimeoutCloseReconnectsWithoutLosingAudio() async throws {
        var script = DeepgramTestServer.Script()
        script.closeAfterBytes = (48_000, 1011, "NET-0001")
        let server = try await DeepgramTestServer(script: script)
        let audio = Array(recording.prefix(64_000))  // 4 s
        let (finals, _, reconnects) = try await stream(audio, to: recognizer(server))
        #expect(reconnects == [true, false])
        #expect(server.connections.filter(\.upgraded).count == 2)
        #expect(
            finals.joined(separator: " ").split(separator: " ").map(String.init)
                == DeepgramTestServer.words(for: wireBytes(audio)))
    }

    @Test func keepAliveWhenNothingIsSent() async throws {
        let server = try await DeepgramTestServer()
        let session = try await recognizer(server, keepAliveInterval: .milliseconds(300))
            .startStream(StreamOptions(), events: EventCollector())
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await session.run() }
            // A KeepAlive goes out whenever nothing else did for the interval.
            try await server.wait("two KeepAlives") {
                ($0.first?.controls.filter { $0.type == "KeepAlive" }.count ?? 0) >= 2
            }
            session.finish()
            try await group.waitForAll()
        }
        let controls = server.connections.first?.controls.map(\.type) ?? []
        #expect(controls.first == "KeepAlive", "\(controls)")
        #expect(controls.suffix(2) == ["Finalize", "CloseStream"])
    }

    @Test func givesUpMidSessionKeepingTheFinals() async throws {
        var script = DeepgramTestServer.Script()
        script.dropAfterBytes = 2 * 32_000 + 3_200
        script.refuseReconnects = 503
        let server = try await DeepgramTestServer(script: script)
        let collector = EventCollector()
        let session = try await recognizer(
            server,
            backoff: Backoff(base: .milliseconds(10), cap: .milliseconds(50), maxAttempts: 3, maxTotal: .seconds(5))
        )
        .startStream(StreamOptions(interimResults: false), events: collector)
        for start in stride(from: 0, to: 64_000, by: 1600) {
            session.send(AudioChunk(samples: Array(recording[start..<start + 1600])))
        }
        let error = await #expect(throws: RecognitionError.self) { try await session.run() }
        #expect(error?.kind == .backendUnavailable)
        #expect(collector.reconnects == [true])
        let finals = collector.events.value.compactMap { event -> String? in
            guard case .result(let result) = event else { return nil }
            return result.text
        }
        #expect(finals == server.finalsSent, "finals received before the drop are kept")
        #expect(server.connections.count == 4, "the first connection and three refused reconnects")
    }

    @Test func silentServerTimesOutTheHandshake() async throws {
        // A socket that listens but never accepts or answers: the kernel completes the TCP
        // handshake, the WebSocket handshake never comes.
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(listener) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        try #require(
            withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) }
            } == 0)
        try #require(listen(listener, 4) == 0)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        let port = Int(UInt16(bigEndian: address.sin_port))
        let recognizer = DeepgramRecognizer(
            settings: DeepgramSettings(
                url: "ws://127.0.0.1:\(port)/v1/listen", backoff: Backoff(maxAttempts: 0), connectTimeout: .seconds(1)),
            environment: ["STTD_API_KEY": "silent-server-key"], logger: logs.logger())
        let started = ContinuousClock.now
        let error = await #expect(throws: RecognitionError.self) {
            _ = try await recognizer.startStream(StreamOptions(), events: EventCollector())
        }
        #expect(error?.kind == .backendUnavailable)
        #expect(error?.message.contains("handshake") == true, "\(error?.message ?? "")")
        #expect(ContinuousClock.now - started < .seconds(10))
    }

    @Test func tunnelsThroughAnHTTPProxyWithTLS() async throws {
        // A name only the proxy resolves (it connects to 127.0.0.1 whatever the name): a
        // loopback name would not go through the proxy at all.
        let certificates = try TestCertificates(hosts: ["stt.test"])
        let server = try await DeepgramTestServer(
            tls: (certificates.certificate("stt.test"), certificates.key("stt.test")))
        let proxy = try ConnectProxy()
        defer { proxy.stop() }
        let recognizer = DeepgramRecognizer(
            settings: DeepgramSettings(
                url: server.url(tls: true, host: "stt.test"), caFile: certificates.caCertificate,
                backoff: Backoff(maxAttempts: 0)),
            environment: ["STTD_API_KEY": server.script.key, "https_proxy": "http://127.0.0.1:\(proxy.port)"],
            logger: logs.logger())
        let audio = Array(recording.prefix(16_000))
        let (finals, _, _) = try await stream(audio, to: recognizer)
        #expect(proxy.requestedTargets == ["stt.test:\(server.port)"])
        #expect(
            finals.joined(separator: " ").split(separator: " ").map(String.init)
                == DeepgramTestServer.words(for: wireBytes(audio)))
    }

    /// With every proxy variable set to a real proxy, a server on loopback is reached directly:
    /// the proxy sees no CONNECT, so the key never leaves the machine.
    @Test func loopbackServersAreReachedWithoutTheProxy() async throws {
        let server = try await DeepgramTestServer()
        let proxy = try ConnectProxy()
        defer { proxy.stop() }
        let proxyURL = "http://127.0.0.1:\(proxy.port)"
        let environment = [
            "http_proxy": proxyURL, "https_proxy": proxyURL, "all_proxy": proxyURL, "HTTP_PROXY": proxyURL,
            "ALL_PROXY": proxyURL,
        ]
        let audio = Array(recording.prefix(16_000))
        for host in ["127.0.0.1", "localhost"] {
            let (finals, _, _) = try await stream(
                audio, to: recognizer(server, url: server.url(host: host), environment: environment))
            #expect(
                finals.joined(separator: " ").split(separator: " ").map(String.init)
                    == DeepgramTestServer.words(for: wireBytes(audio)), "\(host)")
        }
        #expect(proxy.requestedTargets == [])
        #expect(server.connections.filter(\.upgraded).count == 2)
        #expect(server.connections.allSatisfy { $0.header("Authorization") == "Token \(server.script.key)" })
    }

    @Test func cancelClosesTheConnectionAtOnce() async throws {
        let server = try await DeepgramTestServer()
        let session = try await recognizer(server).startStream(StreamOptions(), events: EventCollector())
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await session.run() }
            session.send(AudioChunk(samples: Array(recording.prefix(8_000))))
            try await server.wait { ($0.first?.audioBytes ?? 0) >= 16_000 }
            session.cancel()
            try await group.waitForAll()
        }
        try await server.wait("the socket to close on cancel, not when the server times out", timeout: .seconds(3)) {
            $0.allSatisfy { !$0.open }
        }
    }

    @Test func cancellingTheRunningTaskEndsTheSessionPromptly() async throws {
        let server = try await DeepgramTestServer()
        let collector = EventCollector()
        let session = try await recognizer(server).startStream(StreamOptions(), events: collector)
        let took = try await elapsed {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await session.run() }
                // Two seconds at once: 0.6 s goes out directly (the pacer's head start), the rest
                // only through run()'s paced drain, so a seventh frame shows run() is under way.
                for start in stride(from: 0, to: 32_000, by: 1_600) {
                    session.send(AudioChunk(samples: Array(recording[start..<start + 1_600])))
                }
                try await server.wait { ($0.first?.audioBytes ?? 0) >= 22_400 }
                group.cancelAll()
                try await group.waitForAll()
            }
        }
        #expect(took < .seconds(8), "\(took)")
        try await server.wait("every socket closed", timeout: .seconds(3)) { $0.allSatisfy { !$0.open } }
        let before = collector.events.value.count
        session.send(AudioChunk(samples: Array(recording.prefix(1_600))))
        #expect(collector.events.value.count == before, "nothing is delivered after run() returned")
    }

    @Test func refusalWhoseBodyNeverEndsIsDeniedAtOnce() async throws {
        var script = DeepgramTestServer.Script()
        script.stallRefusalBody = true
        let server = try await DeepgramTestServer(script: script)
        var error: RecognitionError?
        let took = await elapsed {
            error = await #expect(throws: RecognitionError.self) {
                _ = try await recognizer(server, key: "wrong-key-0000").startStream(
                    StreamOptions(), events: EventCollector())
            }
        }
        #expect(error?.kind == .notAuthorized)
        #expect(error?.authorization == .denied)
        #expect(error?.message.contains("401") == true)
        #expect(
            took < .seconds(9),
            "the status decides (the body is read for 2 s at most), not the 10 s connect timeout: \(took)")
        #expect(server.connections.count == 1, "401 is not retried")
        try await server.wait("every socket closed", timeout: .seconds(3)) { $0.allSatisfy { !$0.open } }
    }

    @Test func serverThatNeverAnswersFailsWithinTheConnectTimeout() async throws {
        var script = DeepgramTestServer.Script()
        script.neverAnswer = true
        let server = try await DeepgramTestServer(script: script)
        let recognizer = recognizer(server, backoff: Backoff(), connectTimeout: .seconds(1))
        var error: RecognitionError?
        let took = await elapsed {
            error = await #expect(throws: RecognitionError.self) {
                _ = try await recognizer.startStream(StreamOptions(), events: EventCollector())
            }
        }
        #expect(error?.kind == .backendUnavailable)
        #expect(error?.message.contains("handshake") == true, "\(error?.message ?? "")")
        #expect(took < .seconds(8), "\(took)")
        var status = RecognizerAuthorization.authorized
        let authorizing = await elapsed { status = await recognizer.authorize().0 }
        #expect(status == .notDetermined)
        #expect(authorizing < .seconds(8), "\(authorizing)")
        try await server.wait("every socket closed", timeout: .seconds(3)) { $0.allSatisfy { !$0.open } }
    }

    @Test func proxyThatNeverAnswersFailsWithinTheConnectTimeout() async throws {
        let server = try await DeepgramTestServer()
        let proxy = try ConnectProxy(answers: false)
        defer { proxy.stop() }
        // A name only the proxy would resolve: a loopback one does not go through a proxy.
        let recognizer = recognizer(
            server, url: server.url(host: "stt.test"), backoff: Backoff(), connectTimeout: .seconds(1),
            environment: ["http_proxy": "http://127.0.0.1:\(proxy.port)"])
        let took = await elapsed {
            await #expect(throws: RecognitionError.self) {
                _ = try await recognizer.startStream(StreamOptions(), events: EventCollector())
            }
        }
        #expect(took < .seconds(8), "\(took)")
        #expect(proxy.requestedTargets.first == "stt.test:\(server.port)")
        #expect(server.connections.isEmpty)
    }

    @Test func serviceUnavailableOnEveryAttemptFailsWithinTheConnectTimeout() async throws {
        var script = DeepgramTestServer.Script()
        script.refusals = Array(repeating: 503, count: 1_000)
        let server = try await DeepgramTestServer(script: script)
        var error: RecognitionError?
        // The backoff alone would go on for minutes; the connect timeout (its largest, 15 s)
        // bounds the start. Short delays: several attempts fit in it however busy the machine.
        let backoff = Backoff(
            base: .milliseconds(20), cap: .milliseconds(50), maxAttempts: 1_000, maxTotal: .seconds(600))
        let took = await elapsed {
            error = await #expect(throws: RecognitionError.self) {
                _ = try await recognizer(server, backoff: backoff, connectTimeout: .seconds(15))
                    .startStream(StreamOptions(), events: EventCollector())
            }
        }
        #expect(error?.kind == .backendUnavailable)
        #expect(error?.message.contains("503") == true, "\(error?.message ?? "")")
        #expect(took < .seconds(40), "\(took)")
        #expect(server.connections.count >= 2, "retried while the deadline allowed")
    }

    @Test func cancellingAStartWhileConnectingEndsItPromptly() async throws {
        var script = DeepgramTestServer.Script()
        script.neverAnswer = true
        let server = try await DeepgramTestServer(script: script)
        let recognizer = recognizer(server, connectTimeout: .seconds(10))
        var outcome: (any Error)?
        let took = await elapsed {
            outcome = await withTaskGroup(of: (any Error)?.self) { group in
                group.addTask {
                    do {
                        _ = try await recognizer.startStream(StreamOptions(), events: EventCollector())
                        return nil
                    } catch {
                        return error
                    }
                }
                #expect(await server.happens(within: .seconds(10)) { $0.count == 1 })
                group.cancelAll()
                return await group.next() ?? nil
            }
        }
        #expect((outcome as? RecognitionError)?.message.contains("cancelled") == true, "\(String(describing: outcome))")
        #expect(took < .seconds(8), "\(took)")
        try await server.wait("every socket closed", timeout: .seconds(3)) { $0.allSatisfy { !$0.open } }
    }

    @Test func connectionDownLongerThanTheReplayBufferFailsTheSession() async throws {
        var script = DeepgramTestServer.Script()
        script.dropAfterBytes = 3_200
        script.refuseReconnects = 503
        let server = try await DeepgramTestServer(script: script)
        let collector = EventCollector()
        let session = try await recognizer(
            server,
            backoff: Backoff(
                base: .milliseconds(20), cap: .milliseconds(50), maxAttempts: 1_000, maxTotal: .seconds(60)),
            replayCapacity: .seconds(1)
        ).startStream(StreamOptions(), events: collector)
        let error = await #expect(throws: RecognitionError.self) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await session.run() }
                session.send(AudioChunk(samples: Array(recording.prefix(1_600))))
                #expect(await collector.events.happens(within: .seconds(10)) { $0.contains(.reconnecting(true)) })
                // 1.5 s captured while no connection is open: more than the 1 s buffer.
                for start in stride(from: 1_600, to: 25_600, by: 1_600) {
                    session.send(AudioChunk(samples: Array(recording[start..<start + 1_600])))
                }
                try await group.waitForAll()
            }
        }
        #expect(error?.kind == .backendUnavailable)
        #expect(error?.message.contains("replay buffer") == true, "\(error?.message ?? "")")
        #expect(logs.all.contains { $0.contains("can no longer be replayed") }, "releasing sent audio is logged")
    }

    @Test func stalledSocketIsAbortedOnceTheWriteBoundIsReached() async throws {
        var script = DeepgramTestServer.Script()
        script.stopReadingAfterBytes = 32_000
        let server = try await DeepgramTestServer(script: script)
        let url = try #require(URL(string: server.url()))
        let frame = [Int16](repeating: 7, count: 1_600)
        // A server that reads: bursts within the bound go out.
        let reading = try await DeepgramTestServer()
        let healthy = try await WebSocketConnection.connect(
            url: try #require(URL(string: reading.url())), headers: [("Authorization", "Token \(reading.script.key)")],
            tls: nil, logger: logs.logger(), onMessage: { _ in })
        for batch in 1...20 {
            for _ in 0..<50 { healthy.send(binary: frame) }
            try await reading.wait("batch \(batch) read") { $0.first?.audioBytes == batch * 160_000 }
        }
        healthy.close()
        // A server that stopped reading: once the kernel's buffers are full, writes queue up to the bound.
        let connection = try await WebSocketConnection.connect(
            url: url, headers: [("Authorization", "Token \(server.script.key)")], tls: nil, logger: logs.logger(),
            onMessage: { _ in })
        let ended = Watched<WebSocketEnd?>(nil)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                let end = await connection.end
                ended.update { $0 = end }
            }
            // 50 frames (160 kB, half the bound) at a time, until the connection gives up (at most 64 MB).
            for _ in 0..<400 where ended.value == nil {
                for _ in 0..<50 { connection.send(binary: frame) }
                if await ended.happens(within: .milliseconds(10), { $0 != nil }) { break }
            }
            connection.abort()
            try await group.waitForAll()
        }
        guard case .dropped(let reason) = ended.value else {
            Issue.record("the connection did not end as dropped: \(String(describing: ended.value))")
            return
        }
        #expect(reason.contains("stalled"), "\(reason)")
    }

    @Test func undecodableAudioCloseIsNotRetried() async throws {
        var script = DeepgramTestServer.Script()
        script.closeAfterBytes = (16_000, 1008, "DATA-0000")
        let server = try await DeepgramTestServer(script: script)
        let error = await #expect(throws: RecognitionError.self) {
            _ = try await stream(Array(recording.prefix(32_000)), to: recognizer(server))
        }
        #expect(error?.kind == .failed)
        #expect(error?.message.contains("1008") == true)
        #expect(server.connections.filter(\.upgraded).count == 1)
    }

    /// The server cuts TCP after ~2 s of a 7 s recording; every word must still arrive once.
    @Test func droppedConnectionIsResumedAndReplayed() async throws {
        var script = DeepgramTestServer.Script()
        script.dropAfterBytes = 2 * 32_000 + 6_400
        let server = try await DeepgramTestServer(script: script)
        let (finals, _, reconnects) = try await stream(recording, to: recognizer(server))
        #expect(reconnects == [true, false])
        let upgraded = server.connections.filter(\.upgraded)
        #expect(upgraded.count == 2)
        let received = upgraded.reduce(0) { $0 + $1.audioBytes }
        #expect(received >= recording.count * 2, "every byte of the recording reached the server: \(received)")
        #expect(
            finals.joined(separator: " ").split(separator: " ").map(String.init)
                == DeepgramTestServer.words(for: wireBytes(recording)))
    }

    @Test func tlsWithTestCAAndWrongHostRefused() async throws {
        let certificates = try TestCertificates(hosts: ["localhost", "wrong.example"])
        let good = try await DeepgramTestServer(
            tls: (certificates.certificate("localhost"), certificates.key("localhost")))
        let audio = Array(recording.prefix(16_000))
        let (finals, _, _) = try await stream(
            audio, to: recognizer(good, url: good.url(tls: true), caFile: certificates.caCertificate))
        #expect(!finals.isEmpty)
        // Without the CA the system trust store does not know the server.
        let untrusted = await #expect(throws: RecognitionError.self) {
            _ = try await recognizer(good, url: good.url(tls: true), backoff: Backoff(maxAttempts: 0)).startStream(
                StreamOptions(), events: EventCollector())
        }
        #expect(untrusted?.kind == .backendUnavailable)
        // A certificate for another host is refused even with the right CA.
        let wrong = try await DeepgramTestServer(
            tls: (certificates.certificate("wrong.example"), certificates.key("wrong.example")))
        let mismatch = await #expect(throws: RecognitionError.self) {
            _ = try await recognizer(
                wrong, url: wrong.url(tls: true), caFile: certificates.caCertificate, backoff: Backoff(maxAttempts: 0)
            ).startStream(StreamOptions(), events: EventCollector())
        }
        #expect(mismatch?.kind == .backendUnavailable)
        #expect(wrong.connections.allSatisfy { !$0.upgraded })
    }
}
