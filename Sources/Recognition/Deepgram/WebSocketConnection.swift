import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization

/// A refused WebSocket handshake: the server answered with a plain HTTP response.
public struct HandshakeRefusal: Error, Sendable, Equatable {
    public var status: Int
    public var headers: [(String, String)]
    public var body: String

    public static func == (lhs: HandshakeRefusal, rhs: HandshakeRefusal) -> Bool {
        lhs.status == rhs.status && lhs.body == rhs.body
    }

    public func header(_ name: String) -> String? {
        headers.first { $0.0.lowercased() == name.lowercased() }?.1
    }
}

/// Why a connection ended.
public enum WebSocketEnd: Sendable, Equatable {
    /// The server sent a close frame.
    case closed(code: UInt16, reason: String)
    /// The TCP connection ended without a close frame (1006 in WebSocket terms).
    case dropped(String)
}

/// An inbound message.
public enum WebSocketMessage: Sendable, Equatable {
    case text(String)
    case binary(Int)
}

/// One client WebSocket connection on swift-nio: TLS from NIOSSL, the handshake from
/// NIOWebSocket's upgrader. Unlike WSClient, a refused handshake reports its HTTP status and
/// headers (the streaming protocol needs 401 vs 402 vs 429 vs 5xx), which is why the
/// connection is built here.
///
/// Sending never waits: frames go to the channel from whatever thread sends them, in the order
/// sent (through the event loop's task queue, also from the loop itself). Audio thus reaches the
/// socket with one thread hop from the capture thread.
public final class WebSocketConnection: Sendable {
    /// Messages from the server; ends when the connection does.
    public let messages: AsyncStream<WebSocketMessage>
    private let channel: any Channel
    private let endPromise: EventLoopPromise<WebSocketEnd>
    /// Set once a close frame went out: nothing may follow it.
    private let closed = Atomic<Bool>(false)
    /// When a frame was last queued (event loop clock, nanoseconds), for keep-alives.
    private let lastSent = Atomic<UInt64>(NIODeadline.now().uptimeNanoseconds)

    /// How the connection ended (completes once).
    public var end: WebSocketEnd {
        get async { (try? await endPromise.futureResult.get()) ?? .dropped("connection ended") }
    }

    /// Connects and performs the handshake.
    /// - Throws: ``HandshakeRefusal`` if the server answered without upgrading; other errors for
    ///   network and TLS failures.
    public static func connect(
        url: URL, headers: [(String, String)], tls: TLSConfiguration?, proxy: ProxySettings? = nil,
        timeout: Duration = .seconds(10), logger: Logger
    ) async throws -> WebSocketConnection {
        guard let host = url.host, let scheme = url.scheme?.lowercased() else {
            throw WebSocketError("the URL \(url.absoluteString) has no host")
        }
        let secure = scheme == "wss"
        let port = url.port ?? (secure ? 443 : 80)
        let sslContext = try tls.map { try NIOSSLContext(configuration: $0) }
        let path = (url.path.isEmpty ? "/" : url.path) + (url.query.map { "?" + $0 } ?? "")
        let hostHeader = url.port.map { "\(host):\($0)" } ?? host
        let bareHost = host.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))

        let opened = Mutex<(any Channel)?>(nil)
        let upgradeResult = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(TimeAmount(timeout))
            .connect(host: proxy?.host ?? bareHost, port: proxy?.port ?? port) { channel in
                opened.withLock { $0 = channel }
                return channel.eventLoop.makeCompletedFuture {
                    // TLS and the upgrade go on the application side of a proxy tunnel, if any.
                    let setUp: @Sendable () throws -> EventLoopFuture<UpgradeOutcome> = {
                        if let sslContext {
                            // Host names go in SNI and are verified; IP addresses are checked against the certificate's IP SANs.
                            let sniName = Self.isIPAddress(bareHost) ? nil : bareHost
                            try channel.pipeline.syncOperations.addHandler(
                                NIOSSLClientHandler(context: sslContext, serverHostname: sniName))
                        }
                        return try Self.configureUpgrade(
                            channel, path: path, hostHeader: hostHeader, headers: headers)
                    }
                    guard let proxy else { return try setUp() }
                    let deadline = NIODeadline.now() + TimeAmount(timeout)
                    return try proxy.establishTunnel(on: channel, to: bareHost, port: port, deadline: deadline)
                        .flatMapThrowing { try setUp() }.flatMap { $0 }
                }
            }
        // The TCP connect has its own timeout; TLS and the HTTP upgrade are bounded here, so a
        // server that accepts and then says nothing cannot hang a start. (A future's get() does
        // not observe task cancellation, so the race is settled by whichever resumes first.)
        let outcome: UpgradeOutcome = try await withCheckedThrowingContinuation { continuation in
            let pending = Mutex<CheckedContinuation<UpgradeOutcome, any Error>?>(continuation)
            let take: @Sendable () -> CheckedContinuation<UpgradeOutcome, any Error>? = {
                pending.withLock { current -> CheckedContinuation<UpgradeOutcome, any Error>? in
                    defer { current = nil }
                    return current
                }
            }
            let timer = upgradeResult.eventLoop.scheduleTask(
                in: TimeAmount(timeout)
            ) {
                guard let waiting = take() else { return }
                opened.withLock { $0?.close(promise: nil) }
                waiting.resume(throwing: WebSocketError("the server did not complete the handshake within \(timeout)"))
            }
            upgradeResult.whenComplete { result in
                timer.cancel()
                guard let waiting = take() else {
                    // Too late: the caller has given up on this connection.
                    if case .success(.upgraded(let connection)) = result { connection.abort() }
                    return
                }
                waiting.resume(with: result)
            }
        }
        switch outcome {
        case .upgraded(let connection):
            return connection
        case .refused(let refusal):
            throw try await refusal.get()
        }
    }

    /// Wraps an upgraded channel; runs on its event loop, before any frame is read.
    fileprivate init(upgraded channel: any Channel) throws {
        self.channel = channel
        let (messages, messagesContinuation) = AsyncStream<WebSocketMessage>.makeStream()
        self.messages = messages
        endPromise = channel.eventLoop.makePromise()
        try channel.pipeline.syncOperations.addHandler(
            WebSocketClientHandler(messages: messagesContinuation, end: endPromise))
    }

    /// Queues a text frame; frames go out in the order queued.
    public func send(text: String) {
        var buffer = channel.allocator.buffer(capacity: text.utf8.count)
        buffer.writeString(text)
        write(WebSocketFrame(fin: true, opcode: .text, maskKey: .random(), data: buffer))
    }

    /// Queues a binary frame (never an empty one: servers read that as end of stream).
    public func send(binary samples: [Int16]) {
        guard !samples.isEmpty else { return }
        var buffer = channel.allocator.buffer(capacity: samples.count * 2)
        #if _endian(little)
            _ = samples.withUnsafeBytes { buffer.writeBytes($0) }
        #else
            for sample in samples { buffer.writeInteger(sample, endianness: .little) }
        #endif
        write(WebSocketFrame(fin: true, opcode: .binary, maskKey: .random(), data: buffer))
    }

    /// Sends a close frame and stops writing.
    public func close(code: UInt16 = 1000) {
        var buffer = channel.allocator.buffer(capacity: 2)
        buffer.writeInteger(code)
        write(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: buffer))
    }

    /// Drops the connection at once.
    public func abort() {
        channel.close(promise: nil)
    }

    /// Sends `text` whenever nothing else went out for `interval`, until the connection ends.
    public func keepAlive(_ text: String, every interval: Duration) {
        let quietLimit = TimeAmount(interval)
        // One timer, armed for when the connection would have been quiet that long.
        @Sendable func arm(at deadline: NIODeadline) {
            channel.eventLoop.scheduleTask(deadline: deadline) { [self] in
                guard channel.isActive, !closed.load(ordering: .relaxed) else { return }
                let quietSince = NIODeadline.uptimeNanoseconds(lastSent.load(ordering: .relaxed))
                let now = NIODeadline.now()
                if now >= quietSince + quietLimit {
                    send(text: text)
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
        // Always through the task queue: a write made on the loop itself must not overtake one
        // queued earlier from another thread.
        let channel = channel
        channel.eventLoop.execute { channel.writeAndFlush(frame, promise: nil) }
    }

    /// The HTTP/1 upgrade request and NIOWebSocket's upgrader; a refusal is read by a recorder.
    private static func configureUpgrade(
        _ channel: any Channel, path: String, hostHeader: String, headers: [(String, String)]
    ) throws -> EventLoopFuture<UpgradeOutcome> {
        var requestHeaders = HTTPHeaders()
        requestHeaders.add(name: "Host", value: hostHeader)
        for (name, value) in headers { requestHeaders.add(name: name, value: value) }
        let upgrader = NIOTypedWebSocketClientUpgrader<UpgradeOutcome>(
            maxFrameSize: 1 << 20,
            upgradePipelineHandler: { channel, _ in
                channel.eventLoop.makeCompletedFuture { .upgraded(try WebSocketConnection(upgraded: channel)) }
            })
        let configuration = NIOTypedHTTPClientUpgradeConfiguration<UpgradeOutcome>(
            upgradeRequestHead: HTTPRequestHead(version: .http1_1, method: .GET, uri: path, headers: requestHeaders),
            upgraders: [upgrader],
            notUpgradingCompletionHandler: { channel in
                channel.eventLoop.makeCompletedFuture {
                    // NIO replays the buffered response after this returns; the recorder reads it.
                    let recorder = RefusalRecorder(promise: channel.eventLoop.makePromise())
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
public struct WebSocketError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

enum UpgradeOutcome: Sendable {
    case upgraded(WebSocketConnection)
    case refused(EventLoopFuture<HandshakeRefusal>)
}

/// Reads frames on the event loop: messages to the stream, pongs and the close handshake answered.
final class WebSocketClientHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame
    private let messages: AsyncStream<WebSocketMessage>.Continuation
    private let end: EventLoopPromise<WebSocketEnd>
    private var assembler = MessageAssembler()

    init(messages: AsyncStream<WebSocketMessage>.Continuation, end: EventLoopPromise<WebSocketEnd>) {
        self.messages = messages
        self.end = end
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch assembler.receive(unwrapInboundIn(data)) {
        case .message(let message):
            messages.yield(message)
        case .ping(let data):
            context.writeAndFlush(
                wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: data)),
                promise: nil)
        case .close(let code, let reason):
            // Answer the close handshake, then let the server close the socket.
            var buffer = context.channel.allocator.buffer(capacity: 2)
            buffer.writeInteger(code)
            context.writeAndFlush(
                wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, maskKey: .random(), data: buffer)),
                promise: nil)
            end.succeed(.closed(code: code, reason: reason))
        case .none:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        end.succeed(.dropped("the server closed the connection without a close frame"))
        messages.finish()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        end.succeed(.dropped("\(error)"))
        context.close(promise: nil)
    }
}

/// Reads the HTTP response of a refused handshake.
final class RefusalRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    let promise: EventLoopPromise<HandshakeRefusal>
    private var refusal = HandshakeRefusal(status: 0, headers: [], body: "")

    init(promise: EventLoopPromise<HandshakeRefusal>) { self.promise = promise }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            refusal.status = Int(head.status.code)
            refusal.headers = head.headers.map { ($0.name, $0.value) }
        case .body(var body):
            if refusal.body.utf8.count < 4096 {
                refusal.body += body.readString(length: min(body.readableBytes, 4096)) ?? ""
            }
        case .end:
            promise.succeed(refusal)
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.succeed(refusal)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.succeed(refusal)
        context.close(promise: nil)
    }
}

/// Joins fragmented frames into messages and picks out control frames.
struct MessageAssembler {
    enum Output { case message(WebSocketMessage), ping(ByteBuffer), close(UInt16, String) }
    private var fragments: ByteBuffer?
    private var fragmentsAreText = false

    mutating func receive(_ frame: WebSocketFrame) -> Output? {
        var data = frame.unmaskedData
        switch frame.opcode {
        case .text, .binary:
            if frame.fin { return .message(Self.message(data, text: frame.opcode == .text)) }
            fragments = data
            fragmentsAreText = frame.opcode == .text
            return nil
        case .continuation:
            guard var buffer = fragments else { return nil }
            buffer.writeBuffer(&data)
            guard buffer.readableBytes <= 1 << 22 else {
                fragments = nil
                return nil
            }
            fragments = buffer
            guard frame.fin else { return nil }
            fragments = nil
            return .message(Self.message(buffer, text: fragmentsAreText))
        case .ping:
            return .ping(data)
        case .connectionClose:
            let code = data.readInteger(as: UInt16.self) ?? 1005
            return .close(code, data.readString(length: data.readableBytes) ?? "")
        default:
            return nil
        }
    }

    private static func message(_ buffer: ByteBuffer, text: Bool) -> WebSocketMessage {
        text ? .text(String(buffer: buffer)) : .binary(buffer.readableBytes)
    }
}
