import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization

/// An in-process server speaking the Deepgram `/v1/listen` protocol on loopback.
///
/// Its transcript depends on the audio it actually received: one word per 100 ms of audio, made
/// from a checksum of those bytes, finals every second of audio. Lost audio shows up as missing
/// words, replayed audio (if the client did not drop the duplicate finals) as repeated ones.
public final class DeepgramTestServer: Sendable {
    /// What the server does; set before clients connect.
    public struct Script: Sendable {
        public var key = "test-key-0123456789"
        public var subprotocolAuth = false
        /// Statuses for the first handshakes (e.g. [429] refuses once); later ones upgrade.
        public var refusals: [Int] = []
        /// Refuses every handshake after the first upgraded one with this status.
        public var refuseReconnects: Int?
        /// Closes the first connection's socket without a close frame after this many audio bytes.
        public var dropAfterBytes: Int?
        /// Closes the first connection's socket without a close frame this long after the upgrade.
        public var dropAfter: Duration?
        /// Dies as a killed server would after the first connection got this many audio bytes: that
        /// socket closes without a close frame, and every later connection is closed at once.
        public var dieAfterBytes: Int?
        /// Sends a close frame with this code and reason after this many audio bytes (first connection).
        public var closeAfterBytes: (bytes: Int, code: UInt16, reason: String)?
        /// Sends Metadata first (as SubQ may) instead of last (as Deepgram does).
        public var metadataFirst = false
        /// Text frames sent right after the upgrade (unknown types, malformed JSON...).
        public var extraMessages: [String] = []
        /// Sends words as [word, start_ms, end_ms] arrays, as SubQ's docs show.
        public var tupleWords = false
        /// Accepts TCP connections and never answers anything.
        public var neverAnswer = false
        /// Refusals send their head and half their body, then nothing (the socket stays open).
        public var stallRefusalBody = false
        /// The first connection stops reading its socket after this many audio bytes.
        public var stopReadingAfterBytes: Int?
        /// For latency benchmarks: this many extra interims per audio frame, each with the
        /// transcript `s<CLOCK_MONOTONIC nanoseconds at sending>`.
        public var stampedInterimsPerFrame = 0
        /// The words every result is made of, in turn (one per 100 ms of audio), instead of
        /// words computed from the audio: e.g. non-ASCII text to type.
        public var vocabulary: [String] = []
        /// The finals sent in turn, one per second of audio (then empty ones), whatever the audio
        /// says; an interim shows the next one. E.g. text carrying voice commands.
        public var finals: [String] = []
        /// Indices of scripted finals sent without `speech_final`: their utterance goes on.
        public var continuing: Set<Int> = []
        /// Scripted finals wait for ``DeepgramTestServer/permitFinals(_:)``, one permit each
        /// (a Finalize or CloseStream still flushes everything).
        public var gatedFinals = false
        public init() {}
    }

    /// What one connection saw.
    public struct Connection: Sendable {
        public var uri = ""
        public var headers: [(String, String)] = []
        public var upgraded = false
        public var audioBytes = 0
        public var emptyBinaryFrames = 0
        /// Client text messages with the audio byte count at their arrival.
        public var controls: [(type: String, atByte: Int)] = []
        public var finalsSent: [String] = []
        public var clientClosed = false
        /// The socket is still open.
        public var open = true
        /// When the server accepted the TCP connection.
        public var accepted = ContinuousClock.now
        /// The audio received (its first minute; see ``ReceivedAudio``).
        public var audio = ReceivedAudio()

        public func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name.lowercased() }?.1
        }
        public var query: [(String, String)] {
            URLComponents(string: uri)?.queryItems?.map { ($0.name, $0.value ?? "") } ?? []
        }
    }

    public let port: Int
    public let script: Script
    private let records = Watched<[Connection]>([])
    private let finalPermits = Mutex(0)
    /// When the server died (``Script/dieAfterBytes``), if it did.
    private let died = Mutex<ContinuousClock.Instant?>(nil)
    private let channel: any Channel

    /// Starts listening on 127.0.0.1; with `tls`, speaks wss with that certificate.
    public init(script: Script = Script(), tls: (certificate: String, key: String)? = nil) async throws {
        self.script = script
        let sslContext = try tls.map {
            try NIOSSLContext(
                configuration: .makeServerConfiguration(
                    certificateChain: try NIOSSLCertificate.fromPEMFile($0.certificate).map { .certificate($0) },
                    privateKey: .privateKey(try NIOSSLPrivateKey(file: $0.key, format: .pem))))
        }
        let server = ServerBox()
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard let owner = server.owner, owner.diedAt == nil else { throw ChannelError.ioOnClosedChannel }
                    if let sslContext {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                    }
                    let index = owner.records.update { records in
                        records.append(Connection())
                        return records.count - 1
                    }
                    channel.closeFuture.whenComplete { _ in owner.update(index) { $0.open = false } }
                    // No handlers: what the client sends is dropped, nothing is ever answered.
                    if owner.script.neverAnswer { return }
                    let session = ServerSession(server: owner, index: index)
                    let refusing = RefusingHTTPHandler(session: session)
                    let boundRefusing = NIOLoopBound(refusing, eventLoop: channel.eventLoop)
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: 1 << 20, automaticErrorHandling: true,
                        shouldUpgrade: { channel, head in
                            channel.eventLoop.makeSucceededFuture(session.shouldUpgrade(head))
                        },
                        upgradePipelineHandler: { channel, _ in
                            channel.pipeline.syncOperations.removeHandler(boundRefusing.value).flatMap {
                                channel.eventLoop.makeCompletedFuture {
                                    try channel.pipeline.syncOperations.addHandler(
                                        WebSocketServerHandler(session: session))
                                }
                            }
                        })
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
                    try channel.pipeline.syncOperations.addHandler(refusing)
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress?.port ?? 0
        server.owner = self
    }

    /// `ws://127.0.0.1:PORT/v1/listen` (or wss://localhost:PORT/... for TLS).
    public func url(tls: Bool = false, host: String? = nil) -> String {
        "\(tls ? "wss" : "ws")://\(host ?? (tls ? "localhost" : "127.0.0.1")):\(port)/v1/listen"
    }

    public var connections: [Connection] { records.value }

    /// Lets `count` more gated finals go out (``Script/gatedFinals``), as audio arrives.
    public func permitFinals(_ count: Int = 1) { finalPermits.withLock { $0 += count } }

    func takeFinalPermit() -> Bool {
        finalPermits.withLock { permits in
            guard permits > 0 else { return false }
            permits -= 1
            return true
        }
    }

    /// Waits until the connections seen so far satisfy `condition`; throws ``WaitTimedOut`` if
    /// they do not within `timeout`.
    public func wait(
        _ what: @autoclosure () -> String = "the awaited connections", timeout: Duration = .seconds(30),
        fileID: String = #fileID, line: Int = #line, until condition: @escaping @Sendable ([Connection]) -> Bool
    ) async throws {
        try await records.wait(what(), timeout: timeout, fileID: fileID, line: line, until: condition)
    }

    /// Whether the connections come to satisfy `condition` within `timeout` (use the answer).
    public func happens(within timeout: Duration, _ condition: @escaping @Sendable ([Connection]) -> Bool) async
        -> Bool
    {
        await records.happens(within: timeout, condition)
    }

    /// Sockets still open.
    public var openConnections: Int { connections.filter(\.open).count }

    /// Every final the server sent, in order, across connections.
    public var finalsSent: [String] { connections.flatMap(\.finalsSent) }

    func update(_ index: Int, _ change: (inout Connection) -> Void) {
        records.update { change(&$0[index]) }
    }

    public func stop() {
        channel.close(promise: nil)
    }

    /// When the server died (``Script/dieAfterBytes``); nil while it lives.
    public var diedAt: ContinuousClock.Instant? { died.withLock { $0 } }

    func die() {
        died.withLock { $0 = $0 ?? .now }
        stop()
    }

    deinit { channel.close(promise: nil) }

    /// The words the server makes of a stretch of audio: one per full 100 ms.
    public static func words(for audio: [UInt8]) -> [String] {
        stride(from: 0, to: audio.count - 3199, by: 3200).map { start in
            let sum = audio[start..<start + 3200].enumerated().reduce(0) {
                ($0 &+ Int($1.element) &* ($1.offset % 7 + 1)) % 99_991
            }
            return "w\(sum)"
        }
    }
}

/// Lets the child initializer reach the server once init has finished.
final class ServerBox: @unchecked Sendable {
    // Safety: written once in init before the server accepts its first connection's upgrade.
    weak var owner: DeepgramTestServer?
}

/// One connection's protocol state, on its event loop.
final class ServerSession: @unchecked Sendable {
    // Safety: used only on the connection's event loop (NIO calls handlers there).
    let server: DeepgramTestServer
    let index: Int
    var refusal: Int?
    var audio: [UInt8] = []
    var finalizedBytes = 0
    var interimSentFor = 0
    var scriptedFinalsSent = 0

    init(server: DeepgramTestServer, index: Int) {
        self.server = server
        self.index = index
    }

    /// Whether this is the first connection that upgraded (scripted failures hit only that one).
    lazy var isFirst: Bool = index == server.connections.firstIndex { $0.upgraded } ?? index

    func shouldUpgrade(_ head: HTTPRequestHead) -> HTTPHeaders? {
        let headers = head.headers.map { ($0.name, $0.value) }
        server.update(index) {
            $0.uri = head.uri
            $0.headers = headers
        }
        let script = server.script
        let handshakesSoFar = index
        if handshakesSoFar < script.refusals.count {
            refusal = script.refusals[handshakesSoFar]
            return nil
        }
        if let status = script.refuseReconnects, server.connections.contains(where: \.upgraded) {
            refusal = status
            return nil
        }
        var response = HTTPHeaders()
        if script.subprotocolAuth {
            guard head.headers["Sec-WebSocket-Protocol"].first == "token, \(script.key)" else {
                refusal = 401
                return nil
            }
            response.add(name: "Sec-WebSocket-Protocol", value: "token")
        } else {
            guard head.headers["Authorization"].first == "Token \(script.key)" else {
                refusal = 401
                return nil
            }
        }
        server.update(index) { $0.upgraded = true }
        response.add(name: "dg-request-id", value: "req-\(index)")
        return response
    }
}

/// Answers a handshake that was not upgraded with the scripted status, as Deepgram does.
final class RefusingHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let session: ServerSession

    init(session: ServerSession) { self.session = session }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard case .end = unwrapInboundIn(data) else { return }
        let status = session.refusal ?? 400
        let codes = [
            401: "INVALID_AUTH", 402: "ASR_PAYMENT_REQUIRED", 429: "TOO_MANY_REQUESTS", 503: "SERVICE_UNAVAILABLE",
        ]
        let code = codes[status] ?? "BAD_REQUEST"
        let body =
            #"{"err_code":"\#(code)","err_msg":"scripted \#(status) from the test server","request_id":"req-\#(session.index)"}"#
        var headers = HTTPHeaders()
        headers.add(name: "content-type", value: "application/json")
        headers.add(name: "content-length", value: String(body.utf8.count))
        headers.add(name: "dg-request-id", value: "req-\(session.index)")
        headers.add(name: "dg-error", value: "scripted \(code)")
        headers.add(name: "connection", value: "close")
        context.write(
            wrapOutboundOut(
                .head(HTTPResponseHead(version: .http1_1, status: .init(statusCode: status), headers: headers))),
            promise: nil)
        if session.server.script.stallRefusalBody {
            let half = String(body.prefix(body.utf8.count / 2))
            context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: half)))), promise: nil)
            return
        }
        context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(string: body)))), promise: nil)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in bound.value.close(promise: nil) }
    }
}

/// The protocol after the upgrade.
final class WebSocketServerHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame
    let session: ServerSession
    var server: DeepgramTestServer { session.server }
    var script: DeepgramTestServer.Script { server.script }
    var closing = false

    init(session: ServerSession) { self.session = session }

    func handlerAdded(context: ChannelHandlerContext) {
        if session.isFirst, let delay = script.dropAfter {
            let milliseconds = delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000
            let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(in: .milliseconds(milliseconds)) { bound.value.close(promise: nil) }
        }
        if script.metadataFirst { send(context, metadata()) }
        for message in script.extraMessages { send(context, message) }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        var payload = frame.unmaskedData
        switch frame.opcode {
        case .binary:
            let bytes = payload.readBytes(length: payload.readableBytes) ?? []
            if bytes.isEmpty { server.update(session.index) { $0.emptyBinaryFrames += 1 } }
            session.audio += bytes
            server.update(session.index) {
                $0.audioBytes += bytes.count
                $0.audio.append(bytes)
            }
            if session.isFirst, let limit = script.dropAfterBytes, session.audio.count >= limit {
                context.close(promise: nil)
                return
            }
            if session.isFirst, let limit = script.dieAfterBytes, session.audio.count >= limit {
                server.die()
                context.close(promise: nil)
                return
            }
            if session.isFirst, let limit = script.stopReadingAfterBytes, session.audio.count >= limit {
                try? context.channel.syncOptions?.setOption(.autoRead, value: false)
                return
            }
            if session.isFirst, let close = script.closeAfterBytes, session.audio.count >= close.bytes, !closing {
                closing = true
                sendClose(context, code: close.code, reason: close.reason)
                return
            }
            emitResults(context, finalizeAll: false)
            for _ in 0..<script.stampedInterimsPerFrame { sendStamped(context) }
        case .text:
            let text = payload.readString(length: payload.readableBytes) ?? ""
            let type =
                (try? JSONSerialization.jsonObject(with: Data(text.utf8)) as? [String: Any])?["type"] as? String ?? "?"
            server.update(session.index) { $0.controls.append((type, self.session.audio.count)) }
            switch type {
            case "Finalize": emitResults(context, finalizeAll: true)
            case "CloseStream":
                emitResults(context, finalizeAll: true)
                if !script.metadataFirst { send(context, metadata()) }
                closing = true
                sendClose(context, code: 1000, reason: "")
            default: break
            }
        case .connectionClose:
            server.update(session.index) { $0.clientClosed = true }
            if !closing { sendClose(context, code: 1000, reason: "") }
            context.close(promise: nil)
        case .ping:
            context.writeAndFlush(
                wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: payload)), promise: nil)
        default:
            break
        }
    }

    /// Finals for each full second of audio (or everything on Finalize), interims in between.
    private func emitResults(_ context: ChannelHandlerContext, finalizeAll: Bool) {
        let second = 32_000
        while session.audio.count - session.finalizedBytes >= second
            || (finalizeAll && session.audio.count > session.finalizedBytes)
        {
            if !finalizeAll, script.gatedFinals, !server.takeFinalPermit() { break }
            let end = min(session.finalizedBytes + second, session.audio.count)
            sendResult(
                context, from: session.finalizedBytes, to: end, isFinal: true,
                fromFinalize: finalizeAll && end - session.finalizedBytes < second)
            session.finalizedBytes = end
        }
        // An interim for the half second in progress.
        let pending = session.audio.count - session.finalizedBytes
        if pending >= 16_000 && session.interimSentFor != session.finalizedBytes {
            session.interimSentFor = session.finalizedBytes
            sendResult(
                context, from: session.finalizedBytes, to: session.audio.count, isFinal: false, fromFinalize: false)
        }
    }

    private func sendResult(_ context: ChannelHandlerContext, from: Int, to: Int, isFinal: Bool, fromFinalize: Bool) {
        var words = DeepgramTestServer.words(for: Array(session.audio[from..<to]))
        if !script.vocabulary.isEmpty {
            words = (from / 3200..<from / 3200 + words.count).map { script.vocabulary[$0 % script.vocabulary.count] }
        }
        var speechFinal = isFinal && to == session.audio.count
        if !script.finals.isEmpty {
            let next = session.scriptedFinalsSent
            speechFinal = isFinal && !script.continuing.contains(next)
            if isFinal { session.scriptedFinalsSent += 1 }
            words = next < script.finals.count ? script.finals[next].split(separator: " ").map(String.init) : []
        }
        let transcript = words.joined(separator: " ")
        if isFinal { server.update(session.index) { $0.finalsSent.append(transcript) } }
        let start = Double(from) / 32_000
        let duration = Double(to - from) / 32_000
        let wordList = words.enumerated().map { index, word -> String in
            let wordStart = start + Double(index) * 0.1
            return script.tupleWords
                ? #"["\#(word)",\#(Int(wordStart * 1000)),\#(Int((wordStart + 0.1) * 1000))]"#
                : #"{"word":"\#(word)","start":\#(wordStart),"end":\#(wordStart + 0.1),"confidence":0.9}"#
        }.joined(separator: ",")
        send(
            context,
            #"{"type":"Results","channel_index":[0,1],"start":\#(start),"duration":\#(duration),"is_final":\#(isFinal),"speech_final":\#(speechFinal),"from_finalize":\#(fromFinalize),"channel":{"alternatives":[{"transcript":"\#(transcript)","confidence":0.9,"words":[\#(wordList)]}]},"metadata":{"request_id":"req-\#(session.index)"}}"#
        )
    }

    private func sendStamped(_ context: ChannelHandlerContext) {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        let stamp = Int64(now.tv_sec) * 1_000_000_000 + Int64(now.tv_nsec)
        let start = Double(session.finalizedBytes) / 32_000
        send(
            context,
            #"{"type":"Results","start":\#(start),"duration":0.05,"is_final":false,"speech_final":false,"channel":{"alternatives":[{"transcript":"s\#(stamp)","confidence":0.9,"words":[]}]}}"#
        )
    }

    private func metadata() -> String {
        #"{"type":"Metadata","request_id":"req-\#(session.index)","duration":\#(Double(session.audio.count) / 32_000),"channels":1}"#
    }

    private func send(_ context: ChannelHandlerContext, _ text: String) {
        context.writeAndFlush(
            wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: ByteBuffer(string: text))), promise: nil)
    }

    private func sendClose(_ context: ChannelHandlerContext, code: UInt16, reason: String) {
        var buffer = ByteBuffer()
        buffer.writeInteger(code)
        buffer.writeString(reason)
        let bound = NIOLoopBound(context, eventLoop: context.eventLoop)
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: buffer)))
            .whenComplete { _ in
                // The client's answer closes the socket (.connectionClose); this bounds a client that
                // never answers. Closing sooner would reset a busy client's socket before it read the
                // close frame, and the test would see a dropped connection instead of the close.
                bound.value.eventLoop.scheduleTask(in: .seconds(5)) { bound.value.close(promise: nil) }
            }
    }
}

/// A test CA and server certificates made with the openssl command.
public struct TestCertificates: Sendable {
    public let directory: String
    public var caCertificate: String { "\(directory)/ca.pem" }
    public func certificate(_ name: String) -> String { "\(directory)/\(name).pem" }
    public func key(_ name: String) -> String { "\(directory)/\(name).key" }

    /// A CA, plus a server certificate for each name (SAN = DNS name, and 127.0.0.1 for localhost).
    public init(hosts: [String]) throws {
        let openssl = try requireTool("openssl", package: "openssl")
        directory = try makeTemporaryDirectory("sttd-certs")
        func check(_ arguments: [String]) throws {
            let result = try run(openssl, arguments, timeout: 60)
            guard result.status == 0 else {
                throw MissingPrerequisite(description: "openssl \(arguments.first ?? ""): \(result.stderr)")
            }
        }
        try check([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout",
            "\(directory)/ca.key",
            "-out", caCertificate, "-days", "2", "-subj", "/CN=sttd test CA", "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        ])
        for host in hosts {
            let san = host == "localhost" ? "DNS:localhost,IP:127.0.0.1" : "DNS:\(host)"
            try "subjectAltName=\(san)\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n".write(
                toFile: "\(directory)/\(host).ext", atomically: true, encoding: .utf8)
            try check([
                "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key(host),
                "-out", "\(directory)/\(host).csr", "-subj", "/CN=\(host)",
            ])
            try check([
                "x509", "-req", "-in", "\(directory)/\(host).csr", "-CA", caCertificate, "-CAkey",
                "\(directory)/ca.key",
                "-CAcreateserial", "-out", certificate(host), "-days", "2", "-extfile", "\(directory)/\(host).ext",
            ])
        }
    }
}
