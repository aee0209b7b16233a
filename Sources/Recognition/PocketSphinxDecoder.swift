import CPocketSphinx
import Capture
import Foundation
import Logging
import Synchronization

/// A pocketsphinx decoder. Not thread-safe: used on the decoder thread only.
final class SphinxDecoder {
    let raw: OpaquePointer
    // cmd_ln keeps pointers into argv, so the strings live as long as the decoder.
    private let argv: [UnsafeMutablePointer<CChar>?]

    init?(model: PocketSphinxModel) {
        err_set_logfp(nil)
        // argv[0] is the program name, which cmd_ln skips.
        var argv = (["sttd"] + model.arguments).map { strdup($0) }
        guard let config = cmd_ln_parse_r(nil, ps_args(), Int32(argv.count), &argv, 1) else {
            argv.forEach { free($0) }
            return nil
        }
        guard let decoder = ps_init(config) else {
            cmd_ln_free_r(config)
            argv.forEach { free($0) }
            return nil
        }
        cmd_ln_free_r(config)
        raw = decoder
        self.argv = argv
        if let cmn = ps_get_feat(decoder)?.pointee.cmn_struct {
            initialMeans = [Float](repeating: 0, count: Int(cmn.pointee.veclen))
            cmn_live_get(cmn, &initialMeans)
        }
    }

    /// The model's initial cepstral means, restored at every session start.
    private var initialMeans: [Float] = []

    /// Starts a new audio stream as a fresh decoder would: noise and cepstral-mean estimates
    /// adapt within a session but do not carry over, so the same speech gives the same text.
    func startStream() {
        ps_start_stream(raw)
        // As a fresh decoder has it: the model's -cmninit means and no frames observed yet
        // (cmn_live_set would instead weigh the initial means as 500 frames).
        guard let cmn = ps_get_feat(raw)?.pointee.cmn_struct, initialMeans.count == Int(cmn.pointee.veclen),
            let means = cmn.pointee.cmn_mean, let sums = cmn.pointee.sum
        else { return }
        for index in initialMeans.indices {
            means[index] = initialMeans[index]
            sums[index] = 0
        }
        cmn.pointee.nframe = 0
    }

    deinit {
        ps_free(raw)
        argv.forEach { free($0) }
    }

    func startUtterance() { ps_start_utt(raw) }
    func endUtterance() { ps_end_utt(raw) }

    func process(_ samples: ArraySlice<Int16>) {
        samples.withUnsafeBufferPointer { buffer in
            _ = ps_process_raw(raw, buffer.baseAddress, buffer.count, 0, 0)
        }
    }

    var inSpeech: Bool { ps_get_in_speech(raw) != 0 }

    var hypothesis: String {
        ps_get_hyp(raw, nil).map { String(cString: $0) } ?? ""
    }
}

/// The thread that owns the decoder and its work queue.
final class PocketSphinxEngine: Sendable {
    enum Job: Sendable {
        case load(PocketSphinxModel, @Sendable (Result<Void, RecognitionError>) -> Void)
        case begin(PocketSphinxStream)
        case audio(PocketSphinxStream, AudioChunk)
        case finish(PocketSphinxStream)
        /// The pending utterance becomes a final now; the session goes on.
        case finalize(PocketSphinxStream)
        /// Ends the session without a last final: `cancel()` (error nil) or a backlog overflow.
        case stop(PocketSphinxStream, RecognitionError?)

        var session: PocketSphinxStream? {
            switch self {
            case .load: nil
            case .begin(let session), .audio(let session, _), .finish(let session), .finalize(let session),
                .stop(let session, _):
                session
            }
        }
    }

    let queue: WeightBoundedQueue<Job>
    let logger: Logger
    /// The session that owns the decoder, from ``begin(interimResults:servedTo:events:)`` until
    /// it has ended, and whom it serves.
    private let owner = Mutex<(session: ObjectIdentifier, servedTo: String)?>(nil)

    init(maxQueuedSamples: Int, logger: Logger) {
        self.logger = logger
        let queue = WeightBoundedQueue<Job>(capacity: maxQueuedSamples)
        self.queue = queue
        let thread = Thread { PocketSphinxDecodeLoop(queue: queue).run() }
        thread.name = "pocketsphinx"
        thread.start()
    }

    // Sessions keep this object alive, so the thread outlives every session that needs it (one
    // never finished or cancelled keeps it for good; the service ends every session).
    deinit { queue.close() }

    func load(_ model: PocketSphinxModel) async throws(RecognitionError) {
        let result = await withCheckedContinuation { continuation in
            queue.push(.load(model) { continuation.resume(returning: $0) })
        }
        try result.get()
    }

    /// Gives the decoder to a new session, decided here rather than on the decoder thread so
    /// that the caller learns it at once; throws `busy` while another session holds it.
    func begin(interimResults: Bool, servedTo: String, events: any RecognitionEventSink) throws(RecognitionError)
        -> PocketSphinxStream
    {
        let session = PocketSphinxStream(decoder: self, interimResults: interimResults, events: events)
        let holder = owner.withLock { owner -> String? in
            if let owner { return owner.servedTo }
            owner = (ObjectIdentifier(session), servedTo)
            return nil
        }
        if let holder { throw Self.busy(holder) }
        queue.push(.begin(session))
        return session
    }

    /// Frees the decoder for the next session; called once `session` has ended, before its
    /// `run()` returns, so that whoever waited for that can start another at once.
    func release(_ session: PocketSphinxStream) {
        owner.withLock { owner in
            if owner?.session == ObjectIdentifier(session) { owner = nil }
        }
    }

    static func busy(_ holder: String) -> RecognitionError {
        // Authorized: the engine works, it is only taken (what AuthorizationStatus should say).
        RecognitionError(
            .busy,
            "The offline engine (pocketsphinx) decodes one session at a time, and \(holder) is using it now. Try again once that has ended, or choose the sherpa-onnx engine ([local] engine = \"sherpa-onnx\"), which serves several sessions at once.",
            authorization: .authorized)
    }
}

/// Runs decoder jobs on the decoder thread.
private final class PocketSphinxDecodeLoop {
    let queue: WeightBoundedQueue<PocketSphinxEngine.Job>
    var decoder: SphinxDecoder?
    var current: PocketSphinxStream?
    var utteranceStarted = false
    var samplesSinceHypothesis = 0
    /// Samples of the current session decoded so far, and where the current utterance began.
    var samplesProcessed = 0
    var utteranceStart = 0
    var lastInterim = ""
    // An interim hypothesis every 250 ms of speech: ps_get_hyp walks the lattice, so not per chunk.
    let interimInterval = AudioFormat.sampleRate / 4
    /// What `pocketsphinx_continuous -infile` reads at a time (128 ms).
    static let blockSize = 2048
    /// Received samples short of a whole block.
    var pending: [Int16] = []

    init(queue: WeightBoundedQueue<PocketSphinxEngine.Job>) { self.queue = queue }

    func run() {
        while let job = queue.pop() {
            switch job {
            case .load(let model, let done):
                if decoder != nil {
                    done(.success(()))
                    continue
                }
                decoder = SphinxDecoder(model: model)
                done(
                    decoder == nil
                        ? .failure(
                            RecognitionError(
                                .backendUnavailable,
                                "pocketsphinx could not load the model at \(model.acousticModel). \(PocketSphinxModel.installHint)"
                            ))
                        : .success(()))
            case .begin(let session):
                guard let decoder else {
                    session.complete(
                        .failure(RecognitionError(.backendUnavailable, "The offline model is not loaded.")))
                    continue
                }
                guard current == nil else {
                    // begin() admits one session at a time: the one decoding is never ended for it.
                    session.complete(.failure(PocketSphinxEngine.busy("another session")))
                    continue
                }
                current = session
                decoder.startStream()
                decoder.startUtterance()
                utteranceStarted = false
                samplesSinceHypothesis = 0
                samplesProcessed = 0
                lastInterim = ""
            case .audio(let session, let chunk):
                guard session === current, let decoder else { continue }
                receive(chunk, decoder, session)
            case .finish(let session):
                guard session === current else {
                    // Already ended (its begin failed, or it was stopped): complete() keeps that.
                    session.complete(.success(()))
                    continue
                }
                end(session, lastFinal: true)
            case .finalize(let session):
                guard session === current, let decoder else { continue }
                finalize(decoder, session)
            case .stop(let session, let error):
                guard session === current else {
                    // Stopped before its begin came up (the stop removed it) or already ended.
                    session.complete(error.map { .failure($0) } ?? .success(()))
                    continue
                }
                end(session, lastFinal: false, error: error)
            }
        }
    }

    /// Decodes audio in blocks of ``blockSize`` samples, as the reference tool reads its file:
    /// speech is detected once per block, so the same samples give the same utterances and words
    /// however the microphone cut them into chunks.
    private func receive(_ chunk: AudioChunk, _ decoder: SphinxDecoder, _ session: PocketSphinxStream) {
        pending.append(contentsOf: chunk.samples)
        var start = 0
        while pending.count - start >= Self.blockSize {
            process(pending[start..<start + Self.blockSize], decoder, session)
            start += Self.blockSize
        }
        pending.removeFirst(start)
    }

    /// Decodes what is left of the last block, as the reference tool does at the end of its file.
    private func flushPending(_ decoder: SphinxDecoder, _ session: PocketSphinxStream) {
        guard !pending.isEmpty else { return }
        process(pending[...], decoder, session)
        pending.removeAll(keepingCapacity: true)
    }

    // Segmentation as `pocketsphinx_continuous -infile` does it, so results match the reference tool.
    private func process(_ samples: ArraySlice<Int16>, _ decoder: SphinxDecoder, _ session: PocketSphinxStream) {
        decoder.process(samples)
        samplesProcessed += samples.count
        let inSpeech = decoder.inSpeech
        if inSpeech && !utteranceStarted {
            utteranceStarted = true
            utteranceStart = samplesProcessed - samples.count
            samplesSinceHypothesis = 0
            session.events.deliver(.speechActivity(true))
        }
        if !inSpeech && utteranceStarted {
            decoder.endUtterance()
            let text = decoder.hypothesis
            session.events.deliver(.result(finalResult(text)))
            session.events.deliver(.speechActivity(false))
            decoder.startUtterance()
            utteranceStarted = false
            lastInterim = ""
            return
        }
        guard utteranceStarted, session.interimResults else { return }
        samplesSinceHypothesis += samples.count
        if samplesSinceHypothesis >= interimInterval {
            samplesSinceHypothesis = 0
            let text = decoder.hypothesis
            if !text.isEmpty && text != lastInterim {
                lastInterim = text
                session.events.deliver(.result(RecognitionResult(text: text, isFinal: false)))
            }
        }
    }

    /// Ends the utterance in progress (if any) with a final marked `fromFinalize`, empty when
    /// nothing was pending, and starts listening again.
    private func finalize(_ decoder: SphinxDecoder, _ session: PocketSphinxStream) {
        flushPending(decoder, session)
        decoder.endUtterance()
        var result = finalResult(utteranceStarted ? decoder.hypothesis : "", fromFinalize: true)
        if !utteranceStarted { result.audioStart = result.audioEnd }
        session.events.deliver(.result(result))
        if utteranceStarted { session.events.deliver(.speechActivity(false)) }
        decoder.startUtterance()
        utteranceStarted = false
        lastInterim = ""
    }

    private func finalResult(_ text: String, fromFinalize: Bool = false) -> RecognitionResult {
        let rate = Double(AudioFormat.sampleRate)
        return RecognitionResult(
            text: text, isFinal: true, audioStart: Double(utteranceStart) / rate,
            audioEnd: Double(samplesProcessed) / rate, fromFinalize: fromFinalize)
    }

    /// Ends the current session: the last final only when finishing (a stop drops the pending
    /// interim), then `run()` returns or throws.
    private func end(_ session: PocketSphinxStream, lastFinal: Bool, error: RecognitionError? = nil) {
        if lastFinal, let decoder { flushPending(decoder, session) }
        pending.removeAll(keepingCapacity: true)
        decoder?.endUtterance()
        if lastFinal, utteranceStarted, let text = decoder?.hypothesis, !text.isEmpty {
            session.events.deliver(.result(finalResult(text)))
        }
        if utteranceStarted { session.events.deliver(.speechActivity(false)) }
        utteranceStarted = false
        current = nil
        session.complete(error.map { .failure($0) } ?? .success(()))
    }
}
