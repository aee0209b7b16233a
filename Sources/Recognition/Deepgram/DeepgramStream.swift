import Capture
import Logging
import Synchronization
import Waiting

/// One streaming session: reconnects on retryable failures and replays the audio the server has
/// not answered for.
///
/// The protocol's decisions are ``DeepgramStreamMachine``'s; this class feeds it and performs its
/// actions. Threads: audio arrives on the capture thread and goes straight to the socket when the
/// pacer allows (one hop: the event loop's task queue). Server messages are decoded and delivered
/// to the sink on the connection's event loop, in `channelRead`. ``run()`` owns everything else
/// as child tasks: the connection loop (reconnects with backoff), the paced drain of audio that
/// had to wait (a replay, or audio faster than the pacer allows), and a watch for ``cancel()``
/// and for failures found on other threads.
///
/// Send, Finalize, CloseStream and KeepAlive all go through the connection's one ordered queue,
/// queued under the machine's lock as it returns them, so frames leave in the order captured.
final class DeepgramStream: HandOverStream {
    typealias Connect =
        @Sendable (@escaping WebSocketConnection.MessageHandler) async throws(RecognitionError)
        -> WebSocketConnection
    typealias Machine = DeepgramStreamMachine<WebSocketConnection>

    private let settings: DeepgramSettings
    private let events: any RecognitionEventSink
    private let logger: Logger
    private let connect: Connect
    /// Audio is waiting for the pacer: the drain has work.
    private let drainWakeup = TaskWakeup()
    /// The session was cancelled or failed outside ``run()``'s tasks; latched.
    private let stopped = TaskWakeup(latching: true)
    private let machine: Mutex<Machine>

    init(
        options: StreamOptions, settings: DeepgramSettings, events: any RecognitionEventSink, logger: Logger,
        connect: @escaping Connect
    ) {
        self.settings = settings
        self.events = events
        self.logger = logger
        self.connect = connect
        machine = Mutex(Machine(replayCapacity: settings.replayCapacity, interimResults: options.interimResults))
    }

    // MARK: - RecognitionStream

    func run() async throws(RecognitionError) {
        let outcome = await withTaskCancellationHandler {
            await withTaskGroup(of: Machine.Outcome?.self) { group in
                group.addTask { await self.connectionLoop() }
                group.addTask {
                    await self.drainLoop()
                    return nil
                }
                group.addTask {
                    await self.stopped.wait()
                    return .stopped
                }
                var outcome = Machine.Outcome.stopped
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
        let failure = machine.withLock { machine in
            sendUnderLock(machine.handle(.runReturned, now: .now), on: machine.connection)
            return machine.failure
        }
        switch outcome {
        case .finished: return
        case .failed(let error): throw error
        case .stopped: if let failure { throw failure }
        }
    }

    /// Live audio goes straight to the socket from the caller's thread (the capture thread);
    /// audio the pacer holds back waits in the ledger for the drain.
    func send(_ chunk: AudioChunk) { handle(.audio(chunk)) }

    func finish() { handle(.finish) }

    func finalize() { handle(.finalize) }

    func cancel() { handle(.cancel) }

    /// Gives the session up for another engine: nothing more goes out or is delivered, and
    /// ``run()`` returns soon. Returns the audio no final answered for (see ``StreamLedger``).
    func handOver() -> (start: Int, samples: [Int16]) {
        let (actions, audio) = machine.withLock { machine in
            let actions = machine.handle(.cancel, now: .now)
            sendUnderLock(actions, on: machine.connection)
            return (actions, machine.unansweredAudio)
        }
        perform(actions)
        return audio
    }

    // MARK: - Actions

    /// Handles `event`: sends under the lock, the rest after it.
    @discardableResult
    private func handle(_ event: Machine.Event) -> [Machine.Action] {
        let actions = machine.withLock { machine in
            let actions = machine.handle(event, now: .now)
            sendUnderLock(actions, on: machine.connection)
            return actions
        }
        perform(actions)
        return actions
    }

    /// Performs the actions for the connection, in order; called with the lock held, so frames
    /// leave in the order the machine produced them.
    private func sendUnderLock(_ actions: [Machine.Action], on connection: WebSocketConnection?) {
        guard let connection else { return }
        for action in actions {
            switch action {
            case .sendAudio(let samples): connection.send(binary: samples)
            case .sendFinalize: connection.send(text: DeepgramProtocol.finalize)
            case .sendCloseStream: connection.send(text: DeepgramProtocol.closeStream)
            case .sendKeepAlive: connection.send(text: DeepgramProtocol.keepAlive)
            case .abortConnection: connection.abort()
            default: break
            }
        }
    }

    /// Performs the actions that wait for the lock to be released (the connection loop's and
    /// the drain's steps are theirs to take).
    private func perform(_ actions: [Machine.Action]) {
        for action in actions {
            switch action {
            case .wakeDrain: drainWakeup.signal()
            case .deliver(let event): events.deliver(event)
            case .stopRun: stopped.signal()
            case .logReplayReleased:
                logger.warning(
                    "replay buffer full: audio the server has not answered for can no longer be replayed",
                    metadata: ["capacity": "\(settings.replayCapacity)"])
            case .logOverflow(let overflow):
                logger.error(
                    "replay buffer overflow: failing the session",
                    metadata: ["unsentSamples": "\(overflow.unsent)", "capacitySamples": "\(overflow.capacity)"])
            case .logUnknownType(let type):
                logger.notice("ignoring unknown server message type", metadata: ["type": "\(type)"])
            case .sendAudio, .sendFinalize, .sendCloseStream, .sendKeepAlive, .abortConnection, .drainAgain,
                .conclude, .reconnect:
                break
            }
        }
    }

    // MARK: - Connections

    /// Makes `connection` the current one: replays what the server has not answered for, then
    /// streams. Messages may already have arrived on it; none can be about audio yet.
    func adopt(_ connection: WebSocketConnection) {
        handle(.connected(connection))
        connection.keepAlive(every: settings.keepAliveInterval) { [self] in handle(.keepAliveDue(connection)) }
    }

    /// Serves connections until the session ends: waits for each to end, reconnects (with
    /// backoff) after a retryable end.
    private func connectionLoop() async -> Machine.Outcome {
        var backoff = settings.backoff
        while true {
            guard let connection = machine.withLock({ $0.connection }) else { return .stopped }
            // Returns after the last message of this connection was handled.
            let end = await connection.end
            let next = handle(.connectionEnded(connection, end))
            if Task.isCancelled { return .stopped }
            if case .conclude(let outcome) = next.first {
                if outcome == .finished, case .closed(let code, _) = end {
                    logger.debug("stream closed", metadata: ["code": "\(code)"])
                }
                return outcome
            }
            logger.warning("stream dropped; reconnecting", metadata: ["reason": "\(end)"])
            events.deliver(.reconnecting(true))
            var reconnected: WebSocketConnection?
            while reconnected == nil {
                guard let delay = backoff.next() else {
                    return .failed(
                        RecognitionError(
                            .backendUnavailable,
                            "Lost the connection to the recognizer and could not get it back after \(backoff.attempts) attempts."
                        ).unreachable(true))
                }
                do {
                    try await eventLoopSleep(for: delay)
                    reconnected = try await connect(receive)
                } catch {
                    if Task.isCancelled || machine.withLock({ $0.isStopped }) { return .stopped }
                    // A refused key or settings will not get better by retrying.
                    if let error = error as? RecognitionError, error.kind != .backendUnavailable {
                        return .failed(error)
                    }
                    logger.debug("reconnect attempt failed", metadata: ["attempt": "\(backoff.attempts)"])
                }
            }
            backoff.reset()
            if !machine.withLock({ $0.isStopped }) { events.deliver(.reconnecting(false)) }
            if let reconnected { adopt(reconnected) }
        }
    }

    /// Sends what the pacer held back, whenever woken, until cancelled.
    private func drainLoop() async {
        while !Task.isCancelled {
            await drainWakeup.wait()
            while let wait = handle(.drain).lazy.compactMap({ action -> Duration? in
                if case .drainAgain(let wait) = action { wait } else { nil }
            }).first {
                do { try await eventLoopSleep(for: wait) } catch { return }
            }
        }
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
        if case .metadata(let requestID) = decoded {
            logger.debug("stream metadata", metadata: ["request_id": "\(requestID ?? "")"])
        }
        handle(.received(decoded))
    }
}
