import CPulse
import Foundation
import Logging
import Problems
import Synchronization

/// Why the microphone could not be used.
public typealias CaptureError = Problem<CaptureFailure>

/// What kind of microphone failure, for mapping to `MicrophoneStatus`.
public enum CaptureFailure: Sendable, Equatable {
    /// No PulseAudio (or pipewire-pulse) server answered.
    case serverUnavailable
    /// The server refused access.
    case accessDenied
    /// The named source does not exist.
    case noSuchSource
    /// The sound server went away while capturing (it may come back).
    case lost
    /// The named source went away while capturing (unplugged or unloaded).
    case sourceLost
    /// Anything else the server reported.
    case failed
}

extension CaptureError {
    static func from(code: Int32, source: String?) -> CaptureError {
        let reason = String(cString: pa_strerror(code))
        switch UInt32(code) {
        case PA_ERR_CONNECTIONREFUSED.rawValue, PA_ERR_CONNECTIONTERMINATED.rawValue, PA_ERR_TIMEOUT.rawValue:
            return CaptureError(
                .serverUnavailable,
                "Cannot reach the sound server (\(reason)). Is PulseAudio or pipewire-pulse running? Try `pactl info`.")
        case PA_ERR_ACCESS.rawValue, PA_ERR_AUTHKEY.rawValue:
            return CaptureError(
                .accessDenied,
                "The sound server refused access to the microphone (\(reason)). Check your desktop's privacy settings.")
        case PA_ERR_NOENTITY.rawValue,
            PA_ERR_INVALID.rawValue where source != nil:
            // The server answers "invalid argument" for names it could never have.
            let name = source.map { $0.count > 80 ? $0.prefix(80) + "…" : $0 } ?? ""
            return CaptureError(
                .noSuchSource,
                "There is no audio source named '\(name)'. List sources with `sttctl sources` and set `source` to one of them, or to \"\" for the default."
            )
        default:
            return CaptureError(.failed, "The sound server reported an error: \(reason).")
        }
    }
}

/// A PulseAudio capture source.
public struct AudioSource: Sendable, Equatable {
    public var name: String
    public var description: String
    public var isDefault: Bool

    public init(name: String, description: String, isDefault: Bool) {
        self.name = name
        self.description = description
        self.isDefault = isDefault
    }
}

/// Microphone capture and source queries through libpulse (PipeWire serves the same API).
public enum PulseAudio {
    /// Opens the microphone; returns once the server has accepted the record stream.
    ///
    /// - Parameters:
    ///   - source: a source name, or nil for the server's default (followed when it changes).
    ///   - chunk: how much audio each chunk carries (20–100 ms).
    ///   - server: a server address, or nil for the usual lookup (`PULSE_SERVER`, the user's runtime dir).
    ///   - deliver: if given, gets each chunk on the capture thread instead of ``Capture/chunks``
    ///     (which then only ends or fails). It must not block. This saves a thread hop per chunk.
    ///   - mediaName: the stream's `media.name`, which sound settings show (e.g. who asked for it).
    public static func capture(
        source: String?, chunk: Duration = .milliseconds(100), server: String? = nil,
        mediaName: String = defaultMediaName, logger: Logger, deliver: (@Sendable (AudioChunk) -> Void)? = nil
    ) async throws(CaptureError) -> Capture {
        let worker = CaptureWorker(
            source: source, chunkSamples: AudioFormat.samples(in: chunk), mediaName: mediaName, logger: logger,
            deliver: deliver)
        worker.server = server
        try await worker.open()
        return Capture(worker: worker)
    }

    /// The capture sources the server offers, default first marked.
    public static func sources(server: String? = nil) async throws(CaptureError) -> [AudioSource] {
        let query = SourceQuery(mode: .list)
        query.server = server
        return try await query.run()
    }

    /// Checks that the server answers and that `source` (or a default source) exists.
    public static func probe(source: String?, server: String? = nil) async throws(CaptureError) {
        let query = SourceQuery(mode: .probe(source))
        query.server = server
        _ = try await query.run()
    }
}

extension PulseAudio {
    /// `media.name` of a capture stream nobody in particular asked for.
    public static let defaultMediaName = "Dictation"
}

/// The stream properties that make desktops show their microphone indicator (contract §3).
func makeProperties(_ pairs: [(String, String)]) -> OpaquePointer {
    let list = pa_proplist_new()!
    for (key, value) in pairs { pa_proplist_sets(list, key, value) }
    return list
}

let clientProperties = [
    ("application.name", "sttd"), ("application.id", "io.github.sttd"),
    ("application.icon_name", "audio-input-microphone"),
]
let streamProperties = clientProperties + [("media.role", "production")]

/// A libpulse main loop and context on a thread of their own; subclasses drive the context.
///
/// `@unchecked Sendable`: the main loop, context and everything subclasses keep are used only on
/// the worker's thread; other threads only set `quitRequested` and call `pa_mainloop_wakeup`
/// (which libpulse documents as thread-safe) under `wakeLock`, which also keeps the main loop
/// alive for that call.
class PulseWorker: @unchecked Sendable {
    /// The main loop pointer, shared only for `pa_mainloop_wakeup`.
    private struct MainloopHandle: @unchecked Sendable {
        // Safety: only passed to pa_mainloop_wakeup, under `wakeLock`, while the loop is alive.
        let pointer: OpaquePointer
    }
    private let wakeLock = Mutex<MainloopHandle?>(nil)
    private let quitRequested = Atomic<Bool>(false)
    private var drainUntil: ContinuousClock.Instant?
    var context: OpaquePointer?
    /// The server to connect to; set before the thread starts.
    var server: String?
    private var finished = false

    /// Starts the thread, which connects and then calls `contextReady` or `failed`.
    func startThread(name: String) {
        let thread = Thread { [self] in runLoop() }
        thread.name = name
        thread.start()
    }

    /// Asks the thread to end; with `drain`, it keeps reading that long first.
    func requestQuit(drain: Duration = .zero) {
        wakeLock.withLock { handle in
            guard let mainloop = handle?.pointer else { return }
            // Drain timing is read on the worker thread only after it sees `quitRequested`.
            pendingDrain.withLock { $0 = drain }
            quitRequested.store(true, ordering: .releasing)
            pa_mainloop_wakeup(mainloop)
        }
    }
    private let pendingDrain = Mutex<Duration>(.zero)

    /// Ends the loop from the worker thread itself.
    func finish() { finished = true }

    // Overridden by subclasses; all run on the worker thread.
    func contextReady() {}
    func failed(_ error: CaptureError) {}
    func willQuit() {}

    private func runLoop() {
        guard let mainloop = pa_mainloop_new() else {
            failed(CaptureError(.failed, "Out of memory starting the audio client."))
            return
        }
        let handle = MainloopHandle(pointer: mainloop)
        wakeLock.withLock { $0 = handle }
        let properties = makeProperties(clientProperties)
        context = pa_context_new_with_proplist(pa_mainloop_get_api(mainloop), "sttd", properties)
        pa_proplist_free(properties)
        let me = Unmanaged.passUnretained(self).toOpaque()
        pa_context_set_state_callback(
            context,
            { context, userdata in
                let worker = Unmanaged<PulseWorker>.fromOpaque(userdata!).takeUnretainedValue()
                switch pa_context_get_state(context) {
                case PA_CONTEXT_READY: worker.contextReady()
                case PA_CONTEXT_FAILED, PA_CONTEXT_TERMINATED:
                    worker.failed(CaptureError.from(code: pa_context_errno(context), source: nil))
                    worker.finish()
                default: break
                }
            }, me)
        if pa_context_connect(context, server, PA_CONTEXT_NOAUTOSPAWN, nil) < 0 {
            failed(CaptureError.from(code: pa_context_errno(context), source: nil))
            finished = true
        }
        while !finished {
            var timeout: Int32 = -1
            if quitRequested.load(ordering: .acquiring) {
                let now = ContinuousClock.now
                if drainUntil == nil { drainUntil = now + pendingDrain.withLock { $0 } }
                let remaining = now.duration(to: drainUntil!)
                if remaining <= .zero { break }
                timeout = Int32(clamping: Int64(remaining / .microseconds(1)))
            }
            if pa_mainloop_prepare(mainloop, timeout) < 0 { break }
            if pa_mainloop_poll(mainloop) < 0 { break }
            if pa_mainloop_dispatch(mainloop) < 0 { break }
        }
        willQuit()
        pa_context_disconnect(context)
        pa_context_unref(context)
        context = nil
        wakeLock.withLock { $0 = nil }
        pa_mainloop_free(mainloop)
    }
}

/// A live microphone stream: chunks arrive on ``chunks`` (or at the `deliver` function) until
/// ``stop()`` or a failure.
public struct Capture: MicrophoneStream {
    fileprivate let worker: CaptureWorker

    /// Chunks of audio (none when they go to a `deliver` function). Ends normally after ``stop()``,
    /// or throws a ``CaptureError`` (kind `.lost` or `.sourceLost`) when the server or source goes
    /// away. Bounded: a consumer that falls 10 s behind ends the stream with an error (kind
    /// `.failed`) rather than growing memory or losing audio silently.
    public var chunks: AsyncThrowingStream<AudioChunk, any Error> { worker.chunks }

    public func ended() async -> CaptureError? { await worker.ended() }

    /// Stops capture. Audio the server has already recorded (up to one chunk, which it sends
    /// when the chunk is full or within its duration) is still delivered, then ``chunks`` ends.
    public func stop() { worker.requestQuit(drain: worker.chunkDuration + .milliseconds(20)) }

    /// Stops at once, dropping what is in flight.
    public func cancel() { worker.requestQuit() }
}
