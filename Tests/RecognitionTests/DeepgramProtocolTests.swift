import Capture
import Foundation
import Testing

@testable import Recognition

@Suite("Deepgram protocol values")
struct DeepgramProtocolTests {
    @Test func streamURLCarriesTheAudioFormatAndEveryKeyterm() throws {
        let url = try #require(
            DeepgramProtocol.streamURL(
                base: "wss://api.deepgram.com/v1/listen", model: "nova-3", language: "en-US", interimResults: false,
                keyterms: ["sttd", "C++ code"], parameters: ["smart_format": "true", "endpointing": "300"]))
        let items = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []
        let pairs = items.map { "\($0.name)=\($0.value ?? "")" }
        #expect(
            pairs == [
                "encoding=linear16", "sample_rate=16000", "channels=1", "model=nova-3", "language=en-US",
                "interim_results=false", "keyterm=sttd", "keyterm=C++ code", "endpointing=300", "smart_format=true",
            ])
        #expect(url.query?.contains("C%2B%2B%20code") == true, "a '+' must not turn into a space: \(url.query ?? "")")
    }

    /// Deepgram's models before Nova-3 take `keywords`; Nova-3, Flux and other servers `keyterm`.
    @Test(arguments: [
        ("nova-3", "keyterm"), ("nova-3-medical", "keyterm"), ("flux-general-en", "keyterm"), ("", "keyterm"),
        ("nova-2", "keywords"), ("nova-2-meeting", "keywords"), ("nova", "keywords"), ("enhanced", "keywords"),
        ("base", "keywords"),
    ])
    func keytermsGoWhereTheModelTakesThem(model: String, parameter: String) throws {
        let url = try #require(
            DeepgramProtocol.streamURL(
                base: "wss://api.deepgram.com/v1/listen", model: model, language: "en-US", interimResults: true,
                keyterms: ["PipeWire"], parameters: [:]))
        let items = URLComponents(url: url, resolvingAgainstBaseURL: false)?.queryItems ?? []
        #expect(items.filter { $0.value == "PipeWire" }.map(\.name) == [parameter])
    }

    @Test func decodesResultsLeniently() throws {
        let deepgram =
            #"{"type":"Results","channel_index":[0,1],"start":1.5,"duration":0.75,"is_final":true,"speech_final":false,"channel":{"alternatives":[{"transcript":"hello there","confidence":0.98,"words":[{"word":"hello","start":1.5,"end":1.8,"confidence":0.99,"punctuated_word":"Hello"}]}]},"metadata":{"request_id":"r"}}"#
        guard case .results(let results) = try DeepgramProtocol.decode(deepgram) else {
            Issue.record("not results"); return
        }
        #expect(results.transcript == "hello there")
        #expect(results.isFinal && !results.speechFinal)
        #expect(results.end == 2.25)
        let subq =
            #"{"type":"Results","start":0,"duration":1,"speech_final":true,"channel":{"alternatives":[{"transcript":"hi","words":[["hi",0,400]]}]}}"#
        guard case .results(let tuple) = try DeepgramProtocol.decode(subq) else { Issue.record("not results"); return }
        #expect(tuple.isFinal, "speech_final implies is_final")
        #expect(tuple.wordCount == 1)
        let sparse = #"{"type":"Results","channel":{"alternatives":[{"transcript":""}]}}"#
        guard case .results(let empty) = try DeepgramProtocol.decode(sparse) else {
            Issue.record("not results"); return
        }
        #expect(!empty.isFinal && empty.start == 0)
    }

    @Test func decodesOtherTypesAndRefusesGarbage() throws {
        #expect(try DeepgramProtocol.decode(#"{"type":"Metadata","request_id":"abc"}"#) == .metadata(requestID: "abc"))
        #expect(
            try DeepgramProtocol.decode(#"{"type":"UtteranceEnd","channel":[0,1],"last_word_end":2.5}"#)
                == .utteranceEnd(lastWordEnd: 2.5))
        #expect(
            try DeepgramProtocol.decode(#"{"type":"SpeechStarted","timestamp":"0.5"}"#)
                == .speechStarted(timestamp: 0.5))
        #expect(try DeepgramProtocol.decode(#"{"type":"Warning","description":"x"}"#) == .unknown(type: "Warning"))
        for garbage in ["", "{", "[]", #"{"no_type":1}"#, #"{"type":"Results","channel":{}}"#, "\u{0}\u{1}"] {
            #expect(throws: DeepgramProtocol.MalformedMessage.self) { try DeepgramProtocol.decode(garbage) }
        }
    }

    @Test func retryableCloseCodesAndStatuses() {
        #expect(DeepgramProtocol.isRetryable(closeCode: 1011))
        #expect(DeepgramProtocol.isRetryable(closeCode: 1006))
        #expect(!DeepgramProtocol.isRetryable(closeCode: 1000))
        #expect(!DeepgramProtocol.isRetryable(closeCode: 1008))
        #expect(!DeepgramProtocol.isRetryable(closeCode: 1002))
        #expect(DeepgramProtocol.isRetryable(handshakeStatus: 429))
        #expect(DeepgramProtocol.isRetryable(handshakeStatus: 503))
        for status in [400, 401, 402, 403] { #expect(!DeepgramProtocol.isRetryable(handshakeStatus: status)) }
    }

    @Test func ledgerReplaysUnansweredAudioAndDropsDuplicateFinals() throws {
        var ledger = StreamLedger(capacity: .seconds(30))
        #expect(ledger.beginConnection() == 0)
        for _ in 0..<30 {  // 3 s, sent as it comes
            try ledger.append(AudioChunk(samples: Array(repeating: 1, count: 1600)))
            #expect(ledger.takeUnsent()?.count == 1600)
        }
        #expect(ledger.unsent == 0)
        let first = ledger.acceptFinal(start: 0, duration: 1)
        #expect(first)
        #expect(ledger.unanswered == 32_000)
        // The connection drops; the next one starts with the unanswered two seconds.
        #expect(ledger.beginConnection() == 32_000)
        var replay: [Int16] = []
        while let samples = ledger.takeUnsent() { replay += samples }
        #expect(replay.count == 32_000)
        #expect(ledger.connectionBase == 16_000)
        #expect(ledger.sessionTime(0.5) == 1.5)
        // A final for audio before the last final's end is a duplicate.
        let duplicate = ledger.acceptFinal(start: -1, duration: 1)
        #expect(!duplicate)
        let second = ledger.acceptFinal(start: 0, duration: 2)
        #expect(second)
        #expect(ledger.lastFinalEnd == 3)
        #expect(ledger.unanswered == 0)
        #expect(ledger.released == 0)
    }

    @Test func ledgerReleasesSentAudioPastItsCapacity() throws {
        var ledger = StreamLedger(capacity: .seconds(1))
        ledger.beginConnection()
        for _ in 0..<30 {
            try ledger.append(AudioChunk(samples: Array(repeating: 1, count: 1600)))
            _ = ledger.takeUnsent()
        }
        #expect(ledger.unanswered == 16_000, "the newest second is kept")
        #expect(ledger.released == 32_000, "sent audio past the capacity is released, and counted")
        #expect(ledger.beginConnection() == 16_000, "what is kept is replayed")
        #expect(ledger.connectionBase == 32_000)
    }

    @Test func ledgerNeverDropsUnsentAudio() throws {
        var ledger = StreamLedger(capacity: .seconds(1))
        ledger.beginConnection()
        let chunk = AudioChunk(samples: Array(repeating: 1, count: 1600))
        for _ in 0..<5 {
            try ledger.append(chunk)
            _ = ledger.takeUnsent()
        }
        // The connection drops: nothing more is sent.
        for _ in 0..<10 { try ledger.append(chunk) }
        #expect(ledger.released == 8_000, "the sent half second made room")
        #expect(ledger.unsent == 16_000)
        let overflow = #expect(throws: StreamLedger.Overflow.self) { try ledger.append(chunk) }
        #expect(overflow?.unsent == 17_600 && overflow?.capacity == 16_000)
        #expect(ledger.captured == 24_000, "the chunk that did not fit was not taken")
        #expect(ledger.unanswered == 16_000)
        // Back online: once audio goes out again there is room.
        #expect(ledger.beginConnection() == 16_000)
        _ = ledger.takeUnsent()
        try ledger.append(chunk)
        #expect(ledger.unsent == 16_000)
    }

    @Test func backoffIsBoundedWithFullJitter() {
        var backoff = Backoff(base: .milliseconds(100), cap: .seconds(1), maxAttempts: 5, maxTotal: .seconds(60))
        var delays: [Duration] = []
        while let delay = backoff.next() { delays.append(delay) }
        #expect(delays.count == 5)
        #expect(delays.allSatisfy { $0 >= .zero && $0 <= .seconds(1) })
        backoff.reset()
        #expect(backoff.next() != nil)
        var short = Backoff(base: .seconds(10), cap: .seconds(10), maxAttempts: 100, maxTotal: .milliseconds(1))
        var count = 0
        while short.next() != nil { count += 1 }
        #expect(count >= 1 && count < 100, "total time bounds the attempts")
    }

    @Test func apiKeyNeverPrints() throws {
        let key = APIKey("secret-123")
        #expect("\(key)" == "<redacted>")
        #expect(String(reflecting: key) == "<redacted>")
        #expect(key.redact("bad key secret-123 here") == "bad key <redacted> here")
    }

    @Test func apiKeyComesFromFileThenCredentialThenEnvironment() throws {
        let directory = NSTemporaryDirectory() + "sttd-key-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let file = "\(directory)/key"
        try "from-file\n".write(toFile: file, atomically: true, encoding: .utf8)
        chmod(file, 0o644)
        let open = #expect(throws: RecognitionError.self) { try APIKey.load(keyFile: file, environment: [:]) }
        #expect(open?.message.contains("chmod 600 \(file)") == true)
        #expect(open?.message.contains("from-file") == false)
        chmod(file, 0o600)
        #expect(try APIKey.load(keyFile: file, environment: ["STTD_API_KEY": "env"]) == APIKey("from-file"))
        try "from-credential".write(toFile: "\(directory)/api-key", atomically: true, encoding: .utf8)
        #expect(
            try APIKey.load(keyFile: "", environment: ["CREDENTIALS_DIRECTORY": directory, "STTD_API_KEY": "env"])
                == APIKey("from-credential"))
        #expect(try APIKey.load(keyFile: "", environment: ["STTD_API_KEY": " env "]) == APIKey("env"))
        #expect(try APIKey.load(keyFile: "", environment: [:]) == nil)
    }

    @Test func proxyComesFromTheEnvironment() throws {
        let secure = try #require(URL(string: "wss://api.deepgram.com/v1/listen"))
        let plain = try #require(URL(string: "ws://stt.lan:8080/v1/listen"))
        #expect(ProxySettings.forURL(secure, environment: [:]) == nil)
        #expect(
            ProxySettings.forURL(secure, environment: ["https_proxy": "http://proxy.lan:3128"])
                == ProxySettings(kind: .httpConnect, host: "proxy.lan", port: 3128))
        #expect(
            ProxySettings.forURL(secure, environment: ["HTTPS_PROXY": "proxy.lan:8080"])
                == ProxySettings(kind: .httpConnect, host: "proxy.lan", port: 8080))
        #expect(
            ProxySettings.forURL(secure, environment: ["all_proxy": "socks5h://127.0.0.1:1080"])
                == ProxySettings(kind: .socks5, host: "127.0.0.1", port: 1080))
        #expect(
            ProxySettings.forURL(secure, environment: ["http_proxy": "http://p:1"]) == nil,
            "http_proxy is for ws:// only")
        #expect(ProxySettings.forURL(plain, environment: ["http_proxy": "http://p:1"])?.host == "p")
        for exclusion in ["deepgram.com", ".deepgram.com", "api.deepgram.com", "*", "example.org, deepgram.com"] {
            #expect(
                ProxySettings.forURL(secure, environment: ["https_proxy": "http://p:1", "no_proxy": exclusion]) == nil,
                "\(exclusion)")
        }
        #expect(
            ProxySettings.forURL(secure, environment: ["https_proxy": "http://p:1", "NO_PROXY": "notdeepgram.com"])
                != nil)
        #expect(ProxySettings.forURL(secure, environment: ["https_proxy": "ftp://p:1"]) == nil)
    }

    /// A proxy would carry the key (and audio) off the machine, in cleartext for ws://.
    @Test func loopbackNeverGoesThroughAProxy() throws {
        let proxies = ["http_proxy": "http://p:1", "https_proxy": "http://p:1", "all_proxy": "socks5h://p:1"]
        for host in [
            "127.0.0.1", "127.0.0.53", "127.255.255.254", "localhost", "LocalHost", "[::1]", "[::ffff:127.0.0.1]",
        ] {
            for scheme in ["ws", "wss"] {
                let url = try #require(URL(string: "\(scheme)://\(host):8765/v1/listen"))
                #expect(ProxySettings.forURL(url, environment: proxies) == nil, "\(url)")
            }
        }
        for host in ["127.evil.example", "localhost.example", "128.0.0.1", "[::2]", "10.0.0.1"] {
            let url = try #require(URL(string: "ws://\(host):8765/v1/listen"))
            #expect(ProxySettings.forURL(url, environment: proxies)?.host == "p", "\(url)")
        }
    }
}

@Suite("Pacing and timers")
struct PacingTests {
    @Test func halfASecondGoesAtOnceThenAtMostOnePointTwoTimesRealTime() {
        let start = ContinuousClock.now
        var pacer = Pacer(started: start)
        #expect(pacer.wait(at: start) == .zero)
        pacer.sent(samples: 8_000)  // 0.5 s: the head start
        #expect(pacer.wait(at: start) == .zero)
        pacer.sent(samples: 16_000)  // 1.5 s sent at once
        let wait = pacer.wait(at: start)
        // 1.5 s may go out by 1.2 x t + 0.5 s, i.e. at t = 0.833 s.
        #expect(abs(wait.seconds - 1.0 / 1.2) < 0.001, "\(wait)")
        #expect(pacer.wait(at: start + .seconds(1)) == .zero)
    }

    @Test func eventLoopSleepEndsAndIsCancellable() async throws {
        try await eventLoopSleep(for: .milliseconds(20))
        let sleeping = Task { try await eventLoopSleep(for: .seconds(600)) }
        sleeping.cancel()
        await #expect(throws: CancellationError.self) { try await sleeping.value }
    }
}

extension Duration {
    fileprivate var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
