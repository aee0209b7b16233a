import Capture
import Foundation
import Logging
import NIOCore
import NIOWebSocket
import Recognition
import ServiceLifecycle
import Synchronization

/// One accepted stream: a recognition session fed by the client's audio frames, its events sent
/// back as Deepgram messages.
///
/// Child tasks (the writer, the reader, the idle watchdog, the recognition's `run()`, timers) report
/// to one coordinator loop through `signals` (unbounded, but each kind comes at most a few
/// times per stream); ``StreamMachine`` decides what each means and how the stream ends.
struct ListenStream {
    let request: ListenRequest
    let requestID: String
    let settings: ListenServerSettings
    let recognizer: any Recognizer
    let logger: Logger

    /// Frames waiting to be written. Policy: results are never dropped; a client that reads
    /// nothing while this many frames pile up (minutes of speech) is closed with 1011.
    static let outgoingLimit = 4096
    /// How long the client gets to read what is queued and answer our close frame before the
    /// socket is closed.
    static let closeHandshakeTimeout = Duration.seconds(5)

    typealias Signal = StreamMachine.Event

    /// Starts the stream's recognition, then upgrades the request and serves the stream; an engine
    /// that cannot take the session (pocketsphinx serving dictation) gets the request refused
    /// with 503, so no session of another client is ever ended for this one.
    func serve(_ accepted: AcceptedRequest, upgrade: EventLoopFuture<ListenServer.Upgrade>) async {
        var logger = logger
        logger[metadataKey: "request_id"] = "\(requestID)"
        let (signals, signal) = AsyncStream.makeStream(of: Signal.self)
        let (outgoing, out) = AsyncStream.makeStream(
            of: WebSocketFrame.self, bufferingPolicy: .bufferingOldest(Self.outgoingLimit))
        let clock = StreamClock()
        // Events before the upgrade wait in `outgoing` for the writer.
        let sink = StreamSink(
            translator: ResultsTranslator(request: request, requestID: requestID, model: settings.model),
            clock: clock, out: out, onOverflow: { signal.yield(.overflow) })

        let recognition: any RecognitionStream
        do throws(RecognitionError) {
            recognition = try await recognizer.startStream(request.streamOptions, events: sink)
        } catch {
            if error.kind == .busy {
                logger.notice("listen stream refused: the engine is busy", metadata: ["reason": "\(error.message)"])
                accepted.refuse(.engineBusy(error.message))
            } else {
                logger.error("listen stream: the engine did not start", metadata: ["error": "\(error.message)"])
                accepted.refuse(.engineUnavailable(error.message))
            }
            return
        }
        accepted.accept()
        guard case .stream(let channel) = try? await upgrade.get() else {
            // The client left before the upgrade: its recognition ends unused.
            recognition.cancel()
            try? await recognition.run()
            return
        }
        logger.info(
            "listen stream opened",
            metadata: [
                "interim_results": "\(request.interimResults)", "model": "\(request.model ?? "")",
                "language": "\(request.language)",
            ])
        do {
            try await channel.executeThenClose { inbound, outbound in
                await serve(
                    inbound: inbound, outbound: outbound, recognition: recognition, slot: accepted.slot, clock: clock,
                    outgoing: (outgoing, out), signals: (signals, signal), logger: logger)
            }
        } catch {
            logger.debug("listen stream socket", metadata: ["error": "\(error)"])
        }
        // Also when the socket failed before the stream's tasks ran.
        recognition.cancel()
    }

    private func serve(
        inbound: NIOAsyncChannelInboundStream<WebSocketFrame>, outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>,
        recognition: any RecognitionStream, slot: Slots.Lease, clock: StreamClock,
        outgoing: (stream: AsyncStream<WebSocketFrame>, continuation: AsyncStream<WebSocketFrame>.Continuation),
        signals: (stream: AsyncStream<Signal>, continuation: AsyncStream<Signal>.Continuation), logger: Logger
    ) async {
        let (outgoing, out) = outgoing
        let (signals, signal) = signals
        let created = Date()
        clock.touch()
        let idleTimeout = settings.idleTimeout
        let flushTimeout = settings.flushTimeout
        await withGracefulShutdownHandler {
            await withTaskGroup(of: Void.self) { group in
                group.addTask {
                    // Writer: frames in queue order; nothing after a close frame.
                    for await frame in outgoing {
                        do { try await outbound.write(frame) } catch { break }
                        if frame.opcode == .connectionClose { break }
                    }
                    signal.yield(.writerDone)
                }
                group.addTask {
                    await Self.read(
                        inbound, recognition: recognition, out: out, signal: signal, clock: clock, logger: logger)
                }
                group.addTask {
                    // Watchdog: Deepgram's NET-0001 after `idleTimeout` without audio or text.
                    while !Task.isCancelled {
                        let deadline =
                            clock.lastActivity.load(ordering: .relaxed) + UInt64(idleTimeout / .nanoseconds(1))
                        let now = NIODeadline.now().uptimeNanoseconds
                        if now >= deadline {
                            signal.yield(.idle)
                            return
                        }
                        try? await eventLoopSleep(for: .nanoseconds(Int64(deadline - now)))
                    }
                }
                group.addTask {
                    do throws(RecognitionError) {
                        try await recognition.run()
                        signal.yield(.sessionEnded(failure: nil))
                    } catch {
                        signal.yield(.sessionEnded(failure: error.message))
                    }
                }

                let seconds = { clock.seconds }
                var machine = StreamMachine(idleTimeoutSeconds: idleTimeout.components.seconds)
                loop: for await event in signals {
                    if case .sessionEnded(let failure?) = event {
                        logger.error("listen stream: the session failed", metadata: ["error": "\(failure)"])
                    } else if event == .flushTimeout {
                        logger.warning("listen stream: the last finals took too long")
                    }
                    for action in machine.handle(event) {
                        switch action {
                        case .finishSession:
                            recognition.finish()
                        case .cancelSession:
                            recognition.cancel()
                        case .sendMetadata:
                            out.yield(
                                Frames.text(
                                    ServerMessages.metadata(
                                        requestID: requestID, created: created, duration: seconds(),
                                        model: settings.model)))
                        case .releaseSlot:
                            slot.release()
                        case .sendClose(let code, let reason):
                            out.yield(Frames.close(code, reason))
                        case .endOutput:
                            out.finish()
                        case .startTimer(let timer):
                            group.addTask {
                                try? await eventLoopSleep(
                                    for: timer == .flush ? flushTimeout : Self.closeHandshakeTimeout)
                                signal.yield(timer == .flush ? .flushTimeout : .closeTimeout)
                            }
                        case .stop:
                            break loop
                        }
                    }
                }
                logger.info(
                    "listen stream closed", metadata: ["reason": "\(machine.reason)", "audio_s": "\(seconds())"])
                // Also when the task was cancelled (the loop ends without .stop).
                recognition.cancel()
                out.finish()
                group.cancelAll()
            }
        } onGracefulShutdown: {
            signal.yield(.shutdown)
        }
    }

    /// Reader: audio to the recognition (an odd byte waits for the next frame), control messages
    /// handled, anything unknown answered with an `Error` and the stream goes on.
    private static func read(
        _ inbound: NIOAsyncChannelInboundStream<WebSocketFrame>, recognition: any RecognitionStream,
        out: AsyncStream<WebSocketFrame>.Continuation, signal: AsyncStream<Signal>.Continuation,
        clock: StreamClock, logger: Logger
    ) async {
        var carry: UInt8?
        var closing = false
        do {
            for try await frame in inbound {
                switch frame.opcode {
                case .binary:
                    clock.touch()
                    // After CloseStream nothing more is recognized, as on Deepgram.
                    guard !closing else { continue }
                    let samples = Frames.samples(frame.unmaskedData, carry: &carry)
                    guard !samples.isEmpty else { continue }
                    clock.samples.add(samples.count, ordering: .relaxed)
                    recognition.send(AudioChunk(samples: samples))
                case .text:
                    clock.touch()
                    let text = String(buffer: frame.unmaskedData)
                    let message = ServerMessages.decodeClient(text)
                    switch message {
                    case .keepAlive:
                        logger.trace("listen stream control", metadata: ["type": "KeepAlive"])
                    case .finalize:
                        logger.debug("listen stream control", metadata: ["type": "Finalize"])
                        if !closing { recognition.finalize() }
                    case .closeStream:
                        logger.debug("listen stream control", metadata: ["type": "CloseStream"])
                        closing = true
                        signal.yield(.closeStream)
                    case .unknown(let description):
                        logger.debug("listen stream: unknown message", metadata: ["error": "\(description)"])
                        out.yield(Frames.text(ServerMessages.schemaError(description: description, original: text)))
                    }
                case .ping:
                    out.yield(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData))
                case .connectionClose:
                    var data = frame.unmaskedData
                    signal.yield(.clientClosed(code: data.readInteger(as: UInt16.self) ?? 1005))
                    return
                default:
                    break
                }
            }
        } catch {}
        signal.yield(.clientGone)
    }
}

/// Where a stream's session delivers its events: translated to messages on the caller's thread
/// and queued for the writer, never blocking.
final class StreamSink: RecognitionEventSink {
    private let translator: Mutex<ResultsTranslator>
    private let clock: StreamClock
    private let out: AsyncStream<WebSocketFrame>.Continuation
    private let onOverflow: @Sendable () -> Void

    init(
        translator: ResultsTranslator, clock: StreamClock, out: AsyncStream<WebSocketFrame>.Continuation,
        onOverflow: @escaping @Sendable () -> Void
    ) {
        self.translator = Mutex(translator)
        self.clock = clock
        self.out = out
        self.onOverflow = onOverflow
    }

    func deliver(_ event: RecognitionEvent) {
        let seconds = clock.seconds
        let messages = translator.withLock { $0.messages(for: event, audioSeconds: seconds) }
        for message in messages {
            if case .dropped = out.yield(Frames.text(message)) { onOverflow() }
        }
    }
}

/// The stream's audio received (the reader counts, the sink reads it for times the engine does
/// not give) and when the client last sent anything (for the idle watchdog).
final class StreamClock: Sendable {
    let samples = Atomic<Int>(0)
    let lastActivity = Atomic<UInt64>(NIODeadline.now().uptimeNanoseconds)

    var seconds: Double { Double(samples.load(ordering: .relaxed)) / Double(AudioFormat.sampleRate) }
    func touch() { lastActivity.store(NIODeadline.now().uptimeNanoseconds, ordering: .relaxed) }
}

/// Frame helpers.
enum Frames {
    static func text(_ string: String) -> WebSocketFrame {
        WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: string))
    }

    static func close(_ code: UInt16, _ reason: String) -> WebSocketFrame {
        var buffer = ByteBuffer()
        buffer.writeInteger(code)
        // Close reasons are at most 123 bytes; cut at a character boundary.
        var text = Substring(reason)
        while text.utf8.count > 123 { text = text.dropLast() }
        buffer.writeString(String(text))
        return WebSocketFrame(fin: true, opcode: .connectionClose, data: buffer)
    }

    /// Little-endian 16-bit samples; a trailing odd byte is kept in `carry` for the next frame.
    static func samples(_ buffer: ByteBuffer, carry: inout UInt8?) -> [Int16] {
        buffer.withUnsafeReadableBytes { bytes in
            var samples: [Int16] = []
            samples.reserveCapacity((bytes.count + 1) / 2)
            var index = 0
            if let first = carry, bytes.count > 0 {
                samples.append(Int16(bitPattern: UInt16(first) | UInt16(bytes[0]) << 8))
                carry = nil
                index = 1
            }
            while index + 1 < bytes.count {
                samples.append(Int16(bitPattern: UInt16(bytes[index]) | UInt16(bytes[index + 1]) << 8))
                index += 2
            }
            if index < bytes.count { carry = bytes[index] }
            return samples
        }
    }
}
