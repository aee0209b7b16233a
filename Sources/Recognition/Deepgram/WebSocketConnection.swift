import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization

/// A refused WebSocket handshake: the server answered with a plain HTTP response.
struct HandshakeRefusal: Error, Sendable, Equatable {
    var status: Int
    var headers: [(String, String)]
    var body: String

    static func == (lhs: HandshakeRefusal, rhs: HandshakeRefusal) -> Bool {
        lhs.status == rhs.status && lhs.body == rhs.body
    }

    func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
}

/// Why a connection ended.
enum WebSocketEnd: Sendable, Equatable {
    /// The server sent a close frame.
    case closed(code: UInt16, reason: String)
    /// The TCP connection ended without a close frame (1006 in WebSocket terms).
    case dropped(String)
}

/// An inbound message.
enum WebSocketMessage: Sendable, Equatable {
    case text(String)
    case binary(Int)
}

/// One client WebSocket connection on swift-nio: TLS from NIOSSL, the handshake from
/// NIOWebSocket's upgrader. Unlike WSClient, a refused handshake reports its HTTP status and
/// headers (the streaming protocol needs 401 vs 402 vs 429 vs 5xx), which is why the
/// connection is built here.
///
/// Inbound: each message goes to the `onMessage` handler given to `connect`, called on the
/// channel's event loop in `channelRead` as soon as its last frame is read: no queue and no
/// thread hop between the socket and the handler. Nothing is delivered after the
/// server's close frame, so once ``end`` returns the handler has been called for the last time.
///
/// Outbound: sending never waits: frames go to the channel from whatever thread sends them, in
/// the order sent (through the event loop's task queue, also from the loop itself). Audio thus
/// reaches the socket with one thread hop from the capture thread. Bound: at most
/// ``maxQueuedBytes`` (10 s of audio) may be queued but not yet written to the socket; past that
/// the connection counts as stalled and is aborted (``end`` says so), so its owner reconnects and
/// replays from its ledger instead of queueing without limit.
final class WebSocketConnection: Sendable {
    /// Called on the event loop for each message, in order; must not block.
    typealias MessageHandler = @Sendable (WebSocketMessage) -> Void

    /// Bytes that may wait to be written before the connection counts as stalled: 10 s of
    /// 16 kHz 16-bit audio (100 frames of 100 ms).
    static let maxQueuedBytes = 320_000
    /// How long the body of a refused handshake is read, for its message only: the status has
    /// already decided the outcome.
    static let refusalBodyTimeout = Duration.seconds(2)

    private let channel: any Channel
    private let endPromise: EventLoopPromise<WebSocketEnd>
    /// Set once a close frame went out or the connection stalled: nothing may follow.
    private let closed = Atomic<Bool>(false)
    /// When a frame was last queued (event loop clock, nanoseconds), for keep-alives.
    private let lastSent = Atomic<UInt64>(NIODeadline.now().uptimeNanoseconds)
    /// Bytes handed to ``send(binary:)`` and friends whose write has not completed yet.
    private let queuedBytes = Atomic<Int>(0)

    /// How the connection ended; waits until it does. Cancelling the waiting task aborts the
    /// connection (the wait still lasts until the channel has closed, which is soon).
    var end: WebSocketEnd {
        get async {
            await withTaskCancellationHandler {
                (try? await endPromise.futureResult.get()) ?? .dropped("connection ended")
            } onCancel: {
                abort()
            }
        }
    }

    /// Connects and performs the handshake, all within `timeout`: TCP connect, proxy tunnel, TLS,
    /// the upgrade, and for a refusal at most ``refusalBodyTimeout`` of its body. The channel
    /// lives on `eventLoop` (by default one of NIO's shared loops), where `onMessage` is called. Observes task
    /// cancellation: the channel is closed and `CancellationError` thrown at once.
    /// - Throws: ``HandshakeRefusal`` if the server answered without upgrading; `CancellationError`;
    ///   other errors for network and TLS failures and the timeout.
    static func connect(
        url: URL, headers: [(String, String)], tls: TLSConfiguration?, proxy: ProxySettings? = nil,
        timeout: Duration = .seconds(10), on eventLoop: (any EventLoop)? = nil, logger: Logger,
        onMessage: @escaping MessageHandler
    ) async throws -> WebSocketConnection {
        guard let host = url.host, let scheme = url.scheme?.lowercased() else {
            throw WebSocketError("the URL \(url.absoluteString) has no host")
        }
        try Task.checkCancellation()
        let secure = scheme == "wss"
        let port = url.port ?? (secure ? 443 : 80)
        let sslContext = try tls.map { try NIOSSLContext(configuration: $0) }
        let path = (url.path.isEmpty ? "/" : url.path) + (url.query.map { "?" + $0 } ?? "")
        let hostHeader = url.port.map { "\(host):\($0)" } ?? host
        let bareHost = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))

        let loop = eventLoop ?? MultiThreadedEventLoopGroup.singleton.next()
        let deadline = NIODeadline.now() + TimeAmount(timeout)
        let attempt = ConnectAttempt(promise: loop.makePromise())
        let timer = loop.scheduleTask(deadline: deadline) {
            attempt.fail(WebSocketError("the server did not complete the handshake within \(timeout)"))
        }
        attempt.promise.futureResult.whenComplete { _ in timer.cancel() }

        ClientBootstrap(group: loop)
            .connectTimeout(TimeAmount(timeout))
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try attempt.opened(channel)
                    // TLS and the upgrade go on the application side of a proxy tunnel, if any.
                    let setUp: @Sendable () throws -> EventLoopFuture<UpgradeOutcome> = {
                        if let sslContext {
                            // Host names go in SNI and are verified; IP addresses are checked against the certificate's IP SANs.
                            let sniName = Self.isIPAddress(bareHost) ? nil : bareHost
                            try channel.pipeline.syncOperations.addHandler(
                                NIOSSLClientHandler(context: sslContext, serverHostname: sniName))
                        }
                        return try Self.configureUpgrade(
                            channel, path: path, hostHeader: hostHeader, headers: headers, deadline: deadline,
                            onMessage: onMessage)
                    }
                    attempt.prepared(
                        channel,
                        try proxy.map {
                            try $0.establishTunnel(on: channel, to: bareHost, port: port, deadline: deadline)
                                .flatMapThrowing { try setUp() }.flatMap { $0 }
                        } ?? setUp())
                }
            }
            .connect(host: proxy?.host ?? bareHost, port: proxy?.port ?? port)
            .whenComplete { result in
                switch result {
                case .success(let channel): attempt.connected(channel)
                case .failure(let error): attempt.fail(error)
                }
            }

        // A future's get() does not observe task cancellation: settle the attempt instead.
        return try await withTaskCancellationHandler {
            try await attempt.promise.futureResult.get()
        } onCancel: {
            attempt.fail(CancellationError())
        }
    }

    /// Wraps an upgraded channel; runs on its event loop, before any frame is read.
    fileprivate init(upgraded channel: any Channel, onMessage: @escaping MessageHandler) throws {
        self.channel = channel
        endPromise = channel.eventLoop.makePromise()
        do {
            try channel.pipeline.syncOperations.addHandler(
                WebSocketClientHandler(onMessage: onMessage, end: endPromise))
        } catch {
            endPromise.succeed(.dropped("\(error)"))
            throw error
        }
    }

    /// Queues a text frame; frames go out in the order queued.
    func send(text: String) {
        var buffer = channel.allocator.buffer(capacity: text.utf8.count)
        buffer.writeString(text)
        write(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: buffer))
    }

    /// Queues a binary frame (never an empty one: servers read that as end of stream).
    func send(binary samples: [Int16]) {
        guard !samples.isEmpty else { return }
        var buffer = channel.allocator.buffer(capacity: samples.count * 2)
        #if _endian(little)
            _ = samples.withUnsafeBytes { buffer.writeBytes($0) }
        #else
            for sample in samples { buffer.writeInteger(sample, endianness: .little) }
        #endif
        write(WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: buffer))
    }

    /// Queues a binary frame of raw bytes, as given (tests send odd lengths and garbage with it).
    func send(bytes: [UInt8]) {
        var buffer = channel.allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        write(WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: buffer))
    }

    /// Sends a close frame and stops writing.
    func close(code: UInt16 = 1000) {
        var buffer = channel.allocator.buffer(capacity: 2)
        buffer.writeInteger(code)
        write(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: buffer))
    }

    /// Drops the connection at once.
    func abort() {
        channel.close(promise: nil)
    }

    /// Sends `text` whenever nothing else went out for `interval`, until the connection ends.
    func keepAlive(_ text: String, every interval: Duration) {
        keepAlive(every: interval) { [self] in send(text: text) }
    }

    /// Calls `due` on the event loop whenever nothing went out for `interval`, until the
    /// connection ends; `due` sends a keep-alive, or nothing when none is wanted any more.
    func keepAlive(every interval: Duration, due: @escaping @Sendable () -> Void) {
        let quietLimit = TimeAmount(interval)
        // One timer, armed for when the connection would have been quiet that long.
        @Sendable func arm(at deadline: NIODeadline) {
            channel.eventLoop.scheduleTask(deadline: deadline) { [self] in
                guard channel.isActive, !closed.load(ordering: .relaxed) else { return }
                let quietSince = NIODeadline.uptimeNanoseconds(lastSent.load(ordering: .relaxed))
                let now = NIODeadline.now()
                if now >= quietSince + quietLimit {
                    due()
                    arm(at: now + quietLimit)
                } else {
                    arm(at: quietSince + quietLimit)
                }
            }
        }
        arm(at: .uptimeNanoseconds(lastSent.load(ordering: .relaxed)) + quietLimit)
    }

    private func write(_ frame: WebSocketFrame) {
        guard !closed.load(ordering: .acquiring) else { return }
        if frame.opcode == .connectionClose, closed.exchange(true, ordering: .acquiringAndReleasing) { return }
        lastSent.store(NIODeadline.now().uptimeNanoseconds, ordering: .relaxed)
        let size = frame.data.readableBytes
        let queued = queuedBytes.add(size, ordering: .relaxed).newValue
        guard queued <= Self.maxQueuedBytes else {
            stall(queued: queued)
            return
        }
        // Always through the task queue: a write made on the loop itself must not overtake one
        // queued earlier from another thread.
        let channel = channel
        channel.eventLoop.execute {
            channel.writeAndFlush(frame).whenComplete { _ in
                self.queuedBytes.subtract(size, ordering: .relaxed)
            }
        }
    }

    /// The socket takes nothing: give up on this connection rather than queue more.
    private func stall(queued: Int) {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let (channel, endPromise) = (channel, endPromise)
        channel.eventLoop.execute {
            // Ended before the close, so the reason is the stall and not the dropped socket.
            endPromise.succeed(.dropped("the connection stalled with \(queued) bytes waiting to be written"))
            channel.close(promise: nil)
        }
    }

    /// The HTTP/1 upgrade request and NIOWebSocket's upgrader; a refusal is read by a recorder.
    private static func configureUpgrade(
        _ channel: any Channel, path: String, hostHeader: String, headers: [(String, String)], deadline: NIODeadline,
        onMessage: @escaping MessageHandler
    ) throws -> EventLoopFuture<UpgradeOutcome> {
        var requestHeaders = HTTPHeaders()
        requestHeaders.add(name: "Host", value: hostHeader)
        for (name, value) in headers { requestHeaders.add(name: name, value: value) }
        let upgrader = NIOTypedWebSocketClientUpgrader<UpgradeOutcome>(
            maxFrameSize: 1 << 20,
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture {
                    .upgraded(try WebSocketConnection(upgraded: channel, onMessage: onMessage))
                }
            })
        let configuration = NIOTypedHTTPClientUpgradeConfiguration<UpgradeOutcome>(
            upgradeRequestHead: HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: requestHeaders),
            upgraders: [upgrader],
            notUpgradingCompletionHandler: { channel in
                channel.eventLoop.makeCompletedFuture {
                    // NIO replays the buffered response after this returns; the recorder reads it.
                    let bodyDeadline = min(deadline, .now() + TimeAmount(refusalBodyTimeout))
                    let recorder = RefusalRecorder(promise: channel.eventLoop.makePromise(), deadline: bodyDeadline)
                    try channel.pipeline.syncOperations.addHandler(recorder)
                    return .refused(recorder.promise.futureResult)
                }
            })
        var pipeline = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: configuration)
        pipeline.leftOverBytesStrategy = .forwardBytes
        return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(configuration: pipeline)
    }

    static func isIPAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        var v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }
}

/// A transport error other than a refused handshake.
struct WebSocketError: Error, Sendable, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

enum UpgradeOutcome: Sendable {
    case upgraded(WebSocketConnection)
    case refused(EventLoopFuture<HandshakeRefusal>)
}

/// Settles one connection attempt once: by the handshake, the deadline or cancellation.
/// Whichever comes later finds it settled: a late channel is refused, a late upgrade aborted.
///
/// Happy Eyeballs may open several channels (IPv6 and IPv4) and close the losers; only the
/// handshake on the channel that won the race decides.
private final class ConnectAttempt: Sendable {
    let promise: EventLoopPromise<WebSocketConnection>
    private struct State {
        var settled = false
        var channels: [(channel: any Channel, handshake: EventLoopFuture<UpgradeOutcome>?)] = []
    }
    private let state = Mutex(State())

    init(promise: EventLoopPromise<WebSocketConnection>) { self.promise = promise }

    /// Records a channel so giving up can close it; throws if the attempt is already over.
    func opened(_ channel: any Channel) throws {
        try state.withLock { state in
            guard !state.settled else { throw WebSocketError("the connection attempt was abandoned") }
            state.channels.append((channel, nil))
        }
    }

    /// The handshake under way on `channel`.
    func prepared(_ channel: any Channel, _ handshake: EventLoopFuture<UpgradeOutcome>) {
        state.withLock { state in
            guard let index = state.channels.firstIndex(where: { $0.channel === channel }) else { return }
            state.channels[index].handshake = handshake
        }
    }

    /// `channel` won the connection race: its handshake's outcome settles the attempt.
    func connected(_ channel: any Channel) {
        let handshake = state.withLock { state in state.channels.first { $0.channel === channel }?.handshake }
        guard let handshake else {
            fail(WebSocketError("the connection has no handshake under way"))
            return
        }
        handshake.whenComplete { result in
            switch result {
            case .success(.upgraded(let connection)): self.succeed(connection)
            case .success(.refused(let refusal)): refusal.whenSuccess { self.fail($0) }
            case .failure(let error): self.fail(error)
            }
        }
    }

    private func succeed(_ connection: WebSocketConnection) {
        let won = state.withLock { state in
            defer {
                state.settled = true
                state.channels = []
            }
            return !state.settled
        }
        if won { promise.succeed(connection) } else { connection.abort() }
    }

    func fail(_ error: any Error) {
        let channels = state.withLock { state -> [any Channel]? in
            guard !state.settled else { return nil }
            state.settled = true
            defer { state.channels = [] }
            return state.channels.map(\.channel)
        }
        guard let channels else { return }
        for channel in channels { channel.close(promise: nil) }
        promise.fail(error)
    }
}
