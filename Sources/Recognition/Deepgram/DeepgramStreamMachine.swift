import Capture

/// The streaming session's protocol, as a plain value: ``DeepgramStream`` tells it what happened
/// (calls, connections, server messages, the drain's turn), one method per input, and does what
/// each returns: the ``Sends`` under its lock, the ``Effects`` after it. No sockets, threads or
/// clocks here: `now` comes with each input.
///
/// - Audio goes into the ``StreamLedger`` and out on the open connection as the ``Pacer``
///   allows; what the pacer holds back waits for the drain (`wakeDrain`, then ``drain(now:)``).
/// - Finalize goes out after the audio before it; after ``finish(now:)`` no audio is taken, and
///   once everything is out Finalize and CloseStream go out, after which nothing may follow.
/// - A new connection replays what the server has not answered for; finals it repeats are dropped.
/// - A connection that drops is replaced, with ``Backoff`` between attempts; a close the server
///   means, or a refused key or setting, ends the session.
/// - Stopped (cancelled, the replay buffer overflowed, or `run()` returned), nothing more goes
///   out or is delivered.
struct DeepgramStreamMachine<Connection: AnyObject & Sendable>: Sendable {
    /// Where the session is in its life; it only moves down this list.
    enum Phase: Sendable, Equatable {
        /// Audio is taken and streams (or waits for a connection).
        case streaming
        /// ``finish(now:)`` came: no more audio; Finalize and CloseStream go out once it has.
        case finishing
        /// Nothing more goes out. `failure`: the replay buffer overflowed (what `run()` throws).
        /// `keepsAudio`: the ledger still takes audio, which the offline engine may take over.
        case stopped(failure: RecognitionError?, keepsAudio: Bool)
    }

    /// The connection audio goes out on.
    enum Link: Sendable {
        /// None: before the first, or while reconnecting.
        case down
        /// Open for audio, paced from when it opened.
        case up(Connection, Pacer)
        /// Finalize and CloseStream went out on it: nothing may follow; the server closes it.
        case closing(Connection)

        var connection: Connection? {
            switch self {
            case .down: nil
            case .up(let connection, _), .closing(let connection): connection
            }
        }
    }

    /// How `run()`'s connection loop ends.
    enum Outcome: Sendable, Equatable {
        case finished
        case failed(RecognitionError)
        /// Cancelled, or failed outside the loop (``failure`` says so).
        case stopped
    }

    /// A frame for the current connection (``connection``).
    enum Frame: Sendable, Equatable {
        case audio([Int16])
        case finalize
        case closeStream
        case keepAlive
    }

    /// What goes to the current connection, under the session's lock so what leaves follows the
    /// order of the inputs: the frames in order, then the abort (never both at once).
    struct Sends: Sendable, Equatable {
        var frames: [Frame] = []
        var abort = false
    }

    /// What happens after the lock is released, in this order.
    struct Effects: Sendable, Equatable {
        var log: LogLine?
        var deliver: [RecognitionEvent] = []
        /// Audio waits for the pacer and the drain is idle: wake it.
        var wakeDrain = false
        /// `run()` must return soon: cancelled or failed.
        var stopRun = false
    }

    enum LogLine: Sendable, Equatable {
        /// Audio sent but unanswered was released to keep within the replay capacity (once).
        case replayReleased
        case overflow(StreamLedger.Overflow)
        /// A server message type seen for the first time and ignored.
        case unknownType(String)
        /// The server closed the stream as asked.
        case closed(code: UInt16)
        /// The connection ended and the session goes on: it connects again.
        case dropped(WebSocketEnd)
        /// An attempt to connect again failed with an error worth retrying.
        case reconnectFailed(attempt: Int)
    }

    struct Step: Sendable, Equatable {
        var sends = Sends()
        var effects = Effects()
    }

    /// What the connection loop does after its connection ended, or after an attempt to connect
    /// again failed: the effects, then `next`.
    struct AfterEnd: Sendable, Equatable {
        var effects = Effects()
        var next: Next
    }

    enum Next: Sendable, Equatable {
        /// The connection loop ends so.
        case conclude(Outcome)
        /// Connect again after this long; report ``reconnected(_:now:)`` or ``reconnectFailed(_:)``.
        case reconnect(after: Duration)
    }

    private(set) var phase = Phase.streaming
    private(set) var link = Link.down
    private var ledger: StreamLedger
    private let replayCapacity: Duration
    private let interimResults: Bool
    /// Connecting again after a drop: bounded attempts and total time.
    private var backoff: Backoff
    /// The drain owns pacing: it has been woken and has not yet found the ledger sent out.
    private var draining = false
    /// Finalize calls waiting for the audio before them to go out.
    private var finalizesPending = 0
    private var speaking = false
    private var releaseLogged = false
    private var unknownTypesLogged = Set<String>()

    init(replayCapacity: Duration, interimResults: Bool, backoff: Backoff) {
        ledger = StreamLedger(capacity: replayCapacity)
        self.replayCapacity = replayCapacity
        self.interimResults = interimResults
        self.backoff = backoff
    }

    /// The open connection, if any: what the sends are for.
    var connection: Connection? { link.connection }

    var isStopped: Bool {
        if case .stopped = phase { true } else { false }
    }

    /// Why the session failed outside the connection loop, if it did.
    var failure: RecognitionError? {
        if case .stopped(let failure, _) = phase { failure } else { nil }
    }

    /// The audio no final answered for (see ``StreamLedger``).
    var unansweredAudio: (start: Int, samples: [Int16]) { ledger.unansweredAudio }

    // MARK: - Calls

    /// Captured audio (`send`). After a failure (or once `run()` returned) the ledger still takes
    /// audio, though nothing goes out: the offline engine may take it over.
    mutating func audio(_ chunk: AudioChunk, now: ContinuousClock.Instant) -> Step {
        switch phase {
        case .streaming, .stopped(_, keepsAudio: true): break
        case .finishing, .stopped(_, keepsAudio: false): return Step()
        }
        do throws(StreamLedger.Overflow) {
            try ledger.append(chunk)
        } catch {
            guard !isStopped else { return Step() }
            phase = .stopped(
                failure: RecognitionError(
                    .backendUnavailable,
                    "The connection to the recognizer was down longer than the replay buffer holds (\(replayCapacity) of audio), so the audio captured meanwhile cannot all be kept. Check the network and start again."
                ), keepsAudio: true)
            return Step(sends: abort(), effects: Effects(log: .overflow(error), stopRun: true))
        }
        var step = startPump(now: now)
        if ledger.released > 0 && !releaseLogged {
            releaseLogged = true
            step.effects.log = .replayReleased
        }
        return step
    }

    mutating func finalize(now: ContinuousClock.Instant) -> Step {
        guard phase == .streaming else { return Step() }
        finalizesPending += 1
        return startPump(now: now)
    }

    mutating func finish(now: ContinuousClock.Instant) -> Step {
        switch phase {
        case .streaming:
            phase = .finishing
            // Flush, then ask the server to close once it has sent every final. While audio
            // is still unsent (or no connection is open) this happens once it has gone out.
            return startPump(now: now)
        case .finishing:
            return Step()
        case .stopped(let failure, _):
            phase = .stopped(failure: failure, keepsAudio: false)
            return Step()
        }
    }

    /// `cancel()` or `handOver()`.
    mutating func cancel() -> Step {
        phase = .stopped(failure: failure, keepsAudio: false)
        // Close now rather than when the server notices the silence.
        return Step(sends: abort(), effects: Effects(stopRun: true))
    }

    /// `run()` returned.
    mutating func runReturned() -> Sends {
        switch phase {
        case .streaming: phase = .stopped(failure: nil, keepsAudio: true)
        case .finishing: phase = .stopped(failure: nil, keepsAudio: false)
        case .stopped: break
        }
        return abort()
    }

    // MARK: - Sending

    /// Nothing went out on this connection for the keep-alive interval.
    mutating func keepAliveDue(_ connection: Connection) -> Sends {
        // Nothing may follow CloseStream.
        guard case .up(let current, _) = link, current === connection, !isStopped else { return Sends() }
        return Sends(frames: [.keepAlive])
    }

    /// The drain's turn: sends what the pacer now allows. `again`: the drain comes back after
    /// this long (nil: nothing waits, and the drain sleeps until woken).
    mutating func drain(now: ContinuousClock.Instant) -> (sends: Sends, again: Duration?) {
        let (sends, wait) = pump(now: now)
        if wait == nil { draining = false }
        return (sends, wait)
    }

    private func abort() -> Sends {
        Sends(abort: connection != nil)
    }

    /// Sends what the pacer allows now, and wakes the drain for the rest unless it is awake.
    private mutating func startPump(now: ContinuousClock.Instant) -> Step {
        let (sends, wait) = pump(now: now)
        guard wait != nil, !draining else { return Step(sends: sends) }
        draining = true
        return Step(sends: sends, effects: Effects(wakeDrain: true))
    }

    /// Sends unsent audio at the pacer's rate, then pending Finalizes, then Finalize and
    /// CloseStream once finishing and everything is out. `wait`: how long until the pacer allows
    /// more, or nil when nothing waits.
    private mutating func pump(now: ContinuousClock.Instant) -> (sends: Sends, wait: Duration?) {
        guard case .up(let connection, var pacer) = link, !isStopped else { return (Sends(), nil) }
        var frames: [Frame] = []
        while ledger.unsent > 0 {
            let wait = pacer.wait(at: now)
            guard wait == .zero else {
                link = .up(connection, pacer)
                return (Sends(frames: frames), wait)
            }
            guard let samples = ledger.takeUnsent() else { break }
            pacer.sent(samples: samples.count)
            frames.append(.audio(samples))
        }
        frames += Array(repeating: .finalize, count: finalizesPending)
        finalizesPending = 0
        if phase == .finishing {
            link = .closing(connection)
            frames += [.finalize, .closeStream]
        } else {
            link = .up(connection, pacer)
        }
        return (Sends(frames: frames), nil)
    }

    // MARK: - Connections

    /// A connection is open and becomes the current one: what the server has not answered for
    /// is replayed on it.
    mutating func connected(_ connection: Connection, now: ContinuousClock.Instant) -> Step {
        link = .up(connection, Pacer(started: now))
        // Still current when stopped, so the loop waits for its end before run() returns.
        guard !isStopped else { return Step(sends: abort()) }
        ledger.beginConnection()
        return startPump(now: now)
    }

    /// The connection loop connected again after a drop: as ``connected(_:now:)``, and the drop
    /// is over (unless the session stopped meanwhile).
    mutating func reconnected(_ connection: Connection, now: ContinuousClock.Instant) -> Step {
        backoff.reset()
        var step = connected(connection, now: now)
        if !isStopped { step.effects.deliver.append(.reconnecting(false)) }
        return step
    }

    /// The connection loop saw this connection end.
    mutating func connectionEnded(_ connection: Connection, _ end: WebSocketEnd) -> AfterEnd {
        if link.connection === connection { link = .down }
        guard !isStopped else { return AfterEnd(next: .conclude(.stopped)) }
        switch end {
        case .closed(let code, _) where phase == .finishing && code == 1000:
            return AfterEnd(effects: Effects(log: .closed(code: code)), next: .conclude(.finished))
        case .closed(let code, let reason) where !DeepgramProtocol.isRetryable(closeCode: code):
            return AfterEnd(
                next: .conclude(
                    .failed(
                        code == 1008 || code == 1002
                            ? RecognitionError(
                                .failed, "The server could not decode the audio (close \(code) \(reason)).")
                            : RecognitionError(
                                .backendUnavailable,
                                "The server ended the stream (close \(code)\(reason.isEmpty ? "" : " \(reason)")).")
                    )))
        default:
            // Announced before the first attempt, even when no attempt is allowed.
            return AfterEnd(
                effects: Effects(log: .dropped(end), deliver: [.reconnecting(true)]), next: nextAttempt())
        }
    }

    /// An attempt to connect again failed.
    mutating func reconnectFailed(_ error: RecognitionError) -> AfterEnd {
        guard !isStopped else { return AfterEnd(next: .conclude(.stopped)) }
        // A refused key or settings will not get better by retrying.
        guard error.kind == .backendUnavailable else { return AfterEnd(next: .conclude(.failed(error))) }
        let failed = Effects(log: .reconnectFailed(attempt: backoff.attempts))
        return AfterEnd(effects: failed, next: nextAttempt())
    }

    private mutating func nextAttempt() -> Next {
        guard let delay = backoff.next() else {
            return .conclude(
                .failed(
                    RecognitionError(
                        .backendUnavailable,
                        "Lost the connection to the recognizer and could not get it back after \(backoff.attempts) attempts."
                    ).unreachable(true)))
        }
        return .reconnect(after: delay)
    }

    // MARK: - Receiving

    mutating func received(_ message: DeepgramProtocol.ServerMessage) -> Effects {
        switch message {
        case .results(let results):
            return Effects(deliver: received(results))
        case .metadata:
            return Effects()
        case .speechStarted:
            return Effects(deliver: speaking(true) ? [.speechActivity(true)] : [])
        case .utteranceEnd:
            return Effects(deliver: speaking(false) ? [.speechActivity(false)] : [])
        case .unknown(let type):
            return Effects(log: unknownTypesLogged.insert(type).inserted ? .unknownType(type) : nil)
        }
    }

    /// Speech activity changes: results with words start it (SpeechStarted needs `vad_events`),
    /// `speech_final` and `UtteranceEnd` end it. The result goes out between the two.
    private mutating func received(_ results: DeepgramProtocol.Results) -> [RecognitionEvent] {
        var events: [RecognitionEvent] = []
        if !results.transcript.isEmpty, speaking(true) { events.append(.speechActivity(true)) }
        if let result = result(results) { events.append(.result(result)) }
        if results.speechFinal, speaking(false) { events.append(.speechActivity(false)) }
        return events
    }

    private mutating func result(_ results: DeepgramProtocol.Results) -> RecognitionResult? {
        guard !isStopped else { return nil }
        if results.isFinal {
            // Finals repeated by a replay are dropped; times are in session seconds.
            guard ledger.acceptFinal(start: results.start, duration: results.duration) else { return nil }
            return RecognitionResult(
                text: results.transcript, isFinal: true, audioStart: ledger.sessionTime(results.start),
                audioEnd: ledger.sessionTime(results.end), fromFinalize: results.fromFinalize,
                endsUtterance: results.speechFinal || results.fromFinalize)
        }
        guard interimResults, !results.transcript.isEmpty else { return nil }
        return RecognitionResult(text: results.transcript, isFinal: false)
    }

    /// Records whether speech is going on; true if that changed (and the session still runs).
    private mutating func speaking(_ now: Bool) -> Bool {
        guard speaking != now, !isStopped else { return false }
        speaking = now
        return true
    }
}
