import Capture
import Foundation
import Logging
import Recognition
import TestSupport
import Testing

/// Streams audio through a session and collects what comes back.
func stream(
    _ samples: [Int16], to recognizer: DeepgramRecognizer, options: SessionOptions = SessionOptions()
) async throws -> (finals: [String], interims: [String], reconnects: [Bool]) {
    let session = try await recognizer.startSession(options)
    for start in stride(from: 0, to: samples.count, by: 1600) {
        session.send(AudioChunk(samples: Array(samples[start..<min(start + 1600, samples.count)])))
    }
    session.finish()
    var finals: [String] = []
    var interims: [String] = []
    var reconnects: [Bool] = []
    for try await event in session.events {
        switch event {
        case .result(let result) where result.isFinal: if !result.text.isEmpty { finals.append(result.text) }
        case .result(let result): interims.append(result.text)
        case .reconnecting(let down): reconnects.append(down)
        case .speechActivity: break
        }
    }
    return (finals, interims, reconnects)
}

/// Little-endian bytes of samples, as sent on the wire.
func wireBytes(_ samples: [Int16]) -> [UInt8] {
    samples.flatMap { [UInt8(truncatingIfNeeded: $0), UInt8(truncatingIfNeeded: $0 >> 8)] }
}

@Suite("Deepgram streaming against a loopback server")
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
            base: .milliseconds(20), cap: .milliseconds(200), maxAttempts: 5, maxTotal: .seconds(5))
    ) -> DeepgramRecognizer {
        DeepgramRecognizer(
            settings: DeepgramSettings(
                url: url ?? server.url(), useSubprotocol: subprotocol, model: "nova-3", caFile: caFile,
                parameters: ["smart_format": "true"], backoff: backoff),
            environment: ["STTD_API_KEY": key ?? server.script.key], logger: logs.logger())
    }

    @Test func headerAuthQueryAndOrderedStop() async throws {
        let server = try await DeepgramTestServer()
        let audio = Array(recording.prefix(40_000))  // 2.5 s
        let (finals, interims, _) = try await stream(
            audio, to: recognizer(server), options: SessionOptions(language: "en-GB", keyterms: ["sttd", "D-Bus"]))
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
        #expect(connection.controls.allSatisfy { $0.atByte == audio.count * 2 })
        #expect(connection.audioBytes == audio.count * 2)
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
            _ = try await recognizer(server, key: wrong).startSession(SessionOptions())
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
            _ = try await recognizer(server).startSession(SessionOptions())
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
            _ = try await recognizer(
                server,
                backoff: Backoff(base: .milliseconds(10), cap: .milliseconds(50), maxAttempts: 3, maxTotal: .seconds(5))
            ).startSession(SessionOptions())
        }
        #expect(error?.kind == .backendUnavailable)
        #expect(server.connections.count == 4, "one try and three retries")
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
        let session = try await recognizer(server).startSession(SessionOptions())
        try await Task.sleep(for: .milliseconds(5_500))
        session.finish()
        for try await _ in session.events {}
        let controls = server.connections.first?.controls.map(\.type) ?? []
        #expect(controls.first == "KeepAlive", "\(controls)")
        #expect(controls.suffix(2) == ["Finalize", "CloseStream"])
    }

    @Test func givesUpMidSessionKeepingTheFinals() async throws {
        var script = DeepgramTestServer.Script()
        script.dropAfterBytes = 2 * 32_000 + 3_200
        script.refuseReconnects = 503
        let server = try await DeepgramTestServer(script: script)
        let session = try await recognizer(
            server,
            backoff: Backoff(base: .milliseconds(10), cap: .milliseconds(50), maxAttempts: 3, maxTotal: .seconds(5))
        )
        .startSession(SessionOptions(interimResults: false))
        for start in stride(from: 0, to: 64_000, by: 1600) {
            session.send(AudioChunk(samples: Array(recording[start..<start + 1600])))
        }
        var finals: [String] = []
        var reconnecting: [Bool] = []
        let error = await #expect(throws: RecognitionError.self) {
            for try await event in session.events {
                switch event {
                case .result(let result): finals.append(result.text)
                case .reconnecting(let down): reconnecting.append(down)
                case .speechActivity: break
                }
            }
        }
        #expect(error?.kind == .backendUnavailable)
        #expect(reconnecting == [true])
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
            _ = try await recognizer.startSession(SessionOptions())
        }
        #expect(error?.kind == .backendUnavailable)
        #expect(error?.message.contains("handshake") == true, "\(error?.message ?? "")")
        #expect(ContinuousClock.now - started < .seconds(10))
    }

    @Test func tunnelsThroughAnHTTPProxyWithTLS() async throws {
        let certificates = try TestCertificates(hosts: ["localhost"])
        let server = try await DeepgramTestServer(
            tls: (certificates.certificate("localhost"), certificates.key("localhost")))
        let proxy = try ConnectProxy()
        defer { proxy.stop() }
        let recognizer = DeepgramRecognizer(
            settings: DeepgramSettings(
                url: server.url(tls: true), caFile: certificates.caCertificate, backoff: Backoff(maxAttempts: 0)),
            environment: ["STTD_API_KEY": server.script.key, "https_proxy": "http://127.0.0.1:\(proxy.port)"],
            logger: logs.logger())
        let audio = Array(recording.prefix(16_000))
        let (finals, _, _) = try await stream(audio, to: recognizer)
        #expect(proxy.requestedTargets == ["localhost:\(server.port)"])
        #expect(
            finals.joined(separator: " ").split(separator: " ").map(String.init)
                == DeepgramTestServer.words(for: wireBytes(audio)))
    }

    @Test func cancelClosesTheConnectionAtOnce() async throws {
        let server = try await DeepgramTestServer()
        let session = try await recognizer(server).startSession(SessionOptions())
        session.send(AudioChunk(samples: Array(recording.prefix(8_000))))
        try await Task.sleep(for: .milliseconds(200))
        session.cancel()
        for try await _ in session.events {}
        let deadline = ContinuousClock.now + .seconds(3)
        while server.openConnections > 0, ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(20))
        }
        #expect(server.openConnections == 0, "the socket closes on cancel, not when the server times out")
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
            _ = try await recognizer(good, url: good.url(tls: true), backoff: Backoff(maxAttempts: 0)).startSession(
                SessionOptions())
        }
        #expect(untrusted?.kind == .backendUnavailable)
        // A certificate for another host is refused even with the right CA.
        let wrong = try await DeepgramTestServer(
            tls: (certificates.certificate("wrong.example"), certificates.key("wrong.example")))
        let mismatch = await #expect(throws: RecognitionError.self) {
            _ = try await recognizer(
                wrong, url: wrong.url(tls: true), caFile: certificates.caCertificate, backoff: Backoff(maxAttempts: 0)
            ).startSession(SessionOptions())
        }
        #expect(mismatch?.kind == .backendUnavailable)
        #expect(wrong.connections.allSatisfy { !$0.upgraded })
    }
}
