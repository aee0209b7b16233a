import CSttdSystem
import Capture
import Foundation
import Logging
import Synchronization

/// The decoder threads: each asks the scheduler for its next step and takes it (loading the
/// model, running a stream's work, unloading when idle), waiting on the condition in between.
extension SherpaDecoderPool {
    func run() {
        condition.lock()
        while true {
            switch scheduler.threadFree(now: .now) {
            case .load(let stream):
                loadModel(for: stream)
            case .run(let stream, let work, let engine, let waited, let interim):
                // Marked before the work runs: an interim starting may go out, one it overtakes must not.
                switch interim {
                case .admit?: stream.interims.withLock { $0.void = false }
                case .void?: stream.interims.withLock { $0.void = true }
                case nil: break
                }
                condition.unlock()
                perform(work, for: stream, engine: engine, waited: waited)
                condition.lock()
                wake(scheduler.done(stream, work, now: .now))
            case .unload(let reason):
                unload(reason: reason)
            case .wait(let timeout?):
                _ = condition.wait(
                    until: Date(timeIntervalSinceNow: Double(timeout / .milliseconds(1)) / 1000 + 0.01))
            case .wait(nil):
                condition.wait()
            case .exit(let unloading):
                if let unloading { unload(reason: unloading) }
                condition.unlock()
                return
            }
        }
    }

    /// Loads the model for the streams waiting (called and returning with the lock held); on
    /// failure every open stream ends with the error.
    func loadModel(for stream: SherpaStream) {
        condition.unlock()
        let started = ContinuousClock.now
        let result = Result { () throws(RecognitionError) -> any SherpaDecoding in
            if let executable = settings.workerExecutable {
                return try SherpaWorkerProcess(
                    executable: executable, model: stream.model, settings: settings, channels: settings.decoderThreads)
            }
            return try SherpaEngine(library: stream.library, model: stream.model, settings: settings)
        }
        condition.lock()
        wake(scheduler.loaded(result, now: .now))
        switch result {
        case .success:
            shared.loads.wrappingAdd(1, ordering: .relaxed)
            logger.info(
                "offline model loaded",
                metadata: [
                    "engine": "sherpa-onnx \(stream.library.version)", "model": "\(stream.model.directory)",
                    "seconds": "\(started.duration(to: .now))",
                ])
        case .failure(let error):
            logger.error("offline model unavailable", metadata: ["reason": "\(error.message)"])
            shared.recordFailure(stream.model, error)
        }
    }

    /// The scheduler has let the engine go (called with the lock held): hand its memory back.
    func unload(reason: String) {
        // onnxruntime frees its arenas into the heap; hand that memory back to the system, and
        // the engine's code pages too (read back from the page cache on the next load).
        sttd_release_free_memory()
        let dropped = settings.libraryPath.map { sttd_drop_clean_library_pages(directoryName($0)) } ?? 0
        logger.info(
            "offline model unloaded", metadata: ["reason": "\(reason)", "code_mb_released": "\(dropped >> 20)"])
    }

    /// Runs one item of a stream's work, outside the lock.
    func perform(
        _ work: SherpaWork, for stream: SherpaStream, engine: Scheduler.Engine?, waited: Duration
    ) {
        /// The text, or nil when the engine failed: it is dropped, and the next work loads it
        /// again (a worker process that died is started anew).
        func decode(_ samples: [Float]) -> String? {
            guard let engine else { return nil }
            do {
                let started = ContinuousClock.now
                let text = try engine.decoder.decode(samples)
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
                condition.withLock { scheduler.engineFailed(engine) }
                return nil
            }
        }
        switch work {
        case .event(let event):
            stream.interims.withLock { _ in stream.deliverIfRunning(event) }
        case .resumed:
            stream.speculative = nil
        case .interim(let utterance):
            let started = ContinuousClock.now
            guard let text = decode(utterance.samples) else { return }
            stream.interimDecoded(took: started.duration(to: .now))
            stream.interims.withLock { interims in
                guard !interims.void, !text.isEmpty, text != interims.lastText else { return }
                interims.lastText = text
                stream.deliverIfRunning(.result(result(text, utterance, isFinal: false)))
            }
        case .speculative(let utterance):
            guard let text = decode(utterance.samples) else { return }
            stream.speculative = (text, utterance.samples.count)
        case .final(let utterance, let fromFinalize):
            let reused = stream.speculative.flatMap { $0.samples == utterance.samples.count ? $0.text : nil }
            stream.speculative = nil
            guard let text = utterance.samples.isEmpty ? "" : reused ?? decode(utterance.samples) else {
                // Decoded once more by the next engine; failing again, the stream ends with an
                // error (its earlier finals stand).
                condition.withLock { wake(scheduler.finalFailed(stream, work, now: .now)) }
                return
            }
            var final = result(text, utterance, isFinal: true)
            final.fromFinalize = fromFinalize
            stream.interims.withLock { interims in
                interims.lastText = ""
                guard !text.isEmpty || fromFinalize else { return }
                stream.deliverIfRunning(.result(final))
            }
        case .end(let error):
            // After an interim still decoding has delivered, or been voided (taking this did).
            stream.interims.withLock { _ in }
            stream.complete(error.map { .failure($0) } ?? .success(()))
        }
    }

    func directoryName(_ path: String) -> String {
        URL(fileURLWithPath: path).deletingLastPathComponent().path + "/"
    }

    func result(_ text: String, _ utterance: UtteranceSegmenter.Utterance, isFinal: Bool) -> RecognitionResult {
        let rate = Double(AudioFormat.sampleRate)
        return RecognitionResult(
            text: text, isFinal: isFinal, audioStart: Double(utterance.start) / rate,
            audioEnd: Double(utterance.end) / rate, endsUtterance: utterance.endsUtterance)
    }
}
