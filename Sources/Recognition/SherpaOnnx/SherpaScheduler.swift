import Capture

/// What the shared decoder threads do next, as a plain value: ``SherpaDecoderPool`` tells it what
/// happened (streams' work, stops, loads, finished work), one method per input, and does what
/// each returns. No threads, locks or clocks here: `now` comes with each input.
///
/// A free thread asks (``threadFree(now:)``) and gets one step: load the model, run one item of
/// work, unload, wait, or exit. The rules are ``SherpaDecoderPool``'s (order, priority, backlog,
/// model); `Stream` tells streams apart, `Decoder` is the loaded engine, never called here.
struct SherpaScheduler<Stream: Hashable, Decoder> {
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

    /// What a thread is doing for a stream.
    enum Lane: Equatable {
        case free
        /// Running an item; `since` when it decodes audio (nil for events).
        case running(since: ContinuousClock.Instant?)
        /// Running the stream's end: nothing of it needs the model any more.
        case ending

        var since: ContinuousClock.Instant? {
            if case .running(let since) = self { since } else { nil }
        }
    }

    /// What becomes of a final the engine fails on.
    enum FinalRetry {
        /// Decoded once more by the next engine.
        case once
        /// It failed again: the stream ends with an error (its earlier finals stand).
        case spent
        /// The stream was stopped: not decoded again.
        case never
    }

    struct Item {
        var work: SherpaWork
        var sequence: UInt64
        var queued: ContinuousClock.Instant
    }

    /// A stream's queued work and what the threads do for it.
    struct Queue {
        var items: [Item] = []
        var weight = 0
        /// Its work other than interims, one item at a time.
        var main = Lane.free
        /// An interim decoding beside its other work; taking other work voids the interim.
        var interim = Lane.free
        var finalRetry = FinalRetry.once
    }

    /// Whether the waiting threads must be woken: something changed they may act on.
    enum Wake: Equatable {
        case threads
        case nobody
    }

    /// What becomes of a stream's work.
    enum Queued: Equatable {
        case accepted(Wake)
        /// The stream's backlog would overflow: its work is refused and it ends with this error.
        case refused(RecognitionError)
    }

    /// What a stop asks of the caller.
    struct Stopped {
        var wake: Wake
        /// Give this engine up (a worker process is killed): the next work loads another.
        var abandon: Decoder?
    }

    /// What a stream's interim becomes when a thread takes its work.
    enum InterimMark: Equatable {
        /// The interim starts: its text may go out.
        case admit
        /// Newer work of the stream was taken: the interim decoding must not go out.
        case void
    }

    /// A free thread's next step.
    enum ThreadStep {
        /// Load the model for this stream (and the others waiting); report ``loaded(_:now:)``.
        case load(Stream)
        /// Mark the stream's interim as `interim` says (before the lock is released), run the work
        /// with this engine (nil: none is loaded), and report ``done(_:_:now:)``.
        case run(Stream, SherpaWork, Engine?, waited: Duration, interim: InterimMark?)
        /// The engine was let go: give its memory back.
        case unload(reason: String)
        /// Wait to be woken, or at most `timeout`.
        case wait(timeout: Duration?)
        /// The recognizer is released and every stream has ended; `unloading`: the engine was let
        /// go first (give its memory back, for this reason).
        case exit(unloading: String?)
    }

    private let threads: Int
    /// Samples a stream may have queued.
    private let capacity: Int
    private let unloadAfter: Duration
    private(set) var model = Model.unloaded
    private(set) var queues: [Stream: Queue] = [:]
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

    // MARK: - Inputs

    /// A stream opened: it will need the model (a thread loads it now if needed).
    mutating func began(_ stream: Stream) -> Wake {
        queues[stream] = Queue()
        return .threads
    }

    /// The recognizer is released: threads exit once every stream has ended.
    mutating func close() -> Wake {
        closing = true
        return .threads
    }

    mutating func queued(_ work: [SherpaWork], for stream: Stream, now: ContinuousClock.Instant) -> Queued {
        guard let queue = queues[stream] else { return .accepted(.nobody) }
        guard queue.weight + work.reduce(0, { $0 + $1.weight }) <= capacity else {
            return .refused(
                RecognitionError(
                    .backendUnavailable,
                    "The offline engine fell \(capacity / AudioFormat.sampleRate) s behind real time (the computer is too busy), so the session stopped; what was recognized before is kept."
                ))
        }
        append(work, to: stream, now: now)
        return .accepted(.threads)
    }

    /// Drops the stream's queued work and ends it next (error nil: cancelled); `abandon` gives the
    /// engine up if it is stuck on this stream or on every thread.
    mutating func stop(
        _ stream: Stream, error: RecognitionError?, abandon: Bool, now: ContinuousClock.Instant
    ) -> Stopped {
        guard var queue = queues[stream] else { return Stopped(wake: .nobody) }
        queue.items = [Item(work: .end(error), sequence: nextSequence(), queued: now)]
        queue.weight = 0
        queue.finalRetry = .never
        queues[stream] = queue
        guard abandon, case .loaded(let engine) = model,
            queue.main.since != nil || queue.interim.since != nil || allThreadsStuck(now: now)
        else { return Stopped(wake: .threads) }
        model = .unloaded
        return Stopped(wake: .threads, abandon: engine.decoder)
    }

    mutating func loaded(_ result: Result<Decoder, RecognitionError>, now: ContinuousClock.Instant) -> Wake {
        switch result {
        case .success(let decoder):
            generation += 1
            model = .loaded(Engine(decoder: decoder, generation: generation))
        case .failure(let error):
            // Every open stream ends with the error.
            model = .unloaded
            for stream in queues.keys {
                let end = Item(work: .end(error), sequence: nextSequence(), queued: now)
                queues[stream]?.items = [end]
                queues[stream]?.weight = 0
            }
        }
        return .threads
    }

    /// A thread finished an item of the stream's work.
    mutating func done(_ stream: Stream, _ work: SherpaWork, now: ContinuousClock.Instant) -> Wake {
        switch work {
        case .end:
            queues[stream] = nil
            lastEnded = now
        case .interim: queues[stream]?.interim = .free
        case .event, .resumed, .speculative, .final: queues[stream]?.main = .free
        }
        return .threads
    }

    /// A decode failed on this engine: it is not used again.
    mutating func engineFailed(_ engine: Engine) {
        if case .loaded(let current) = model, current.generation == engine.generation { model = .unloaded }
    }

    /// The engine failed on this final of the stream: the failing thread decodes it once more
    /// next (no wake-up needed); failing again, the stream ends with an error.
    mutating func finalFailed(_ stream: Stream, _ work: SherpaWork, now: ContinuousClock.Instant) -> Wake {
        guard var queue = queues[stream] else { return .nobody }
        switch queue.finalRetry {
        case .once:
            queue.items.insert(Item(work: work, sequence: nextSequence(), queued: now), at: 0)
            queue.weight += work.weight
            queue.finalRetry = .spent
            queues[stream] = queue
            return .nobody
        case .spent:
            let error = RecognitionError(
                .backendUnavailable,
                "The offline engine failed twice on this session's speech (sttd's log has the reason); the words recognized before are kept."
            )
            // Without `abandon` a stop gives up no engine.
            return stop(stream, error: error, abandon: false, now: now).wake
        case .never:
            return .nobody
        }
    }

    // MARK: - A thread's next step

    /// A thread is free and asks for its next step.
    mutating func threadFree(now: ContinuousClock.Instant) -> ThreadStep {
        if !isModelLoaded, needsModel {
            if case .loading = model { return .wait(timeout: nil) }
            guard let stream = queues.keys.first else { return .wait(timeout: nil) }
            model = .loading
            return .load(stream)
        }
        if let taken = takeWork(now: now) { return taken }
        if closing && queues.isEmpty { return .exit(unloading: unload() ? "recognizer released" : nil) }
        // Idle with a model and no stream: give its memory back after unloadAfter.
        if isModelLoaded, queues.isEmpty {
            let idleFor = lastEnded.duration(to: now)
            guard idleFor < unloadAfter else {
                model = .unloaded
                return .unload(reason: "idle for \(unloadAfter)")
            }
            return .wait(timeout: unloadAfter - idleFor)
        }
        return .wait(timeout: nil)
    }

    /// A stream is open that is not ending with an error: it will need the model.
    private var needsModel: Bool {
        queues.values.contains { queue in
            // While a failed load's end runs on one thread, another must not load again.
            if queue.main == .ending { return false }
            guard case .end(let error) = queue.items.last?.work else { return true }
            return error == nil
        }
    }

    /// The next work to run: the oldest non-interim head of a stream no thread runs such work
    /// of, else the oldest interim when nothing else waits. Marks what it took as running.
    private mutating func takeWork(now: ContinuousClock.Instant) -> ThreadStep? {
        var best: (stream: Stream, sequence: UInt64, interim: Bool)?
        for (stream, queue) in queues where queue.main == .free {
            guard let head = queue.items.first else { continue }
            let interim = if case .interim = head.work { true } else { false }
            if interim && queue.interim != .free { continue }
            if let current = best, (current.interim ? 1 : 0, current.sequence) <= (interim ? 1 : 0, head.sequence) {
                continue
            }
            best = (stream, head.sequence, interim)
        }
        guard let best, var queue = queues[best.stream] else { return nil }
        // Interims only when the decoders have caught up: no decode but interims waits anywhere,
        // even behind a stream that a thread is busy with; and one thread is kept from them.
        if best.interim && queues.values.contains(where: { $0.items.contains { $0.work.isDecode } }) { return nil }
        if best.interim && queues.values.count(where: { $0.interim != .free }) >= max(1, threads - 1) { return nil }
        let item = queue.items.removeFirst()
        queue.weight -= item.work.weight
        let since = item.work.weight > 0 ? now : nil
        var mark: InterimMark?
        if best.interim {
            queue.interim = .running(since: since)
            mark = .admit
        } else {
            if case .end = item.work { queue.main = .ending } else { queue.main = .running(since: since) }
            if queue.interim != .free { mark = .void }
        }
        queues[best.stream] = queue
        let engine: Engine? = if case .loaded(let engine) = model { engine } else { nil }
        return .run(best.stream, item.work, engine, waited: item.queued.duration(to: now), interim: mark)
    }

    // MARK: - Queues

    private mutating func nextSequence() -> UInt64 {
        sequence += 1
        return sequence
    }

    private mutating func append(_ work: [SherpaWork], to stream: Stream, now: ContinuousClock.Instant) {
        guard var queue = queues[stream] else { return }
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
        queues[stream] = queue
    }

    /// Every thread has been on its current decode for over a second.
    private func allThreadsStuck(now: ContinuousClock.Instant) -> Bool {
        let starts = queues.values.flatMap { [$0.main.since, $0.interim.since].compactMap { $0 } }
        return starts.count >= max(1, threads) && starts.allSatisfy { $0.duration(to: now) > .seconds(1) }
    }

    /// Lets the engine go; whether one was loaded.
    private mutating func unload() -> Bool {
        guard isModelLoaded else { return false }
        model = .unloaded
        return true
    }
}

extension SherpaScheduler.Engine: Equatable where Decoder: Equatable {}
extension SherpaScheduler.Stopped: Equatable where Decoder: Equatable {}
extension SherpaScheduler.ThreadStep: Equatable where Decoder: Equatable {}
