import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization

/// Reads frames on the event loop: messages straight to the handler, pongs and the close
/// handshake answered.
final class WebSocketClientHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame
    private let onMessage: WebSocketConnection.MessageHandler
    private let end: EventLoopPromise<WebSocketEnd>
    private var assembler = MessageAssembler()
    /// The server's close frame came: nothing it sends later counts.
    private var closeReceived = false

    init(onMessage: @escaping WebSocketConnection.MessageHandler, end: EventLoopPromise<WebSocketEnd>) {
        self.onMessage = onMessage
        self.end = end
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !closeReceived else { return }
        switch assembler.receive(unwrapInboundIn(data)) {
        case .message(let message):
            onMessage(message)
        case .ping(let data):
            context.writeAndFlush(
                wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, maskKey: .random(), data: data)),
                promise: nil)
        case .close(let code, let reason):
            closeReceived = true
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
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        end.succeed(.dropped("\(error)"))
        context.close(promise: nil)
    }
}

/// Reads the HTTP response of a refused handshake. The status line decides; the body is read
/// until its end, the connection's end or `deadline`, whichever comes first, for its message only.
final class RefusalRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    let promise: EventLoopPromise<HandshakeRefusal>
    private let deadline: NIODeadline
    private var refusal = HandshakeRefusal(status: 0, headers: [], body: "")
    private var timer: Scheduled<Void>?
    private var settled = false

    init(promise: EventLoopPromise<HandshakeRefusal>, deadline: NIODeadline) {
        self.promise = promise
        self.deadline = deadline
    }

    func handlerAdded(context: ChannelHandlerContext) {
        timer = context.eventLoop.assumeIsolated().scheduleTask(deadline: deadline) { [self] in
            settle(context)
        }
    }

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
            settle(context)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        settle(context)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        settle(context)
    }

    private func settle(_ context: ChannelHandlerContext) {
        guard !settled else { return }
        settled = true
        timer?.cancel()
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
