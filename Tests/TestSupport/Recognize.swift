import Capture
import Dictation
import Recognition
import Synchronization

/// Runs a session of `recognizer` over `samples` (sent in pieces of `chunk` samples, then
/// finished) until it ends; its events go to `events`.
public func recognize(
    _ samples: ArraySlice<Int16>, with recognizer: any Recognizer, options: StreamOptions = StreamOptions(),
    chunk: Int = 1600, events: any RecognitionEventSink
) async throws {
    let session = try await recognizer.startStream(options, events: events)
    try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { try await session.run() }
        for start in stride(from: samples.startIndex, to: samples.endIndex, by: chunk) {
            session.send(AudioChunk(samples: Array(samples[start..<min(start + chunk, samples.endIndex)])))
        }
        session.finish()
        try await group.waitForAll()
    }
}

extension Transcript {
    /// Collapses runs of whitespace, as an engine's words are compared.
    public static func normalized(_ text: String) -> String {
        text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }

    /// Adds an engine's result as it is (no commands): a final appended, an interim shown.
    @discardableResult
    public mutating func apply(_ result: RecognitionResult) -> Bool {
        let text = Transcript.normalized(result.text)
        guard result.isFinal else { return setInterim(text) }
        let before = self
        append(text)
        return self != before
    }
}

/// Collects a session's finals with words, whitespace normalized as the transcript joins them.
public final class FinalsSink: RecognitionEventSink {
    private let collected = Mutex<[String]>([])

    public init() {}

    public func deliver(_ event: RecognitionEvent) {
        guard case .result(let result) = event, result.isFinal else { return }
        let text = Transcript.normalized(result.text)
        guard !text.isEmpty else { return }
        collected.withLock { $0.append(text) }
    }

    public var texts: [String] { collected.withLock { $0 } }
}
