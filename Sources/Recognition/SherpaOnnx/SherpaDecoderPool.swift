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
///   of them are speaking than that one thread can take finals for (see `SherpaStream.send`),
///   so interims use only capacity finals cannot need; a newer interim replaces a queued one, and
///   a queued interim is dropped when its utterance's speculative decode or final is queued. So
///   under load interims are skipped, finals never.
/// - Backlog: a session's queued audio may not pass `maxQueuedAudio`; past it that session fails
///   with a clear error (its finals so far stand) and the others go on.
/// - Model: the first thread with work for it loads it (the others wait; audio keeps queueing),
///   and it is unloaded `unloadAfter` after the last session ended.
///
/// These decisions are ``SherpaScheduler``'s; the pool tells it each input under the lock and
/// does what it returns.
final class SherpaDecoderPool: @unchecked Sendable {
    // @unchecked: `scheduler` is only touched with `condition` locked.
    typealias Scheduler = SherpaScheduler<SherpaStream, any SherpaDecoding>

    let settings: SherpaSettings
    let shared: SherpaShared
    let logger: Logger
    /// Threads wait on it for work; it guards `scheduler`.
    let condition = NSCondition()
    /// Whether its model is loaded is published after every input, for any thread to read.
    var scheduler: Scheduler {
        didSet { shared.loaded.store(scheduler.isModelLoaded, ordering: .relaxed) }
    }
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

    init(settings: SherpaSettings, shared: SherpaShared, logger: Logger) {
        self.settings = settings
        self.shared = shared
        self.logger = logger
        scheduler = Scheduler(
            threads: settings.decoderThreads, capacity: max(1, AudioFormat.samples(in: settings.maxQueuedAudio)),
            unloadAfter: settings.unloadAfter, now: .now)
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
        condition.withLock { wake(scheduler.close()) }
    }

    /// A new session; with `wakeSegments`, only the start of each utterance is decoded.
    func begin(
        library: SherpaLibrary, model: SherpaModel, interimResults: Bool, wakeSegments: Duration? = nil,
        events: any RecognitionEventSink
    ) -> SherpaStream {
        let stream = SherpaStream(
            decoders: self, library: library, model: model, interimResults: interimResults,
            segmenter: wakeSegments.map { UtteranceSegmenter(wakeSegments: $0) } ?? UtteranceSegmenter(),
            events: events)
        // Registered, it makes a thread load the model now if needed, while its audio queues.
        condition.withLock { wake(scheduler.began(stream)) }
        return stream
    }

    /// Queues a stream's work; returns the error that ends it if its backlog would overflow.
    func enqueue(_ work: [SherpaWork], for stream: SherpaStream) -> RecognitionError? {
        condition.withLock {
            switch scheduler.queued(work, for: stream, now: .now) {
            case .accepted(let threads):
                wake(threads)
                return nil
            case .refused(let error):
                return error
            }
        }
    }

    /// Drops the stream's queued work and ends it next (error nil: cancelled).
    ///
    /// `abandon` (a stop that timed out): if the engine is still decoding for this stream, or
    /// every thread has been on one decode for over a second so its work cannot start, the
    /// engine is given up (a worker process is killed): the threads are free at once and the
    /// next work starts a new worker. Other streams' finals in flight there are decoded again.
    func stop(_ stream: SherpaStream, error: RecognitionError?, abandon: Bool = false) {
        let stopped = condition.withLock {
            let stopped = scheduler.stop(stream, error: error, abandon: abandon, now: .now)
            wake(stopped.wake)
            return stopped
        }
        if let engine = stopped.abandon {
            logger.warning("the offline engine did not finish in time; restarting it")
            engine.abandon()
        }
    }

    /// Wakes the waiting threads if the scheduler says so; called with the lock held.
    func wake(_ wake: Scheduler.Wake) {
        switch wake {
        case .threads: condition.broadcast()
        case .nobody: break
        }
    }
}

/// Sessions are told apart by identity, as the scheduler's keys.
extension SherpaStream: Hashable {
    static func == (lhs: SherpaStream, rhs: SherpaStream) -> Bool { lhs === rhs }
    func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self)) }
}
