import Logging
import Recognition
import Synchronization

/// What the microphone's state says (contract: `MicrophoneStatus`).
public enum MicrophoneStatus: String, Sendable {
    /// Never opened.
    case notDetermined
    /// Opened fine.
    case authorized
    /// The sound server refused access.
    case denied
    /// No server, or no such source.
    case unavailable
}

/// One change the speech core reports. Every output (the bus adapter, tests, later typing and
/// the local server) follows the core through these, in order.
public enum SpeechEvent: Sendable, Equatable {
    /// The session state changed (`State`).
    case state(SessionState)
    /// The transcript changed; `update` is the result that changed it, nil when it was reset
    /// for a new session or an interim was dropped (the property changes, no signal).
    case transcript(String, update: TranscriptUpdate?)
    /// "scratch that" removed `removed`, the last final; the first value is the whole text now.
    case retracted(String, removed: String)
    /// Voice activity started or stopped.
    case speechActivity(Bool)
    /// A level reading (RMS dBFS), at most 10 per second while listening.
    case audioLevel(Double)
    /// A session ended on its own because of this error.
    case sessionFailed(SpeechError)
    /// Typing or the clipboard failed; the session goes on (`LastError` shows it too).
    case outputFailed(SpeechError)
    /// The last session failure changed (nil: cleared by a new session).
    case lastError(SpeechError?)
    case authorization(RecognizerAuthorization)
    case microphone(MicrophoneStatus)
    /// A session opened for this caller; it lasts until the state is `idle` again. It stops when
    /// the connection `stopsWhenGone` leaves the bus: a sandboxed app's, or that of the input
    /// method that started it (its push-to-talk release can never come then); see
    /// ``SpeechCore/stopSession(startedFrom:)``.
    case owner(Caller, stopsWhenGone: String?)
    /// The engine the running session uses (`ActiveBackend`); nil when no session runs.
    case activeBackend(Backend?)
    /// The streaming backend was out of reach (this error says why) and the offline engine took
    /// the session over; it goes on.
    case continuingOffline(SpeechError)
    /// The input method's report changed, or another one is the input method now (nil: none is
    /// left): the `InputMethod` property.
    case inputMethod(InputMethodReport?)
    /// Text for the input method `to` to put into the focused field. It goes to that input method
    /// alone; no other observer acts on it.
    case inputMethodText(InputMethodText, to: InputMethodID)
    /// Hands-free dictation's state changed (`HandsFree`).
    case handsFree(HandsFreeState)
}

/// One result as clients see it: the whole transcript, the result's own text, whether final.
public struct TranscriptUpdate: Sendable, Equatable {
    public var segment: String
    public var isFinal: Bool

    public init(segment: String, isFinal: Bool) {
        self.segment = segment
        self.isFinal = isFinal
    }
}

/// The values of `State`.
public typealias SessionState = SessionMachine<StartOptions>.State

/// Hands the core's events to its subscribers, on the core's executor, in order, and keeps the
/// ``SessionSnapshot`` they make, which observers get with each event; the one
/// exception is level readings, which a session's capture thread publishes while its pipeline's
/// ``LevelGate`` is open (the core closes it before the session's end goes out).
///
/// Observers are called inline and must not block (the bus adapter queues messages for the bus
/// thread, or hands a level reading to libdbus at once). Stream subscribers each get a buffer of
/// ``streamBound`` events; one that falls that far behind has its stream ended (and a warning
/// logged) rather than growing memory or silently missing events.
final class EventHub: Sendable {
    static let streamBound = 4096

    typealias Observer = @Sendable (SpeechEvent, SessionSnapshot) -> Void

    private struct Subscribers {
        var observers: [Observer] = []
        var streams: [Int: Stream] = [:]
        var nextID = 0
    }

    /// A stream subscriber and the events it asked for (each one yielded wakes its task).
    private struct Stream {
        var continuation: AsyncStream<SpeechEvent>.Continuation
        var wants: @Sendable (SpeechEvent) -> Bool
    }
    private let subscribers = Mutex(Subscribers())
    /// Written only by ``publish(_:)``, before any subscriber hears of the event.
    private let published = Mutex(SessionSnapshot())
    private let logger: Logger

    init(logger: Logger) { self.logger = logger }

    var snapshot: SessionSnapshot { published.withLock { $0 } }

    func observe(_ observer: @escaping Observer) {
        subscribers.withLock { $0.observers.append(observer) }
    }

    func stream(where wants: @escaping @Sendable (SpeechEvent) -> Bool) -> AsyncStream<SpeechEvent> {
        let (stream, continuation) = AsyncStream<SpeechEvent>.makeStream(
            bufferingPolicy: .bufferingOldest(Self.streamBound))
        let id = subscribers.withLock { subscribers in
            defer { subscribers.nextID += 1 }
            subscribers.streams[subscribers.nextID] = Stream(continuation: continuation, wants: wants)
            return subscribers.nextID
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.subscribers.withLock { $0.streams.removeValue(forKey: id) }
        }
        return stream
    }

    func publish(_ event: SpeechEvent) {
        let snapshot = published.withLock { snapshot in
            snapshot.note(event)
            return snapshot
        }
        let (observers, streams) = subscribers.withLock { ($0.observers, $0.streams) }
        for observer in observers { observer(event, snapshot) }
        for (id, stream) in streams where stream.wants(event) {
            let continuation = stream.continuation
            if case .dropped = continuation.yield(event) {
                logger.warning(
                    "an event subscriber fell behind; its stream is ended", metadata: ["bound": "\(Self.streamBound)"])
                continuation.finish()
                _ = subscribers.withLock { $0.streams.removeValue(forKey: id) }
            }
        }
    }

    func finish() {
        let streams = subscribers.withLock { subscribers in
            defer { subscribers.streams = [:] }
            return subscribers.streams
        }
        for stream in streams.values { stream.continuation.finish() }
    }
}
