import Capture
import Logging
import Synchronization
import Waiting

/// One streaming session: reconnects on retryable failures and replays the audio the server has
/// not answered for.
///
/// The protocol's decisions are ``DeepgramStreamMachine``'s; this class tells it each input and
/// does what it returns. Threads: audio arrives on the capture thread and goes straight to the socket when the
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
        machine = Mutex(
            Machine(
                replayCapacity: settings.replayCapacity, interimResults: options.interimResults,
                backoff: settings.backoff))
    }

    // MARK: - RecognitionStream

    func run() async throws(RecognitionError) {
        let outcome = await withTaskCancellationHandler {
            // The loop has seen its connection's end (so every event is delivered) or is
            // cancelled once the race is decided, which aborts the connection and waits for that end.
            await firstResult(
                of: Machine.Outcome.self,
                { await self.connectionLoop() },
                {
                    await self.drainLoop()
                    return nil
                },
                {
                    await self.stopped.wait()
                    return .stopped
                }
            ) ?? .stopped
        } onCancel: {
            cancel()
        }
        let failure = machine.withLock { machine in
            sendUnderLock(machine.runReturned(), on: machine.connection)
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
    func send(_ chunk: AudioChunk) { apply { $0.audio(chunk, now: .now) } }

    func finish() { apply { $0.finish(now: .now) } }

    func finalize() { apply { $0.finalize(now: .now) } }

    func cancel() { apply { $0.cancel() } }

    /// Gives the session up for another engine: nothing more goes out or is delivered, and
    /// ``run()`` returns soon. Returns the audio no final answered for (see ``StreamLedger``).
    func handOver() -> (start: Int, samples: [Int16]) {
        var audio: (start: Int, samples: [Int16]) = (0, [])
        apply { machine in
            let step = machine.cancel()
            audio = machine.unansweredAudio
            return step
        }
        return audio
    }

    // MARK: - Doing what the machine returns

    /// Tells the machine one input and does what it returns: the sends under the lock, so frames
    /// leave in the order of the inputs, the effects after it.
    private func apply(_ input: (inout Machine) -> Machine.Step) {
        let effects = machine.withLock { machine in
            let step = input(&machine)
            sendUnderLock(step.sends, on: machine.connection)
            return step.effects
        }
        perform(effects)
    }

    /// With the lock held, so frames leave in the order the machine returned them.
    private func sendUnderLock(_ sends: Machine.Sends, on connection: WebSocketConnection?) {
        guard let connection else { return }
        for frame in sends.frames {
            switch frame {
            case .audio(let samples): connection.send(binary: samples)
            case .finalize: connection.send(text: DeepgramProtocol.finalize)
            case .closeStream: connection.send(text: DeepgramProtocol.closeStream)
            case .keepAlive: connection.send(text: DeepgramProtocol.keepAlive)
            }
        }
        if sends.abort { connection.abort() }
    }

    /// After the lock is released.
    private func perform(_ effects: Machine.Effects) {
        if let line = effects.log { log(line) }
        for event in effects.deliver { events.deliver(event) }
        if effects.wakeDrain { drainWakeup.signal() }
        if effects.stopRun { stopped.signal() }
    }

    private func log(_ line: Machine.LogLine) {
        switch line {
        case .replayReleased:
            logger.warning(
                "replay buffer full: audio the server has not answered for can no longer be replayed",
                metadata: ["capacity": "\(settings.replayCapacity)"])
        case .overflow(let overflow):
            logger.error(
                "replay buffer overflow: failing the session",
                metadata: ["unsentSamples": "\(overflow.unsent)", "capacitySamples": "\(overflow.capacity)"])
        case .unknownType(let type):
            logger.notice("ignoring unknown server message type", metadata: ["type": "\(type)"])
        case .closed(let code):
            logger.debug("stream closed", metadata: ["code": "\(code)"])
        case .dropped(let end):
            logger.warning("stream dropped; reconnecting", metadata: ["reason": "\(end)"])
        case .reconnectFailed(let attempt):
            logger.debug("reconnect attempt failed", metadata: ["attempt": "\(attempt)"])
        }
    }

    // MARK: - Connections

    /// Makes `connection` the current one: replays what the server has not answered for, then
    /// streams. Messages may already have arrived on it; none can be about audio yet.
    func adopt(_ connection: WebSocketConnection) {
        apply { $0.connected(connection, now: .now) }
        keepAlive(connection)
    }

    private func keepAlive(_ connection: WebSocketConnection) {
        connection.keepAlive(every: settings.keepAliveInterval) { [self] in
            machine.withLock { machine in sendUnderLock(machine.keepAliveDue(connection), on: machine.connection) }
        }
    }

    /// Serves connections until the session ends: waits for each to end, then connects again or
    /// ends as the machine says.
    private func connectionLoop() async -> Machine.Outcome {
        serving: while true {
            guard let connection = machine.withLock({ $0.connection }) else { return .stopped }
            // Returns after the last message of this connection was handled.
            let end = await connection.end
            var after = machine.withLock { $0.connectionEnded(connection, end) }
            while !Task.isCancelled {
                perform(after.effects)
                switch after.next {
                case .conclude(let outcome):
                    return outcome
                case .reconnect(let delay):
                    do { try await eventLoopSleep(for: delay) } catch { return .stopped }
                    do throws(RecognitionError) {
                        let reconnected = try await connect(receive)
                        apply { $0.reconnected(reconnected, now: .now) }
                        keepAlive(reconnected)
                        continue serving
                    } catch {
                        after = machine.withLock { $0.reconnectFailed(error) }
                    }
                }
            }
            return .stopped
        }
    }

    /// Sends what the pacer held back, whenever woken, until cancelled.
    private func drainLoop() async {
        while !Task.isCancelled {
            await drainWakeup.wait()
            while let wait = drain() {
                do { try await eventLoopSleep(for: wait) } catch { return }
            }
        }
    }

    /// The drain's turn; returns when to come back, if more waits for the pacer.
    private func drain() -> Duration? {
        machine.withLock { machine in
            let (sends, again) = machine.drain(now: .now)
            sendUnderLock(sends, on: machine.connection)
            return again
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
        perform(machine.withLock { $0.received(decoded) })
    }
}
