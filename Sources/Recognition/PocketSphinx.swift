import CPocketSphinx
import Capture
import Foundation
import Logging
import Synchronization

/// Where the files of a pocketsphinx model are.
public struct PocketSphinxModel: Sendable, Equatable {
    public var acousticModel: String
    public var languageModel: String
    public var dictionary: String

    static let installHint =
        "Install Debian's pocketsphinx-en-us package (`sudo apt install pocketsphinx-en-us`) or set [local] model_dir to a pocketsphinx model."

    /// Finds the model in `directory`: an acoustic model folder (holding `mdef`), a `*.lm.bin`
    /// or `*.lm` language model and a `*.dict` dictionary, laid out as Debian's `pocketsphinx-en-us`.
    public init(directory: String) throws(RecognitionError) {
        let files = FileManager.default
        guard let entries = try? files.contentsOfDirectory(atPath: directory).sorted() else {
            throw RecognitionError(
                .backendUnavailable, "The offline model folder \(directory) does not exist. \(Self.installHint)")
        }
        let acoustic =
            files.fileExists(atPath: "\(directory)/mdef")
            ? directory : entries.map { "\(directory)/\($0)" }.first { files.fileExists(atPath: "\($0)/mdef") }
        // Debian's folder also holds en-us-phone.lm.bin, a phonetic model for phoneme decoding.
        let words = entries.filter { !$0.contains("phone") }
        let languageModel = words.first { $0.hasSuffix(".lm.bin") } ?? words.first { $0.hasSuffix(".lm") }
        let dictionary = words.first { $0.hasSuffix(".dict") }
        guard let acoustic, let languageModel, let dictionary else {
            throw RecognitionError(
                .backendUnavailable,
                "The offline model in \(directory) is incomplete (it needs an acoustic model folder, a .lm.bin and a .dict). \(Self.installHint)"
            )
        }
        self.acousticModel = acoustic
        self.languageModel = "\(directory)/\(languageModel)"
        self.dictionary = "\(directory)/\(dictionary)"
    }

    var arguments: [String] {
        ["-hmm", acousticModel, "-lm", languageModel, "-dict", dictionary, "-logfn", "/dev/null"]
    }
}

/// The offline engine: pocketsphinx with a model loaded once and reused by every session.
///
/// The decoder blocks, so it lives on a thread of its own and takes work from a queue; one
/// session at a time owns it. Another session asked for meanwhile (a D-Bus dictation, a
/// `/v1/listen` stream) is refused with `busy`: a session is never ended by one that starts
/// after it.
///
/// Backlog policy: the queue holds at most `maxQueuedAudio` of audio (30 s by default), counted
/// in samples across the recognizer. A ``RecognitionSession/send(_:)`` that would go past it
/// fails the session instead of blocking the capture thread or dropping audio unnoticed: the
/// session's queued audio is discarded, later audio is ignored, the finals already delivered
/// stand, and its `run()` throws a `backendUnavailable` error that names the bound. Control work
/// (loading, starting, finishing, cancelling) is never refused.
public final class PocketSphinxRecognizer: Recognizer {
    private let decoder: DecoderThread
    private let directory: String
    private let validator: (@Sendable (String) async -> Bool)?
    /// The model's load, started by the first caller; every caller shares its outcome.
    private let loading = Mutex<Eventual<Result<Void, RecognitionError>>?>(nil)
    private let logger: Logger

    /// - Parameters:
    ///   - modelDirectory: the model folder, e.g. `/usr/share/pocketsphinx/model/en-us`.
    ///   - maxQueuedAudio: how far the decoder may fall behind before a session fails.
    ///   - validator: loads the model in a child process first and says whether that worked;
    ///     pocketsphinx exits the process on some corrupt models, so the service passes one.
    public init(
        modelDirectory: String, maxQueuedAudio: Duration = .seconds(30), logger: Logger,
        validator: (@Sendable (String) async -> Bool)? = nil
    ) {
        self.directory = modelDirectory
        self.validator = validator
        self.logger = logger
        self.decoder = DecoderThread(maxQueuedSamples: max(1, AudioFormat.samples(in: maxQueuedAudio)), logger: logger)
    }

    /// Loads the model (once); later calls wait for the first load and share its outcome.
    public func load() async throws(RecognitionError) {
        let (load, isFirst) = loading.withLock { loading in
            if let load = loading { return (load, false) }
            let load = Eventual<Result<Void, RecognitionError>>()
            loading = load
            return (load, true)
        }
        // Nothing in the load heeds cancellation, so a cancelled first caller still leaves an
        // outcome every waiter can share.
        if isFirst { load.resolve(await performLoad()) }
        try await load.value.get()
    }

    private func performLoad() async -> Result<Void, RecognitionError> {
        let started = ContinuousClock.now
        do throws(RecognitionError) {
            let model = try PocketSphinxModel(directory: directory)
            if let validator, await !validator(directory) {
                throw RecognitionError(
                    .backendUnavailable,
                    "The offline model in \(directory) is broken (pocketsphinx cannot load it). \(PocketSphinxModel.installHint)"
                )
            }
            try await decoder.load(model)
            logger.info(
                "offline model loaded", metadata: ["model": "\(directory)", "seconds": "\(started.duration(to: .now))"])
            return .success(())
        } catch {
            logger.error("offline model unavailable", metadata: ["reason": "\(error.message)"])
            return .failure(error)
        }
    }

    public func authorize() async -> (RecognizerAuthorization, RecognitionError?) {
        do {
            try await load()
            return (.authorized, nil)
        } catch {
            return (.restricted, error)
        }
    }

    public func startSession(
        _ options: SessionOptions, events: any RecognitionEventSink
    ) async throws(RecognitionError) -> any RecognitionSession {
        try await load()
        return try decoder.begin(interimResults: options.interimResults, servedTo: options.servedTo, events: events)
    }

    /// Loads a model and reports whether it worked; for `sttd --check-model` in a child process.
    public static func checkModel(directory: String) -> Bool {
        guard let model = try? PocketSphinxModel(directory: directory) else { return false }
        return Decoder(model: model) != nil
    }
}

/// A pocketsphinx decoder. Not thread-safe: used on the decoder thread only.
final class Decoder {
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
final class DecoderThread: Sendable {
    enum Job: Sendable {
        case load(PocketSphinxModel, @Sendable (Result<Void, RecognitionError>) -> Void)
        case begin(LocalSession)
        case audio(LocalSession, AudioChunk)
        case finish(LocalSession)
        /// The pending utterance becomes a final now; the session goes on.
        case finalize(LocalSession)
        /// Ends the session without a last final: `cancel()` (error nil) or a backlog overflow.
        case stop(LocalSession, RecognitionError?)

        var session: LocalSession? {
            switch self {
            case .load: nil
            case .begin(let session), .audio(let session, _), .finish(let session), .finalize(let session),
                .stop(let session, _):
                session
            }
        }
    }

    let queue: JobQueue<Job>
    let logger: Logger
    /// The session that owns the decoder, from ``begin(interimResults:servedTo:events:)`` until
    /// it has ended, and whom it serves.
    private let owner = Mutex<(session: ObjectIdentifier, servedTo: String)?>(nil)

    init(maxQueuedSamples: Int, logger: Logger) {
        self.logger = logger
        let queue = JobQueue<Job>(capacity: maxQueuedSamples)
        self.queue = queue
        let thread = Thread { DecoderWorker(queue: queue).run() }
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
        -> LocalSession
    {
        let session = LocalSession(decoder: self, interimResults: interimResults, events: events)
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
    func release(_ session: LocalSession) {
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

/// A session of the offline engine; its work runs on the decoder thread, which also delivers
/// its events and ends its `run()`.
final class LocalSession: RecognitionSession {
    let events: any RecognitionEventSink
    let interimResults: Bool
    private let decoder: DecoderThread
    private let state = Mutex(State())
    private let outcome = Eventual<Result<Void, RecognitionError>>()

    private struct State {
        var phase = Phase.active
    }

    private enum Phase {
        case active
        /// finish() was called: the decoder works through the queued audio, then the last final.
        case finishing
        /// cancel() or a backlog overflow: the queued audio is gone, the decoder ends the session.
        case stopping
        case ended
    }

    init(decoder: DecoderThread, interimResults: Bool, events: any RecognitionEventSink) {
        self.decoder = decoder
        self.interimResults = interimResults
        self.events = events
    }

    func run() async throws(RecognitionError) {
        try await outcome.wait { [self] in cancel() }
    }

    func send(_ chunk: AudioChunk) {
        guard !chunk.samples.isEmpty else { return }
        let queue = decoder.queue
        let overflow = state.withLock { state -> RecognitionError? in
            guard case .active = state.phase else { return nil }
            if queue.push(.audio(self, chunk), weight: chunk.samples.count) { return nil }
            let error = RecognitionError(
                .backendUnavailable,
                "The offline engine fell \(Self.seconds(queue.capacity)) s behind real time (the computer is too busy), so the session stopped; what was recognized before is kept."
            )
            state.phase = .stopping
            // Its backlog goes; the stop reports the failure after the session's last event.
            queue.removeAll { $0.session === self }
            queue.push(.stop(self, error))
            return error
        }
        if overflow != nil {
            decoder.logger.warning(
                "offline engine fell behind, session stopped",
                metadata: ["queued_seconds": "\(Self.seconds(queue.capacity))"])
        }
    }

    func finish() {
        state.withLock { state in
            guard case .active = state.phase else { return }
            state.phase = .finishing
            decoder.queue.push(.finish(self))
        }
    }

    func finalize() {
        state.withLock { state in
            guard case .active = state.phase else { return }
            decoder.queue.push(.finalize(self))
        }
    }

    func cancel() {
        state.withLock { state in
            switch state.phase {
            case .active, .finishing:
                state.phase = .stopping
                // The stop comes up next instead of after the queued audio.
                decoder.queue.removeAll { $0.session === self }
                decoder.queue.push(.stop(self, nil))
            case .stopping, .ended:
                break
            }
        }
    }

    /// Called on the decoder thread after the session's last event; the first outcome counts.
    func complete(_ outcome: Result<Void, RecognitionError>) {
        decoder.release(self)
        state.withLock { $0.phase = .ended }
        self.outcome.resolve(outcome)
    }

    private static func seconds(_ samples: Int) -> String {
        let seconds = Double(samples) / Double(AudioFormat.sampleRate)
        return seconds == seconds.rounded() ? "\(Int(seconds))" : "\(seconds)"
    }
}

/// Runs decoder jobs on the decoder thread.
private final class DecoderWorker {
    let queue: JobQueue<DecoderThread.Job>
    var decoder: Decoder?
    var current: LocalSession?
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

    init(queue: JobQueue<DecoderThread.Job>) { self.queue = queue }

    func run() {
        while let job = queue.pop() {
            switch job {
            case .load(let model, let done):
                if decoder != nil {
                    done(.success(()))
                    continue
                }
                decoder = Decoder(model: model)
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
                    session.complete(.failure(DecoderThread.busy("another session")))
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
    private func receive(_ chunk: AudioChunk, _ decoder: Decoder, _ session: LocalSession) {
        pending.append(contentsOf: chunk.samples)
        var start = 0
        while pending.count - start >= Self.blockSize {
            process(pending[start..<start + Self.blockSize], decoder, session)
            start += Self.blockSize
        }
        pending.removeFirst(start)
    }

    /// Decodes what is left of the last block, as the reference tool does at the end of its file.
    private func flushPending(_ decoder: Decoder, _ session: LocalSession) {
        guard !pending.isEmpty else { return }
        process(pending[...], decoder, session)
        pending.removeAll(keepingCapacity: true)
    }

    // Segmentation as `pocketsphinx_continuous -infile` does it, so results match the reference tool.
    private func process(_ samples: ArraySlice<Int16>, _ decoder: Decoder, _ session: LocalSession) {
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
    private func finalize(_ decoder: Decoder, _ session: LocalSession) {
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
    private func end(_ session: LocalSession, lastFinal: Bool, error: RecognitionError? = nil) {
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
