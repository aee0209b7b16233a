import DBus
import Foundation
import Logging
import Recognition
import ServiceLifecycle
import Speech
import SpeechAPI

/// `sd_notify` without libsystemd: one datagram per message to `$NOTIFY_SOCKET`, a protocol
/// systemd documents as stable for reimplementation; linking libsystemd for it would add a
/// dependency to the package and nothing else.
public struct SystemdNotifier: Sendable {
    private let socketPath: String?

    public init(environment: [String: String]) {
        socketPath = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
    }

    public var isActive: Bool { socketPath != nil }

    /// Sends e.g. `READY=1`; returns whether it was sent.
    @discardableResult
    public func notify(_ state: String) -> Bool {
        guard let socketPath else { return false }
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        var path = Array(socketPath.utf8)
        // '@' names a socket in the abstract namespace: a leading NUL byte.
        if path.first == UInt8(ascii: "@") { path[0] = 0 }
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path) }
        let length = socklen_t(MemoryLayout<sa_family_t>.size + path.count + (path.first == 0 ? 0 : 1))
        let message = Array(state.utf8)
        let sent = withUnsafePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { socketAddress in
                message.withUnsafeBytes {
                    sendto(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL), socketAddress, length)
                }
            }
        }
        return sent == message.count
    }

    /// Half the watchdog interval systemd asked for, if it asked this process.
    public static func watchdogInterval(environment: [String: String]) -> Duration? {
        guard let microseconds = environment["WATCHDOG_USEC"].flatMap(UInt64.init), microseconds > 0 else {
            return nil
        }
        if let pid = environment["WATCHDOG_PID"].flatMap(Int32.init), pid != getpid() { return nil }
        return .microseconds(Int64(microseconds / 2))
    }
}

/// Tells systemd the service is ready, proves it is alive from its own loops (`WATCHDOG=1` only
/// after the bus connection's thread and the service actor both answered) and says when it stops.
struct SystemdService: Service {
    let notifier: SystemdNotifier
    let watchdogInterval: Duration?
    let connection: DBusConnection
    let core: SpeechCore
    let logger: Logger

    func run() async throws {
        // Returning early would end the whole group: without systemd, just wait for the end.
        guard notifier.isActive else {
            try? await gracefulShutdown()
            return
        }
        notifier.notify("READY=1\nSTATUS=Serving \(SpeechAPI.busName)")
        if let interval = watchdogInterval {
            // A child task of run(), ended by the shutdown. The period comes from NIO's timers
            // (``eventLoopSleep(for:)``): a pending Task.sleep would wake libdispatch's manager
            // thread every second.
            try? await cancelWhenGracefulShutdown {
                while true {
                    if await isAlive() { notifier.notify("WATCHDOG=1") }
                    try await eventLoopSleep(for: interval)
                }
            }
        } else {
            try? await gracefulShutdown()
        }
        // Last in the group, so shut down first: systemd hears of the stop before the session ends.
        notifier.notify("STOPPING=1")
    }

    /// A round trip through the bus (the connection's owner thread and the daemon) and the actor.
    private func isAlive() async -> Bool {
        do {
            _ = try await connection.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus.Peer",
                member: "Ping", timeout: .seconds(5))
        } catch {
            logger.warning("watchdog: the bus did not answer", metadata: ["reason": "\(error.message)"])
            return false
        }
        return await core.isResponsive()
    }
}
