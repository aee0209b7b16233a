import CPocketSphinx
import Capture
import Foundation
import Logging
import Synchronization
import Waiting

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
/// in samples across the recognizer. A ``RecognitionStream/send(_:)`` that would go past it
/// fails the session instead of blocking the capture thread or dropping audio unnoticed: the
/// session's queued audio is discarded, later audio is ignored, the finals already delivered
/// stand, and its `run()` throws a `backendUnavailable` error that names the bound. Control work
/// (loading, starting, finishing, cancelling) is never refused.
public final class PocketSphinxRecognizer: Recognizer {
    /// pocketsphinx writes lowercase words without marks.
    public var writesPunctuation: Bool { false }
    private let decoder: PocketSphinxEngine
    private let directory: String
    private let validator: (@Sendable (String) async -> Bool)?
    /// The model's load, started by the first caller; every caller shares its outcome.
    private let loading = Mutex<SetOnce<Result<Void, RecognitionError>>?>(nil)
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
        self.decoder = PocketSphinxEngine(
            maxQueuedSamples: max(1, AudioFormat.samples(in: maxQueuedAudio)), logger: logger)
    }

    /// Loads the model (once); later calls wait for the first load and share its outcome.
    public func load() async throws(RecognitionError) {
        let (load, isFirst) = loading.withLock { loading in
            if let load = loading { return (load, false) }
            let load = SetOnce<Result<Void, RecognitionError>>()
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
        await RecognizerAuthorization.checking { () async throws(RecognitionError) in try await load() }
    }

    public func startStream(
        _ options: StreamOptions, events: any RecognitionEventSink
    ) async throws(RecognitionError) -> any RecognitionStream {
        try await load()
        return try decoder.begin(interimResults: options.interimResults, servedTo: options.servedTo, events: events)
    }

    /// Loads a model and reports whether it worked; for `sttd --check-model` in a child process.
    public static func checkModel(directory: String) -> Bool {
        guard let model = try? PocketSphinxModel(directory: directory) else { return false }
        return SphinxDecoder(model: model) != nil
    }
}
