import Logging
import Synchronization

/// A swift-log handler that keeps every rendered line, to check what a run logged.
public final class LogRecorder: Sendable {
    private let lines = Mutex<[String]>([])
    public init() {}

    public var all: [String] { lines.withLock { $0 } }

    /// A logger whose lines (message and metadata) land here.
    public func logger(_ label: String = "test") -> Logger {
        var logger = Logger(label: label) { _ in RecordingLogHandler(recorder: self) }
        logger.logLevel = .trace
        return logger
    }

    func append(_ line: String) { lines.withLock { $0.append(line) } }
}

struct RecordingLogHandler: LogHandler {
    let recorder: LogRecorder
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let merged = metadata.merging(event.metadata ?? [:]) { $1 }
        recorder.append(
            "\(event.level) \(event.message) \(merged.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: " "))")
    }
}
