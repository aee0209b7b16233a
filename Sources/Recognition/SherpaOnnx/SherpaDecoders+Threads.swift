import CSttdSystem
import Capture
import Foundation
import Logging
import Synchronization

/// The decoder threads: loading the model, running each session's work, unloading when idle.
extension SherpaDecoders {
    func run() {
        condition.lock()
        while true {
            if engine == nil, needsModel {
                if loading {
                    condition.wait()
                    continue
                }
                loadModel()
                continue
            }
            if let (session, work, waited) = takeWork() {
                let engine = self.engine
                condition.unlock()
                perform(work, for: session, engine: engine, waited: waited)
                condition.lock()
                let key = ObjectIdentifier(session)
                if case .end = work {
                    queues[key] = nil
                    lastEnded = .now
                } else if case .interim = work {
                    queues[key]?.interimRunning = false
                    queues[key]?.interimDecoding = nil
                } else {
                    queues[key]?.busy = false
                    queues[key]?.decoding = nil
                }
                condition.broadcast()
                continue
            }
            if closed && queues.isEmpty {
                unload(reason: "recognizer released")
                condition.unlock()
                return
            }
            // Idle with a model and no session: give its memory back after unloadAfter.
            if engine != nil, queues.isEmpty, !loading {
                let idleFor = lastEnded.duration(to: .now)
                if idleFor >= settings.unloadAfter {
                    unload(reason: "idle for \(settings.unloadAfter)")
                    continue
                }
                let wait = settings.unloadAfter - idleFor
                _ = condition.wait(until: Date(timeIntervalSinceNow: Double(wait / .milliseconds(1)) / 1000 + 0.01))
                continue
            }
            condition.wait()
        }
    }

    /// Loads the model for the sessions waiting (called and returning with the lock held); on
    /// failure every open session ends with the error.
    func loadModel() {
        guard let session = queues.values.first?.session else { return }
        loading = true
        condition.unlock()
        let started = ContinuousClock.now
        let result = Result { () throws(RecognitionError) -> any SherpaDecoding in
            if let executable = settings.workerExecutable {
                return try SherpaWorkerProcess(
                    executable: executable, model: session.model, settings: settings, channels: settings.decoderThreads)
            }
            return try SherpaEngine(library: session.library, model: session.model, settings: settings)
        }
        condition.lock()
        loading = false
        defer { condition.broadcast() }
        switch result {
        case .success(let loaded):
            engine = loaded
            shared.loaded.store(true, ordering: .relaxed)
            shared.loads.wrappingAdd(1, ordering: .relaxed)
            logger.info(
                "offline model loaded",
                metadata: [
                    "engine": "sherpa-onnx \(session.library.version)", "model": "\(session.model.directory)",
                    "seconds": "\(started.duration(to: .now))",
                ])
        case .failure(let error):
            logger.error("offline model unavailable", metadata: ["reason": "\(error.message)"])
            shared.recordFailure(session.model, error)
            for key in queues.keys {
                queues[key]?.items = [Item(work: .end(error), sequence: nextSequence())]
                queues[key]?.weight = 0
            }
        }
    }

    /// Called with the lock held.
    func unload(reason: String) {
        guard engine != nil else { return }
        engine = nil
        shared.loaded.store(false, ordering: .relaxed)
        // onnxruntime frees its arenas into the heap; hand that memory back to the system, and
        // the engine's code pages too (read back from the page cache on the next load).
        sttd_release_free_memory()
        let dropped = settings.libraryPath.map { sttd_drop_clean_library_pages(directoryName($0)) } ?? 0
        logger.info(
            "offline model unloaded", metadata: ["reason": "\(reason)", "code_mb_released": "\(dropped >> 20)"])
    }

    /// Runs one item of a session's work, outside the lock.
    func perform(
        _ work: SherpaWork, for session: SherpaSession, engine: (any SherpaDecoding)?, waited: Duration
    ) {
        /// The text, or nil when the engine failed: it is dropped, and the next work loads it
        /// again (a worker process that died is started anew).
        func decode(_ samples: [Float]) -> String? {
            guard let engine else { return nil }
            do {
                let started = ContinuousClock.now
                let text = try engine.decode(samples)
                let took = started.duration(to: .now)
                pace.withLock { $0 = ($0.seconds + took.seconds, $0.samples + samples.count) }
                logger.debug(
                    "decoded",
                    metadata: [
                        "work": "\(work.kind)", "audio_s": "\(Double(samples.count) / Double(AudioFormat.sampleRate))",
                        "waited_ms": "\(waited / .milliseconds(1))", "took_ms": "\(took / .milliseconds(1))",
                    ])
                return text
            } catch {
                logger.error("offline engine failed", metadata: ["reason": "\(error.message)"])
                condition.lock()
                if self.engine === engine {
                    self.engine = nil
                    shared.loaded.store(false, ordering: .relaxed)
                }
                condition.unlock()
                return nil
            }
        }
        /// A final the engine failed on is decoded once more by the next engine; failing again,
        /// the session ends with the error (its earlier finals stand).
        func retry(_ work: SherpaWork) {
            condition.lock()
            let key = ObjectIdentifier(session)
            let queue = queues[key]
            let again = queue.map { !$0.retriedFinal && !$0.stopped } ?? false
            if again {
                queues[key]?.items.insert(Item(work: work, sequence: nextSequence()), at: 0)
                queues[key]?.weight += work.weight
                queues[key]?.retriedFinal = true
            }
            condition.unlock()
            if !again, queue?.stopped == false {
                stop(
                    session,
                    error: RecognitionError(
                        .backendUnavailable,
                        "The offline engine failed twice on this session's speech (sttd's log has the reason); the words recognized before are kept."
                    ))
            }
        }
        switch work {
        case .event(let event):
            session.interims.withLock { _ in session.deliverIfRunning(event) }
        case .resumed:
            session.speculative = nil
        case .interim(let utterance):
            let started = ContinuousClock.now
            guard let text = decode(utterance.samples) else { return }
            session.interimDecoded(took: started.duration(to: .now))
            session.interims.withLock { interims in
                guard !interims.void, !text.isEmpty, text != interims.lastText else { return }
                interims.lastText = text
                session.deliverIfRunning(.result(result(text, utterance, isFinal: false)))
            }
        case .speculative(let utterance):
            guard let text = decode(utterance.samples) else { return }
            session.speculative = (text, utterance.samples.count)
        case .final(let utterance, let fromFinalize):
            let reused = session.speculative.flatMap { $0.samples == utterance.samples.count ? $0.text : nil }
            session.speculative = nil
            guard let text = utterance.samples.isEmpty ? "" : reused ?? decode(utterance.samples) else {
                retry(work)
                return
            }
            var final = result(text, utterance, isFinal: true)
            final.fromFinalize = fromFinalize
            session.interims.withLock { interims in
                interims.lastText = ""
                guard !text.isEmpty || fromFinalize else { return }
                session.deliverIfRunning(.result(final))
            }
        case .end(let error):
            // After an interim still decoding has delivered, or been voided (taking this did).
            session.interims.withLock { _ in }
            session.complete(error.map { .failure($0) } ?? .success(()))
        }
    }

    func directoryName(_ path: String) -> String {
        URL(fileURLWithPath: path).deletingLastPathComponent().path + "/"
    }

    func result(_ text: String, _ utterance: UtteranceSegmenter.Utterance, isFinal: Bool) -> RecognitionResult {
        let rate = Double(AudioFormat.sampleRate)
        return RecognitionResult(
            text: text, isFinal: isFinal, audioStart: Double(utterance.start) / rate,
            audioEnd: Double(utterance.end) / rate)
    }
}
