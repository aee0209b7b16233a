import Capture

/// The streaming session's protocol, as a plain value: ``DeepgramStream`` feeds it what
/// happened (calls, connections, server messages, the drain's turn) and performs the actions it
/// returns, in order. No sockets, threads or clocks here: `now` comes with each event.
///
/// - Audio goes into the ``StreamLedger`` and out on the open connection as the ``Pacer``
///   allows; what the pacer holds back waits for the drain (`wakeDrain`, then `drain` events).
/// - Finalize goes out after the audio before it; after ``Event/finish`` no audio is taken, and
///   once everything is out Finalize and CloseStream go out, after which nothing may follow.
/// - A new connection replays what the server has not answered for; finals it repeats are dropped.
/// - Stopped (cancelled, the replay buffer overflowed, or `run()` returned), nothing more goes
///   out or is delivered.
struct DeepgramStreamMachine<Connection: AnyObject & Sendable>: Sendable {
    /// Where the session is in its life; it only moves down this list.
    enum Phase: Sendable, Equatable {
        /// Audio is taken and streams (or waits for a connection).
        case streaming
        /// ``Event/finish`` came: no more audio; Finalize and CloseStream go out once it has.
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

    enum Event: Sendable {
        /// Captured audio (`send`).
        case audio(AudioChunk)
        case finalize
        case finish
        /// `cancel()` or `handOver()`.
        case cancel
        /// A connection is open and becomes the current one.
        case connected(Connection)
        /// The connection loop saw this connection end.
        case connectionEnded(Connection, WebSocketEnd)
        /// Nothing went out on this connection for the keep-alive interval.
        case keepAliveDue(Connection)
        /// The drain's turn: send what the pacer now allows.
        case drain
        /// `run()` returned.
        case runReturned
        case received(DeepgramProtocol.ServerMessage)
    }

    /// How `run()`'s connection loop ends.
    enum Outcome: Sendable, Equatable {
        case finished
        case failed(RecognitionError)
        /// Cancelled, or failed outside the loop (``failure`` says so).
        case stopped
    }

    enum Action: Sendable, Equatable {
        // On the current connection (``connection``): sent in this order, under the session's
        // lock, so what leaves follows the order of the events.
        case sendAudio([Int16])
        case sendFinalize
        case sendCloseStream
        case sendKeepAlive
        case abortConnection
        // The rest runs outside the lock.
        /// Audio waits for the pacer and the drain is idle: wake it.
        case wakeDrain
        /// The drain sends more after this long (another `drain` event).
        case drainAgain(after: Duration)
        case deliver(RecognitionEvent)
        /// `run()` must return soon: cancelled or failed.
        case stopRun
        /// The connection loop ends so.
        case conclude(Outcome)
        /// The connection loop announces the drop and connects again, with backoff.
        case reconnect
        /// Audio sent but unanswered was released to keep within the replay capacity (once).
        case logReplayReleased
        case logOverflow(StreamLedger.Overflow)
        /// A server message type seen for the first time and ignored.
        case logUnknownType(String)
    }

    private(set) var phase = Phase.streaming
    private(set) var link = Link.down
    private var ledger: StreamLedger
    private let replayCapacity: Duration
    private let interimResults: Bool
    /// The drain owns pacing: it has been woken and has not yet found the ledger sent out.
    private var draining = false
    /// Finalize calls waiting for the audio before them to go out.
    private var finalizesPending = 0
    private var speaking = false
    private var releaseLogged = false
    private var unknownTypesLogged = Set<String>()

    init(replayCapacity: Duration, interimResults: Bool) {
        ledger = StreamLedger(capacity: replayCapacity)
        self.replayCapacity = replayCapacity
        self.interimResults = interimResults
    }

    /// The open connection, if any: what the send and abort actions are for.
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

    mutating func handle(_ event: Event, now: ContinuousClock.Instant) -> [Action] {
        switch event {
        case .audio(let chunk):
            return take(chunk, now: now)
        case .finalize:
            guard phase == .streaming else { return [] }
            finalizesPending += 1
            return startPump(now: now)
        case .finish:
            switch phase {
            case .streaming:
                phase = .finishing
                // Flush, then ask the server to close once it has sent every final. While audio
                // is still unsent (or no connection is open) this happens once it has gone out.
                return startPump(now: now)
            case .finishing:
                return []
            case .stopped(let failure, _):
                phase = .stopped(failure: failure, keepsAudio: false)
                return []
            }
        case .cancel:
            phase = .stopped(failure: failure, keepsAudio: false)
            // Close now rather than when the server notices the silence.
            return abort() + [.stopRun]
        case .connected(let connection):
            link = .up(connection, Pacer(started: now))
            // Still current when stopped, so the loop waits for its end before run() returns.
            guard !isStopped else { return abort() }
            ledger.beginConnection()
            return startPump(now: now)
        case .connectionEnded(let connection, let end):
            if link.connection === connection { link = .down }
            return [connectionEnded(end)]
        case .keepAliveDue(let connection):
            // Nothing may follow CloseStream.
            guard case .up(let current, _) = link, current === connection, !isStopped else { return [] }
            return [.sendKeepAlive]
        case .drain:
            let (actions, wait) = pump(now: now)
            guard let wait else {
                draining = false
                return actions
            }
            return actions + [.drainAgain(after: wait)]
        case .runReturned:
            switch phase {
            case .streaming: phase = .stopped(failure: nil, keepsAudio: true)
            case .finishing: phase = .stopped(failure: nil, keepsAudio: false)
            case .stopped: break
            }
            return abort()
        case .received(let message):
            return received(message)
        }
    }

    // MARK: - Sending

    /// After a failure (or once `run()` returned) the ledger still takes audio, though nothing
    /// goes out: the offline engine may take it over.
    private mutating func take(_ chunk: AudioChunk, now: ContinuousClock.Instant) -> [Action] {
        switch phase {
        case .streaming, .stopped(_, keepsAudio: true): break
        case .finishing, .stopped(_, keepsAudio: false): return []
        }
        do throws(StreamLedger.Overflow) {
            try ledger.append(chunk)
        } catch {
            guard !isStopped else { return [] }
            phase = .stopped(
                failure: RecognitionError(
                    .backendUnavailable,
                    "The connection to the recognizer was down longer than the replay buffer holds (\(replayCapacity) of audio), so the audio captured meanwhile cannot all be kept. Check the network and start again."
                ), keepsAudio: true)
            return abort() + [.logOverflow(error), .stopRun]
        }
        let releasedFirst = ledger.released > 0 && !releaseLogged
        if releasedFirst { releaseLogged = true }
        return startPump(now: now) + (releasedFirst ? [.logReplayReleased] : [])
    }

    private func abort() -> [Action] {
        connection == nil ? [] : [.abortConnection]
    }

    /// Sends what the pacer allows now, and wakes the drain for the rest unless it is awake.
    private mutating func startPump(now: ContinuousClock.Instant) -> [Action] {
        let (actions, wait) = pump(now: now)
        guard wait != nil, !draining else { return actions }
        draining = true
        return actions + [.wakeDrain]
    }

    /// Sends unsent audio at the pacer's rate, then pending Finalizes, then Finalize and
    /// CloseStream once finishing and everything is out. `wait`: how long until the pacer allows
    /// more, or nil when nothing waits.
    private mutating func pump(now: ContinuousClock.Instant) -> (actions: [Action], wait: Duration?) {
        guard case .up(let connection, var pacer) = link, !isStopped else { return ([], nil) }
        var actions: [Action] = []
        while ledger.unsent > 0 {
            let wait = pacer.wait(at: now)
            guard wait == .zero else {
                link = .up(connection, pacer)
                return (actions, wait)
            }
            guard let samples = ledger.takeUnsent() else { break }
            pacer.sent(samples: samples.count)
            actions.append(.sendAudio(samples))
        }
        actions += Array(repeating: .sendFinalize, count: finalizesPending)
        finalizesPending = 0
        if phase == .finishing {
            link = .closing(connection)
            actions += [.sendFinalize, .sendCloseStream]
        } else {
            link = .up(connection, pacer)
        }
        return (actions, nil)
    }

    // MARK: - Connections

    /// What the connection loop does after its connection ended.
    private func connectionEnded(_ end: WebSocketEnd) -> Action {
        guard !isStopped else { return .conclude(.stopped) }
        switch end {
        case .closed(let code, _) where phase == .finishing && code == 1000:
            return .conclude(.finished)
        case .closed(let code, let reason) where !DeepgramProtocol.isRetryable(closeCode: code):
            return .conclude(
                .failed(
                    code == 1008 || code == 1002
                        ? RecognitionError(.failed, "The server could not decode the audio (close \(code) \(reason)).")
                        : RecognitionError(
                            .backendUnavailable,
                            "The server ended the stream (close \(code)\(reason.isEmpty ? "" : " \(reason)")).")
                ))
        default:
            return .reconnect
        }
    }

    // MARK: - Receiving

    private mutating func received(_ message: DeepgramProtocol.ServerMessage) -> [Action] {
        switch message {
        case .results(let results):
            return received(results)
        case .metadata:
            return []
        case .speechStarted:
            return speaking(true) ? [.deliver(.speechActivity(true))] : []
        case .utteranceEnd:
            return speaking(false) ? [.deliver(.speechActivity(false))] : []
        case .unknown(let type):
            return unknownTypesLogged.insert(type).inserted ? [.logUnknownType(type)] : []
        }
    }

    /// Speech activity changes: results with words start it (SpeechStarted needs `vad_events`),
    /// `speech_final` and `UtteranceEnd` end it. The result goes out between the two.
    private mutating func received(_ results: DeepgramProtocol.Results) -> [Action] {
        var actions: [Action] = []
        if !results.transcript.isEmpty, speaking(true) { actions.append(.deliver(.speechActivity(true))) }
        if let result = result(results) { actions.append(.deliver(.result(result))) }
        if results.speechFinal, speaking(false) { actions.append(.deliver(.speechActivity(false))) }
        return actions
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
