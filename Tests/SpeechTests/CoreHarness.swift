import Foundation
import History
import Logging
import NIOCore
import TestSupport
import Testing

@testable import Speech

/// A core with a fake microphone and recognizer, its events logged, its history in a temp file.
struct CoreHarness {
    let microphone = FakeMicrophone()
    let recognizer = FakeRecognizer()
    let output = FakeOutput()
    let log = EventLog()
    let core: SpeechCore
    let history: HistoryStore
    let directory: String

    /// - Parameter deepgram: the streaming backend's recognizer; by default the same fake as the local one.
    init(deepgram: FakeRecognizer? = nil, _ configure: (inout Configuration) -> Void = { _ in }) async throws {
        var configuration = Configuration()
        configuration.stopTimeoutMilliseconds = 2000
        configure(&configuration)
        directory = try makeTemporaryDirectory("sttd-core")
        history = try HistoryStore(path: "\(directory)/history.sqlite")
        core = SpeechCore(
            configuration: configuration, microphone: microphone,
            recognizers: Recognizers(local: recognizer, deepgram: deepgram ?? recognizer), history: history, output: output,
            logger: Logger(label: "test"))
        let log = log
        await core.observe { event, _ in log.append(event) }
    }

    /// Runs the core while `body` drives it, then shuts it down and waits for it to end.
    func run(_ body: () async throws -> Void) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await core.run() }
            do {
                try await body()
            } catch {
                await core.shutDown()
                throw error
            }
            await core.shutDown()
            try await group.waitForAll()
        }
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Starts a session and returns its fake recognizer session and capture.
    func start(_ options: StartOptions = StartOptions()) async throws -> (FakeRecognitionStream, FakeStream) {
        try await core.start(options)
        return (try #require(recognizer.current), try #require(microphone.current))
    }

    /// Stops and returns the transcript, or nil when no reply came within `limit` (a hang fails
    /// the test instead of stalling the suite).
    func stop(within limit: TimeAmount) async -> String? {
        let (replies, reply) = AsyncStream.makeStream(of: String?.self)
        Task.immediate { [core] in reply.yield(await core.stop()) }
        core.loop.scheduleTask(in: limit) { reply.yield(nil) }
        var first = replies.makeAsyncIterator()
        return await first.next() ?? nil
    }

    /// The newest history entry's text.
    var lastHistoryText: String? { (try? history.sessions(limit: 1))?.first?.text }
}
