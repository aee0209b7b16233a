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
/// session at a time owns it (the service never runs two).
public final class PocketSphinxRecognizer: Recognizer {
    private let decoder: DecoderThread
    private let directory: String
    private let validator: (@Sendable (String) async -> Bool)?
    private let state = Mutex<LoadState>(.notLoaded)
    private let logger: Logger

    private enum LoadState {
        case notLoaded
        case loading([CheckedContinuation<Result<Void, RecognitionError>, Never>])
        case loaded
        case failed(RecognitionError)
    }

    /// - Parameters:
    ///   - modelDirectory: the model folder, e.g. `/usr/share/pocketsphinx/model/en-us`.
    ///   - validator: loads the model in a child process first and says whether that worked;
    ///     pocketsphinx exits the process on some corrupt models, so the service passes one.
    public init(
        modelDirectory: String, logger: Logger, validator: (@Sendable (String) async -> Bool)? = nil
    ) {
        self.directory = modelDirectory
        self.validator = validator
        self.logger = logger
        self.decoder = DecoderThread(logger: logger)
    }

    /// Loads the model (once); later calls wait for the first load and share its outcome.
    public func load() async throws(RecognitionError) {
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<Void, RecognitionError>, Never>) in
            let startLoad = state.withLock { state -> Bool in
                switch state {
                case .notLoaded:
                    state = .loading([continuation])
                    return true
                case .loading(let waiters):
                    state = .loading(waiters + [continuation])
                case .loaded:
                    continuation.resume(returning: .success(()))
                case .failed(let error):
                    continuation.resume(returning: .failure(error))
                }
                return false
            }
            if startLoad { Task { await self.performLoad() } }
        }
        try result.get()
    }

    private func performLoad() async {
        let started = ContinuousClock.now
        var outcome: Result<Void, RecognitionError>
        do throws(RecognitionError) {
            let model = try PocketSphinxModel(directory: directory)
            if let validator, await !validator(directory) {
                throw RecognitionError(
                    .backendUnavailable,
                    "The offline model in \(directory) is broken (pocketsphinx cannot load it). \(PocketSphinxModel.installHint)"
                )
            }
            try await decoder.load(model)
            outcome = .success(())
            logger.info(
                "offline model loaded", metadata: ["model": "\(directory)", "seconds": "\(started.duration(to: .now))"])
        } catch {
            outcome = .failure(error)
            logger.error("offline model unavailable", metadata: ["reason": "\(error.message)"])
        }
        let waiters = state.withLock { state in
            guard case .loading(let waiters) = state else {
                return [CheckedContinuation<Result<Void, RecognitionError>, Never>]()
            }
            switch outcome {
            case .success: state = .loaded
            case .failure(let error): state = .failed(error)
            }
            return waiters
        }
        for waiter in waiters { waiter.resume(returning: outcome) }
    }

    public func authorize() async -> (RecognizerAuthorization, RecognitionError?) {
        do {
            try await load()
            return (.authorized, nil)
        } catch {
            return (.restricted, error)
        }
    }

    public func startSession(_ options: SessionOptions) async throws(RecognitionError) -> any RecognitionSession {
        try await load()
        return decoder.begin(interimResults: options.interimResults)
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

    func process(_ samples: [Int16]) {
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
        case cancel(LocalSession)
    }

    private let queue = JobQueue<Job>()
    private let logger: Logger

    init(logger: Logger) {
        self.logger = logger
        let queue = self.queue
        let thread = Thread { DecoderWorker(queue: queue).run() }
        thread.name = "pocketsphinx"
        thread.start()
    }

    deinit { queue.close() }

    func load(_ model: PocketSphinxModel) async throws(RecognitionError) {
        let result = await withCheckedContinuation { continuation in
            queue.push(.load(model) { continuation.resume(returning: $0) })
        }
        try result.get()
    }

    func begin(interimResults: Bool) -> LocalSession {
        let session = LocalSession(queue: queue, interimResults: interimResults)
        queue.push(.begin(session))
        return session
    }
}

/// A session of the offline engine; its work runs on the decoder thread.
final class LocalSession: RecognitionSession {
    let events: AsyncThrowingStream<RecognitionEvent, any Error>
    let continuation: AsyncThrowingStream<RecognitionEvent, any Error>.Continuation
    let interimResults: Bool
    private let queue: JobQueue<DecoderThread.Job>
    private let ended = Atomic<Bool>(false)

    init(queue: JobQueue<DecoderThread.Job>, interimResults: Bool) {
        self.queue = queue
        self.interimResults = interimResults
        (events, continuation) = AsyncThrowingStream.makeStream()
    }

    func send(_ chunk: AudioChunk) {
        guard !ended.load(ordering: .relaxed) else { return }
        queue.push(.audio(self, chunk))
    }

    func finish() {
        guard !ended.exchange(true, ordering: .relaxed) else { return }
        queue.push(.finish(self))
    }

    func cancel() {
        // End the events now rather than after the decoder works through queued audio.
        continuation.finish()
        guard !ended.exchange(true, ordering: .relaxed) else { return }
        queue.push(.cancel(self))
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

    init(queue: JobQueue<DecoderThread.Job>) { self.queue = queue }

    func run() {
        while let job = queue.pop() {
            switch job {
            case .load(let model, let done):
                if decoder != nil { done(.success(())); continue }
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
                    session.continuation.finish(
                        throwing: RecognitionError(.backendUnavailable, "The offline model is not loaded."))
                    continue
                }
                if let current { end(current, deliver: false) }
                current = session
                decoder.startStream()
                decoder.startUtterance()
                utteranceStarted = false
                samplesSinceHypothesis = 0
                samplesProcessed = 0
                lastInterim = ""
            case .audio(let session, let chunk):
                guard session === current, let decoder else { continue }
                process(chunk, decoder, session)
            case .finish(let session):
                guard session === current else { continue }
                end(session, deliver: true)
            case .cancel(let session):
                guard session === current else { continue }
                end(session, deliver: false)
            }
        }
    }

    // Segmentation as `pocketsphinx_continuous -infile` does it, so results match the reference tool.
    private func process(_ chunk: AudioChunk, _ decoder: Decoder, _ session: LocalSession) {
        decoder.process(chunk.samples)
        samplesProcessed += chunk.samples.count
        let inSpeech = decoder.inSpeech
        if inSpeech && !utteranceStarted {
            utteranceStarted = true
            utteranceStart = samplesProcessed - chunk.samples.count
            samplesSinceHypothesis = 0
            session.continuation.yield(.speechActivity(true))
        }
        if !inSpeech && utteranceStarted {
            decoder.endUtterance()
            let text = decoder.hypothesis
            session.continuation.yield(.result(finalResult(text)))
            session.continuation.yield(.speechActivity(false))
            decoder.startUtterance()
            utteranceStarted = false
            lastInterim = ""
            return
        }
        guard utteranceStarted, session.interimResults else { return }
        samplesSinceHypothesis += chunk.samples.count
        if samplesSinceHypothesis >= interimInterval {
            samplesSinceHypothesis = 0
            let text = decoder.hypothesis
            if !text.isEmpty && text != lastInterim {
                lastInterim = text
                session.continuation.yield(.result(RecognitionResult(text: text, isFinal: false)))
            }
        }
    }

    private func finalResult(_ text: String) -> RecognitionResult {
        let rate = Double(AudioFormat.sampleRate)
        return RecognitionResult(
            text: text, isFinal: true, audioStart: Double(utteranceStart) / rate,
            audioEnd: Double(samplesProcessed) / rate)
    }

    private func end(_ session: LocalSession, deliver: Bool) {
        decoder?.endUtterance()
        if deliver, utteranceStarted, let text = decoder?.hypothesis, !text.isEmpty {
            session.continuation.yield(.result(finalResult(text)))
        }
        if utteranceStarted { session.continuation.yield(.speechActivity(false)) }
        utteranceStarted = false
        session.continuation.finish()
        current = nil
    }
}

/// A FIFO of jobs for a thread that blocks until work arrives.
final class JobQueue<Job: Sendable>: Sendable {
    private let condition = NSConditionBox()
    private let jobs = Mutex<(items: [Job], closed: Bool)>(([], false))

    func push(_ job: Job) {
        jobs.withLock { $0.items.append(job) }
        condition.signal()
    }

    func close() {
        jobs.withLock { $0.closed = true }
        condition.signal()
    }

    /// Blocks until a job arrives; nil once closed and empty.
    func pop() -> Job? {
        while true {
            let next = jobs.withLock { state -> (Job?, Bool) in
                if !state.items.isEmpty { return (state.items.removeFirst(), false) }
                return (nil, state.closed)
            }
            if let job = next.0 { return job }
            if next.1 { return nil }
            condition.wait()
        }
    }
}

/// A counting semaphore for the decoder thread to sleep on.
final class NSConditionBox: Sendable {
    private let semaphore = DispatchSemaphore(value: 0)
    func signal() { semaphore.signal() }
    func wait() { semaphore.wait() }
}
