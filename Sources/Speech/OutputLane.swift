import Dictation

/// One session's tool output (typing tools, the clipboard). The core queues each step at once
/// and goes on; a job of the core's carries the steps out in order, off its executor, and hands
/// each problem back to the core (``SpeechCore/outputFailed(_:)``).
struct OutputLane: Sendable {
    enum Step: Sendable {
        case type(String)
        case press(Key)
        case retract(String)
        /// Nothing may be typed now: this problem says why.
        case refused(String)
        /// The session is over; then the machine hears `outcome`, if any.
        case finish(transcript: String?, then: SessionMachine<StartOptions>.Event?)
    }

    private let steps: AsyncStream<Step>.Continuation

    /// Starts the lane as a job of `core`; nil when the core is shutting down.
    static func start(_ session: any DictationOutputSession, on core: isolated SpeechCore) -> OutputLane? {
        let (stream, steps) = AsyncStream<Step>.makeStream()
        let queued = core.jobQueue.yield { await run(stream, through: session, reportingTo: core) }
        if case .terminated = queued { return nil }
        return OutputLane(steps: steps)
    }

    func send(_ step: Step) { steps.yield(step) }

    func finish(transcript: String?, then outcome: SessionMachine<StartOptions>.Event?) {
        steps.yield(.finish(transcript: transcript, then: outcome))
        steps.finish()
    }

    private static func run(
        _ steps: AsyncStream<Step>, through session: any DictationOutputSession, reportingTo core: SpeechCore
    ) async {
        // A display that went away fails every step the same way: one report is enough.
        var lastProblem: String?
        for await step in steps {
            let problem: String?
            var outcome: SessionMachine<StartOptions>.Event?
            switch step {
            case .type(let text): problem = await session.type(text)
            case .press(let key): problem = await session.press(key)
            case .retract(let typed): problem = await session.retract(typed)
            case .refused(let why): problem = why
            case .finish(let transcript, let then):
                problem = await session.finish(transcript: transcript)
                outcome = then
            }
            if let problem {
                if problem != lastProblem { await core.outputFailed(problem) }
                lastProblem = problem
            }
            if let outcome { await core.handle(outcome) }
        }
    }
}
