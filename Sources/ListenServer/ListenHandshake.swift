import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Recognition
import ServiceLifecycle
import Synchronization

/// A request whose checks passed, waiting for its stream's session: ``accept()`` upgrades it,
/// ``refuse(_:)`` answers it with an HTTP error.
struct AcceptedRequest: Sendable {
    let request: ListenRequest
    let requestID: String
    let subprotocol: String?
    let handshake: HandshakeState
    let decision: EventLoopPromise<HTTPHeaders?>
    /// The stream's place among `max_streams`, given back when the stream ends.
    let slot: Slots.Lease

    func accept() {
        handshake.set(.accepted)
        var response = HTTPHeaders()
        response.add(name: "dg-request-id", value: requestID)
        if let subprotocol { response.add(name: "Sec-WebSocket-Protocol", value: subprotocol) }
        decision.succeed(response)
    }

    func refuse(_ refusal: ListenRefusal) {
        handshake.set(.refused(refusal, requestID: requestID, afterRequest: true))
        decision.succeed(nil)
    }
}

/// What every handshake is checked against: the server's key and the origins it allows.
struct HandshakeChecks: Sendable {
    let key: APIKey?
    let allowedOrigins: Set<WebOrigin>

    func evaluate(uri: String, headers: [(String, String)]) -> Result<
        (request: ListenRequest, subprotocol: String?), ListenRefusal
    > {
        ListenHandshake.evaluate(uri: uri, headers: headers, key: key, allowedOrigins: allowedOrigins)
    }
}

/// Counts what is open (streams, connections) against a limit.
final class Slots: Sendable {
    let limit: Int
    private let used = Atomic<Int>(0)

    init(limit: Int) { self.limit = limit }

    var inUse: Int { used.load(ordering: .relaxed) }

    func acquire() -> Bool {
        var current = used.load(ordering: .relaxed)
        while current < limit {
            let (exchanged, original) = used.compareExchange(
                expected: current, desired: current + 1, ordering: .acquiringAndReleasing)
            if exchanged { return true }
            current = original
        }
        return false
    }

    func release() { used.subtract(1, ordering: .acquiringAndReleasing) }

    /// A place taken with `acquire()`, given back once however many times it is released.
    final class Lease: Sendable {
        private let slots: Slots
        private let released = Atomic(false)

        init(_ slots: Slots) { self.slots = slots }

        func release() {
            if !released.exchange(true, ordering: .acquiringAndReleasing) { slots.release() }
        }
    }
}

/// What `shouldUpgrade` decided for one connection, for the upgrade or the refusal that follows.
final class HandshakeState: Sendable {
    enum Decision: Sendable {
        case none
        case accepted
        /// `afterRequest`: decided once the whole request was read (the upgrader consumed its
        /// end, which the responder then never sees), so the refusal is answered at once.
        case refused(ListenRefusal, requestID: String, afterRequest: Bool)
    }
    private let decision = Mutex(Decision.none)

    func set(_ value: Decision) { decision.withLock { $0 = value } }
    func get() -> Decision { decision.withLock { $0 } }
}

/// Answers a request that was not upgraded with Deepgram's error response: the status, headers
/// `dg-request-id` and `dg-error`, and the JSON body `{"err_code","err_msg","request_id"}`.
final class RefusalResponder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let handshake: HandshakeState
    private let checks: HandshakeChecks
    private let logger: Logger
    private var refusal: (ListenRefusal, String)?
    private var responded = false

    init(handshake: HandshakeState, checks: HandshakeChecks, logger: Logger) {
        self.handshake = handshake
        self.checks = checks
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if case .refused(let refusal, let requestID, afterRequest: true) = handshake.get() {
            respond(context: context, refusal, requestID: requestID)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            // A request the upgrader looked at never comes here with its head (NIO does not
            // buffer it), only with its end: see below.
            if case .refused(let refusal, let requestID, _) = handshake.get() {
                self.refusal = (refusal, requestID)
            } else {
                // Not an upgrade request (or not one the upgrader looked at): same checks, and a
                // valid one is told to upgrade.
                let headers = head.headers.map { ($0.name, $0.value) }
                let requestID = UUID().uuidString.lowercased()
                switch checks.evaluate(uri: head.uri, headers: headers) {
                case .failure(let refusal): self.refusal = (refusal, requestID)
                case .success: self.refusal = (.upgradeRequired, requestID)
                }
            }
        case .body:
            break
        case .end:
            if self.refusal == nil, case .refused(let refusal, let requestID, _) = handshake.get() {
                self.refusal = (refusal, requestID)
            }
            guard let (refusal, requestID) = self.refusal else { return }
            self.refusal = nil
            respond(context: context, refusal, requestID: requestID)
        }
    }

    private func respond(context: ChannelHandlerContext, _ refusal: ListenRefusal, requestID: String) {
        // One answer per connection, which then closes.
        guard !responded else { return }
        responded = true
        // Status, request id and error only: never a header value (a key) of the request; the
        // origin of a refused web page is no secret, and says what to allow if it was wanted.
        var metadata: Logger.Metadata = [
            "status": "\(refusal.status)", "request_id": "\(requestID)", "error": "\(refusal.code)",
        ]
        if let origin = refusal.refusedOrigin {
            metadata["origin"] = "\(origin)"
            logger.notice(
                "listen server refused a web page: its origin is not in [server] allowed_origins", metadata: metadata)
        } else {
            logger.info("listen server refused a stream", metadata: metadata)
        }
        let body = refusal.body(requestID: requestID)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "Content-Length", value: String(body.utf8.count))
        headers.add(name: "Connection", value: "close")
        headers.add(name: "dg-request-id", value: requestID)
        headers.add(name: "dg-error", value: refusal.message)
        if refusal.status == 426 { headers.add(name: "Upgrade", value: "websocket") }
        if let seconds = refusal.retryAfter { headers.add(name: "Retry-After", value: String(seconds)) }
        let head = HTTPResponseHead(
            version: .http1_1, status: HTTPResponseStatus(statusCode: refusal.status), headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: body)))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}

/// Lets a repeated event be logged at most once per interval, with how often it happened since.
final class LogThrottle: Sendable {
    private let interval: TimeAmount
    private let state = Mutex((count: 0, next: NIODeadline.uptimeNanoseconds(0)))

    init(interval: TimeAmount) { self.interval = interval }

    /// Counts one occurrence; calls `log` with the count so far when the interval has passed.
    func note(_ log: (Int) -> Void) {
        let due = state.withLock { state -> Int? in
            state.count += 1
            let now = NIODeadline.now()
            guard now >= state.next else { return nil }
            state.next = now + interval
            defer { state.count = 0 }
            return state.count
        }
        if let due { log(due) }
    }
}

/// Runs tasks on one event loop.
final class EventLoopExecutor: TaskExecutor {
    private let loop: any EventLoop

    init(_ loop: any EventLoop) { self.loop = loop }

    func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        let executor = asUnownedTaskExecutor()
        loop.execute { job.runSynchronously(on: executor) }
    }
}
