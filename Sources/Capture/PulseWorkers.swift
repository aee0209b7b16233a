import CPulse
import Foundation
import Logging
import Synchronization
import Waiting

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
    private let outcome = SetOnce<CaptureError?>()

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
