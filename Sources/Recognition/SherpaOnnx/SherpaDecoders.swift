import CSttdSystem
import Capture
import Foundation
import Logging
import Synchronization

/// The decoder threads every session of the engine shares, with the one loaded model: D-Bus
/// dictation and the local server's streams are equals here.
///
/// - Order: a session's work runs in the order it was queued, one item at a time, except that an
///   interim may still be decoding when the session's next work starts: that voids it (a final
///   never waits for an interim, and no interim goes out after the work that followed it). Work
///   of different sessions runs on up to `threads` threads at once, on the one model
///   (onnxruntime runs a loaded model from several threads at once).
/// - Priority: finals, speculative decodes and events go first, the longest-waiting first. An
///   interim runs only when no other work is waiting, and with several threads one is always
///   kept from interims (onnxruntime cannot stop a decode, so finals coming due together would
///   otherwise wait for interims already running); sessions queue interims only while no more
///   of them are speaking than that one thread can take finals for (see `SherpaSession.send`),
///   so interims use only capacity finals cannot need; a newer interim replaces a queued one, and
///   a queued interim is dropped when its utterance's speculative decode or final is queued. So
///   under load interims are skipped, finals never.
/// - Backlog: a session's queued audio may not pass `maxQueuedAudio`; past it that session fails
///   with a clear error (its finals so far stand) and the others go on.
/// - Model: the first thread with work for it loads it (the others wait; audio keeps queueing),
///   and it is unloaded `unloadAfter` after the last session ended.
final class SherpaDecoders: @unchecked Sendable {
    // @unchecked: every mutable field is guarded by `condition`.
    let settings: SherpaSettings
    let shared: SherpaShared
    let logger: Logger
    let capacity: Int
    let condition = NSCondition()
    var queues: [ObjectIdentifier: SessionQueue] = [:]
    var sequence: UInt64 = 0
    var engine: (any SherpaDecoding)?
    var loading = false
    var lastEnded = ContinuousClock.now
    var closed = false
    /// Sessions inside an utterance now: each may need a thread for its final at any moment.
    let speakingSessions = Atomic<Int>(0)
    /// Every decode's time and audio so far: what decoding a second of audio costs here.
    let pace = Mutex((seconds: 0.0, samples: 0))

    /// Whether interims may be queued: at most as many sessions are inside an utterance as the
    /// threads kept from interims could decode finals for at once.
    var interimsHaveRoom: Bool {
        speakingSessions.load(ordering: .relaxed) <= max(1, settings.decoderThreads - 1)
    }

    /// Seconds a decode takes per second of audio on this machine (wall time, as interims'
    /// budget is charged), once one has run.
    var decodeCostPerAudioSecond: Double? {
        pace.withLock { $0.samples > 0 ? $0.seconds * Double(AudioFormat.sampleRate) / Double($0.samples) : nil }
    }

    struct Item {
        var work: SherpaWork
        var sequence: UInt64
        var queued = ContinuousClock.now
    }

    struct SessionQueue {
        let session: SherpaSession
        var items: [Item] = []
        var weight = 0
        /// A thread is running one of its items other than an interim.
        var busy = false
        /// A thread is decoding an interim of it. Other work of the session may run meanwhile
        /// (a final need not wait for an interim): taking it voids that interim.
        var interimRunning = false
        /// A final of it was queued again once after the engine failed.
        var retriedFinal = false
        /// A thread is running its end: nothing of it needs the model any more.
        var ending = false
        /// Stopped (cancelled, or failed): a final the engine fails on is not decoded again.
        var stopped = false
        /// Since when a thread decodes for it (an interim, or other work).
        var decoding: ContinuousClock.Instant?
        var interimDecoding: ContinuousClock.Instant?
    }

    init(settings: SherpaSettings, shared: SherpaShared, logger: Logger) {
        self.settings = settings
        self.shared = shared
        self.logger = logger
        capacity = max(1, AudioFormat.samples(in: settings.maxQueuedAudio))
    }

    /// Starts the threads; they end after ``close()`` once every session has ended.
    func start(threads: Int) {
        for index in 0..<max(1, threads) {
            let thread = Thread { self.run() }
            thread.name = "sherpa-onnx-\(index)"
            thread.start()
        }
    }

    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }

    func begin(
        library: SherpaLibrary, model: SherpaModel, interimResults: Bool, events: any RecognitionEventSink
    ) -> SherpaSession {
        let session = SherpaSession(
            decoders: self, library: library, model: model, interimResults: interimResults,
            segmenter: UtteranceSegmenter(), events: events)
        condition.lock()
        // Registered, it makes a thread load the model now if needed, while its audio queues.
        queues[ObjectIdentifier(session)] = SessionQueue(session: session)
        condition.broadcast()
        condition.unlock()
        return session
    }

    /// Queues a session's work; returns the error that ends it if its backlog would overflow.
    func enqueue(_ work: [SherpaWork], for session: SherpaSession) -> RecognitionError? {
        condition.lock()
        defer { condition.unlock() }
        let key = ObjectIdentifier(session)
        guard let queue = queues[key] else { return nil }
        if queue.weight + work.reduce(0, { $0 + $1.weight }) > capacity {
            let seconds = capacity / AudioFormat.sampleRate
            return RecognitionError(
                .backendUnavailable,
                "The offline engine fell \(seconds) s behind real time (the computer is too busy), so the session stopped; what was recognized before is kept."
            )
        }
        append(work, to: key)
        condition.broadcast()
        return nil
    }

    /// Drops the session's queued work and ends it next (error nil: cancelled).
    ///
    /// `abandon` (a stop that timed out): if the engine is still decoding for this session, or
    /// every thread has been on one decode for over a second so its work cannot start, the
    /// engine is given up (a worker process is killed): the threads are free at once and the
    /// next work starts a new worker. Other sessions' finals in flight there are decoded again.
    func stop(_ session: SherpaSession, error: RecognitionError?, abandon: Bool = false) {
        condition.lock()
        let key = ObjectIdentifier(session)
        var abandoned: (any SherpaDecoding)?
        if var queue = queues[key] {
            queue.items = [Item(work: .end(error), sequence: nextSequence())]
            queue.weight = 0
            queue.stopped = true
            queues[key] = queue
            if abandon, let engine, queue.decoding != nil || queue.interimDecoding != nil || allThreadsStuck {
                abandoned = engine
                self.engine = nil
                shared.loaded.store(false, ordering: .relaxed)
            }
            condition.broadcast()
        }
        condition.unlock()
        if let abandoned {
            logger.warning("the offline engine did not finish in time; restarting it")
            abandoned.abandon()
        }
    }

    /// Every thread has been on its current decode for over a second (called with the lock held).
    var allThreadsStuck: Bool {
        let starts = queues.values.flatMap { [$0.decoding, $0.interimDecoding].compactMap { $0 } }
        return starts.count >= max(1, settings.decoderThreads)
            && starts.allSatisfy { $0.duration(to: .now) > .seconds(1) }
    }

    // MARK: - Queues (under the lock)

    func nextSequence() -> UInt64 {
        sequence += 1
        return sequence
    }

    func append(_ work: [SherpaWork], to key: ObjectIdentifier) {
        guard var queue = queues[key] else { return }
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
            queue.items.append(Item(work: item, sequence: nextSequence()))
        }
        queue.weight = queue.items.reduce(0) { $0 + $1.work.weight }
        queues[key] = queue
    }

    /// The next work to run: the oldest non-interim head of a session no thread runs such work
    /// of, else the oldest interim when nothing else waits. Marks what it took as running.
    func takeWork() -> (SherpaSession, SherpaWork, waited: Duration)? {
        var best: (key: ObjectIdentifier, sequence: UInt64, interim: Bool)?
        for (key, queue) in queues where !queue.busy {
            guard let head = queue.items.first else { continue }
            let interim = if case .interim = head.work { true } else { false }
            if interim && queue.interimRunning { continue }
            if let current = best, (current.interim ? 1 : 0, current.sequence) <= (interim ? 1 : 0, head.sequence) {
                continue
            }
            best = (key, head.sequence, interim)
        }
        guard let best, var queue = queues[best.key] else { return nil }
        // Interims only when the decoders have caught up: no decode but interims waits anywhere,
        // even behind a session that a thread is busy with.
        if best.interim && queues.values.contains(where: { $0.items.contains { $0.work.isDecode } }) { return nil }
        if best.interim && queues.values.count(where: \.interimRunning) >= max(1, settings.decoderThreads - 1) {
            return nil
        }
        let item = queue.items.removeFirst()
        queue.weight -= item.work.weight
        if item.work.weight > 0 {
            if best.interim { queue.interimDecoding = .now } else { queue.decoding = .now }
        }
        if best.interim {
            queue.interimRunning = true
            queue.session.interims.withLock { $0.void = false }
        } else {
            queue.busy = true
            if case .end = item.work { queue.ending = true }
            if queue.interimRunning { queue.session.interims.withLock { $0.void = true } }
        }
        queues[best.key] = queue
        return (queue.session, item.work, item.queued.duration(to: .now))
    }

    /// A session is open that is not ending with an error: it will need the model.
    var needsModel: Bool {
        queues.values.contains { queue in
            // While a failed load's end runs on one thread, another must not load again.
            if queue.ending { return false }
            guard case .end(let error) = queue.items.last?.work else { return true }
            return error == nil
        }
    }

}
