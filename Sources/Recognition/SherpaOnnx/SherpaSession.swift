import CSttdSystem
import Capture
import Foundation
import Logging
import Synchronization

/// A session of the sherpa-onnx engine; its work runs on the engine's thread, which also
/// delivers its events and ends its `run()`.
final class SherpaSession: RecognitionSession {
    let events: any RecognitionEventSink
    let interimResults: Bool
    let library: SherpaLibrary
    let model: SherpaModel
    private let thread: SherpaThread
    private let state = Mutex(State())

    private typealias Runner = CheckedContinuation<Result<Void, RecognitionError>, Never>

    private struct State {
        var phase = Phase.active
        var runners: [Runner] = []
    }

    private enum Phase {
        case active
        /// finish() was called: the thread works through the queued audio, then the last final.
        case finishing
        /// cancel() or a backlog overflow: the queued audio is gone, the thread ends the session.
        case stopping
        case ended(Result<Void, RecognitionError>)
    }

    init(
        thread: SherpaThread, library: SherpaLibrary, model: SherpaModel, interimResults: Bool,
        events: any RecognitionEventSink
    ) {
        self.thread = thread
        self.library = library
        self.model = model
        self.interimResults = interimResults
        self.events = events
    }

    func run() async throws(RecognitionError) {
        let outcome = await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let ended = state.withLock { state -> Result<Void, RecognitionError>? in
                    if case .ended(let outcome) = state.phase { return outcome }
                    state.runners.append(continuation)
                    return nil
                }
                if let ended { continuation.resume(returning: ended) }
            }
        } onCancel: {
            cancel()
        }
        try outcome.get()
    }

    func send(_ chunk: AudioChunk) {
        guard !chunk.samples.isEmpty else { return }
        let queue = thread.queue
        let overflow = state.withLock { state -> Bool in
            guard case .active = state.phase else { return false }
            if queue.push(.audio(self, chunk), weight: chunk.samples.count) { return false }
            let seconds = queue.capacity / AudioFormat.sampleRate
            state.phase = .stopping
            queue.removeAll { $0.session === self }
            queue.push(
                .stop(
                    self,
                    RecognitionError(
                        .backendUnavailable,
                        "The offline engine fell \(seconds) s behind real time (the computer is too busy), so the session stopped; what was recognized before is kept."
                    )))
            return true
        }
        if overflow { thread.logger.warning("sherpa-onnx engine fell behind, session stopped") }
    }

    func finish() {
        state.withLock { state in
            guard case .active = state.phase else { return }
            state.phase = .finishing
            thread.queue.push(.finish(self))
        }
    }

    func finalize() {
        state.withLock { state in
            guard case .active = state.phase else { return }
            thread.queue.push(.finalize(self))
        }
    }

    func cancel() {
        state.withLock { state in
            switch state.phase {
            case .active, .finishing:
                state.phase = .stopping
                thread.queue.removeAll { $0.session === self }
                thread.queue.push(.stop(self, nil))
            case .stopping, .ended:
                break
            }
        }
    }

    /// Called on the engine's thread after the session's last event; the first outcome counts.
    func complete(_ outcome: Result<Void, RecognitionError>) {
        let runners = state.withLock { state -> [Runner] in
            if case .ended = state.phase { return [] }
            state.phase = .ended(outcome)
            let runners = state.runners
            state.runners = []
            return runners
        }
        for runner in runners { runner.resume(returning: outcome) }
    }
}

/// Runs session work on the engine's thread: segmentation, decoding, loading and unloading.
final class SherpaWorker: @unchecked Sendable {
    // @unchecked: handed to its thread once at start and used only there afterwards.
    let queue: JobQueue<SherpaThread.Job>
    let settings: SherpaSettings
    let shared: SherpaShared
    let logger: Logger
    var engine: SherpaEngine?
    var current: SherpaSession?
    var segmenter = UtteranceSegmenter()
    /// A decode of the utterance made during the hangover, and the length it covered.
    var speculative: (text: String, samples: Int)?
    var lastInterim = ""
    var lastInterimAt = 0
    var interimSpacing = AudioFormat.sampleRate
    // Interims: at least 1 s of new audio apart, and none while 0.5 s of audio waits.
    let minInterimSpacing = AudioFormat.sampleRate
    let behindLimit = AudioFormat.sampleRate / 2

    init(queue: JobQueue<SherpaThread.Job>, settings: SherpaSettings, shared: SherpaShared, logger: Logger) {
        self.queue = queue
        self.settings = settings
        self.shared = shared
        self.logger = logger
    }

    func run() {
        while true {
            // Idle with a model: wait at most unloadAfter for work, then give the memory back.
            let idle = engine != nil && current == nil
            switch queue.pop(timeout: idle ? settings.unloadAfter : nil) {
            case .closed:
                unload(reason: "recognizer released")
                return
            case .timedOut:
                unload(reason: "idle for \(settings.unloadAfter)")
            case .job(let job):
                handle(job)
            }
        }
    }

    private func handle(_ job: SherpaThread.Job) {
        switch job {
        case .begin(let session):
            if let current { end(current, lastFinal: false) }
            guard load(session) != nil else { return }
            current = session
            segmenter = UtteranceSegmenter()
            speculative = nil
            lastInterim = ""
            lastInterimAt = 0
            interimSpacing = minInterimSpacing
        case .audio(let session, let chunk):
            guard session === current, let engine else { return }
            process(chunk, engine, session)
        case .finish(let session):
            guard session === current else { return session.complete(.success(())) }
            end(session, lastFinal: true)
        case .finalize(let session):
            guard session === current, let engine else { return }
            finalize(engine, session)
        case .stop(let session, let error):
            guard session === current else { return session.complete(error.map { .failure($0) } ?? .success(())) }
            end(session, lastFinal: false, error: error)
        }
    }

    /// The loaded model, loading it for `session` if needed; on failure the session ends with it.
    private func load(_ session: SherpaSession) -> SherpaEngine? {
        if let engine, engine.model == session.model { return engine }
        unload(reason: "another model")
        let started = ContinuousClock.now
        do {
            let engine = try SherpaEngine(library: session.library, model: session.model, settings: settings)
            self.engine = engine
            shared.loaded.store(true, ordering: .relaxed)
            shared.loads.wrappingAdd(1, ordering: .relaxed)
            logger.info(
                "offline model loaded",
                metadata: [
                    "engine": "sherpa-onnx \(session.library.version)", "model": "\(session.model.directory)",
                    "seconds": "\(started.duration(to: .now))",
                ])
            return engine
        } catch {
            logger.error("offline model unavailable", metadata: ["reason": "\(error.message)"])
            shared.recordFailure(session.model, error)
            session.complete(.failure(error))
            return nil
        }
    }

    private func unload(reason: String) {
        guard engine != nil else { return }
        engine = nil
        shared.loaded.store(false, ordering: .relaxed)
        // onnxruntime frees its arenas into the heap; hand that memory back to the system.
        sttd_release_free_memory()
        logger.info("offline model unloaded", metadata: ["reason": "\(reason)"])
    }

    private func process(_ chunk: AudioChunk, _ engine: SherpaEngine, _ session: SherpaSession) {
        for event in segmenter.append(chunk.samples) {
            switch event {
            case .started:
                speculative = nil
                lastInterim = ""
                lastInterimAt = 0
                interimSpacing = minInterimSpacing
                session.events.deliver(.speechActivity(true))
            case .paused:
                // Decode during the hangover: if speech does not resume, this is the final.
                guard queue.weight <= behindLimit * 2 else { break }
                let utterance = segmenter.current
                speculative = (engine.decode(utterance.samples), utterance.samples.count)
            case .resumed:
                speculative = nil
            case .split(let head):
                deliverFinal(engine.decode(head.samples), head, session)
                speculative = nil
                lastInterim = ""
                lastInterimAt = 0
            case .ended(let utterance):
                if let utterance {
                    let text =
                        speculative.flatMap { $0.samples == utterance.samples.count ? $0.text : nil }
                        ?? engine.decode(utterance.samples)
                    deliverFinal(text, utterance, session)
                }
                speculative = nil
                session.events.deliver(.speechActivity(false))
            }
        }
        interimIfDue(engine, session)
    }

    private func interimIfDue(_ engine: SherpaEngine, _ session: SherpaSession) {
        guard session.interimResults, segmenter.inSpeech, !segmenter.isPaused,
            segmenter.length - lastInterimAt >= interimSpacing,
            queue.weight <= behindLimit
        else { return }
        let utterance = segmenter.current
        let started = ContinuousClock.now
        let text = engine.decode(utterance.samples)
        let took = started.duration(to: .now)
        lastInterimAt = utterance.samples.count
        // Four times the decode's own time in new audio before the next: interims take at most a
        // quarter of real time (measured: 0.28 CPU-s per audio s for finals, about 0.52 in all).
        interimSpacing = max(minInterimSpacing, 4 * AudioFormat.samples(in: took))
        guard !text.isEmpty, text != lastInterim else { return }
        lastInterim = text
        session.events.deliver(
            .result(
                RecognitionResult(
                    text: text, isFinal: false, audioStart: seconds(utterance.start), audioEnd: seconds(utterance.end)))
        )
    }

    private func deliverFinal(_ text: String, _ utterance: UtteranceSegmenter.Utterance, _ session: SherpaSession) {
        lastInterim = ""
        guard !text.isEmpty else { return }
        session.events.deliver(
            .result(
                RecognitionResult(
                    text: text, isFinal: true, audioStart: seconds(utterance.start), audioEnd: seconds(utterance.end))))
    }

    /// The pending utterance (if any) as a final marked `fromFinalize`, empty when nothing was
    /// pending; segmentation starts afresh.
    private func finalize(_ engine: SherpaEngine, _ session: SherpaSession) {
        let wasInSpeech = segmenter.inSpeech
        let position = segmenter.position
        let pending = segmenter.flush()
        let text =
            pending.map { pending in
                speculative.flatMap { $0.samples == pending.samples.count ? $0.text : nil }
                    ?? engine.decode(pending.samples)
            } ?? ""
        speculative = nil
        lastInterim = ""
        session.events.deliver(
            .result(
                RecognitionResult(
                    text: text, isFinal: true, audioStart: seconds(pending?.start ?? position),
                    audioEnd: seconds(pending?.end ?? position), fromFinalize: true)))
        if wasInSpeech { session.events.deliver(.speechActivity(false)) }
    }

    private func seconds(_ samples: Int) -> Double { Double(samples) / Double(AudioFormat.sampleRate) }

    /// Ends the current session: the pending utterance's final only when finishing (a stop drops
    /// the pending interim), then `run()` returns or throws.
    private func end(_ session: SherpaSession, lastFinal: Bool, error: RecognitionError? = nil) {
        let wasInSpeech = segmenter.inSpeech
        let pending = segmenter.flush()
        if lastFinal, let pending, let engine {
            let text =
                speculative.flatMap { $0.samples == pending.samples.count ? $0.text : nil }
                ?? engine.decode(pending.samples)
            deliverFinal(text, pending, session)
        }
        if wasInSpeech { session.events.deliver(.speechActivity(false)) }
        speculative = nil
        current = nil
        session.complete(error.map { .failure($0) } ?? .success(()))
    }
}
