import Capture
import NIOCore
import Waiting

/// One result from a recognizer: an interim guess or a final that never changes.
public struct RecognitionResult: Sendable, Equatable {
    /// The words, always ``RecognitionText/sanitized(_:)``: every engine's text (and the local
    /// server's) enters sttd through here.
    public var text: String {
        didSet { text = RecognitionText.sanitized(text) }
    }
    public var isFinal: Bool
    /// Where the result's audio starts and ends, in seconds from the session's start, if known.
    public var audioStart: Double?
    public var audioEnd: Double?
    /// The final that answers a ``RecognitionStream/finalize()`` (Deepgram's `from_finalize`).
    public var fromFinalize: Bool
    /// A final that ends its utterance (a pause follows): an offline engine's finals always do;
    /// a streaming server's only with `speech_final` (or as the answer to a flush).
    public var endsUtterance: Bool

    public init(
        text: String, isFinal: Bool, audioStart: Double? = nil, audioEnd: Double? = nil, fromFinalize: Bool = false,
        endsUtterance: Bool = true
    ) {
        self.text = RecognitionText.sanitized(text)
        self.isFinal = isFinal
        self.audioStart = audioStart
        self.audioEnd = audioEnd
        self.fromFinalize = fromFinalize
        self.endsUtterance = endsUtterance
    }
}

/// Text a recognizer may not pass on.
enum RecognitionText {
    /// `text` without what a D-Bus string, a terminal or a log must not get from a recognizer:
    /// control characters (C0, DEL, C1: NUL breaks D-Bus marshalling, ESC drives terminals;
    /// line breaks and tabs become spaces), bidirectional overrides and isolates (they reorder
    /// what a reader sees), and Unicode noncharacters.
    static func sanitized(_ text: String) -> String {
        guard text.unicodeScalars.contains(where: isRefused) else { return text }
        var kept = String.UnicodeScalarView()
        for scalar in text.unicodeScalars {
            if !isRefused(scalar) {
                kept.append(scalar)
            } else if scalar.properties.isWhitespace {
                kept.append(" ")
            }
        }
        return String(kept)
    }

    private static func isRefused(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x20...0x7E: return false  // the common case first
        case 0x00...0x1F, 0x7F...0x9F: return true
        case 0x202A...0x202E, 0x2066...0x2069: return true
        default: return scalar.properties.isNoncharacterCodePoint
        }
    }
}

/// What a session is asked to recognize.
public struct StreamOptions: Sendable, Equatable {
    public var language: String
    public var interimResults: Bool
    public var keyterms: [String]
    /// Whom the session serves, as an engine that is busy with it names it to others: "dictation"
    /// (D-Bus) or "a /v1/listen stream".
    public var servedTo: String
    /// Decode only the start of each utterance, at most this long (listening for a wake phrase):
    /// nil decodes everything. Only for a recognizer that ``Recognizer/decodesWakeSegments``.
    public var wakeSegments: Duration?

    public init(
        language: String = "en-US", interimResults: Bool = true, keyterms: [String] = [],
        servedTo: String = "dictation", wakeSegments: Duration? = nil
    ) {
        self.language = language
        self.interimResults = interimResults
        self.keyterms = keyterms
        self.servedTo = servedTo
        self.wakeSegments = wakeSegments
    }
}

/// Why recognition could not start or went on.
public struct RecognitionError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kind of failure, mapped once to a D-Bus error name by the service.
    public enum Kind: Sendable, Equatable {
        /// Credentials are missing or were refused.
        case notAuthorized
        /// The engine or server cannot be reached or started (e.g. a missing model).
        case backendUnavailable
        /// The configuration cannot work.
        case invalidConfiguration
        /// The engine is serving as many sessions as it can; another may start once one ends.
        case busy
        /// Anything else.
        case failed
    }

    public var kind: Kind
    public var message: String
    /// What the failure says about `AuthorizationStatus`, if anything (e.g. 401 -> denied).
    public var authorization: RecognizerAuthorization?
    /// The server could not be reached or did not serve (network, timeout, 429, 5xx, a lost
    /// stream that did not come back): nothing the user must fix, so the offline engine may take over.
    public var unreachable = false

    public init(_ kind: Kind, _ message: String, authorization: RecognizerAuthorization? = nil) {
        self.kind = kind
        self.message = message
        self.authorization = authorization
    }

    public var description: String { message }

    /// This error with ``unreachable`` set as given.
    public func unreachable(_ unreachable: Bool) -> RecognitionError {
        var error = self
        error.unreachable = unreachable
        return error
    }
}

/// The recognizer's view of whether it may and can work (as Apple's `SFSpeechRecognizerAuthorizationStatus`).
public enum RecognizerAuthorization: String, Sendable {
    case notDetermined, authorized, denied, restricted

    /// `authorized` when `check` passes; otherwise `restricted`, with its error (an engine that
    /// cannot load its model or library).
    static func checking(
        _ check: () async throws(RecognitionError) -> Void
    ) async -> (RecognizerAuthorization, RecognitionError?) {
        do {
            try await check()
            return (.authorized, nil)
        } catch {
            return (.restricted, error)
        }
    }
}

/// A speech recognizer: the offline engine or a streaming client.
public protocol Recognizer: Sendable {
    /// Checks now whether sessions can start (model loaded, credentials accepted).
    func authorize() async -> (RecognizerAuthorization, RecognitionError?)

    /// Starts a session; returns once it accepts audio. Its events go to `events`, in order.
    /// Bounded in time: a streaming backend gives up within its connect timeout.
    func startStream(_ options: StreamOptions, events: any RecognitionEventSink) async throws(RecognitionError)
        -> any RecognitionStream

    /// Whether the engine writes punctuation and capitals itself (spoken punctuation is off by
    /// default for such engines).
    var writesPunctuation: Bool { get }

    /// Whether the engine honours ``StreamOptions/wakeSegments`` (others decode everything).
    var decodesWakeSegments: Bool { get }
}

extension Recognizer {
    public var writesPunctuation: Bool { true }
    public var decodesWakeSegments: Bool { false }
}

/// What a session reports, in order.
public enum RecognitionEvent: Sendable, Equatable {
    case result(RecognitionResult)
    /// The link to the recognizer dropped and is being re-established (true), or is back (false).
    case reconnecting(Bool)
    /// Speech started (true) or stopped (false), as far as the recognizer can tell.
    case speechActivity(Bool)
    /// The streaming backend failed for this reason and the offline engine took over the
    /// session: the results after this come from it (see ``FallbackRecognizer``).
    case fellBack(RecognitionError)
}

/// Where a session's events go. Called on the recognizer's own thread (decoder thread, event
/// loop), never blocks; events delivered before ``RecognitionStream/run()`` returns arrive
/// before the caller learns that it returned.
public protocol RecognitionEventSink: Sendable {
    func deliver(_ event: RecognitionEvent)

    /// The event loop the sink's owner runs on, if any. A recognizer doing network I/O opens its
    /// connections there, so that what it reads reaches the sink without a thread hop.
    var eventLoop: (any EventLoop)? { get }
}

extension RecognitionEventSink {
    public var eventLoop: (any EventLoop)? { nil }
}

/// An engine's part of one dictation session: audio in, events out (to the sink given at start).
/// "Session" names the dictation session only (`SessionMachine`, `SessionPipeline` in Speech); what an
/// engine runs for it is a stream.
public protocol RecognitionStream: Sendable {
    /// Runs the session until it ends: returns after ``finish()`` once every final is delivered,
    /// or soon after ``cancel()`` (or cancellation of the calling task); throws when it fails,
    /// e.g. when audio backs up past the session's bound. The caller runs it as a child task.
    func run() async throws(RecognitionError)

    /// Hands over audio from the capture thread; never blocks.
    func send(_ chunk: AudioChunk)

    /// No more audio: recognize what was sent, deliver the last finals, then let ``run()`` return.
    func finish()

    /// Recognize all audio sent so far without ending the session (Deepgram's `Finalize`): the
    /// pending speech becomes finals, and exactly one final result per call has `fromFinalize`
    /// set (the last one it produced, or an empty one when nothing was pending).
    func finalize()

    /// Stop at once: ``run()`` returns soon and pending interim text is dropped.
    func cancel()

    /// A stop timed out: as ``cancel()``, and work the engine cannot stop otherwise is given up
    /// by force (a worker process that does not answer is killed and restarted).
    func abandon()
}

extension RecognitionStream {
    public func abandon() { cancel() }
}

extension SetOnce where Value == Result<Void, RecognitionError> {
    /// Waits for a session's outcome; cancelling the waiting task calls `cancel` (which ends the
    /// session, and so resolves the outcome).
    func wait(onCancel cancel: @escaping @Sendable () -> Void) async throws(RecognitionError) {
        let outcome = await withTaskCancellationHandler {
            await value
        } onCancel: {
            cancel()
        }
        try outcome.get()
    }
}
