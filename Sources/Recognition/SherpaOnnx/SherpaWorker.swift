import CSttdSystem
import Foundation
import Synchronization

/// Decodes whole utterances with the loaded model.
protocol SherpaDecoding: AnyObject {
    /// The text of `samples` (16 kHz, -1…1), with the model's punctuation and capitals.
    func decode(_ samples: [Float]) throws(RecognitionError) -> String

    /// Ends the decodes in progress, which nobody waits for any more, if the engine can: they
    /// fail soon, and this engine is not used again.
    func abandon()
}

extension SherpaEngine: SherpaDecoding {
    /// onnxruntime cannot stop a decode in this process: it runs to its end.
    func abandon() {}
}

/// The model loaded in a child process (`sttd --offline-engine-worker`), one socket per decoder
/// thread.
///
/// Why a process: unloading then gives back all of onnxruntime's memory (in-process about 9 MB
/// of its heap and the pages of its 31 MB library stayed), and a crash in onnxruntime ends the
/// worker, not the service. Each request is the sample count (Int32) and the samples (Float32);
/// each reply a status (0 text, 1 error), a byte count and UTF-8 bytes. The first reply on every
/// socket says whether the model loaded.
final class SherpaWorkerProcess: SherpaDecoding {
    static let flag = "--offline-engine-worker"
    static let replyTimeoutMilliseconds: Int32 = 60_000

    private let pid: pid_t
    private let sockets: [Int32]
    /// Sockets no thread is using: each decoder thread takes one for a request and its reply.
    private let idle: Mutex<[Int32]>
    /// Set once a socket broke: the worker is gone, and every later decode fails at once.
    private let broken = Atomic<Bool>(false)

    init(executable: String, model: SherpaModel, settings: SherpaSettings, channels: Int) throws(RecognitionError) {
        guard let libraryPath = settings.libraryPath else {
            throw RecognitionError(
                .backendUnavailable, "The sherpa-onnx engine is not installed. \(SherpaInstall.installHint)")
        }
        var ours: [Int32] = []
        var theirs: [Int32] = []
        for _ in 0..<max(1, channels) {
            var pair: [Int32] = [-1, -1]
            guard sttd_socketpair(&pair) == 0 else {
                (ours + theirs).forEach { close($0) }
                throw Self.startFailure(errno)
            }
            // A worker that stops answering or reading (a wedged decode, a load stuck on a dead
            // disk, a stopped process) counts as gone, so no decoder thread waits on it forever;
            // a 20 s utterance decodes in about 2 s here, a cold load takes about 1 s.
            _ = sttd_set_receive_timeout(pair[0], Self.replyTimeoutMilliseconds)
            _ = sttd_set_send_timeout(pair[0], Self.replyTimeoutMilliseconds)
            ours.append(pair[0])
            theirs.append(pair[1])
        }
        let arguments = [
            "sttd", Self.flag, libraryPath, model.kind.rawValue, model.directory, "\(settings.threads)",
            settings.sessionConfigPath ?? "-", "\(ours.count)",
        ]
        let argv = arguments.map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let devNull = open("/dev/null", O_RDWR | O_CLOEXEC)
        defer { close(devNull) }
        // stdin from /dev/null; stdout and stderr are sttd's own (sherpa-onnx's reasons reach
        // the journal); the sockets from descriptor 3 on.
        let map = [devNull, STDERR_FILENO, STDERR_FILENO] + theirs
        var pid: pid_t = 0
        let status = ChildEnvironment.withEnvp(ChildEnvironment.current) { envp in
            map.withUnsafeBufferPointer {
                sttd_spawn_mapped(&pid, executable, argv, envp, $0.baseAddress, Int32($0.count))
            }
        }
        // Only the worker holds its ends now: if it dies, our reads see the end of the stream.
        theirs.forEach { close($0) }
        guard status == 0 else {
            ours.forEach { close($0) }
            throw Self.startFailure(status)
        }
        // The model has loaded (or failed to) when every socket has its first reply.
        for socket in ours {
            switch Self.receive(on: socket) {
            case .text: continue
            case .failed(let message):
                Self.shutDown(pid: pid, sockets: ours)
                throw RecognitionError(.backendUnavailable, message)
            case .gone:
                Self.shutDown(pid: pid, sockets: ours)
                throw Self.workerGone
            }
        }
        self.pid = pid
        sockets = ours
        idle = Mutex(ours)
    }

    deinit { Self.shutDown(pid: pid, sockets: sockets) }

    /// Kills the worker: a decode waiting on it sees its socket end at once, and the next work
    /// starts a new worker.
    func abandon() {
        broken.store(true, ordering: .relaxed)
        // Reaped only by deinit, so the pid is still this worker's (at worst a zombie).
        kill(pid, SIGKILL)
    }

    func decode(_ samples: [Float]) throws(RecognitionError) -> String {
        guard samples.count >= 1_600 else { return "" }
        guard !broken.load(ordering: .relaxed), let socket = idle.withLock({ $0.popLast() }) else {
            throw Self.workerGone
        }
        defer { idle.withLock { $0.append(socket) } }
        var count = Int32(samples.count)
        let sent =
            sttd_send_all(socket, &count, 4) == 0
            && samples.withUnsafeBytes { sttd_send_all(socket, $0.baseAddress, $0.count) } == 0
        guard sent else {
            broken.store(true, ordering: .relaxed)
            throw Self.workerGone
        }
        switch Self.receive(on: socket) {
        case .text(let text): return text
        case .failed(let message): throw RecognitionError(.backendUnavailable, message)
        case .gone:
            broken.store(true, ordering: .relaxed)
            throw Self.workerGone
        }
    }

    private enum Reply {
        case text(String)
        case failed(String)
        /// The socket broke or timed out: the worker ended or stopped answering.
        case gone
    }

    private static func receive(on socket: Int32) -> Reply {
        var header: (Int32, Int32) = (0, 0)
        guard sttd_receive_all(socket, &header, 8) == 0, header.1 >= 0, header.1 <= 1 << 20 else { return .gone }
        var bytes = [UInt8](repeating: 0, count: Int(header.1))
        guard bytes.withUnsafeMutableBytes({ sttd_receive_all(socket, $0.baseAddress, $0.count) }) == 0 else {
            return .gone
        }
        let text = String(decoding: bytes, as: UTF8.self)
        return header.0 == 0 ? .text(text) : .failed(text)
    }

    /// Closing the sockets ends the worker; one that does not end within 2 s is killed.
    private static func shutDown(pid: pid_t, sockets: [Int32]) {
        sockets.forEach { close($0) }
        var status: Int32 = 0
        if sttd_wait_child(pid, 2_000, &status) == 0 {
            kill(pid, SIGKILL)
            _ = sttd_wait_child(pid, 2_000, &status)
        }
    }

    private static let workerGone = RecognitionError(
        .backendUnavailable,
        "The offline engine's process ended unexpectedly or stopped answering for 60 s (sttd's log has its reason); a new one is started for the work that follows."
    )

    private static func startFailure(_ code: Int32) -> RecognitionError {
        RecognitionError(
            .backendUnavailable,
            "The offline engine's process could not be started: \(String(cString: strerror(code))).")
    }

    /// The worker's side: loads the model, replies on every socket, then serves each socket on a
    /// thread of its own until sttd closes it. Returns the exit status.
    static func serve(_ arguments: [String]) -> Int32 {
        signal(SIGPIPE, SIG_IGN)
        guard arguments.count == 6, let kind = SherpaModel.Kind(rawValue: arguments[1]),
            let threads = Int32(arguments[3]), let channels = Int32(arguments[5]), channels > 0
        else {
            FileHandle.standardError.write(Data("sttd \(flag): bad arguments \(arguments)\n".utf8))
            return 2
        }
        var settings = SherpaSettings(
            libraryPath: arguments[0], sessionConfigPath: arguments[4] == "-" ? nil : arguments[4], model: kind,
            modelDirectory: arguments[2], unloadAfter: .zero)
        settings.threads = threads
        let sockets = (0..<channels).map { 3 + $0 }
        let loaded = Result { () throws(RecognitionError) -> SherpaEngine in
            let library = try SherpaLibrary.open(arguments[0])
            let model = try SherpaModel(kind: kind, directory: arguments[2])
            return try SherpaEngine(library: library, model: model, settings: settings)
        }
        switch loaded {
        case .failure(let error):
            sockets.forEach { send(status: 1, text: error.message, on: $0) }
            return 1
        case .success(let engine):
            sockets.forEach { send(status: 0, text: engine.library.version, on: $0) }
            for socket in sockets.dropFirst() {
                let thread = Thread { serve(socket, engine) }
                thread.name = "sherpa-worker-\(socket)"
                thread.start()
            }
            serve(sockets[0], engine)
            // sttd closes every socket at once: the first one closed ends the process.
            return 0
        }
    }

    private static func serve(_ socket: Int32, _ engine: SherpaEngine) {
        while true {
            var count: Int32 = 0
            guard sttd_receive_all(socket, &count, 4) == 0, count >= 0, count <= 16_000 * 600 else { return }
            var samples = [Float](repeating: 0, count: Int(count))
            guard samples.withUnsafeMutableBytes({ sttd_receive_all(socket, $0.baseAddress, $0.count) }) == 0 else {
                return
            }
            send(status: 0, text: engine.decode(samples), on: socket)
        }
    }

    private static func send(status: Int32, text: String, on socket: Int32) {
        let bytes = Array(text.utf8)
        var header = (status, Int32(bytes.count))
        guard sttd_send_all(socket, &header, 8) == 0 else { return }
        _ = bytes.withUnsafeBytes { sttd_send_all(socket, $0.baseAddress, $0.count) }
    }
}
