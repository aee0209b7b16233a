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
    /// The web pages that may use the server; a handshake with any other `Origin` gets HTTP 403.
    public var allowedOrigins: Set<WebOrigin>
    /// A stream that gets no audio and no text message for this long is closed with 1011 `NET-0001`.
    var idleTimeout: Duration
    /// How long a stream may take to deliver its last finals after `CloseStream` or at shutdown.
    var flushTimeout: Duration
    /// The model `Results` and `Metadata` name.
    public var model: ServerMessages.ModelInfo
    /// Connections open at most, handshakes and streams together; one more is accepted and
    /// closed at once. Well below the descriptor limit, so that clients holding sockets open
    /// cannot starve the rest of sttd (the microphone, D-Bus, memfds) of descriptors.
    var maxConnections: Int
    /// A connection that has not sent its whole handshake request (TLS included) by then is closed.
    var handshakeTimeout: Duration

    public init(
        host: String, port: Int, key: APIKey? = nil, tls: TLSConfiguration? = nil, maxStreams: Int = 4,
        allowedOrigins: Set<WebOrigin> = [], idleTimeout: Duration = .seconds(10),
        flushTimeout: Duration = .seconds(30),
        model: ServerMessages.ModelInfo = .init(name: "sttd-local"),
        maxConnections: Int = ListenServerSettings.defaultMaxConnections, handshakeTimeout: Duration = .seconds(5)
    ) {
        self.host = host
        self.port = port
        self.key = key
        self.tls = tls
        self.maxStreams = maxStreams
        self.allowedOrigins = allowedOrigins
        self.idleTimeout = idleTimeout
        self.flushTimeout = flushTimeout
        self.model = model
        self.maxConnections = maxConnections
        self.handshakeTimeout = handshakeTimeout
    }

    /// 128, or a quarter of the soft descriptor limit when that is lower: above the most
    /// streams there can be (`max_streams` is at most 64), far below the 1024 a session usually gets.
    public static var defaultMaxConnections: Int {
        var limit = rlimit()
        // RLIM_INFINITY is the largest rlim_t, so it takes the 128 too.
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return 128 }
        return Int(min(128, max(8, limit.rlim_cur / 4)))
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
    private let serverChannel: NIOAsyncChannel<PendingConnection, Never>
    private let settings: ListenServerSettings
    private let recognizer: any Recognizer
    private let logger: Logger
    private let slots: Slots
    private let connections: Slots

    /// A handshake's outcome, as the pipeline hands it to `run()`.
    enum Upgrade: Sendable {
        case stream(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>)
        /// Answered with an HTTP error by ``RefusalResponder``; nothing more to do.
        case refused
    }

    /// An accepted connection, as the pipeline hands it to `run()`.
    struct PendingConnection: Sendable {
        /// The request once its checks passed (its session is then `run()`'s to start); fails
        /// when the request was refused or the connection closed first.
        let request: EventLoopFuture<AcceptedRequest>
        /// The upgrade's outcome, once the request has been answered.
        let upgrade: EventLoopFuture<Upgrade>

        var eventLoop: any EventLoop { upgrade.eventLoop }
    }

    private init(
        channel: NIOAsyncChannel<PendingConnection, Never>, settings: ListenServerSettings,
        recognizer: any Recognizer, slots: Slots, connections: Slots, logger: Logger
    ) {
        serverChannel = channel
        self.settings = settings
        self.recognizer = recognizer
        self.slots = slots
        self.connections = connections
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
        let slots = Slots(limit: settings.maxStreams)
        let connections = Slots(limit: settings.maxConnections)
        let turnedAway = LogThrottle(interval: .seconds(10))
        let checks = HandshakeChecks(key: settings.key, allowedOrigins: settings.allowedOrigins)
        let handshakeTimeout = TimeAmount(settings.handshakeTimeout)
        let maxConnections = settings.maxConnections
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 64)
            .bind(host: settings.host, port: settings.port) { channel -> EventLoopFuture<PendingConnection> in
                // Runs before the connection is registered: a refused one never reads a byte.
                guard connections.acquire() else {
                    channel.close(promise: nil)
                    turnedAway.note { count in
                        logger.warning(
                            "listen server: too many connections open; new ones are closed at once",
                            metadata: ["max_connections": "\(maxConnections)", "closed": "\(count)"])
                    }
                    return channel.eventLoop.makeFailedFuture(ChannelError.ioOnClosedChannel)
                }
                channel.closeFuture.whenComplete { _ in connections.release() }
                let timer = channel.eventLoop.scheduleTask(in: handshakeTimeout) {
                    logger.debug("listen server: closed a connection that sent no handshake in time")
                    channel.close(promise: nil)
                }
                channel.closeFuture.whenComplete { _ in timer.cancel() }
                return channel.eventLoop.makeCompletedFuture {
                    if let sslContext {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                    }
                    return try configureHandshake(channel, checks: checks, slots: slots, timer: timer, logger: logger)
                }
            }
        return ListenServer(
            channel: channel, settings: settings, recognizer: recognizer, slots: slots, connections: connections,
            logger: logger)
    }

    /// Streams open now.
    var openStreams: Int { slots.inUse }
    /// Connections open now: streams, and clients still in their handshake.
    var openConnections: Int { connections.inUse }

    /// Accepts connections until graceful shutdown or cancellation; each stream is a child task.
    public func run() async throws {
        logger.info("listen server accepting", metadata: ["address": "\(address)"])
        let (settings, recognizer, logger, serverChannel) = (settings, recognizer, logger, serverChannel)
        try await withGracefulShutdownHandler {
            try await serverChannel.executeThenClose { inbound in
                // Accepting and each connection's task run on event loops: a handshake waits for
                // them (to start the session), never for a shared pool other work may hold.
                try await withTaskExecutorPreference(EventLoopExecutor(serverChannel.channel.eventLoop)) {
                    try await withThrowingDiscardingTaskGroup { group in
                        for try await connection in inbound {
                            group.addTask(executorPreference: EventLoopExecutor(connection.eventLoop)) {
                                // Refused or gone before its request was in: the pipeline answered it.
                                guard let accepted = try? await connection.request.get() else { return }
                                await ListenStream(
                                    request: accepted.request, requestID: accepted.requestID, settings: settings,
                                    recognizer: recognizer, logger: logger
                                ).serve(accepted, upgrade: connection.upgrade)
                            }
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
    /// `shouldUpgrade`, which then waits for `run()` to start the stream's session (so that an
    /// engine that cannot take it is answered with an HTTP error, not an upgrade); a refusal is
    /// answered by ``RefusalResponder``.
    private static func configureHandshake(
        _ channel: any Channel, checks: HandshakeChecks, slots: Slots, timer: Scheduled<Void>, logger: Logger
    ) throws -> PendingConnection {
        let handshake = HandshakeState()
        let requested = channel.eventLoop.makePromise(of: AcceptedRequest.self)
        // Never left pending: a refusal or the socket's end leaves `run()` nothing to do.
        channel.closeFuture.whenComplete { _ in requested.fail(ChannelError.ioOnClosedChannel) }
        let upgrader = NIOTypedWebSocketServerUpgrader<Upgrade>(
            // A client may send up to a second of audio (32 KB) per frame, or more; 1 MB is plenty.
            maxFrameSize: 1 << 20,
            shouldUpgrade: { channel, head in
                let requestID = UUID().uuidString.lowercased()
                let headers = head.headers.map { ($0.name, $0.value) }
                switch checks.evaluate(uri: head.uri, headers: headers) {
                case .failure(let refusal):
                    handshake.set(.refused(refusal, requestID: requestID, afterRequest: false))
                    return channel.eventLoop.makeSucceededFuture(nil)
                case .success(let (request, subprotocol)):
                    guard slots.acquire() else {
                        handshake.set(.refused(.tooManyStreams, requestID: requestID, afterRequest: false))
                        return channel.eventLoop.makeSucceededFuture(nil)
                    }
                    // Given back when the stream sends its close frame (a client that read it may
                    // connect again at once), or at the latest when the socket closes.
                    let slot = Slots.Lease(slots)
                    channel.closeFuture.whenComplete { _ in slot.release() }
                    // The request is all in (it has no body): what remains is the server's to do.
                    timer.cancel()
                    let decision = channel.eventLoop.makePromise(of: HTTPHeaders?.self)
                    channel.closeFuture.whenComplete { _ in decision.succeed(nil) }
                    requested.succeed(
                        AcceptedRequest(
                            request: request, requestID: requestID, subprotocol: subprotocol, handshake: handshake,
                            decision: decision, slot: slot))
                    return decision.futureResult
                }
            },
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    guard case .accepted = handshake.get() else { return .refused }
                    try channel.pipeline.syncOperations.addHandler(
                        NIOWebSocketFrameAggregator(
                            minNonFinalFragmentSize: 0, maxAccumulatedFrameCount: 256,
                            maxAccumulatedFrameSize: 1 << 22))
                    return .stream(
                        try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(wrappingChannelSynchronously: channel))
                }
            })
        let configuration = NIOTypedHTTPServerUpgradeConfiguration<Upgrade>(
            upgraders: [upgrader],
            notUpgradingCompletionHandler: { channel in
                requested.fail(ChannelError.ioOnClosedChannel)
                return channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(
                        RefusalResponder(handshake: handshake, checks: checks, logger: logger))
                    return .refused
                }
            })
        let upgrade = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(
            configuration: NIOUpgradableHTTPServerPipelineConfiguration(upgradeConfiguration: configuration))
        return PendingConnection(request: requested.futureResult, upgrade: upgrade)
    }
}
