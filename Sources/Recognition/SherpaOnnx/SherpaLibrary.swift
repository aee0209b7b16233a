import CSherpaOnnx
import CSttdSystem
import Foundation
import Synchronization

/// Where scripts/setup and `make install` put the sherpa-onnx engine and its default model.
///
/// Found relative to the running executable, so neither a build in a checkout nor an installed
/// sttd needs an environment variable: a checkout's `.build/<triple>/debug/sttd` finds
/// `.build/engines/…` and `.build/models/…`; an installed `$PREFIX/bin/sttd` finds
/// `$PREFIX/lib/sttd/…` and `$PREFIX/share/sttd/models/…`.
public struct SherpaInstall: Sendable, Equatable {
    /// The pinned versions (see scripts/setup).
    public static let engineName = "sherpa-onnx-2.0.1"
    public static let defaultModelName = "moonshine-base-en-0.1.4-q8"
    public static let installHint =
        "Install it with `scripts/setup` in an sttd checkout (then `make install` for an installed sttd), or set [local] engine = \"pocketsphinx\"."

    /// The engine folder (holding `lib/libsherpa-onnx-c-api.so` and `session.conf`), if found.
    public var engineDirectory: String?
    /// The default Moonshine base-en model folder, if found.
    public var defaultModelDirectory: String?

    public var libraryPath: String? { engineDirectory.map { "\($0)/lib/libsherpa-onnx-c-api.so" } }

    public init(engineDirectory: String? = nil, defaultModelDirectory: String? = nil) {
        self.engineDirectory = engineDirectory
        self.defaultModelDirectory = defaultModelDirectory
    }

    /// Looks next to the executable and up to three folders above it.
    public static func locate(executable: String? = nil) -> SherpaInstall {
        let files = FileManager.default
        let exe =
            executable ?? (try? files.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        var directory = URL(fileURLWithPath: exe).resolvingSymlinksInPath().deletingLastPathComponent()
        var found = SherpaInstall()
        for _ in 0..<4 {
            let base = directory.path
            let engines = ["\(base)/engines/\(engineName)", "\(base)/lib/sttd/\(engineName)"]
            let models = ["\(base)/models/\(defaultModelName)", "\(base)/share/sttd/models/\(defaultModelName)"]
            if found.engineDirectory == nil {
                found.engineDirectory = engines.first { files.fileExists(atPath: "\($0)/lib/libsherpa-onnx-c-api.so") }
            }
            if found.defaultModelDirectory == nil {
                found.defaultModelDirectory = models.first { files.fileExists(atPath: "\($0)/tokens.txt") }
            }
            if found.engineDirectory != nil && found.defaultModelDirectory != nil { break }
            directory.deleteLastPathComponent()
        }
        return found
    }
}

/// The functions of `libsherpa-onnx-c-api.so` that sttd uses, looked up once with `dlopen`.
///
/// Loaded at run time rather than linked, so an sttd built without the engine still builds and
/// runs pocketsphinx, and a missing library is a clear error instead of a failed start. The
/// struct layouts come from the pinned version's own header (Sources/CSherpaOnnx/c-api.h, checked
/// byte for byte against the unpacked wheel by scripts/setup).
final class SherpaLibrary: Sendable {
    typealias CreateRecognizer =
        @convention(c) (UnsafePointer<SherpaOnnxOfflineRecognizerConfig>?) -> OpaquePointer?
    typealias DestroyRecognizer = @convention(c) (OpaquePointer?) -> Void
    typealias CreateStream = @convention(c) (OpaquePointer?) -> OpaquePointer?
    typealias DestroyStream = @convention(c) (OpaquePointer?) -> Void
    typealias AcceptWaveform = @convention(c) (OpaquePointer?, Int32, UnsafePointer<Float>?, Int32) -> Void
    typealias Decode = @convention(c) (OpaquePointer?, OpaquePointer?) -> Void
    typealias GetResult = @convention(c) (OpaquePointer?) -> UnsafePointer<SherpaOnnxOfflineRecognizerResult>?
    typealias DestroyResult = @convention(c) (UnsafePointer<SherpaOnnxOfflineRecognizerResult>?) -> Void
    typealias VersionString = @convention(c) () -> UnsafePointer<CChar>?

    let createRecognizer: CreateRecognizer
    let destroyRecognizer: DestroyRecognizer
    let createStream: CreateStream
    let destroyStream: DestroyStream
    let acceptWaveform: AcceptWaveform
    let decode: Decode
    let getResult: GetResult
    let destroyResult: DestroyResult
    let version: String

    // One handle per path for the life of the process: onnxruntime is not built to be unloaded.
    private static let opened = Mutex<[String: Result<SherpaLibrary, RecognitionError>]>([:])

    /// Opens the library at `path` (once per process) and resolves its functions.
    static func open(_ path: String) throws(RecognitionError) -> SherpaLibrary {
        try opened.withLock { opened in
            if let known = opened[path] { return known }
            let result: Result<SherpaLibrary, RecognitionError>
            do throws(RecognitionError) {
                result = .success(try SherpaLibrary(path: path))
            } catch {
                result = .failure(error)
            }
            opened[path] = result
            // Opened to check it (sttd's start, Authorize): until a model loads, its relocated
            // code need not stay in memory.
            _ = sttd_drop_clean_library_pages(URL(fileURLWithPath: path).deletingLastPathComponent().path + "/")
            return result
        }.get()
    }

    private init(path: String) throws(RecognitionError) {
        guard FileManager.default.fileExists(atPath: path) else {
            throw RecognitionError(
                .backendUnavailable,
                "The sherpa-onnx engine is not installed (no \(path)). \(SherpaInstall.installHint)")
        }
        // RTLD_LOCAL: its onnxruntime symbols stay out of the global namespace.
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            let reason = dlerror().map { String(cString: $0) } ?? "unknown reason"
            throw RecognitionError(
                .backendUnavailable,
                "The sherpa-onnx engine at \(path) cannot be loaded: \(reason). \(SherpaInstall.installHint)")
        }
        func symbol<T>(_ name: String, as type: T.Type) throws(RecognitionError) -> T {
            guard let pointer = dlsym(handle, name) else {
                throw RecognitionError(
                    .backendUnavailable,
                    "The library at \(path) is not sherpa-onnx \(SherpaInstall.engineName) (it lacks \(name)). \(SherpaInstall.installHint)"
                )
            }
            return unsafeBitCast(pointer, to: type)
        }
        createRecognizer = try symbol("SherpaOnnxCreateOfflineRecognizer", as: CreateRecognizer.self)
        destroyRecognizer = try symbol("SherpaOnnxDestroyOfflineRecognizer", as: DestroyRecognizer.self)
        createStream = try symbol("SherpaOnnxCreateOfflineStream", as: CreateStream.self)
        destroyStream = try symbol("SherpaOnnxDestroyOfflineStream", as: DestroyStream.self)
        acceptWaveform = try symbol("SherpaOnnxAcceptWaveformOffline", as: AcceptWaveform.self)
        decode = try symbol("SherpaOnnxDecodeOfflineStream", as: Decode.self)
        getResult = try symbol("SherpaOnnxGetOfflineStreamResult", as: GetResult.self)
        destroyResult = try symbol("SherpaOnnxDestroyOfflineRecognizerResult", as: DestroyResult.self)
        let versionString = try symbol("SherpaOnnxGetVersionStr", as: VersionString.self)
        version = versionString().map { String(cString: $0) } ?? "?"
        // The declarations are this version's; another one may lay its structs out differently.
        guard "sherpa-onnx-\(version)" == SherpaInstall.engineName else {
            throw RecognitionError(
                .backendUnavailable,
                "The library at \(path) is sherpa-onnx \(version), but sttd is built for \(SherpaInstall.engineName). \(SherpaInstall.installHint)"
            )
        }
    }
}
