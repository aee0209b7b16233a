import Foundation
import Synchronization

/// A minimal HTTP CONNECT proxy on 127.0.0.1, one thread per direction; records the targets.
public final class ConnectProxy: Sendable {
    public let port: Int
    private let listener: Int32
    private let answers: Bool
    private let targets = Mutex<[String]>([])

    public var requestedTargets: [String] { targets.withLock { $0 } }

    /// - Parameter answers: false for a proxy that reads each CONNECT request and never replies.
    public init(answers: Bool = true) throws {
        self.answers = answers
        listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let listener = listener
        guard
            withUnsafeMutablePointer(
                to: &address, { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, length) } })
                == 0,
            listen(listener, 8) == 0
        else { throw MissingPrerequisite(description: "cannot listen for the test proxy") }
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = Int(UInt16(bigEndian: address.sin_port))
        let thread = Thread { [self] in acceptLoop() }
        thread.start()
    }

    public func stop() {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func acceptLoop() {
        while true {
            let client = accept(listener, nil, nil)
            guard client >= 0 else { return }
            Thread { [self] in serve(client) }.start()
        }
    }

    private func serve(_ client: Int32) {
        var request = [UInt8]()
        var byte: UInt8 = 0
        while !request.suffix(4).elementsEqual([13, 10, 13, 10]), read(client, &byte, 1) == 1 { request.append(byte) }
        let line = String(decoding: request, as: UTF8.self).split(separator: "\r\n").first ?? ""
        let parts = line.split(separator: " ")
        guard parts.count >= 2, parts[0] == "CONNECT", let colon = parts[1].lastIndex(of: ":"),
            let targetPort = UInt16(parts[1][parts[1].index(after: colon)...])
        else { close(client); return }
        targets.withLock { $0.append(String(parts[1])) }
        guard answers else {
            // Hold the socket until the client gives up.
            while read(client, &byte, 1) == 1 {}
            close(client)
            return
        }
        let upstream = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = targetPort.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")  // loopback only, whatever the name
        let connected = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(upstream, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard connected == 0 else { close(client); close(upstream); return }
        let reply = Array("HTTP/1.1 200 Connection established\r\n\r\n".utf8)
        _ = write(client, reply, reply.count)
        let forward = Thread { Self.pipe(from: client, to: upstream) }
        forward.start()
        Self.pipe(from: upstream, to: client)
    }

    private static func pipe(from source: Int32, to destination: Int32) {
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let count = read(source, &buffer, buffer.count)
            if count <= 0 || write(destination, buffer, count) != count { break }
        }
        shutdown(destination, Int32(SHUT_WR))
        shutdown(source, Int32(SHUT_RD))
    }
}
