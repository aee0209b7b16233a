/// How one stream ends, as a plain value: the stream's coordinator feeds it what happened and
/// performs the actions it returns (no sockets, no clocks, no tasks here).
///
/// - `CloseStream` or shutdown: the session finishes (bounded by the flush timer); once its
///   `run()` returned, `Metadata`, then close 1000 (1001 at shutdown).
/// - No audio or text for the idle timeout: close 1011 `NET-0001`.
/// - The session fails, or ends unasked: close 1011 `NET-0000` (retryable on Deepgram's table).
/// - The client closes: the session is cancelled and the close answered; the client vanishes:
///   the session is cancelled and the stream ends at once.
/// - After our close frame the stream ends when the client answers it, or when the
///   close-handshake timer fires.
struct StreamMachine: Sendable {
    enum Event: Sendable, Equatable {
        case closeStream
        case shutdown
        case idle
        case flushTimeout
        /// The session's `run()` returned, or threw with this message.
        case sessionEnded(failure: String?)
        case clientClosed(code: UInt16)
        case clientGone
        /// The client does not read its results (the outgoing queue is full).
        case overflow
        /// The writer stopped: our close frame went out, or the socket failed.
        case writerDone
        case closeTimeout
    }

    enum Timer: Sendable, Equatable {
        /// Bounds the last finals after `CloseStream` or shutdown; fires `flushTimeout`.
        case flush
        /// Bounds the wait for the client's answer to our close frame; fires `closeTimeout`.
        case closeHandshake
    }

    enum Action: Sendable, Equatable {
        case finishSession
        case cancelSession
        case sendMetadata
        case sendClose(code: UInt16, reason: String)
        /// Nothing more goes out after what was queued.
        case endOutput
        case startTimer(Timer)
        /// The session has ended and the close frame is queued: the stream no longer counts
        /// against `max_streams`, so a client that read the close may connect again at once.
        case releaseSlot
        /// The stream is over: leave the loop (the socket closes).
        case stop
    }

    /// Why the stream ended, for the log.
    private(set) var reason = "open"
    private let idleTimeoutSeconds: Int64
    private var flushCode: UInt16?
    private var sessionEnded = false
    /// Our close frame is queued: nothing may follow it.
    private var closed = false
    private var writerDone = false
    private var clientClosed = false
    private var slotReleased = false

    init(idleTimeoutSeconds: Int64) {
        self.idleTimeoutSeconds = idleTimeoutSeconds
    }

    mutating func handle(_ event: Event) -> [Action] {
        let actions = respond(to: event)
        guard closed, sessionEnded, !slotReleased else { return actions }
        slotReleased = true
        return [.releaseSlot] + actions
    }

    private mutating func respond(to event: Event) -> [Action] {
        switch event {
        case .closeStream, .shutdown:
            guard flushCode == nil, !closed else { return [] }
            let shutdown = event == .shutdown
            flushCode = shutdown ? 1001 : 1000
            reason = shutdown ? "shutdown" : "CloseStream"
            return [.finishSession, .startTimer(.flush)]
        case .flushTimeout:
            return sessionEnded ? [] : [.cancelSession]
        case .sessionEnded(let failure):
            sessionEnded = true
            guard !closed else { return [] }
            closed = true
            if let failure {
                reason = "engine error"
                return [
                    .sendClose(code: 1011, reason: "NET-0000: \(failure)"), .endOutput, .startTimer(.closeHandshake),
                ]
            }
            if flushCode == nil { reason = "engine ended the session" }
            // An engine ending a session unasked (e.g. one that serves one stream at a time) is a
            // server-side condition: 1011, worth retrying.
            let close = Action.sendClose(
                code: flushCode ?? 1011, reason: flushCode == nil ? "NET-0000: the local engine ended the stream" : "")
            return [.sendMetadata, close, .endOutput, .startTimer(.closeHandshake)]
        case .idle:
            guard flushCode == nil, !closed else { return [] }
            closed = true
            reason = "idle"
            return [
                .cancelSession,
                .sendClose(
                    code: 1011, reason: "NET-0001: no audio or KeepAlive was received for \(idleTimeoutSeconds) seconds"
                ),
                .endOutput, .startTimer(.closeHandshake),
            ]
        case .overflow:
            guard !closed else { return [] }
            closed = true
            reason = "client not reading"
            return [.cancelSession, .endOutput, .stop]
        case .clientClosed(let code):
            clientClosed = true
            var actions: [Action] = []
            if !closed {
                closed = true
                reason = "client closed (\(code))"
                // Answer the close handshake with the client's code (1005: none was given).
                actions = [
                    .cancelSession, .sendClose(code: code == 1005 ? 1000 : code, reason: ""), .endOutput,
                    .startTimer(.closeHandshake),
                ]
            }
            return writerDone ? actions + [.stop] : actions
        case .clientGone:
            if !closed { reason = "client gone" }
            closed = true
            return [.cancelSession, .endOutput, .stop]
        case .writerDone:
            writerDone = true
            return clientClosed ? [.stop] : []
        case .closeTimeout:
            return [.stop]
        }
    }
}
