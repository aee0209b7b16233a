import Capture

/// What the shared decoder threads do next, as a plain value: ``SherpaDecoderPool`` feeds it
/// what happened (sessions' work, stops, loads, finished work) and its threads perform the
/// actions it returns. No threads, locks or clocks here: `now` comes with each event.
///
/// A free thread asks (``Event/threadFree``) and gets one step: load the model, run one item of
/// work, unload, wait, or exit. The rules are ``SherpaDecoderPool``'s (order, priority, backlog,
/// model); `Session` tells sessions apart, `Decoder` is the loaded engine, never called here.
struct SherpaScheduler<Session: Hashable, Decoder> {
    /// A loaded engine; `generation` tells it from later loads (a failed decode drops only the
    /// engine it ran on).
    struct Engine {
        let decoder: Decoder
        let generation: Int
    }

    enum Model {
        case unloaded
        /// A thread is loading it; the others wait (audio keeps queueing).
        case loading
        case loaded(Engine)
    }

    /// What a thread is doing for a session.
    enum Lane: Equatable {
        case free
        /// Running an item; `since` when it decodes audio (nil for events).
        case running(since: ContinuousClock.Instant?)
        /// Running the session's end: nothing of it needs the model any more.
        case ending

        var since: ContinuousClock.Instant? {
            if case .running(let since) = self { since } else { nil }
        }
    }

    /// What becomes of a final the engine fails on.
    enum FinalRetry {
        /// Decoded once more by the next engine.
        case once
        /// It failed again: the session ends with an error (its earlier finals stand).
        case spent
        /// The session was stopped: not decoded again.
        case never
    }

    struct Item {
        var work: SherpaWork
        var sequence: UInt64
        var queued: ContinuousClock.Instant
    }

    /// A session's queued work and what the threads do for it.
    struct Queue {
        var items: [Item] = []
        var weight = 0
        /// Its work other than interims, one item at a time.
        var main = Lane.free
        /// An interim decoding beside its other work; taking other work voids the interim.
        var interim = Lane.free
        var finalRetry = FinalRetry.once
    }

    enum Event {
        /// A session opened: it will need the model (a thread loads it now if needed).
        case began(Session)
        case queued([SherpaWork], for: Session)
        /// Drop the session's queued work and end it next (error nil: cancelled); `abandon`
        /// gives the engine up if it is stuck on this session or on every thread.
        case stop(Session, error: RecognitionError?, abandon: Bool)
        /// The recognizer is released: threads exit once every session has ended.
        case close
        /// A thread is free and asks for its next step.
        case threadFree
        case loaded(Result<Decoder, RecognitionError>)
        /// A thread finished an item of the session's work.
        case done(Session, SherpaWork)
        /// A decode failed on this engine: it is not used again.
        case engineFailed(Engine)
        /// The engine failed on this final of the session.
        case finalFailed(Session, SherpaWork)
    }

    enum Action {
        /// Something changed that waiting threads may act on.
        case wakeThreads
        /// The session's backlog would overflow: its work is refused and it ends with this error.
        case refuse(RecognitionError)
        /// Give this engine up (a worker process is killed): the next work loads another.
        case abandon(Decoder)
        // A thread's steps.
        /// Load the model for this session (and the others waiting); report ``Event/loaded(_:)``.
        case load(Session)
        /// Run the work, with this engine (nil: none is loaded); report ``Event/done(_:_:)``.
        case run(Session, SherpaWork, Engine?, waited: Duration)
        /// An interim of the session starts: its text may go out.
        case admitInterim(Session)
        /// Newer work of the session was taken: the interim decoding must not go out.
        case voidInterim(Session)
        /// The engine was let go: give its memory back.
        case unload(reason: String)
        /// Wait to be woken, or at most `timeout`.
        case wait(timeout: Duration?)
        case exit
    }

    private let threads: Int
    /// Samples a session may have queued.
    private let capacity: Int
    private let unloadAfter: Duration
    private(set) var model = Model.unloaded
    private(set) var queues: [Session: Queue] = [:]
    private var sequence: UInt64 = 0
    private var generation = 0
    private var lastEnded: ContinuousClock.Instant
    private var closing = false

    init(threads: Int, capacity: Int, unloadAfter: Duration, now: ContinuousClock.Instant) {
        self.threads = threads
        self.capacity = capacity
        self.unloadAfter = unloadAfter
        lastEnded = now
    }

    var isModelLoaded: Bool {
        if case .loaded = model { true } else { false }
    }

    mutating func handle(_ event: Event, now: ContinuousClock.Instant) -> [Action] {
        switch event {
        case .began(let session):
            queues[session] = Queue()
            return [.wakeThreads]
        case .queued(let work, let session):
            guard let queue = queues[session] else { return [] }
            guard queue.weight + work.reduce(0, { $0 + $1.weight }) <= capacity else {
                return [
                    .refuse(
                        RecognitionError(
                            .backendUnavailable,
                            "The offline engine fell \(capacity / AudioFormat.sampleRate) s behind real time (the computer is too busy), so the session stopped; what was recognized before is kept."
                        ))
                ]
            }
            append(work, to: session, now: now)
            return [.wakeThreads]
        case .stop(let session, let error, let abandon):
            return stop(session, error: error, abandon: abandon, now: now)
        case .close:
            closing = true
            return [.wakeThreads]
        case .threadFree:
            return nextStep(now: now)
        case .loaded(.success(let decoder)):
            generation += 1
            model = .loaded(Engine(decoder: decoder, generation: generation))
            return [.wakeThreads]
        case .loaded(.failure(let error)):
            // Every open session ends with the error.
            model = .unloaded
            for session in queues.keys {
                let end = Item(work: .end(error), sequence: nextSequence(), queued: now)
                queues[session]?.items = [end]
                queues[session]?.weight = 0
            }
            return [.wakeThreads]
        case .done(let session, let work):
            switch work {
            case .end:
                queues[session] = nil
                lastEnded = now
            case .interim: queues[session]?.interim = .free
            default: queues[session]?.main = .free
            }
            return [.wakeThreads]
        case .engineFailed(let engine):
            if case .loaded(let current) = model, current.generation == engine.generation { model = .unloaded }
            return []
        case .finalFailed(let session, let work):
            guard var queue = queues[session] else { return [] }
            switch queue.finalRetry {
            case .once:
                // The thread that failed takes it next: no wake-up needed.
                queue.items.insert(Item(work: work, sequence: nextSequence(), queued: now), at: 0)
                queue.weight += work.weight
                queue.finalRetry = .spent
                queues[session] = queue
                return []
            case .spent:
                let error = RecognitionError(
                    .backendUnavailable,
                    "The offline engine failed twice on this session's speech (sttd's log has the reason); the words recognized before are kept."
                )
                return stop(session, error: error, abandon: false, now: now)
            case .never:
                return []
            }
        }
    }

    // MARK: - A thread's next step

    private mutating func nextStep(now: ContinuousClock.Instant) -> [Action] {
        if !isModelLoaded, needsModel {
            if case .loading = model { return [.wait(timeout: nil)] }
            guard let session = queues.keys.first else { return [.wait(timeout: nil)] }
            model = .loading
            return [.load(session)]
        }
        if let taken = takeWork(now: now) { return taken }
        if closing && queues.isEmpty { return unload(reason: "recognizer released") + [.exit] }
        // Idle with a model and no session: give its memory back after unloadAfter.
        if isModelLoaded, queues.isEmpty {
            let idleFor = lastEnded.duration(to: now)
            guard idleFor < unloadAfter else { return unload(reason: "idle for \(unloadAfter)") }
            return [.wait(timeout: unloadAfter - idleFor)]
        }
        return [.wait(timeout: nil)]
    }

    /// A session is open that is not ending with an error: it will need the model.
    private var needsModel: Bool {
        queues.values.contains { queue in
            // While a failed load's end runs on one thread, another must not load again.
            if queue.main == .ending { return false }
            guard case .end(let error) = queue.items.last?.work else { return true }
            return error == nil
        }
    }

    /// The next work to run: the oldest non-interim head of a session no thread runs such work
    /// of, else the oldest interim when nothing else waits. Marks what it took as running.
    private mutating func takeWork(now: ContinuousClock.Instant) -> [Action]? {
        var best: (session: Session, sequence: UInt64, interim: Bool)?
        for (session, queue) in queues where queue.main == .free {
            guard let head = queue.items.first else { continue }
            let interim = if case .interim = head.work { true } else { false }
            if interim && queue.interim != .free { continue }
            if let current = best, (current.interim ? 1 : 0, current.sequence) <= (interim ? 1 : 0, head.sequence) {
                continue
            }
            best = (session, head.sequence, interim)
        }
        guard let best, var queue = queues[best.session] else { return nil }
        // Interims only when the decoders have caught up: no decode but interims waits anywhere,
        // even behind a session that a thread is busy with; and one thread is kept from them.
        if best.interim && queues.values.contains(where: { $0.items.contains { $0.work.isDecode } }) { return nil }
        if best.interim && queues.values.count(where: { $0.interim != .free }) >= max(1, threads - 1) { return nil }
        let item = queue.items.removeFirst()
        queue.weight -= item.work.weight
        let since = item.work.weight > 0 ? now : nil
        var actions: [Action] = []
        if best.interim {
            queue.interim = .running(since: since)
            actions.append(.admitInterim(best.session))
        } else {
            if case .end = item.work { queue.main = .ending } else { queue.main = .running(since: since) }
            if queue.interim != .free { actions.append(.voidInterim(best.session)) }
        }
        queues[best.session] = queue
        let engine: Engine? = if case .loaded(let engine) = model { engine } else { nil }
        return actions + [.run(best.session, item.work, engine, waited: item.queued.duration(to: now))]
    }

    // MARK: - Queues

    private mutating func nextSequence() -> UInt64 {
        sequence += 1
        return sequence
    }

    private mutating func append(_ work: [SherpaWork], to session: Session, now: ContinuousClock.Instant) {
        guard var queue = queues[session] else { return }
        for item in work {
            switch item {
            case .interim, .speculative, .final, .resumed:
                // Newer work makes a queued interim stale; speech that resumed voids a queued
                // speculative decode.
                let isResumed = if case .resumed = item { true } else { false }
                queue.items.removeAll { old in
                    switch old.work {
                    case .interim: return true
                    case .speculative: return isResumed
                    default: return false
                    }
                }
            case .event, .end:
                break
            }
            queue.items.append(Item(work: item, sequence: nextSequence(), queued: now))
        }
        queue.weight = queue.items.reduce(0) { $0 + $1.work.weight }
        queues[session] = queue
    }

    private mutating func stop(
        _ session: Session, error: RecognitionError?, abandon: Bool, now: ContinuousClock.Instant
    ) -> [Action] {
        guard var queue = queues[session] else { return [] }
        queue.items = [Item(work: .end(error), sequence: nextSequence(), queued: now)]
        queue.weight = 0
        queue.finalRetry = .never
        queues[session] = queue
        guard abandon, case .loaded(let engine) = model,
            queue.main.since != nil || queue.interim.since != nil || allThreadsStuck(now: now)
        else { return [.wakeThreads] }
        model = .unloaded
        return [.wakeThreads, .abandon(engine.decoder)]
    }

    /// Every thread has been on its current decode for over a second.
    private func allThreadsStuck(now: ContinuousClock.Instant) -> Bool {
        let starts = queues.values.flatMap { [$0.main.since, $0.interim.since].compactMap { $0 } }
        return starts.count >= max(1, threads) && starts.allSatisfy { $0.duration(to: now) > .seconds(1) }
    }

    private mutating func unload(reason: String) -> [Action] {
        guard isModelLoaded else { return [] }
        model = .unloaded
        return [.unload(reason: reason)]
    }
}

extension SherpaScheduler.Engine: Equatable where Decoder: Equatable {}
extension SherpaScheduler.Action: Equatable where Session: Equatable, Decoder: Equatable {}
