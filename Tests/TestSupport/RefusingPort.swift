import Foundation

/// A loopback TCP port that refuses every connection for as long as this object lives: a socket
/// bound to it that never listens. Unlike a stopped server's port, no other test can take it in
/// the meantime (tests run in parallel), so "nothing listens here" stays true.
public final class RefusingPort: @unchecked Sendable {
    // Safety: immutable after init.
    public let port: UInt16
    private let descriptor: Int32

    public init() throws {
        let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard descriptor >= 0 else {
            throw MissingPrerequisite(description: "socket(): \(String(cString: strerror(errno)))")
        }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                bind(descriptor, socketAddress, length) == 0 && getsockname(descriptor, socketAddress, &length) == 0
            }
        }
        guard bound else {
            close(descriptor)
            throw MissingPrerequisite(description: "cannot bind a loopback port: \(String(cString: strerror(errno)))")
        }
        self.descriptor = descriptor
        port = UInt16(bigEndian: address.sin_port)
    }

    /// A Deepgram-style URL nobody answers at.
    public var url: String { "ws://127.0.0.1:\(port)/v1/listen" }

    deinit { close(descriptor) }
}
