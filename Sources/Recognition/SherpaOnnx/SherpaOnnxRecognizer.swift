import CSttdSystem
import Capture
import Foundation
import Logging
import Synchronization

/// How the sherpa-onnx engine is set up: library, model, memory and timing.
public struct SherpaSettings: Sendable, Equatable {
    /// `libsherpa-onnx-c-api.so`, or nil when it is not installed.
    public var libraryPath: String?
    /// onnxruntime session options (`key=value` lines, read by sherpa-onnx), if any.
    public var sessionConfigPath: String?
    public var model: SherpaModel.Kind
    /// The model folder, or nil when the default model is not installed.
    public var modelDirectory: String?
    /// The model is unloaded after this long without a session.
    public var unloadAfter: Duration
    /// How far the decoder may fall behind (audio queued while it loads or decodes) before a
    /// session fails.
    var maxQueuedAudio: Duration = .seconds(30)
    /// onnxruntime threads per decode. One: a second one doubles the CPU a decode costs on two
    /// cores for no latency worth it (see the performance notes).
    public var threads: Int32 = 1
    /// Decodes that may run at once: two, one per core here, so a final need not wait for
    /// another session's decode (or its own session's interim). With the converted weights a
    /// decode running beside another costs only its activations, not a second model.
    var decoderThreads = 2
    /// Run the model in a child process started from this executable (sttd itself, with
    /// `--offline-engine-worker`): unloading then gives all of onnxruntime's memory back, and an
    /// engine crash cannot take the service down. Nil: in this process.
    public var workerExecutable: String?

    public init(
        libraryPath: String?, sessionConfigPath: String?, model: SherpaModel.Kind, modelDirectory: String?,
        unloadAfter: Duration
    ) {
        self.libraryPath = libraryPath
        self.sessionConfigPath = sessionConfigPath
        self.model = model
        self.modelDirectory = modelDirectory
        self.unloadAfter = unloadAfter
    }

    /// The engine and default model as installed next to this executable.
    public static func installed(unloadAfter: Duration = .seconds(300)) -> SherpaSettings {
        let install = SherpaInstall.locate()
        return SherpaSettings(
            libraryPath: install.libraryPath, sessionConfigPath: install.engineDirectory.map { "\($0)/session.conf" },
            model: .moonshine, modelDirectory: install.defaultModelDirectory, unloadAfter: unloadAfter)
    }
}

/// The offline engine on sherpa-onnx (Moonshine base-en by default): utterances cut by an
/// energy VAD are decoded whole by decoder threads that every session shares.
///
/// - Finals: each utterance is decoded when it ends. The decode starts 240 ms into the silence
///   after speech (during the 600 ms hangover), so an utterance that really ended has its final
///   ready when the hangover runs out; speech that resumes throws that decode away. An utterance
///   of 2 s or more ends at that pause; one longer than 20 s is split at its quietest 100 ms.
/// - Interims (when asked for): see ``SherpaStream/minInterimSpacing``; under load they are
///   skipped (``SherpaDecoderPool``), finals never.
/// - Memory: the model loads when a session starts (audio queues meanwhile, so no first words
///   are lost), stays while sessions come and go, and is unloaded `unloadAfter` after the last.
/// - Backlog: at most `maxQueuedAudio` of a session's audio may wait; past it that session fails
///   with a clear error and its finals so far stand.
/// - Wake segments (``StreamOptions/wakeSegments``): only each utterance's start is decoded, see
///   ``UtteranceSegmenter/init(wakeSegments:)``.
public final class SherpaOnnxRecognizer: Recognizer {
    let settings: SherpaSettings
    private let decoders: SherpaDecoderPool
    private let logger: Logger

    public init(settings: SherpaSettings, logger: Logger) {
        self.settings = settings
        self.logger = logger
        decoders = SherpaDecoderPool(settings: settings, shared: SherpaShared(), logger: logger)
        decoders.start(threads: settings.decoderThreads)
    }

    deinit { decoders.close() }

    public var decodesWakeSegments: Bool { true }

    /// Whether the model is in memory now.
    var isModelLoaded: Bool { decoders.shared.loaded.load(ordering: .relaxed) }
    /// How many times the model was loaded so far.
    var loadCount: Int { decoders.shared.loads.load(ordering: .relaxed) }
    /// How many times loading the model failed so far.
    var failedLoadCount: Int { decoders.shared.failedLoads.load(ordering: .relaxed) }

    /// Everything short of loading the model: the library opens, the model's files are there, and
    /// the same files did not fail to load before.
    func preflight() throws(RecognitionError) -> (SherpaLibrary, SherpaModel) {
        guard let libraryPath = settings.libraryPath else {
            throw RecognitionError(
                .backendUnavailable, "The sherpa-onnx engine is not installed. \(SherpaInstall.installHint)")
        }
        let library = try SherpaLibrary.open(libraryPath)
        guard let directory = settings.modelDirectory else {
            throw RecognitionError(
                .backendUnavailable, "The Moonshine model is not installed. \(SherpaInstall.installHint)")
        }
        let model = try SherpaModel(kind: settings.model, directory: directory)
        if let failure = decoders.shared.knownFailure(model) { throw failure }
        return (library, model)
    }

    public func authorize() async -> (RecognizerAuthorization, RecognitionError?) {
        await RecognizerAuthorization.checking { () throws(RecognitionError) in _ = try preflight() }
    }

    public func startStream(
        _ options: StreamOptions, events: any RecognitionEventSink
    ) async throws(RecognitionError) -> any RecognitionStream {
        let (library, model) = try preflight()
        // Returns at once: the model loads on the decoder thread while the session's audio queues.
        return decoders.begin(
            library: library, model: model, interimResults: options.interimResults,
            wakeSegments: options.wakeSegments, events: events)
    }

    /// Runs `sttd --offline-engine-worker ARGS`: the model in a child process (see
    /// ``SherpaSettings/workerExecutable``). Returns the exit status.
    public static func serveWorker(_ arguments: [String]) -> Int32 { SherpaWorkerProcess.serve(arguments) }

    /// Decodes `samples` (16 kHz, -1…1) in one piece with a model of its own, as sherpa-onnx's
    /// examples do: the reference that tests and benchmarks hold sessions against.
    static func transcribe(_ samples: [Float], settings: SherpaSettings) throws(RecognitionError) -> String {
        try SherpaReference(settings: settings).decode(samples)
    }
}

/// The engine decoding whole recordings directly, with no segmentation: a model loaded once.
/// Not thread-safe; for tests and benchmarks.
public final class SherpaReference {
    private let engine: SherpaEngine

    public init(settings: SherpaSettings) throws(RecognitionError) {
        let (library, model) = try SherpaOnnxRecognizer(settings: settings, logger: Logger(label: "sttd.reference"))
            .preflight()
        engine = try SherpaEngine(library: library, model: model, settings: settings)
    }

    /// The text of `samples` (16 kHz, -1…1).
    public func decode(_ samples: [Float]) -> String { engine.decode(samples) }
}

/// A loaded model; decoder threads may decode with it at once (each decode has its own stream).
final class SherpaEngine: @unchecked Sendable {
    // @unchecked: immutable after init; sherpa-onnx decodes separate streams from several
    // threads at once on one recognizer.
    let library: SherpaLibrary
    let model: SherpaModel
    private let recognizer: OpaquePointer

    init(library: SherpaLibrary, model: SherpaModel, settings: SherpaSettings) throws(RecognitionError) {
        let provider = settings.sessionConfigPath.map { "cpu:\($0)" } ?? "cpu"
        // sherpa-onnx 2.0.1 catches onnxruntime's exceptions here and returns NULL (a corrupt
        // model file, a wrong kind), printing the reason on stderr.
        guard
            let recognizer = model.withConfig(
                threads: settings.threads, provider: provider, { library.createRecognizer($0) })
        else {
            throw RecognitionError(
                .backendUnavailable,
                "The sherpa-onnx model in \(model.directory) cannot be loaded (a damaged file, or not a \(model.kind.rawValue) model; sttd's log has sherpa-onnx's reason). Reinstall it with `scripts/setup` (and `make install`), or check [local] sherpa_model_dir and sherpa_model_kind."
            )
        }
        self.library = library
        self.model = model
        self.recognizer = recognizer
    }

    deinit { library.destroyRecognizer(recognizer) }

    /// The text of `samples`, with the model's punctuation and capitals.
    func decode(_ samples: [Float]) -> String {
        // Under 0.1 s there are no words, and some models refuse so few feature frames.
        guard samples.count >= 1_600, let stream = library.createStream(recognizer) else { return "" }
        defer { library.destroyStream(stream) }
        samples.withUnsafeBufferPointer { buffer in
            library.acceptWaveform(stream, Int32(AudioFormat.sampleRate), buffer.baseAddress, Int32(buffer.count))
        }
        library.decode(recognizer, stream)
        guard let result = library.getResult(stream) else { return "" }
        defer { library.destroyResult(result) }
        guard let text = result.pointee.text else { return "" }
        return String(cString: text).trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// What the decoder thread shares with the recognizer: whether the model is loaded, and which
/// model files failed to load.
final class SherpaShared: Sendable {
    let loaded = Atomic<Bool>(false)
    let loads = Atomic<Int>(0)
    let failedLoads = Atomic<Int>(0)
    /// Model files that failed to load, by their identity (paths, sizes, mtimes), with the error.
    private let failures = Mutex<[String: RecognitionError]>([:])

    func knownFailure(_ model: SherpaModel) -> RecognitionError? {
        // Every start asks: the files' identity is read only once something has failed.
        guard !failures.withLock({ $0.isEmpty }) else { return nil }
        let identity = Self.identity(model)
        return failures.withLock { $0[identity] }
    }

    func recordFailure(_ model: SherpaModel, _ error: RecognitionError) {
        failedLoads.wrappingAdd(1, ordering: .relaxed)
        failures.withLock { $0[Self.identity(model)] = error }
    }

    /// Paths, sizes and modification times: a reinstalled model is tried again.
    static func identity(_ model: SherpaModel) -> String {
        model.allFiles.map { path in
            // stat(2), not FileManager's attributes, which also look up the owner's user and group.
            var info = stat()
            guard stat(path, &info) == 0 else { return "\(path):-1:0" }
            return "\(path):\(info.st_size):\(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec)"
        }.joined(separator: "|")
    }
}
