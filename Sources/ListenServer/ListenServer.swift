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

/// How the local `/v1/listen` server listens and whom it serves.
public struct ListenServerSettings: Sendable {
    public var host: String
    /// 0 picks a free port (``ListenServer/port`` says which).
    public var port: Int
    /// When set, every client must present it (`Authorization: Token KEY` or subprotocols `token, KEY`).
    public var key: APIKey?
    /// When set, the server speaks wss://.
    public var tls: TLSConfiguration?
    /// Open streams at most; one more gets HTTP 429.
    public var maxStreams: Int
    /// A stream that gets no audio and no text message for this long is closed with 1011 `NET-0001`.
    public var idleTimeout: Duration
    /// How long a stream may take to deliver its last finals after `CloseStream` or at shutdown.
    public var flushTimeout: Duration
    /// The model `Results` and `Metadata` name.
    public var model: ServerMessages.ModelInfo

    public init(
        host: String, port: Int, key: APIKey? = nil, tls: TLSConfiguration? = nil, maxStreams: Int = 4,
        idleTimeout: Duration = .seconds(10), flushTimeout: Duration = .seconds(30),
        model: ServerMessages.ModelInfo = .init(name: "sttd-local")
    ) {
        self.host = host
        self.port = port
        self.key = key
        self.tls = tls
        self.maxStreams = maxStreams
        self.idleTimeout = idleTimeout
        self.flushTimeout = flushTimeout
        self.model = model
    }
}

extension ListenServerSettings {
    /// Serves wss:// with a PEM certificate chain and private key.
    public mutating func useTLS(certificateFile: String, keyFile: String) throws {
        let chain = try NIOSSLCertificate.fromPEMFile(certificateFile).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(file: keyFile, format: .pem)
        tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
    }
}

/// A Deepgram-compatible streaming server (`GET /v1/listen` upgraded to a WebSocket) over any
/// ``Recognizer``: each stream is one recognition session of it.
///
/// Structure: ``bind(settings:recognizer:logger:)`` opens the socket (so the address is known
/// before the service starts); ``run()`` accepts connections, and each stream, with its session,
/// runs as a child task of `run()`. Graceful shutdown stops accepting, flushes every stream (its
/// last finals, then `Metadata`) and closes it with 1001.
public final class ListenServer: Service, Sendable {
    /// Where clients connect, e.g. `ws://127.0.0.1:8765` (the bound port, also when 0 was asked).
    public let address: String
    public let port: Int
    private let serverChannel: NIOAsyncChannel<EventLoopFuture<Upgrade>, Never>
    private let settings: ListenServerSettings
    private let recognizer: any Recognizer
    private let logger: Logger
    private let slots: StreamSlots

    /// A handshake's outcome, as the pipeline hands it to `run()`.
    enum Upgrade: Sendable {
        case stream(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, ListenRequest, requestID: String)
        /// Answered with an HTTP error by ``RefusalResponder``; nothing more to do.
        case refused
    }

    private init(
        channel: NIOAsyncChannel<EventLoopFuture<Upgrade>, Never>, settings: ListenServerSettings,
        recognizer: any Recognizer, slots: StreamSlots, logger: Logger
    ) {
        serverChannel = channel
        self.settings = settings
        self.recognizer = recognizer
        self.slots = slots
        self.logger = logger
        port = channel.channel.localAddress?.port ?? settings.port
        let host = settings.host.contains(":") ? "[\(settings.host)]" : settings.host
        address = "\(settings.tls == nil ? "ws" : "wss")://\(host):\(port)"
    }

    /// Opens the listening socket. Throws when the address cannot be bound or TLS set up.
    public static func bind(settings: ListenServerSettings, recognizer: any Recognizer, logger: Logger) async throws
        -> ListenServer
    {
        let sslContext = try settings.tls.map { try NIOSSLContext(configuration: $0) }
        let slots = StreamSlots(limit: settings.maxStreams)
        let key = settings.key
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 64)
            .bind(host: settings.host, port: settings.port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let sslContext {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                    }
                    return try configureHandshake(channel, key: key, slots: slots, logger: logger)
                }
            }
        return ListenServer(channel: channel, settings: settings, recognizer: recognizer, slots: slots, logger: logger)
    }

    /// Streams open now.
    public var openStreams: Int { slots.inUse }

    /// Accepts connections until graceful shutdown or cancellation; each stream is a child task.
    public func run() async throws {
        logger.info("listen server accepting", metadata: ["address": "\(address)"])
        let (settings, recognizer, logger, serverChannel) = (settings, recognizer, logger, serverChannel)
        try await withGracefulShutdownHandler {
            try await serverChannel.executeThenClose { inbound in
                try await withThrowingDiscardingTaskGroup { group in
                    for try await handshake in inbound {
                        group.addTask {
                            guard case .stream(let channel, let request, let requestID) = try? await handshake.get()
                            else { return }
                            await ListenStream(
                                request: request, requestID: requestID, settings: settings, recognizer: recognizer,
                                logger: logger
                            ).serve(channel)
                        }
                    }
                }
            }
        } onGracefulShutdown: {
            // Stop accepting; the streams see the shutdown themselves and flush.
            serverChannel.channel.close(promise: nil)
        }
        logger.info("listen server stopped", metadata: ["address": "\(address)"])
    }

    /// The HTTP/1 pipeline with the WebSocket upgrader: the handshake is checked in
    /// `shouldUpgrade`; a refusal is answered by ``RefusalResponder``.
    private static func configureHandshake(
        _ channel: any Channel, key: APIKey?, slots: StreamSlots, logger: Logger
    ) throws -> EventLoopFuture<Upgrade> {
        let handshake = HandshakeState()
        let upgrader = NIOTypedWebSocketServerUpgrader<Upgrade>(
            // A client may send up to a second of audio (32 KB) per frame, or more; 1 MB is plenty.
            maxFrameSize: 1 << 20,
            shouldUpgrade: { channel, head in
                let requestID = UUID().uuidString.lowercased()
                let headers = head.headers.map { ($0.name, $0.value) }
                switch ListenHandshake.evaluate(uri: head.uri, headers: headers, key: key) {
                case .failure(let refusal):
                    handshake.set(.refused(refusal, requestID: requestID))
                    return channel.eventLoop.makeSucceededFuture(nil)
                case .success(let (request, subprotocol)):
                    guard slots.acquire() else {
                        handshake.set(.refused(.tooManyStreams, requestID: requestID))
                        return channel.eventLoop.makeSucceededFuture(nil)
                    }
                    // The slot is the connection's for as long as its socket is open.
                    channel.closeFuture.whenComplete { _ in slots.release() }
                    handshake.set(.accepted(request, requestID: requestID))
                    var response = HTTPHeaders()
                    response.add(name: "dg-request-id", value: requestID)
                    if let subprotocol { response.add(name: "Sec-WebSocket-Protocol", value: subprotocol) }
                    return channel.eventLoop.makeSucceededFuture(response)
                }
            },
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    guard case .accepted(let request, let requestID) = handshake.get() else { return .refused }
                    try channel.pipeline.syncOperations.addHandler(
                        NIOWebSocketFrameAggregator(
                            minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 256,
                            maxAccumulatedFrameSize: 1 << 22))
                    let stream = try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(
                        wrappingChannelSynchronously: channel)
                    return .stream(stream, request, requestID: requestID)
                }
            })
        let configuration = NIOTypedHTTPServerUpgradeConfiguration<Upgrade>(
            upgraders: [upgrader],
            notUpgradingCompletionHandler: { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        RefusalResponder(handshake: handshake, key: key, logger: logger))
                    return .refused
                }
            })
        return try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(
            configuration: NIOUpgradableHTTPServerPipelineConfiguration(upgradeConfiguration: configuration))
    }
}

/// Counts open streams against `max_streams`.
final class StreamSlots: Sendable {
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
}

/// What `shouldUpgrade` decided for one connection, for the upgrade or the refusal that follows.
final class HandshakeState: Sendable {
    enum Decision: Sendable {
        case none
        case accepted(ListenRequest, requestID: String)
        case refused(ListenRefusal, requestID: String)
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
    private let key: APIKey?
    private let logger: Logger
    private var refusal: (ListenRefusal, String)?

    init(handshake: HandshakeState, key: APIKey?, logger: Logger) {
        self.handshake = handshake
        self.key = key
        self.logger = logger
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            // A request the upgrader looked at never comes here with its head (NIO does not
            // buffer it), only with its end: see below.
            if case .refused(let refusal, let requestID) = handshake.get() {
                self.refusal = (refusal, requestID)
            } else {
                // Not an upgrade request (or not one the upgrader looked at): same checks, and a
                // valid one is told to upgrade.
                let headers = head.headers.map { ($0.name, $0.value) }
                let requestID = UUID().uuidString.lowercased()
                switch ListenHandshake.evaluate(uri: head.uri, headers: headers, key: key) {
                case .failure(let refusal): self.refusal = (refusal, requestID)
                case .success: self.refusal = (.upgradeRequired, requestID)
                }
            }
        case .body:
            break
        case .end:
            if self.refusal == nil, case .refused(let refusal, let requestID) = handshake.get() {
                self.refusal = (refusal, requestID)
            }
            guard let (refusal, requestID) = self.refusal else { return }
            self.refusal = nil
            respond(context: context, refusal, requestID: requestID)
        }
    }

    private func respond(context: ChannelHandlerContext, _ refusal: ListenRefusal, requestID: String) {
        // Status, request id and error only: never a header value (a key) of the request.
        logger.info(
            "listen server refused a stream",
            metadata: ["status": "\(refusal.status)", "request_id": "\(requestID)", "error": "\(refusal.code)"])
        let body = refusal.body(requestID: requestID)
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "application/json")
        headers.add(name: "Content-Length", value: String(body.utf8.count))
        headers.add(name: "Connection", value: "close")
        headers.add(name: "dg-request-id", value: requestID)
        headers.add(name: "dg-error", value: refusal.message)
        if refusal.status == 426 { headers.add(name: "Upgrade", value: "websocket") }
        let head = HTTPResponseHead(
            version: .http1_1, status: HTTPResponseStatus(statusCode: refusal.status), headers: headers)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: body)))), promise: nil)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
    }
}
