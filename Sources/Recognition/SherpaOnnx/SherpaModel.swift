import CSherpaOnnx
import Foundation

/// A sherpa-onnx offline model: its kind and the files in its folder.
///
/// The engine is generic over sherpa-onnx's offline model kinds; each kind fills its own part of
/// `SherpaOnnxOfflineModelConfig`. Files are found by the names sherpa-onnx's released model
/// folders use (an `int8` variant preferred), so pointing `[local] sherpa_model_dir` at such a
/// folder and naming its kind is enough.
public struct SherpaModel: Sendable, Equatable {
    /// The model families sttd knows how to configure.
    public enum Kind: String, Sendable, CaseIterable {
        /// Moonshine v2 (encoder + merged decoder), e.g. the default base-en. Tested.
        case moonshine
        /// OpenAI Whisper exported by sherpa-onnx (`*-encoder.onnx`, `*-decoder.onnx`). Wired only.
        case whisper
        /// A transducer such as NVIDIA Parakeet TDT (`encoder`, `decoder`, `joiner`). Wired only.
        case transducer
        /// SenseVoice (`model.onnx`). Wired only.
        case senseVoice = "sense_voice"
        /// A NeMo CTC model (`model.onnx`). Wired only.
        case nemoCTC = "nemo_ctc"
    }

    public var kind: Kind
    public var directory: String
    /// Model files by role (encoder, decoder, joiner, model) and the tokens file.
    public var files: [String: String]
    public var tokens: String

    /// Finds the files of a `kind` model in `directory`; a missing file is a clear error.
    public init(kind: Kind, directory: String) throws(RecognitionError) {
        let fileManager = FileManager.default
        guard let entries = try? fileManager.contentsOfDirectory(atPath: directory).sorted() else {
            throw RecognitionError(
                .backendUnavailable,
                "The sherpa-onnx model folder \(directory) does not exist. \(SherpaInstall.installHint)")
        }
        let models = entries.filter { $0.hasSuffix(".onnx") || $0.hasSuffix(".ort") }
        // An int8 export is smaller and faster on a CPU; sherpa-onnx's folders often hold both.
        func find(_ matches: (String) -> Bool) -> String? {
            let candidates = models.filter(matches)
            return (candidates.first { $0.contains("int8") } ?? candidates.first).map { "\(directory)/\($0)" }
        }
        var roles: [String: (String) -> Bool] = [:]
        switch kind {
        case .moonshine:
            roles["encoder"] = { $0.hasPrefix("encoder") }
            roles["merged_decoder"] = { $0.contains("decoder_model_merged") || $0.contains("merged_decoder") }
        case .whisper:
            roles["encoder"] = { $0.contains("encoder") }
            roles["decoder"] = { $0.contains("decoder") }
        case .transducer:
            roles["encoder"] = { $0.contains("encoder") }
            roles["decoder"] = { $0.contains("decoder") }
            roles["joiner"] = { $0.contains("joiner") }
        case .senseVoice, .nemoCTC:
            roles["model"] = { $0.hasPrefix("model") }
        }
        var files: [String: String] = [:]
        for (role, matches) in roles.sorted(by: { $0.key < $1.key }) {
            guard let file = find(matches) else {
                throw RecognitionError(
                    .backendUnavailable,
                    "The sherpa-onnx model in \(directory) has no \(role) file for a \(kind.rawValue) model (looked for .onnx/.ort files). Check [local] sherpa_model_dir and sherpa_model_kind. \(SherpaInstall.installHint)"
                )
            }
            files[role] = file
        }
        let tokenFile = entries.first { $0 == "tokens.txt" } ?? entries.first { $0.hasSuffix("tokens.txt") }
        guard let tokenFile else {
            throw RecognitionError(
                .backendUnavailable,
                "The sherpa-onnx model in \(directory) has no tokens.txt. \(SherpaInstall.installHint)")
        }
        self.kind = kind
        self.directory = directory
        self.files = files
        self.tokens = "\(directory)/\(tokenFile)"
    }

    /// The files that make up the model, to tell whether it changed since it last failed to load.
    var allFiles: [String] { files.values.sorted() + [tokens] }

    /// Calls `body` with a recognizer config for this model; the C strings live only during it.
    func withConfig<R>(
        threads: Int32, provider: String, _ body: (UnsafePointer<SherpaOnnxOfflineRecognizerConfig>) -> R
    ) -> R {
        var strings: [UnsafeMutablePointer<CChar>] = []
        defer { strings.forEach { free($0) } }
        func c(_ string: String) -> UnsafePointer<CChar> {
            let copy = strdup(string)!
            strings.append(copy)
            return UnsafePointer(copy)
        }
        // Zeroed as the header asks: every field not set here means "not used".
        var config = SherpaOnnxOfflineRecognizerConfig()
        config.feat_config.sample_rate = 16_000
        config.feat_config.feature_dim = 80
        config.decoding_method = c("greedy_search")
        config.model_config.tokens = c(tokens)
        config.model_config.num_threads = threads
        config.model_config.provider = c(provider)
        switch kind {
        case .moonshine:
            config.model_config.moonshine.encoder = c(files["encoder"]!)
            config.model_config.moonshine.merged_decoder = c(files["merged_decoder"]!)
        case .whisper:
            config.model_config.whisper.encoder = c(files["encoder"]!)
            config.model_config.whisper.decoder = c(files["decoder"]!)
            config.model_config.whisper.language = c("en")
            config.model_config.whisper.task = c("transcribe")
            config.model_config.whisper.tail_paddings = -1
        case .transducer:
            config.model_config.transducer.encoder = c(files["encoder"]!)
            config.model_config.transducer.decoder = c(files["decoder"]!)
            config.model_config.transducer.joiner = c(files["joiner"]!)
            // NeMo exports (Parakeet) say so in their file names; icefall's need no type.
            if directory.lowercased().contains("nemo") || directory.lowercased().contains("parakeet") {
                config.model_config.model_type = c("nemo_transducer")
            }
        case .senseVoice:
            config.model_config.sense_voice.model = c(files["model"]!)
            config.model_config.sense_voice.language = c("auto")
            config.model_config.sense_voice.use_itn = 1
        case .nemoCTC:
            config.model_config.nemo_ctc.model = c(files["model"]!)
        }
        return withUnsafePointer(to: &config) { body($0) }
    }
}
