import Dictation
import Synchronization

/// One session's tool output (typing tools, the clipboard). The core queues each step at once
/// and goes on; a job of the core's carries the steps out in order, off its executor, and hands
/// each problem back to the core (``SpeechCore/outputFailed(_:)``).
///
/// At most ``backlog`` steps wait behind the running one (as the Output module's queue did): a
/// step beyond that is not done, and says so, rather than queue without bound behind a tool
/// that hangs. Its refusals wait as one (the problem is the same), so the queue stays bounded.
struct OutputLane: Sendable {
    static let backlog = 64
    static let fellBehind =
        "typing fell behind: \(backlog) requests are already waiting, so this text was not typed. \(OutputProblem.textIsKept)"

    enum Step: Sendable {
        case type(String)
        case press(Key)
        case retract(String)
        /// Nothing may be typed now: this problem says why.
        case refused(String)
        /// Steps were refused past the backlog.
        case fellBehind
        /// The session is over; then the machine hears `outcome`, if any.
        case finish(transcript: String?, then: SessionMachine<StartOptions>.Event?)
    }

    private let steps: AsyncStream<Step>.Continuation
    /// Typing steps queued and not yet done, the running one included.
    private let pending: Pending

    private final class Pending: Sendable {
        let count = Atomic(0)
        /// A "fell behind" refusal is queued and not yet reported.
        let refusalQueued = Atomic(false)
    }

    /// Starts the lane as a job of `core`; nil when the core is shutting down.
    static func start(_ session: any DictationOutputSession, on core: isolated SpeechCore) -> OutputLane? {
        let (stream, steps) = AsyncStream<Step>.makeStream()
        let pending = Pending()
        let queued = core.jobQueue.yield { await run(stream, through: session, pending: pending, reportingTo: core) }
        if case .terminated = queued { return nil }
        return OutputLane(steps: steps, pending: pending)
    }

    /// Queues typing, a key or a retraction; past the backlog, the problem instead.
    func send(_ step: Step) {
        guard pending.count.wrappingAdd(1, ordering: .relaxed).newValue <= Self.backlog + 1 else {
            pending.count.wrappingSubtract(1, ordering: .relaxed)
            if !pending.refusalQueued.exchange(true, ordering: .relaxed) { steps.yield(.fellBehind) }
            return
        }
        steps.yield(step)
    }

    func refuse(_ problem: String) { steps.yield(.refused(problem)) }

    func finish(transcript: String?, then outcome: SessionMachine<StartOptions>.Event?) {
        steps.yield(.finish(transcript: transcript, then: outcome))
        steps.finish()
    }

    private static func run(
        _ steps: AsyncStream<Step>, through session: any DictationOutputSession, pending: Pending,
        reportingTo core: SpeechCore
    ) async {
        // A display that went away fails every step the same way: one report is enough.
        var lastProblem: String?
        for await step in steps {
            var problem: String?
            var outcome: SessionMachine<StartOptions>.Event?
            switch step {
            case .type(let text): problem = await session.type(text)
            case .press(let key): problem = await session.press(key)
            case .retract(let typed): problem = await session.retract(typed)
            case .refused(let why): problem = why
            case .fellBehind:
                pending.refusalQueued.store(false, ordering: .relaxed)
                problem = Self.fellBehind
            case .finish(let transcript, let then):
                problem = await session.finish(transcript: transcript)
                outcome = then
            }
            switch step {
            case .type, .press, .retract: pending.count.wrappingSubtract(1, ordering: .relaxed)
            case .refused, .fellBehind, .finish: break
            }
            if let problem {
                if problem != lastProblem { await core.outputFailed(problem) }
                lastProblem = problem
            }
            if let outcome { await core.handle(outcome) }
        }
    }
}
