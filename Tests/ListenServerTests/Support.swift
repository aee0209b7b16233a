import Capture
import Foundation
import ListenServer
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import TestSupport
import Testing

@testable import Recognition

/// A recognizer whose transcript is computed from the audio it got: one word (`w1`, `w2`, …) per
/// half second, an interim after each chunk that completed a word, and a final of the pending
/// words whenever 2 s of audio are pending (an utterance), as engines end one at a pause.
/// Speech activity starts with the first audio and stops with each final. Sessions are
/// independent, as the server must treat them.
final class FakeRecognizer: Recognizer {
    struct Stats: Sendable {
        var started = 0
        var finished = 0
        var cancelled = 0
        var running = 0
        var samples: [Int] = []
    }
    let stats = Watched(Stats())

    func authorize() async -> (RecognizerAuthorization, RecognitionError?) { (.authorized, nil) }

    func startStream(_ options: StreamOptions, events: any RecognitionEventSink) async throws(RecognitionError)
        -> any RecognitionStream
    {
        let index = stats.update { stats in
            stats.started += 1
            stats.running += 1
            stats.samples.append(0)
            return stats.samples.count - 1
        }
        return FakeRecognitionStream(index: index, sink: events, interim: options.interimResults, stats: stats)
    }
}

final class FakeRecognitionStream: RecognitionStream {
    static let samplesPerWord = 8_000
    static let wordsPerUtterance = 4

    private struct State {
        var samples = 0
        /// Words already in a final, and where their audio ended.
        var finalWords = 0
        var finalEnd = 0
        var speaking = false
        var ended = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())
    private let index: Int
    private let sink: any RecognitionEventSink
    private let interim: Bool
    private let stats: Watched<FakeRecognizer.Stats>

    init(index: Int, sink: any RecognitionEventSink, interim: Bool, stats: Watched<FakeRecognizer.Stats>) {
        self.index = index
        self.sink = sink
        self.interim = interim
        self.stats = stats
    }

    func run() async throws(RecognitionError) {
        await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ended = state.withLock { state in
                    if state.ended { return true }
                    state.waiter = continuation
                    return false
                }
                if ended { continuation.resume() }
            }
        } onCancel: {
            cancel()
        }
    }

    func send(_ chunk: AudioChunk) {
        let events = state.withLock { state -> [RecognitionEvent] in
            guard !state.ended else { return [] }
            var events: [RecognitionEvent] = []
            if !state.speaking {
                state.speaking = true
                events.append(.speechActivity(true))
            }
            let before = state.samples / Self.samplesPerWord
            state.samples += chunk.samples.count
            let words = state.samples / Self.samplesPerWord
            if words - state.finalWords >= Self.wordsPerUtterance {
                events += final(&state, fromFinalize: false)
            } else if words > before, interim {
                events.append(.result(RecognitionResult(text: text(state.finalWords..<words), isFinal: false)))
            }
            return events
        }
        stats.update { $0.samples[index] += chunk.samples.count }
        events.forEach(sink.deliver)
    }

    func finalize() {
        let events = state.withLock { state in state.ended ? [] : final(&state, fromFinalize: true, always: true) }
        events.forEach(sink.deliver)
    }

    func finish() {
        let (events, waiter) = state.withLock { state -> ([RecognitionEvent], CheckedContinuation<Void, Never>?) in
            guard !state.ended else { return ([], nil) }
            let events = final(&state, fromFinalize: false)
            state.ended = true
            defer { state.waiter = nil }
            return (events, state.waiter)
        }
        events.forEach(sink.deliver)
        stats.update {
            $0.finished += 1
            $0.running -= 1
        }
        waiter?.resume()
    }

    func cancel() {
        let (wasRunning, waiter) = state.withLock { state -> (Bool, CheckedContinuation<Void, Never>?) in
            guard !state.ended else { return (false, nil) }
            state.ended = true
            defer { state.waiter = nil }
            return (true, state.waiter)
        }
        if wasRunning {
            stats.update {
                $0.cancelled += 1
                $0.running -= 1
            }
        }
        waiter?.resume()
    }

    private func text(_ words: Range<Int>) -> String { words.map { "w\($0 + 1)" }.joined(separator: " ") }

    /// The pending words (the last part-word included) as a final; with `always`, an empty one
    /// when nothing is pending.
    private func final(_ state: inout State, fromFinalize: Bool, always: Bool = false) -> [RecognitionEvent] {
        let words = (state.samples + Self.samplesPerWord - 1) / Self.samplesPerWord
        guard words > state.finalWords || always else { return [] }
        let start = Double(state.finalEnd) / 16_000
        let end = Double(state.samples) / 16_000
        let result = RecognitionResult(
            text: text(state.finalWords..<max(words, state.finalWords)), isFinal: true,
            // Times only on engine finals, to exercise the server's own timing for the others.
            audioStart: fromFinalize ? nil : start, audioEnd: fromFinalize ? nil : end, fromFinalize: fromFinalize)
        state.finalWords = max(words, state.finalWords)
        state.finalEnd = state.samples
        var events: [RecognitionEvent] = [.result(result)]
        if state.speaking {
            state.speaking = false
            events.append(.speechActivity(false))
        }
        return events
    }
}

/// A WebSocket client of the server under test, recording what it receives.
final class ListenClient: Sendable {
    let connection: WebSocketConnection
    let messages: Watched<[String]>

    private init(connection: WebSocketConnection, messages: Watched<[String]>) {
        self.connection = connection
        self.messages = messages
    }

    static func connect(
        _ server: ListenServer, query: String = "encoding=linear16&sample_rate=16000&channels=1&interim_results=true",
        headers: [(String, String)] = []
    ) async throws -> ListenClient {
        let texts = Watched<[String]>([])
        let connection = try await WebSocketConnection.connect(
            url: URL(string: "\(server.address)/v1/listen?\(query)")!, headers: headers, tls: nil, timeout: .seconds(5),
            logger: Logger(label: "test-client")
        ) { message in
            if case .text(let text) = message { texts.update { $0.append(text) } }
        }
        return ListenClient(connection: connection, messages: texts)
    }

    /// Received messages decoded as JSON objects.
    var objects: [[String: Any]] {
        messages.value.compactMap {
            (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: Any]
        }
    }

    func results() -> [[String: Any]] { objects.filter { $0["type"] as? String == "Results" } }

    func finals() -> [[String: Any]] { results().filter { $0["is_final"] as? Bool == true } }

    /// Sends `seconds` of a tone in 100 ms frames.
    func sendAudio(seconds: Double) {
        let frames = Int(seconds * 10)
        for _ in 0..<frames {
            connection.send(binary: (0..<1600).map { Int16(truncatingIfNeeded: ($0 % 40) * 800 - 16_000) })
        }
    }

    /// Waits until a received message satisfies `condition`; throws ``WaitTimedOut`` (with the
    /// messages received) if none does within `timeout`.
    func waitForMessage(
        timeout: Duration = .seconds(10), fileID: String = #fileID, line: Int = #line,
        _ condition: @escaping @Sendable ([String: Any]) -> Bool
    ) async throws {
        try await messages.wait("a matching message", timeout: timeout, fileID: fileID, line: line) { texts in
            texts.contains { text in
                ((try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]).map(condition) ?? false
            }
        }
    }
}

func transcript(_ result: [String: Any]) -> String? {
    ((result["channel"] as? [String: Any])?["alternatives"] as? [[String: Any]])?.first?["transcript"] as? String
}

/// A client (with `headers`) gets a whole stream: two seconds of audio, its finals, a clean close.
func expectAStreamIsServed(by server: ListenServer, headers: [(String, String)] = []) async throws {
    let client = try await ListenClient.connect(server, headers: headers)
    client.sendAudio(seconds: 2)
    client.connection.send(text: #"{"type":"CloseStream"}"#)
    #expect(await client.connection.end == .closed(code: 1000, reason: ""))
    #expect(client.finals().compactMap(transcript) == ["w1 w2 w3 w4"])
}

/// Runs a server over `recognizer` on an ephemeral loopback port for `body`, in a service
/// group; shuts it down gracefully afterwards.
func withServer<Result: Sendable>(
    _ settings: ListenServerSettings = ListenServerSettings(host: "127.0.0.1", port: 0),
    recognizer: any Recognizer, _ body: @Sendable (ListenServer) async throws -> Result
) async throws -> Result {
    var logger = Logger(label: "listen-server-test")
    logger.logLevel = .debug
    let server = try await ListenServer.bind(settings: settings, recognizer: recognizer, logger: logger)
    let group = ServiceGroup(services: [server], logger: logger)
    return try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask { try await group.run() }
        do {
            let result = try await body(server)
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
            return result
        } catch {
            await group.triggerGracefulShutdown()
            try? await tasks.waitForAll()
            throw error
        }
    }
}

/// A raw HTTP/1.1 exchange on loopback: sends `request`, returns the response head's status line
/// and headers, and the body (up to the connection's end, for refusals with `Connection: close`).
/// The blocking socket calls run on a thread of their own: the server answers a handshake from a
/// task, which a test holding both of a 2-core machine's pool threads would stall.
func rawHTTP(port: Int, _ request: String, timeout: TimeInterval = 15) async throws -> (
    status: Int, headers: [String: String], body: String
) {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try blockingHTTP(port: port, request, timeout: timeout) }) }
            .start()
    }
}

private func blockingHTTP(port: Int, _ request: String, timeout: TimeInterval) throws -> (
    status: Int, headers: [String: String], body: String
) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw MissingPrerequisite(description: "socket() failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = in_port_t(UInt16(port).bigEndian)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var tv = timeval(tv_sec: Int(timeout), tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
    let connected = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
        }
    }
    guard connected == 0 else { throw MissingPrerequisite(description: "cannot connect to 127.0.0.1:\(port)") }
    let bytes = Array(request.utf8)
    _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    var response = [UInt8]()
    var buffer = [UInt8](repeating: 0, count: 4096)
    while true {
        let count = read(fd, &buffer, buffer.count)
        if count <= 0 { break }
        response += buffer[0..<count]
        // A 101 keeps the connection open: stop at the end of its head.
        if let text = String(bytes: response, encoding: .utf8), text.hasPrefix("HTTP/1.1 101"),
            text.contains("\r\n\r\n")
        {
            break
        }
    }
    let text = String(decoding: response, as: UTF8.self)
    let parts = text.components(separatedBy: "\r\n\r\n")
    let lines = parts[0].components(separatedBy: "\r\n")
    let status = Int(lines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
    var headers: [String: String] = [:]
    for line in lines.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    return (status, headers, parts.dropFirst().joined(separator: "\r\n\r\n"))
}

/// A WebSocket upgrade request for `target`, with extra header lines.
func upgradeRequest(_ target: String, headers: [String] = []) -> String {
    ([
        "GET \(target) HTTP/1.1", "Host: 127.0.0.1", "Upgrade: websocket", "Connection: Upgrade",
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13",
    ] + headers)
    .joined(separator: "\r\n") + "\r\n\r\n"
}

/// A service group of one server, for tests that shut it down themselves.
struct ServiceGroupBox: Sendable {
    let group: ServiceGroup

    init(server: ListenServer, logger: Logger) {
        group = ServiceGroup(services: [server], logger: logger)
    }

    func run() async throws { try await group.run() }
    func shutDown() async { await group.triggerGracefulShutdown() }
}
