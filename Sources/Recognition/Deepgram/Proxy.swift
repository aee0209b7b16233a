import Foundation
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOSOCKS

/// A proxy to tunnel the stream through, from the usual environment variables.
struct ProxySettings: Sendable, Equatable {
    enum Kind: Sendable, Equatable {
        /// An HTTP proxy, tunnelled with CONNECT.
        case httpConnect
        /// A SOCKS5 proxy.
        case socks5
    }

    var kind: Kind
    var host: String
    var port: Int

    init(kind: Kind, host: String, port: Int) {
        self.kind = kind
        self.host = host
        self.port = port
    }

    /// The proxy for `url`: `https_proxy` (wss) or `http_proxy` (ws), else `all_proxy`, in lower
    /// or upper case; none if `no_proxy` lists the host (exactly, as a domain suffix, or `*`),
    /// and never for a loopback host: the proxy would carry the key and audio off the machine.
    static func forURL(_ url: URL, environment: [String: String]) -> ProxySettings? {
        guard let host = url.host?.lowercased(), !Loopback.contains(host) else { return nil }
        func variable(_ name: String) -> String? {
            (environment[name] ?? environment[name.uppercased()]).flatMap { $0.isEmpty ? nil : $0 }
        }
        if let exclusions = variable("no_proxy") {
            for entry in exclusions.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces).lowercased() })
            {
                let domain = entry.hasPrefix(".") ? String(entry.dropFirst()) : entry
                if entry == "*" || host == domain || host.hasSuffix("." + domain) { return nil }
            }
        }
        let secure = url.scheme?.lowercased() == "wss"
        guard let value = variable(secure ? "https_proxy" : "http_proxy") ?? variable("all_proxy") else { return nil }
        // Bare "host:port" means an HTTP proxy, as curl reads it.
        guard let proxy = URL(string: value.contains("://") ? value : "http://" + value), let proxyHost = proxy.host
        else {
            return nil
        }
        switch proxy.scheme?.lowercased() {
        case "http", "https": return ProxySettings(kind: .httpConnect, host: proxyHost, port: proxy.port ?? 80)
        case "socks5", "socks5h": return ProxySettings(kind: .socks5, host: proxyHost, port: proxy.port ?? 1080)
        default: return nil
        }
    }

    /// Adds the tunnel handlers; the future completes when the tunnel to `host:port` is open and
    /// the proxy's handlers are out of the way.
    func establishTunnel(on channel: any Channel, to host: String, port: Int, deadline: NIODeadline) throws
        -> EventLoopFuture<Void>
    {
        let established = channel.eventLoop.makePromise(of: Void.self)
        let pipeline = channel.pipeline.syncOperations
        switch kind {
        case .httpConnect:
            let encoder = HTTPRequestEncoder()
            let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .forwardBytes))
            try pipeline.addHandler(encoder)
            try pipeline.addHandler(decoder)
            try pipeline.addHandler(
                NIOHTTP1ProxyConnectHandler(
                    targetHost: host, targetPort: port, headers: [:], deadline: deadline, promise: established))
            // The handlers are only touched on the channel's event loop, where these run.
            let handlers = NIOLoopBound((encoder, decoder), eventLoop: channel.eventLoop)
            return established.futureResult.flatMap {
                channel.pipeline.syncOperations.removeHandler(handlers.value.0).flatMap {
                    channel.pipeline.syncOperations.removeHandler(handlers.value.1)
                }
            }
        case .socks5:
            let watcher = SOCKSEstablishedWatcher(promise: established)
            try pipeline.addHandler(SOCKSClientHandler(targetAddress: .domain(host, port: port)))
            try pipeline.addHandler(watcher)
            let timeout = channel.eventLoop.scheduleTask(deadline: deadline) {
                established.fail(WebSocketError("the SOCKS proxy did not open a tunnel in time"))
            }
            let boundWatcher = NIOLoopBound(watcher, eventLoop: channel.eventLoop)
            return established.futureResult.flatMap {
                timeout.cancel()
                return channel.pipeline.syncOperations.removeHandler(boundWatcher.value)
            }
        }
    }
}

/// Completes a promise when NIOSOCKS reports the tunnel open (or fails it on an error).
final class SOCKSEstablishedWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = NIOAny
    private let promise: EventLoopPromise<Void>

    init(promise: EventLoopPromise<Void>) { self.promise = promise }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is SOCKSProxyEstablishedEvent { promise.succeed(()) }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        promise.fail(error)
        context.fireErrorCaught(error)
    }

    func channelInactive(context: ChannelHandlerContext) {
        promise.fail(WebSocketError("the proxy closed the connection"))
        context.fireChannelInactive()
    }
}
