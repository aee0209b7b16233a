import Capture
import Foundation

/// The Deepgram-compatible `/v1/listen` protocol as plain values: no sockets, no clocks.
public enum DeepgramProtocol {
    /// Query keys sttd sets itself; `params` may not override them.
    public static let reservedParameters: Set<String> = [
        "encoding", "sample_rate", "channels", "model", "language", "interim_results", "keyterm", "keywords",
    ]

    /// The parameter that carries key terms for `model`: `keyterm` for Nova-3 and Flux (and servers
    /// that follow them), `keywords` for Deepgram's older models, which refuse or ignore `keyterm`.
    static func keytermParameter(model: String) -> String {
        let model = model.lowercased()
        let older = ["nova-2", "nova-1", "enhanced", "base"]
        return model == "nova" || older.contains(where: model.hasPrefix) ? "keywords" : "keyterm"
    }

    /// The stream URL: audio format, model, language, interim results, one `keyterm` (or
    /// `keywords`) per term, then the pass-through parameters (sorted, so the URL is stable).
    static func streamURL(
        base: String, model: String, language: String, interimResults: Bool, keyterms: [String],
        parameters: [String: String]
    ) -> URL? {
        guard var components = URLComponents(string: base) else { return nil }
        var items = components.queryItems ?? []
        items += [
            URLQueryItem(name: "encoding", value: "linear16"),
            URLQueryItem(name: "sample_rate", value: String(AudioFormat.sampleRate)),
            URLQueryItem(name: "channels", value: "1"),
            URLQueryItem(name: "model", value: model),
            URLQueryItem(name: "language", value: language),
            URLQueryItem(name: "interim_results", value: interimResults ? "true" : "false"),
        ]
        let keytermName = keytermParameter(model: model)
        items += keyterms.map { URLQueryItem(name: keytermName, value: $0) }
        items += parameters.sorted { $0.key < $1.key }.map { URLQueryItem(name: $0.key, value: $0.value) }
        components.queryItems = items
        // URLComponents leaves '+' alone, which servers read as a space.
        components.percentEncodedQuery = components.percentEncodedQuery?.replacingOccurrences(of: "+", with: "%2B")
        return components.url
    }

    /// Client control messages; they travel in the same ordered queue as audio.
    static let keepAlive = #"{"type":"KeepAlive"}"#
    static let finalize = #"{"type":"Finalize"}"#
    static let closeStream = #"{"type":"CloseStream"}"#

    /// A server message, decoded leniently: unknown fields are ignored, optional ones may be missing.
    enum ServerMessage: Sendable, Equatable {
        case results(Results)
        case metadata(requestID: String?)
        case utteranceEnd(lastWordEnd: Double?)
        case speechStarted(timestamp: Double?)
        case unknown(type: String)
    }

    /// A `Results` message.
    struct Results: Sendable, Equatable {
        /// Seconds from the start of this connection's audio.
        var start: Double
        var duration: Double
        var isFinal: Bool
        var speechFinal: Bool
        var fromFinalize: Bool
        var transcript: String
        var confidence: Double?
        var wordCount: Int

        var end: Double { start + duration }
    }

    /// A frame that is not a message sttd understands.
    struct MalformedMessage: Error, Sendable, CustomStringConvertible {
        var description: String
    }

    static func decode(_ text: String) throws(MalformedMessage) -> ServerMessage {
        guard let data = text.data(using: .utf8),
            let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        else { throw MalformedMessage(description: "not a JSON object") }
        guard let type = object["type"] as? String else { throw MalformedMessage(description: "no \"type\" field") }
        switch type {
        case "Results":
            let channel = object["channel"] as? [String: Any]
            let alternative = (channel?["alternatives"] as? [Any])?.first as? [String: Any]
            guard let transcript = alternative?["transcript"] as? String else {
                throw MalformedMessage(description: "Results without channel.alternatives[0].transcript")
            }
            let isFinal = object["is_final"] as? Bool ?? false
            let speechFinal = object["speech_final"] as? Bool ?? false
            return .results(
                Results(
                    start: number(object["start"]) ?? 0, duration: number(object["duration"]) ?? 0,
                    // speech_final implies is_final.
                    isFinal: isFinal || speechFinal, speechFinal: speechFinal,
                    fromFinalize: object["from_finalize"] as? Bool ?? false, transcript: transcript,
                    confidence: number(alternative?["confidence"]),
                    // Words come as objects on Deepgram and as [word, start_ms, end_ms] arrays on SubQ.
                    wordCount: (alternative?["words"] as? [Any])?.count ?? 0))
        case "Metadata":
            return .metadata(requestID: object["request_id"] as? String)
        case "UtteranceEnd":
            return .utteranceEnd(lastWordEnd: number(object["last_word_end"]))
        case "SpeechStarted":
            return .speechStarted(timestamp: number(object["timestamp"]))
        default:
            return .unknown(type: type)
        }
    }

    private static func number(_ value: Any?) -> Double? {
        switch value {
        case let double as Double: double
        case let int as Int: Double(int)
        case let string as String: Double(string)
        default: nil
        }
    }

    /// Whether a close code means "try again" (protocol doc's table).
    static func isRetryable(closeCode: UInt16) -> Bool {
        closeCode == 1011 || closeCode == 1006 || closeCode == 1001 || closeCode == 1012 || closeCode == 1013
    }

    /// Whether a refused handshake is worth retrying: rate limits and server errors.
    static func isRetryable(handshakeStatus status: Int) -> Bool {
        status == 429 || status == 408 || (500...599).contains(status)
    }
}

/// Audio the server has not answered for yet, how much of it went out on the current
/// connection, and the time bookkeeping across reconnections.
///
/// Positions are in samples from the start of the session. A final's end marks audio the server
/// has answered for; everything after it is kept to be replayed on a new connection, whose time 0
/// is then the first replayed sample.
///
/// Capacity policy (`capacity`, 60 s by default): audio already sent on the current connection
/// may be released when more than `capacity` is held; it just can no longer be replayed
/// (`released` counts it). Audio not yet sent is never dropped: ``append(_:)`` throws
/// ``Overflow`` instead, and the session fails rather than lose words silently.
struct StreamLedger: Sendable {
    /// Unsent audio would exceed the capacity: the connection was down longer than the buffer holds.
    struct Overflow: Error, Sendable, Equatable {
        var unsent: Int
        var capacity: Int
    }

    let capacity: Int
    /// Audio held, oldest first, with its start position; `chunks[head...]` is live (a moving
    /// head instead of removeFirst, so releasing is O(1)).
    private var chunks: [(start: Int, samples: [Int16])] = []
    private var head = 0
    /// Index of the first chunk not yet sent on the current connection.
    private var next = 0
    /// Samples received from capture so far.
    private(set) var captured = 0
    /// Everything before this position has been answered for with a final (or released).
    private(set) var committed = 0
    /// Session position of the current connection's time 0.
    private(set) var connectionBase = 0
    /// End of the last final accepted, in session seconds (for dropping duplicates).
    private(set) var lastFinalEnd = 0.0
    /// Samples sent but released unanswered because the buffer was full (cannot be replayed).
    private(set) var released = 0

    init(capacity: Duration = .seconds(60)) {
        self.capacity = AudioFormat.samples(in: capacity)
    }

    /// Adds captured audio, releasing the oldest sent audio past `capacity`.
    /// - Throws: ``Overflow`` (and keeps nothing of `chunk`) when the unsent audio would exceed `capacity`.
    mutating func append(_ chunk: AudioChunk) throws(Overflow) {
        guard unsent + chunk.samples.count <= capacity else {
            throw Overflow(unsent: unsent + chunk.samples.count, capacity: capacity)
        }
        chunks.append((captured, chunk.samples))
        captured += chunk.samples.count
        while unanswered > capacity, head < next {
            let oldest = chunks[head]
            head += 1
            released += oldest.start + oldest.samples.count - max(oldest.start, committed)
            committed = max(committed, oldest.start + oldest.samples.count)
        }
        compact()
    }

    /// Starts a new connection: everything held is to be sent (again), its first sample being the
    /// connection's time 0. Returns the samples to replay.
    @discardableResult
    mutating func beginConnection() -> Int {
        connectionBase = head < chunks.count ? chunks[head].start : captured
        next = head
        return unsent
    }

    /// The oldest audio not yet sent on this connection, marked as sent.
    mutating func takeUnsent() -> [Int16]? {
        guard next < chunks.count else { return nil }
        next += 1
        return chunks[next - 1].samples
    }

    /// Samples captured but not yet sent on this connection.
    var unsent: Int { captured - (next < chunks.count ? chunks[next].start : captured) }

    /// Session seconds of a time on the current connection.
    func sessionTime(_ connectionSeconds: Double) -> Double {
        Double(connectionBase) / Double(AudioFormat.sampleRate) + connectionSeconds
    }

    /// Takes a final: true if it is new, false if it repeats audio already finalized
    /// (a replay after reconnecting). Releases the audio it answers for.
    mutating func acceptFinal(start: Double, duration: Double) -> Bool {
        let end = sessionTime(start + duration)
        // Half a frame of slack for rounding in the server's timestamps.
        guard end > lastFinalEnd + 0.005 else { return false }
        lastFinalEnd = end
        let answered = min(captured, Int((end * Double(AudioFormat.sampleRate)).rounded()))
        committed = max(committed, answered)
        while head < chunks.count, chunks[head].start + chunks[head].samples.count <= committed {
            head += 1
        }
        if head < chunks.count, chunks[head].start < committed {
            let first = chunks[head]
            chunks[head] = (committed, Array(first.samples.dropFirst(committed - first.start)))
        }
        next = max(next, head)
        compact()
        return true
    }

    /// The audio not yet answered for, and the session position of its first sample: what
    /// another engine takes over when the stream is given up.
    var unansweredAudio: (start: Int, samples: [Int16]) {
        let live = chunks[head...]
        return (live.first?.start ?? captured, live.flatMap(\.samples))
    }

    /// Samples not yet answered for.
    var unanswered: Int { captured - (head < chunks.count ? chunks[head].start : captured) }

    /// Drops released chunks from storage once they make up most of it.
    private mutating func compact() {
        guard head >= 64, head * 2 >= chunks.count else { return }
        chunks.removeFirst(head)
        next -= head
        head = 0
    }
}

/// Keeps audio within the protocol's rate limit on one connection: at most 1.2x real time (the
/// protocol allows 1.25x) after a half-second head start, so a replay never floods the server.
struct Pacer: Sendable {
    private let started: ContinuousClock.Instant
    private var sentSeconds = 0.0

    init(started: ContinuousClock.Instant = .now) { self.started = started }

    /// How long to wait before sending more.
    func wait(at now: ContinuousClock.Instant) -> Duration {
        let ahead = sentSeconds - 1.2 * (now - started).seconds - 0.5
        return ahead > 0 ? .seconds(ahead / 1.2) : .zero
    }

    mutating func sent(samples: Int) {
        sentSeconds += Double(samples) / Double(AudioFormat.sampleRate)
    }
}

/// Full-jitter exponential backoff with bounded attempts and total time.
public struct Backoff: Sendable {
    public var base: Duration
    public var cap: Duration
    public var maxAttempts: Int
    public var maxTotal: Duration
    public private(set) var attempts = 0
    public private(set) var waited = Duration.zero

    public init(
        base: Duration = .milliseconds(250), cap: Duration = .seconds(8), maxAttempts: Int = 8,
        maxTotal: Duration = .seconds(30)
    ) {
        self.base = base
        self.cap = cap
        self.maxAttempts = maxAttempts
        self.maxTotal = maxTotal
    }

    /// The next delay, or nil when it is time to give up.
    public mutating func next<R: RandomNumberGenerator>(using generator: inout R) -> Duration? {
        guard attempts < maxAttempts, waited < maxTotal else { return nil }
        let ceiling = min(cap, base * (1 << min(attempts, 20)))
        let delay = ceiling * Double.random(in: 0...1, using: &generator)
        attempts += 1
        waited += delay
        return delay
    }

    public mutating func next() -> Duration? {
        var generator = SystemRandomNumberGenerator()
        return next(using: &generator)
    }

    /// After a connection that worked, start counting afresh.
    public mutating func reset() {
        attempts = 0
        waited = .zero
    }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
