import CPulse
import Foundation
import Logging
import Synchronization

/// Why the microphone could not be used.
public struct CaptureError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of failure, for mapping to `MicrophoneStatus`.
    public enum Kind: Sendable, Equatable {
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

    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }

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
private func makeProperties(_ pairs: [(String, String)]) -> OpaquePointer {
    let list = pa_proplist_new()!
    for (key, value) in pairs { pa_proplist_sets(list, key, value) }
    return list
}

private let clientProperties = [
    ("application.name", "sttd"), ("application.id", "io.github.sttd"),
    ("application.icon_name", "audio-input-microphone"),
]
private let streamProperties = clientProperties + [("media.role", "production")]

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
                timeout = Int32(
                    clamping: remaining.components.attoseconds / 1_000_000_000_000 + remaining.components.seconds
                        * 1_000_000)
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

/// The worker thread behind a ``Capture``.
final class CaptureWorker: PulseWorker, @unchecked Sendable {
    let chunks: AsyncThrowingStream<AudioChunk, any Error>
    private let continuation: AsyncThrowingStream<AudioChunk, any Error>.Continuation
    private let source: String?
    private let chunkSamples: Int
    private let mediaName: String
    var chunkDuration: Duration { .microseconds(chunkSamples * 1_000_000 / AudioFormat.sampleRate) }
    private let logger: Logger
    private let deliver: ((AudioChunk) -> Void)?
    private var stream: OpaquePointer?
    private var pending: [Int16] = []
    private var opened: CheckedContinuation<Void, any Error>?
    private var isOpen = false
    /// How capture ended: set once, on the worker thread.
    private let outcome = Eventual<CaptureError?>()

    init(
        source: String?, chunkSamples: Int, mediaName: String, logger: Logger,
        deliver: (@Sendable (AudioChunk) -> Void)?
    ) {
        self.source = source
        self.chunkSamples = chunkSamples
        self.mediaName = mediaName
        self.logger = logger
        self.deliver = deliver
        let chunksPerTenSeconds = max(1, 10 * AudioFormat.sampleRate / chunkSamples)
        (chunks, continuation) = AsyncThrowingStream.makeStream(bufferingPolicy: .bufferingNewest(chunksPerTenSeconds))
    }

    func open() async throws(CaptureError) {
        do {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                opened = continuation
                startThread(name: "pulse-capture")
            }
        } catch {
            throw error as? CaptureError ?? CaptureError(.failed, "\(error)")
        }
    }

    override func contextReady() {
        var spec = pa_sample_spec(format: PA_SAMPLE_S16LE, rate: UInt32(AudioFormat.sampleRate), channels: 1)
        let properties = makeProperties(streamProperties + [("media.name", mediaName)])
        stream = pa_stream_new_with_proplist(context, mediaName, &spec, nil, properties)
        pa_proplist_free(properties)
        guard let stream else {
            failed(CaptureError.from(code: pa_context_errno(context), source: source))
            return finish()
        }
        let me = Unmanaged.passUnretained(self).toOpaque()
        pa_stream_set_state_callback(
            stream,
            { stream, userdata in
                let capture = Unmanaged<CaptureWorker>.fromOpaque(userdata!).takeUnretainedValue()
                capture.streamStateChanged(pa_stream_get_state(stream))
            }, me)
        pa_stream_set_read_callback(
            stream,
            { stream, _, userdata in
                Unmanaged<CaptureWorker>.fromOpaque(userdata!).takeUnretainedValue().readAvailable()
            }, me)
        var attributes = pa_buffer_attr(
            maxlength: UInt32.max, tlength: UInt32.max, prebuf: UInt32.max, minreq: UInt32.max,
            fragsize: UInt32(chunkSamples * AudioFormat.bytesPerSample))
        // A named source must not silently move elsewhere when it disappears.
        var flags = PA_STREAM_ADJUST_LATENCY.rawValue
        if source != nil { flags |= PA_STREAM_DONT_MOVE.rawValue }
        if pa_stream_connect_record(stream, source, &attributes, pa_stream_flags_t(rawValue: flags)) < 0 {
            failed(CaptureError.from(code: pa_context_errno(context), source: source))
            finish()
        }
    }

    private func streamStateChanged(_ state: pa_stream_state_t) {
        switch state {
        case PA_STREAM_READY:
            isOpen = true
            logger.debug("capture stream ready", metadata: ["source": "\(source ?? "(default)")"])
            opened?.resume()
            opened = nil
        case PA_STREAM_FAILED, PA_STREAM_TERMINATED:
            // With the server still there, it is the source that went (a dead server fails the context first).
            if isOpen, pa_context_get_state(context) == PA_CONTEXT_READY {
                failed(
                    CaptureError(
                        .sourceLost,
                        "The audio source '\(source ?? "default")' went away (unplugged or unloaded). List sources with `sttctl sources`."
                    ))
            } else if state == PA_STREAM_FAILED {
                failed(CaptureError.from(code: pa_context_errno(context), source: source))
            }
            finish()
        default: break
        }
    }

    private func readAvailable() {
        while let stream {
            var data: UnsafeRawPointer? = nil
            var length = 0
            guard pa_stream_peek(stream, &data, &length) == 0, length > 0 else { return }
            if let data {
                let samples = UnsafeBufferPointer(
                    start: data.assumingMemoryBound(to: Int16.self), count: length / AudioFormat.bytesPerSample)
                pending.append(contentsOf: samples)
            } else {
                // A hole (lost data): keep timing right with silence.
                pending.append(contentsOf: repeatElement(0, count: length / AudioFormat.bytesPerSample))
            }
            pa_stream_drop(stream)
            var taken = 0
            while pending.count - taken >= chunkSamples {
                output(AudioChunk(samples: Array(pending[taken..<taken + chunkSamples])))
                taken += chunkSamples
            }
            pending.removeFirst(taken)
        }
    }

    private func output(_ chunk: AudioChunk) {
        if let deliver { return deliver(chunk) }
        if case .dropped = continuation.yield(chunk) {
            let error = CaptureError(.failed, "The audio consumer fell 10 s behind; capture stopped.")
            continuation.finish(throwing: error)
            end(error)
        }
    }

    /// Waits for the end of capture: nil when stopped, else why it ended.
    func ended() async -> CaptureError? { await outcome.value }

    private func end(_ error: CaptureError?) { outcome.resolve(error) }

    override func failed(_ error: CaptureError) {
        if let opened {
            opened.resume(throwing: error)
            self.opened = nil
        } else if isOpen {
            let lost =
                error.kind == .failed || error.kind == .serverUnavailable
                ? CaptureError(.lost, "Lost the sound server while listening: \(error.message)") : error
            continuation.finish(throwing: lost)
            isOpen = false
            end(lost)
        }
    }

    override func willQuit() {
        if !pending.isEmpty { output(AudioChunk(samples: pending)) }
        pending.removeAll()
        if let stream {
            pa_stream_set_state_callback(stream, nil, nil)
            pa_stream_set_read_callback(stream, nil, nil)
            pa_stream_disconnect(stream)
            pa_stream_unref(stream)
        }
        stream = nil
        opened?.resume(throwing: CaptureError(.failed, "Capture was stopped before it started."))
        opened = nil
        continuation.finish()
        end(nil)
    }
}

/// A one-shot query: list sources or probe one.
final class SourceQuery: PulseWorker, @unchecked Sendable {
    enum Mode { case list, probe(String?) }
    private let mode: Mode
    private var defaultSource = ""
    private var found: [AudioSource] = []
    private var result: CheckedContinuation<[AudioSource], any Error>?

    init(mode: Mode) { self.mode = mode }

    func run() async throws(CaptureError) -> [AudioSource] {
        do {
            return try await withCheckedThrowingContinuation { continuation in
                result = continuation
                startThread(name: "pulse-query")
            }
        } catch {
            throw error as? CaptureError ?? CaptureError(.failed, "\(error)")
        }
    }

    override func contextReady() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let operation = pa_context_get_server_info(
            context,
            { _, info, userdata in
                let query = Unmanaged<SourceQuery>.fromOpaque(userdata!).takeUnretainedValue()
                query.defaultSource = info?.pointee.default_source_name.map { String(cString: $0) } ?? ""
                query.queryNext()
            }, me)
        pa_operation_unref(operation)
    }

    private func queryNext() {
        let me = Unmanaged.passUnretained(self).toOpaque()
        let callback: pa_source_info_cb_t = { _, info, eol, userdata in
            let query = Unmanaged<SourceQuery>.fromOpaque(userdata!).takeUnretainedValue()
            if let info {
                let name = String(cString: info.pointee.name)
                let description = info.pointee.description.map { String(cString: $0) } ?? name
                query.found.append(
                    AudioSource(name: name, description: description, isDefault: name == query.defaultSource))
            }
            if eol != 0 { query.complete() }
        }
        switch mode {
        case .list:
            pa_operation_unref(pa_context_get_source_info_list(context, callback, me))
        case .probe(let name):
            let target = name ?? defaultSource
            guard !target.isEmpty else {
                return deliver(
                    .failure(
                        CaptureError(
                            .noSuchSource,
                            "The sound server has no default source: connect a microphone, or set `source` (see `sttctl sources`)."
                        )))
            }
            pa_operation_unref(pa_context_get_source_info_by_name(context, target, callback, me))
        }
    }

    private func complete() {
        if case .probe(let name) = mode, found.isEmpty {
            return deliver(.failure(CaptureError.from(code: Int32(PA_ERR_NOENTITY.rawValue), source: name)))
        }
        deliver(.success(found))
    }

    private func deliver(_ outcome: Result<[AudioSource], CaptureError>) {
        result?.resume(with: outcome.mapError { $0 as any Error })
        result = nil
        finish()
    }

    override func failed(_ error: CaptureError) {
        deliver(.failure(error))
    }
}
