import Capture
import Logging
import Synchronization

/// One streaming session: reconnects on retryable failures and replays the audio the server has
/// not answered for.
///
/// Threads: audio arrives on the capture thread and goes straight to the socket when the pacer
/// allows (one hop: the event loop's task queue). Server messages are decoded and delivered to
/// the sink on the connection's event loop, in `channelRead`. ``run()`` owns everything else as
/// child tasks: the connection loop (reconnects with backoff), the paced drain of audio that had
/// to wait (a replay, or audio faster than the pacer allows), and a watch for ``cancel()`` and
/// for failures found on other threads.
///
/// Send, Finalize, CloseStream and KeepAlive all go through the connection's one ordered queue;
/// audio is sent under the state lock, so frames leave in the order they were captured.
final class DeepgramSession: HandOverSession {
    typealias Connect =
        @Sendable (@escaping WebSocketConnection.MessageHandler) async throws(RecognitionError)
        -> WebSocketConnection

    private let options: SessionOptions
    private let settings: DeepgramSettings
    private let events: any RecognitionEventSink
    private let logger: Logger
    private let connect: Connect
    /// Audio is waiting for the pacer: the drain has work.
    private let drainWakeup = TaskWakeup()
    /// The session was cancelled or failed outside ``run()``'s tasks; latched.
    private let stopped = TaskWakeup(latching: true)

    private struct State {
        var ledger: StreamLedger
        /// The open connection, if any (none while reconnecting).
        var connection: WebSocketConnection?
        var pacer = Pacer()
        /// The drain owns pacing: it has been woken and has not yet found the ledger sent out.
        var draining = false
        var finishing = false
        /// ``finalize()`` calls whose Finalize waits for the audio before it to go out.
        var finalizesPending = 0
        var closingSent = false
        var cancelled = false
        /// Set when ``run()`` has returned: nothing more goes out.
        var ended = false
        var failure: RecognitionError?
        var speaking = false
        var releaseLogged = false
        var unknownTypesLogged = Set<String>()

        var isStopped: Bool { cancelled || ended || failure != nil }
    }
    private let state: Mutex<State>

    /// How ``run()``'s connection loop ended.
    private enum Outcome: Sendable {
        case finished
        case failed(RecognitionError)
        case stopped
    }

    init(
        options: SessionOptions, settings: DeepgramSettings, events: any RecognitionEventSink, logger: Logger,
        connect: @escaping Connect
    ) {
        self.options = options
        self.settings = settings
        self.events = events
        self.logger = logger
        self.connect = connect
        state = Mutex(State(ledger: StreamLedger(capacity: settings.replayCapacity)))
    }

    // MARK: - RecognitionSession

    func run() async throws(RecognitionError) {
        let outcome = await withTaskCancellationHandler {
            await withTaskGroup(of: Outcome?.self) { group in
                group.addTask { await self.connectionLoop() }
                group.addTask {
                    await self.drainLoop()
                    return nil
                }
                group.addTask {
                    await self.stopped.wait()
                    return .stopped
                }
                var outcome = Outcome.stopped
                for await next in group {
                    guard let next else { continue }
                    outcome = next
                    break
                }
                // The loop has seen its connection's end (so every event is delivered) or is
                // cancelled here, which aborts the connection and waits for that end.
                group.cancelAll()
                return outcome
            }
        } onCancel: {
            cancel()
        }
        let failure = state.withLock { state in
            state.ended = true
            state.connection?.abort()
            return state.failure
        }
        switch outcome {
        case .finished: return
        case .failed(let error): throw error
        case .stopped: if let failure { throw failure }
        }
    }

    /// Live audio goes straight to the socket from the caller's thread (the capture thread);
    /// audio the pacer holds back waits in the ledger for the drain.
    func send(_ chunk: AudioChunk) {
        var overflow: StreamLedger.Overflow?
        var releasedFirst = false
        let wake = state.withLock { state -> Bool in
            // After a failure the ledger still takes audio (nothing goes out): the offline engine
            // may take it over (``handOver()``).
            guard !state.finishing, !state.cancelled else { return false }
            do throws(StreamLedger.Overflow) {
                try state.ledger.append(chunk)
            } catch {
                guard !state.isStopped else { return false }
                overflow = error
                state.failure = Self.overflowError(capacity: settings.replayCapacity)
                state.connection?.abort()
                return false
            }
            if state.ledger.released > 0, !state.releaseLogged {
                state.releaseLogged = true
                releasedFirst = true
            }
            return Self.startPump(&state)
        }
        if wake { drainWakeup.signal() }
        if releasedFirst {
            logger.warning(
                "replay buffer full: audio the server has not answered for can no longer be replayed",
                metadata: ["capacity": "\(settings.replayCapacity)"])
        }
        if let overflow {
            logger.error(
                "replay buffer overflow: failing the session",
                metadata: ["unsentSamples": "\(overflow.unsent)", "capacitySamples": "\(overflow.capacity)"])
            stopped.signal()
        }
    }

    func finish() {
        let wake = state.withLock { state -> Bool in
            guard !state.finishing else { return false }
            state.finishing = true
            // Flush, then ask the server to close once it has sent every final. While audio is
            // still unsent (or no connection is open) this happens once it has gone out.
            return Self.startPump(&state)
        }
        if wake { drainWakeup.signal() }
    }

    func finalize() {
        let wake = state.withLock { state -> Bool in
            guard !state.finishing, !state.isStopped else { return false }
            state.finalizesPending += 1
            return Self.startPump(&state)
        }
        if wake { drainWakeup.signal() }
    }

    func cancel() {
        state.withLock { state in
            state.cancelled = true
            // Close now rather than when the server notices the silence.
            state.connection?.abort()
        }
        stopped.signal()
    }

    /// Gives the session up for another engine: nothing more goes out or is delivered, and
    /// ``run()`` returns soon. Returns the audio no final answered for (see ``StreamLedger``).
    func handOver() -> (start: Int, samples: [Int16]) {
        let audio = state.withLock { state in
            state.cancelled = true
            state.connection?.abort()
            return state.ledger.unansweredAudio
        }
        stopped.signal()
        return audio
    }

    // MARK: - Connections

    /// Makes `connection` the current one: replays what the server has not answered for, then
    /// streams. Messages may already have arrived on it; none can be about audio yet.
    func adopt(_ connection: WebSocketConnection) {
        let wake = state.withLock { state -> Bool in
            state.connection = connection
            // Still adopted when stopped, so the loop waits for its end before run() returns.
            guard !state.isStopped else {
                connection.abort()
                return false
            }
            state.pacer = Pacer()
            state.closingSent = false
            state.ledger.beginConnection()
            return Self.startPump(&state)
        }
        if wake { drainWakeup.signal() }
        connection.keepAlive(every: settings.keepAliveInterval) { [self] in
            // Under the lock, like audio and CloseStream: nothing may follow CloseStream.
            state.withLock { state in
                guard state.connection === connection, !state.closingSent, !state.isStopped else { return }
                connection.send(text: DeepgramProtocol.keepAlive)
            }
        }
    }

    /// Serves connections until the session ends: waits for each to end, reconnects (with
    /// backoff) after a retryable end.
    private func connectionLoop() async -> Outcome {
        var backoff = settings.backoff
        while true {
            guard let connection = state.withLock({ $0.connection }) else { return .stopped }
            // Returns after the last message of this connection was handled.
            let end = await connection.end
            let (finishing, stopped) = state.withLock { state in
                if state.connection === connection { state.connection = nil }
                return (state.finishing, state.isStopped)
            }
            if stopped || Task.isCancelled { return .stopped }
            switch end {
            case .closed(let code, _) where finishing && code == 1000:
                logger.debug("stream closed", metadata: ["code": "\(code)"])
                return .finished
            case .closed(let code, let reason) where !DeepgramProtocol.isRetryable(closeCode: code):
                return .failed(
                    code == 1008 || code == 1002
                        ? RecognitionError(.failed, "The server could not decode the audio (close \(code) \(reason)).")
                        : RecognitionError(
                            .backendUnavailable,
                            "The server ended the stream (close \(code)\(reason.isEmpty ? "" : " \(reason)")).")
                )
            default:
                logger.warning("stream dropped; reconnecting", metadata: ["reason": "\(end)"])
                events.deliver(.reconnecting(true))
                var next: WebSocketConnection?
                while next == nil {
                    guard let delay = backoff.next() else {
                        return .failed(
                            RecognitionError(
                                .backendUnavailable,
                                "Lost the connection to the recognizer and could not get it back after \(backoff.attempts) attempts."
                            ).unreachable(true))
                    }
                    do {
                        try await eventLoopSleep(for: delay)
                        next = try await connect(receive)
                    } catch {
                        if Task.isCancelled || state.withLock({ $0.isStopped }) { return .stopped }
                        // A refused key or settings will not get better by retrying.
                        if let error = error as? RecognitionError, error.kind != .backendUnavailable {
                            return .failed(error)
                        }
                        logger.debug("reconnect attempt failed", metadata: ["attempt": "\(backoff.attempts)"])
                    }
                }
                backoff.reset()
                if !state.withLock({ $0.isStopped }) { events.deliver(.reconnecting(false)) }
                if let next { adopt(next) }
            }
        }
    }

    // MARK: - Sending

    /// Sends the ledger's unsent audio while the pacer allows; returns whether the drain must be
    /// woken to send the rest later.
    private static func startPump(_ state: inout State) -> Bool {
        guard pump(&state) != nil, !state.draining else { return false }
        state.draining = true
        return true
    }

    /// Sends unsent audio at the pacer's rate, then Finalize and CloseStream once finishing and
    /// everything is out. Returns how long until the pacer allows more, or nil when nothing waits.
    private static func pump(_ state: inout State) -> Duration? {
        guard let connection = state.connection, !state.isStopped else { return nil }
        while state.ledger.unsent > 0 {
            let wait = state.pacer.wait(at: .now)
            guard wait == .zero else { return wait }
            guard let samples = state.ledger.takeUnsent() else { break }
            state.pacer.sent(samples: samples.count)
            connection.send(binary: samples)
        }
        while state.finalizesPending > 0 {
            state.finalizesPending -= 1
            connection.send(text: DeepgramProtocol.finalize)
        }
        if state.finishing, !state.closingSent {
            state.closingSent = true
            connection.send(text: DeepgramProtocol.finalize)
            connection.send(text: DeepgramProtocol.closeStream)
        }
        return nil
    }

    /// Sends what the pacer held back, whenever woken, until cancelled.
    private func drainLoop() async {
        while !Task.isCancelled {
            await drainWakeup.wait()
            while let wait = state.withLock({ state -> Duration? in
                let wait = Self.pump(&state)
                if wait == nil { state.draining = false }
                return wait
            }) {
                do { try await eventLoopSleep(for: wait) } catch { return }
            }
        }
    }

    static func overflowError(capacity: Duration) -> RecognitionError {
        RecognitionError(
            .backendUnavailable,
            "The connection to the recognizer was down longer than the replay buffer holds (\(capacity) of audio), so the audio captured meanwhile cannot all be kept. Check the network and start again."
        )
    }

    // MARK: - Receiving

    /// Handles one server message; called on the connection's event loop.
    func receive(_ message: WebSocketMessage) {
        guard case .text(let text) = message else { return }
        let decoded: DeepgramProtocol.ServerMessage
        do {
            decoded = try DeepgramProtocol.decode(text)
        } catch {
            logger.warning(
                "skipping a malformed server message",
                metadata: ["reason": "\(error.description)", "bytes": "\(text.utf8.count)"])
            return
        }
        switch decoded {
        case .results(let results):
            handle(results)
        case .metadata(let requestID):
            logger.debug("stream metadata", metadata: ["request_id": "\(requestID ?? "")"])
        case .speechStarted:
            if speaking(true) { events.deliver(.speechActivity(true)) }
        case .utteranceEnd:
            if speaking(false) { events.deliver(.speechActivity(false)) }
        case .unknown(let type):
            let first = state.withLock { $0.unknownTypesLogged.insert(type).inserted }
            if first { logger.notice("ignoring unknown server message type", metadata: ["type": "\(type)"]) }
        }
    }

    /// Speech activity changes: results with words start it (SpeechStarted needs `vad_events`),
    /// `speech_final` and `UtteranceEnd` end it. The result goes out between the two.
    private func handle(_ results: DeepgramProtocol.Results) {
        let speechStarted = !results.transcript.isEmpty && speaking(true)
        let result = state.withLock { state -> RecognitionResult? in
            guard !state.isStopped else { return nil }
            if results.isFinal {
                // Finals repeated by a replay are dropped; times are in session seconds.
                guard state.ledger.acceptFinal(start: results.start, duration: results.duration) else { return nil }
                return RecognitionResult(
                    text: results.transcript, isFinal: true, audioStart: state.ledger.sessionTime(results.start),
                    audioEnd: state.ledger.sessionTime(results.end), fromFinalize: results.fromFinalize)
            }
            guard options.interimResults, !results.transcript.isEmpty else { return nil }
            return RecognitionResult(text: results.transcript, isFinal: false)
        }
        if speechStarted { events.deliver(.speechActivity(true)) }
        if let result { events.deliver(.result(result)) }
        if results.speechFinal, speaking(false) { events.deliver(.speechActivity(false)) }
    }

    /// Records whether speech is going on; true if that changed (and the session still runs).
    private func speaking(_ now: Bool) -> Bool {
        state.withLock { state in
            guard state.speaking != now, !state.isStopped else { return false }
            state.speaking = now
            return true
        }
    }
}
