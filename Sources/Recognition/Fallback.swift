import Capture
import Logging
import NIOCore
import Synchronization
import Waiting

/// A stream whose audio not yet recognized another engine can take over (the streaming
/// client's replay ledger).
public protocol HandOverStream: RecognitionStream {
    /// Ends the session at once: it sends and delivers nothing more, and ``run()`` returns soon.
    /// Returns the audio it delivered no final for, and where that audio starts, in samples
    /// from the session's start.
    func handOver() -> (start: Int, samples: [Int16])
}

/// The streaming backend with the offline engine behind it (`[deepgram] fallback = "local"`).
///
/// When the server cannot be reached at the start (refused, DNS, timeout, 429/5xx past the
/// retries) or refuses the key (401/403), the session runs on the offline engine instead. When
/// the stream drops mid-session and is not back within `after` (or the session is stopping), the
/// offline engine takes the audio the server has delivered no final for and continues: every
/// word is recognized once. Configuration errors (no key, a key file others can read, a
/// certificate that does not verify, HTTP 400) never fall back: the user has to fix them. A
/// session that fell back never returns to the server; the next session tries it again.
public final class FallbackRecognizer: Recognizer {
    public var writesPunctuation: Bool { primary.writesPunctuation }
    /// Both must: a session that falls back keeps its options.
    public var decodesWakeSegments: Bool { primary.decodesWakeSegments && fallback.decodesWakeSegments }
    private let primary: any Recognizer
    private let fallback: any Recognizer
    private let after: Duration
    private let logger: Logger

    public init(primary: any Recognizer, fallback: any Recognizer, after: Duration, logger: Logger) {
        self.primary = primary
        self.fallback = fallback
        self.after = after
        self.logger = logger
    }

    /// The streaming backend's status: the offline engine does not make a refused key work.
    public func authorize() async -> (RecognizerAuthorization, RecognitionError?) { await primary.authorize() }

    /// Whether the offline engine may take over after `error`: the server is out of reach, or
    /// it refused the key (the user still learns that from `AuthorizationStatus`).
    public static func fallsBack(on error: RecognitionError) -> Bool {
        error.unreachable || (error.kind == .notAuthorized && error.authorization == .denied)
    }

    public func startStream(_ options: StreamOptions, events: any RecognitionEventSink) async throws(RecognitionError)
        -> any RecognitionStream
    {
        let stream = FallbackStream(
            options: options, fallback: fallback, after: after, events: events, logger: logger)
        do {
            stream.begin(try await primary.startStream(options, events: stream.sink(for: .primary)))
        } catch {
            guard Self.fallsBack(on: error) else { throw error }
            logger.warning(
                "the streaming backend is out of reach; the session runs on the offline engine",
                metadata: ["reason": "\(error.message)"])
            try await stream.takeOver(reason: error, backlog: (0, []))
        }
        return stream
    }
}

/// One session of ``FallbackRecognizer``: audio goes to the streaming session, then (after a
/// hand-over) to the offline one.
///
/// Audio arriving while the offline engine starts waits in a buffer of at most
/// ``FallbackStream/waitingBound`` of audio; past it the session fails rather than drop words.
final class FallbackStream: RecognitionStream {
    static let waitingBound = Duration.seconds(30)

    private enum Route {
        case none
        case primary(any RecognitionStream)
        /// The offline engine is starting; captured audio waits here.
        case waiting([AudioChunk], samples: Int)
        case offline(any RecognitionStream)
        case ended
    }

    private struct State {
        var route = Route.none
        var finishing = false
        var cancelled = false
        var abandoned = false
        /// ``finalize()`` calls made while the offline engine was starting.
        var finalizes = 0
        /// The streaming link is down since then (nil: up).
        var downSince: ContinuousClock.Instant?
        /// The streaming session was given up: its events no longer count.
        var handedOver = false
        /// Session seconds at which the offline engine's audio starts.
        var offset = 0.0
        var overflow: RecognitionError?

        var current: (any RecognitionStream)? {
            switch route {
            case .primary(let session), .offline(let session): session
            case .none, .waiting, .ended: nil
            }
        }
    }

    private let options: StreamOptions
    private let fallback: any Recognizer
    private let after: Duration
    private let events: any RecognitionEventSink
    private let logger: Logger
    private let state = Mutex(State())
    /// The link went down or came back, or the session is finishing: the watch looks again.
    private let linkChanged = TaskWakeup()

    init(
        options: StreamOptions, fallback: any Recognizer, after: Duration, events: any RecognitionEventSink,
        logger: Logger
    ) {
        self.options = options
        self.fallback = fallback
        self.after = after
        self.events = events
        self.logger = logger
    }

    func begin(_ primary: any RecognitionStream) { state.withLock { $0.route = .primary(primary) } }

    // MARK: - RecognitionStream

    func run() async throws(RecognitionError) {
        defer { state.withLock { $0.route = .ended } }
        let route = state.withLock { $0.route }
        switch route {
        case .offline(let offline):
            return try await offline.run()
        case .primary(let primary):
            guard let reason = try await runPrimary(primary) else { return }
            try await takeOver(reason: reason, backlog: handOver(primary))
            guard case .offline(let offline) = state.withLock({ $0.route }) else { return }
            try await offline.run()
        case .none, .waiting, .ended:
            return
        }
        if let overflow = state.withLock({ $0.overflow }) { throw overflow }
    }

    func send(_ chunk: AudioChunk) {
        let target = state.withLock { state -> (any RecognitionStream)? in
            guard case .waiting(var chunks, let samples) = state.route else { return state.current }
            guard samples + chunk.samples.count <= AudioFormat.samples(in: Self.waitingBound) else {
                if state.overflow == nil {
                    state.overflow = RecognitionError(
                        .backendUnavailable,
                        "The offline engine took longer than \(Self.waitingBound) to start after the network was lost; the session stopped. What was recognized before is kept."
                    )
                }
                return nil
            }
            chunks.append(chunk)
            state.route = .waiting(chunks, samples: samples + chunk.samples.count)
            return nil
        }
        target?.send(chunk)
    }

    func finish() {
        forward(marking: { $0.finishing = true }) { $0.finish() }
        linkChanged.signal()
    }

    func finalize() {
        forward(marking: { if case .waiting = $0.route { $0.finalizes += 1 } }) { $0.finalize() }
    }

    func cancel() {
        forward(marking: { $0.cancelled = true }) { $0.cancel() }
        linkChanged.signal()
    }

    func abandon() {
        forward(marking: {
            $0.cancelled = true
            $0.abandoned = true
        }) { $0.abandon() }
        linkChanged.signal()
    }

    /// Notes a request under the lock (``takeOver`` replays what the offline engine missed) and
    /// passes it to the engine running now, outside the lock.
    private func forward(marking mark: (inout State) -> Void, _ request: (any RecognitionStream) -> Void) {
        let target = state.withLock { state -> (any RecognitionStream)? in
            mark(&state)
            return state.current
        }
        if let target { request(target) }
    }

    // MARK: - The streaming phase

    /// Runs the streaming session until it ends (nil) or must be given up (the reason).
    private func runPrimary(_ primary: any RecognitionStream) async throws(RecognitionError) -> RecognitionError? {
        enum End: Sendable {
            case ended(RecognitionError?)
            case linkDown
        }
        let end =
            await firstResult(
                of: End.self,
                {
                    do throws(RecognitionError) {
                        try await primary.run()
                        return .ended(nil)
                    } catch {
                        return .ended(error)
                    }
                },
                { await self.watchLink() ? .linkDown : nil }
            ) ?? .ended(nil)
        if state.withLock({ $0.cancelled }) {
            if case .ended(let error?) = end { throw error }
            return nil
        }
        switch end {
        case .ended(nil):
            return nil
        case .ended(let error?):
            guard FallbackRecognizer.fallsBack(on: error) else { throw error }
            logger.warning(
                "the stream is lost; the offline engine takes over", metadata: ["reason": "\(error.message)"])
            return error
        case .linkDown:
            let waited = state.withLock { $0.downSince.map { ContinuousClock.now - $0 } } ?? .zero
            logger.warning(
                "the stream did not come back; the offline engine takes over",
                metadata: ["waited": "\(waited)", "fallback_after": "\(after)"])
            return RecognitionError(
                .backendUnavailable,
                "The connection to the recognizer was lost and did not come back within \(after.formatted)."
            ).unreachable(true)
        }
    }

    /// Returns true once the link has been down for `after`, or is down while the session is
    /// finishing (a stop does not wait for the network); false when cancelled.
    private func watchLink() async -> Bool {
        while !Task.isCancelled {
            let (since, finishing) = state.withLock { ($0.downSince, $0.finishing) }
            guard let since else {
                await linkChanged.wait()
                continue
            }
            let remaining = since + after - .now
            if finishing || remaining <= .zero { return true }
            do { try await eventLoopSleep(for: remaining) } catch { return false }
        }
        return false
    }

    /// Takes the streaming session's unanswered audio; audio captured from now on waits for the
    /// offline engine. Nothing of the streaming session counts afterwards.
    private func handOver(_ primary: any RecognitionStream) -> (start: Int, samples: [Int16]) {
        let (backlog, wasDown) = state.withLock { state in
            state.handedOver = true
            state.route = .waiting([], samples: 0)
            let wasDown = state.downSince != nil
            state.downSince = nil
            // Under the lock, so no chunk goes to the streaming session after its audio was taken.
            let backlog = (primary as? any HandOverStream)?.handOver() ?? (0, [])
            return (backlog, wasDown)
        }
        if !(primary is any HandOverStream) { primary.cancel() }
        if wasDown { events.deliver(.reconnecting(false)) }
        return backlog
    }

    // MARK: - The offline phase

    /// Starts the offline engine, says so, and gives it `backlog` (from the streaming session) and
    /// the audio that waited meanwhile, before any newer audio.
    func takeOver(reason: RecognitionError, backlog: (start: Int, samples: [Int16])) async throws(RecognitionError) {
        state.withLock { state in
            state.handedOver = true
            if case .none = state.route { state.route = .waiting([], samples: 0) }
        }
        let offline: any RecognitionStream
        do {
            offline = try await fallback.startStream(options, events: sink(for: .offline))
        } catch {
            state.withLock { $0.route = .ended }
            var failure = reason
            failure.message += " The offline engine could not take over: \(error.message)"
            throw failure
        }
        events.deliver(.fellBack(reason))
        let (finishing, cancelled, abandoned, finalizes) = state.withLock { state in
            let waiting: [AudioChunk]
            if case .waiting(let chunks, _) = state.route { waiting = chunks } else { waiting = [] }
            state.route = .offline(offline)
            state.offset = Double(backlog.start) / Double(AudioFormat.sampleRate)
            // Under the lock: the backlog and the waiting audio go in before any live chunk.
            for start in stride(from: 0, to: backlog.samples.count, by: 1600) {
                offline.send(
                    AudioChunk(samples: Array(backlog.samples[start..<min(start + 1600, backlog.samples.count)])))
            }
            for chunk in waiting { offline.send(chunk) }
            defer { state.finalizes = 0 }
            return (state.finishing, state.cancelled, state.abandoned, state.finalizes)
        }
        logger.info(
            "the offline engine took over",
            metadata: ["backlog_ms": "\(backlog.samples.count * 1000 / AudioFormat.sampleRate)"])
        for _ in 0..<finalizes { offline.finalize() }
        if abandoned {
            offline.abandon()
        } else if cancelled {
            offline.cancel()
        } else if finishing {
            offline.finish()
        }
    }

    // MARK: - Events

    enum Phase { case primary, offline }

    /// The sink for one engine's stream, made when that engine starts. It holds this stream
    /// weakly, so the stream and its engines' streams form no cycle.
    func sink(for phase: Phase) -> some RecognitionEventSink {
        PhaseSink(eventLoop: events.eventLoop) { [weak self] event in
            switch phase {
            case .primary: self?.fromPrimary(event)
            case .offline: self?.fromOffline(event)
            }
        }
    }

    private func fromPrimary(_ event: RecognitionEvent) {
        if case .reconnecting(let down) = event {
            let forward = state.withLock { state -> Bool in
                guard !state.handedOver else { return false }
                state.downSince = down ? (state.downSince ?? .now) : nil
                return true
            }
            linkChanged.signal()
            if forward { events.deliver(event) }
            return
        }
        // The streaming session delivers nothing once given up (see ``HandOverStream``).
        if !state.withLock({ $0.handedOver }) { events.deliver(event) }
    }

    /// The offline engine's results, with times in session seconds.
    private func fromOffline(_ event: RecognitionEvent) {
        guard case .result(var result) = event else { return events.deliver(event) }
        let offset = state.withLock { $0.offset }
        result.audioStart = result.audioStart.map { $0 + offset }
        result.audioEnd = result.audioEnd.map { $0 + offset }
        events.deliver(.result(result))
    }
}

/// Passes one engine's events to its ``FallbackStream``.
private struct PhaseSink: RecognitionEventSink {
    let eventLoop: (any EventLoop)?
    let forward: @Sendable (RecognitionEvent) -> Void

    func deliver(_ event: RecognitionEvent) { forward(event) }
}

extension Duration {
    /// "3 s", "1.5 s": for messages.
    var formatted: String { seconds == seconds.rounded() ? "\(Int(seconds)) s" : "\(seconds) s" }
}
