import Foundation

/// TCP connections to a loopback port that send nothing (or only `request`) and never read, as
/// a local process holding sockets open would. Closed on deinit.
public final class IdleSockets: @unchecked Sendable {
    // Safety: the descriptors are set once in init; `closeAll()` is called from one task.
    public private(set) var descriptors: [Int32] = []

    /// Opens `count` connections to 127.0.0.1:`port` without waiting for the server to accept
    /// them (a server that stops accepting leaves them in its backlog); each then sends `request`,
    /// if given, once connected.
    public init(port: Int, count: Int, request: String? = nil) throws {
        for _ in 0..<count {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else {
                closeAll()
                throw MissingPrerequisite(description: "socket() failed after \(descriptors.count): errno \(errno)")
            }
            descriptors.append(fd)
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
                }
            }
            guard result == 0 || errno == EINPROGRESS else {
                closeAll()
                throw MissingPrerequisite(description: "cannot connect to 127.0.0.1:\(port): errno \(errno)")
            }
            guard let request else { continue }
            var writable = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
            guard poll(&writable, 1, 5_000) == 1 else { continue }
            let bytes = Array(request.utf8)
            _ = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        }
    }

    /// Waits up to `timeout` until the server has closed every connection (end of stream or
    /// reset); returns how many it closed.
    public func waitUntilClosed(timeout: Duration = .seconds(15)) async -> Int {
        var closed = Set<Int32>()
        let deadline = ContinuousClock.now + timeout
        var buffer = [UInt8](repeating: 0, count: 4096)
        repeat {
            for fd in descriptors where !closed.contains(fd) {
                // Whatever the server sent first (an HTTP error) is read past, up to its end.
                while true {
                    let count = read(fd, &buffer, buffer.count)
                    if count > 0 { continue }
                    if count == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != ENOTCONN) {
                        closed.insert(fd)
                    }
                    break
                }
            }
            if closed.count == descriptors.count { break }
            try? await Task.sleep(for: .milliseconds(50))
        } while ContinuousClock.now < deadline
        return closed.count
    }

    public func closeAll() {
        for fd in descriptors { close(fd) }
        descriptors = []
    }

    deinit { closeAll() }
}

/// How many descriptors a process has open now.
public func openDescriptors(of pid: pid_t) -> Int {
    (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/fd").count) ?? -1
}
