/// The session state machine: events in, actions out. No I/O, no clocks, no threads.
///
/// Calls from any number of clients are events; each gets exactly one `.reply` action. Calls
/// that arrive during a transition wait for it: a start during `starting` shares its outcome, a
/// stop during `starting` stops right after audio flows, a start during `stopping` starts again
/// once the stop is done.
public struct SessionMachine<Options: Sendable & Equatable>: Sendable {
    /// The values of the `State` property.
    public enum State: String, Sendable {
        case idle, starting, listening, stopping, reconnecting
    }

    /// Identifies one method call awaiting its reply.
    public typealias CallID = UInt64

    public enum Event: Sendable, Equatable {
        case start(CallID, Options)
        case stop(CallID)
        case toggle(CallID, Options)
        case cancel(CallID)
        /// Audio is flowing to the recognizer.
        case opened
        /// The session could not start.
        case openFailed(SpeechError)
        /// The session ended without an error: after a stop or cancel, or by itself.
        case closed
        /// The session ended on its own because of an error.
        case failed(SpeechError)
    }

    public enum Reply: Sendable, Equatable {
        case started
        /// The service replies with the session's final transcript.
        case stopped
        case toggled(listening: Bool)
        case cancelled
        case error(SpeechError)
    }

    public enum Action: Sendable, Equatable {
        /// Open the microphone and a recognizer session with these options.
        case open(Options)
        /// Stop capture; `flush` waits for every final, otherwise pending text is dropped.
        case close(flush: Bool)
        case reply(CallID, Reply)
        /// A session failed: record it as `LastError`; `signal` says whether to emit `SessionFailed`.
        case recordFailure(SpeechError, signal: Bool)
    }

    private enum Waiter: Equatable {
        case start(CallID), toggle(CallID), stop(CallID), cancel(CallID)
    }

    public private(set) var state = State.idle
    private var startWaiters: [Waiter] = []
    private var stopWaiters: [Waiter] = []
    /// Starts queued behind a stop, with the options of the first.
    private var queuedStarts: [Waiter] = []
    private var queuedOptions: Options?
    private var stopRequested = false
    private var cancelRequested = false

    public init() {}

    public mutating func handle(_ event: Event) -> [Action] {
        switch (state, event) {
        // Idle
        case (.idle, .start(let id, let options)):
            return begin(options, waiters: [.start(id)])
        case (.idle, .toggle(let id, let options)):
            return begin(options, waiters: [.toggle(id)])
        case (.idle, .stop(let id)):
            return [.reply(id, .stopped)]
        case (.idle, .cancel(let id)):
            return [.reply(id, .cancelled)]

        // Starting: callers wait for the outcome. Calls keep their order: a start after a stop
        // was asked for runs once that stop is done.
        case (.starting, .start(let id, let options)) where stopRequested || cancelRequested:
            return queueStart(.start(id), options)
        case (.starting, .start(let id, _)):
            startWaiters.append(.start(id))
            return []
        case (.starting, .toggle(let id, let options)) where stopRequested || cancelRequested:
            return queueStart(.toggle(id), options)
        case (.starting, .toggle(let id, _)):
            // A second press while starting means "stop".
            stopWaiters.append(.toggle(id))
            stopRequested = true
            return []
        case (.starting, .stop(let id)):
            stopWaiters.append(.stop(id))
            stopRequested = true
            return []
        case (.starting, .cancel(let id)):
            stopWaiters.append(.cancel(id))
            cancelRequested = true
            return []
        case (.starting, .opened):
            let replies = startWaiters.map { reply(to: $0, listening: true) }
            startWaiters = []
            if cancelRequested || stopRequested {
                state = .stopping
                return replies + [.close(flush: !cancelRequested)]
            }
            state = .listening
            return replies
        case (.starting, .openFailed(let error)):
            let replies = startWaiters.map { Action.reply(id(of: $0), .error(error)) }
            startWaiters = []
            // Recorded before the replies: a caller reading `LastError` after its error reply sees it.
            return [.recordFailure(error, signal: false)] + replies + finishStopping()

        // Listening
        case (.listening, .start(let id, _)), (.reconnecting, .start(let id, _)):
            return [.reply(id, .started)]
        case (.listening, .toggle(let id, _)), (.reconnecting, .toggle(let id, _)):
            return beginStop(.toggle(id), flush: true)
        case (.listening, .stop(let id)), (.reconnecting, .stop(let id)):
            return beginStop(.stop(id), flush: true)
        case (.listening, .cancel(let id)), (.reconnecting, .cancel(let id)):
            return beginStop(.cancel(id), flush: false)
        case (.listening, .failed(let error)), (.reconnecting, .failed(let error)):
            return [.recordFailure(error, signal: true)] + finishStopping()
        case (.listening, .closed), (.reconnecting, .closed):
            // Nobody asked for the end (e.g. an engine that ended its session by itself): the
            // session is over all the same, and the user hears why.
            return [.recordFailure(.endedByRecognizer, signal: true)] + finishStopping()

        // Stopping: stops and cancels join; starts queue for afterwards.
        case (.stopping, .start(let id, let options)):
            return queueStart(.start(id), options)
        case (.stopping, .toggle(let id, let options)):
            return queueStart(.toggle(id), options)
        case (.stopping, .stop(let id)):
            stopWaiters.append(.stop(id))
            return []
        case (.stopping, .cancel(let id)):
            stopWaiters.append(.cancel(id))
            if cancelRequested { return [] }
            cancelRequested = true
            return [.close(flush: false)]
        case (.stopping, .closed):
            return finishStopping()
        case (.stopping, .failed(let error)):
            return [.recordFailure(error, signal: true)] + finishStopping()

        default:
            // Late or duplicate completions (e.g. `.closed` after a failure) change nothing.
            return []
        }
    }

    /// Moves to `reconnecting` or back to `listening` while a session recovers on its own.
    mutating func setReconnecting(_ reconnecting: Bool) {
        if reconnecting, state == .listening { state = .reconnecting }
        if !reconnecting, state == .reconnecting { state = .listening }
    }

    /// A start that runs after the stop in progress.
    private mutating func queueStart(_ waiter: Waiter, _ options: Options) -> [Action] {
        queuedStarts.append(waiter)
        if queuedOptions == nil { queuedOptions = options }
        return []
    }

    private mutating func begin(_ options: Options, waiters: [Waiter]) -> [Action] {
        state = .starting
        startWaiters = waiters
        stopRequested = false
        cancelRequested = false
        return [.open(options)]
    }

    private mutating func beginStop(_ waiter: Waiter, flush: Bool) -> [Action] {
        state = .stopping
        stopWaiters = [waiter]
        cancelRequested = !flush
        return [.close(flush: flush)]
    }

    /// Replies to everyone waiting on the stop; then runs queued starts, if any.
    private mutating func finishStopping() -> [Action] {
        var actions = stopWaiters.map { reply(to: $0, listening: false) }
        stopWaiters = []
        stopRequested = false
        cancelRequested = false
        state = .idle
        if let options = queuedOptions, !queuedStarts.isEmpty {
            let waiters = queuedStarts
            queuedStarts = []
            queuedOptions = nil
            actions += begin(options, waiters: waiters)
        }
        return actions
    }

    private func id(of waiter: Waiter) -> CallID {
        switch waiter {
        case .start(let id), .toggle(let id), .stop(let id), .cancel(let id): id
        }
    }

    private func reply(to waiter: Waiter, listening: Bool) -> Action {
        switch waiter {
        case .start(let id): .reply(id, .started)
        case .toggle(let id): .reply(id, .toggled(listening: listening))
        case .stop(let id): .reply(id, .stopped)
        case .cancel(let id): .reply(id, .cancelled)
        }
    }
}
