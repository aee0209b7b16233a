import CDBus
import Foundation
import Logging
import Synchronization

/// A signal received from the bus.
public struct DBusSignalMessage: Sendable {
    public var sender: String
    public var path: String
    public var interface: String
    public var member: String
    public var arguments: [DBusValue]
}

/// A connection to a message bus.
///
/// One thread owns the libdbus connection and makes every libdbus call on it (see
/// architecture.md) but one, a high-rate droppable signal sent while it has nothing queued
/// (see ``ConnectionLoop``): it polls the connection's file descriptors plus a pipe that other
/// threads use to hand it work. Nothing here blocks the caller; the process never exits because
/// the bus went away.
public final class DBusConnection: Sendable {
    /// Which bus to connect to.
    public enum Bus: Sendable {
        /// The session bus from `DBUS_SESSION_BUS_ADDRESS`.
        case session
        /// A bus at an explicit address, e.g. `unix:path=/run/user/1000/bus`.
        case address(String)
    }

    let loop: ConnectionLoop
    /// The unique name the bus gave this connection, e.g. `:1.42`.
    public let uniqueName: String

    private init(loop: ConnectionLoop, uniqueName: String) {
        self.loop = loop
        self.uniqueName = uniqueName
    }

    /// Connects and registers with the bus, on the connection's own thread.
    public static func connect(to bus: Bus = .session, logger: Logger = Logger(label: "sttd.dbus"))
        async throws(DBusError) -> DBusConnection
    {
        try await connect(to: bus, bounds: .standard, logger: logger)
    }

    /// Connects with a job queue of the given bounds (tests use small ones).
    static func connect(to bus: Bus, bounds: ConnectionLoop.Bounds, logger: Logger = Logger(label: "sttd.dbus"))
        async throws(DBusError) -> DBusConnection
    {
        let loop = try ConnectionLoop(bounds: bounds, logger: logger)
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<String, DBusError>, Never>) in
            let thread = Thread { loop.run(bus: bus, ready: { continuation.resume(returning: $0) }) }
            thread.name = "dbus"
            thread.start()
        }
        return DBusConnection(loop: loop, uniqueName: try result.get())
    }

    /// Whether the connection is still up.
    public var isConnected: Bool { !loop.hasEnded }

    /// Returns when the connection has gone away, because the bus dropped it or ``close()`` was called.
    public func waitUntilDisconnected() async { await loop.waitUntilEnded() }

    /// Closes the connection after sending what is queued.
    public func close() { loop.requestClose() }

    /// Calls a method and returns its reply's arguments; an error reply is thrown.
    public func call(
        destination: String, path: String, interface: String?, member: String,
        arguments: [DBusValue] = [], timeout: Duration = .seconds(25)
    ) async throws(DBusError) -> [DBusValue] {
        let message = try OutgoingMessage.methodCall(
            destination: destination, path: path, interface: interface, member: member, arguments: arguments)
        let timeoutMilliseconds = Self.milliseconds(timeout)
        let result = await withCheckedContinuation {
            (continuation: CheckedContinuation<Result<[DBusValue], DBusError>, Never>) in
            let box = PendingReply { continuation.resume(returning: $0) }
            let queued = loop.perform { loop in loop.sendWithReply(message, timeout: timeoutMilliseconds, box: box) }
            if !queued { box.complete(.failure(.disconnected("the bus connection is closed"))) }
        }
        return try result.get()
    }

    /// A call timeout in libdbus's milliseconds: sub-second parts kept, rounded up (0 would time out
    /// at once), at least 1 ms.
    static func milliseconds(_ timeout: Duration) -> Int32 {
        let milliseconds = (timeout / .milliseconds(1)).rounded(.up)
        return milliseconds >= Double(Int32.max) ? Int32.max : max(1, Int32(clamping: Int64(milliseconds)))
    }

    /// Sends a signal (queued; returns at once).
    public func emitSignal(path: String, interface: String, member: String, arguments: [DBusValue])
        throws(DBusError)
    {
        let message = try OutgoingMessage.signal(
            path: path, interface: interface, member: member, arguments: arguments)
        _ = loop.perform { loop in loop.send(message) }
    }

    /// Asks the bus for a well-known name; returns the `DBUS_REQUEST_NAME_REPLY_*` code.
    public func requestName(_ name: String, doNotQueue: Bool = true) async throws(DBusError) -> UInt32 {
        try Validate.busName(name)
        let flags: UInt32 = doNotQueue ? UInt32(DBUS_NAME_FLAG_DO_NOT_QUEUE) : 0
        let reply = try await call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "RequestName",
            arguments: [.string(name), .uint32(flags)])
        guard let code = reply.first?.uint32 else { throw .failed("RequestName gave an unexpected reply") }
        return code
    }

    /// Exports an object; its methods are served from now on.
    public func export(_ object: DBusObject) {
        object.attach(to: loop)
        _ = loop.perform { loop in loop.objects[object.path] = object }
    }

    /// Stops serving the object at `path` (calls to it get `UnknownObject` from now on).
    public func unexport(path: String) {
        _ = loop.perform { loop in loop.objects[path] = nil }
    }

    /// Subscribes to signals. The stream ends when the connection closes.
    ///
    /// With a `sender`, only signals that sender sent are taken, whether broadcast or sent to this
    /// connection alone (the bus applies match rules to broadcasts only: any peer can send a
    /// signal to a unique name). A well-known name is followed to its current owner, as the bus
    /// announces it, so a service that restarts is still heard and nobody else is.
    ///
    /// With `argument0`, the bus sends only broadcasts whose first argument is that string (e.g.
    /// `NameOwnerChanged` of one name); signals other rules bring are not filtered by it.
    public func signals(
        sender: String? = nil, path: String? = nil, interface: String? = nil, member: String? = nil,
        argument0: String? = nil
    ) async throws(DBusError) -> AsyncStream<DBusSignalMessage> {
        var rule = ["type='signal'"]
        if let argument0 {
            guard !argument0.contains("'"), !argument0.contains("\\") else {
                throw .invalidArgs("a match rule's argument cannot hold quotes or backslashes")
            }
            rule.append("arg0='\(argument0)'")
        }
        if let sender { try Validate.busName(sender); rule.append("sender='\(sender)'") }
        if let path { try Validate.path(path); rule.append("path='\(path)'") }
        if let interface { try Validate.interface(interface); rule.append("interface='\(interface)'") }
        if let member { try Validate.member(member); rule.append("member='\(member)'") }
        let matchRule = rule.joined(separator: ",")
        let from = sender.map(SignalSubscription.Sender.init(name:)) ?? .anyone
        if case .ownerOf(let name) = from { try await follow(name) }
        let (stream, continuation) = AsyncStream<DBusSignalMessage>.makeStream(bufferingPolicy: .bufferingNewest(1024))
        let subscription = SignalSubscription(
            sender: from, path: path, interface: interface, member: member, continuation: continuation)
        let id = subscription.id
        guard loop.perform({ loop in loop.subscriptions[id] = subscription }) else {
            continuation.finish()
            return stream
        }
        continuation.onTermination = { [loop] _ in
            _ = loop.perform { loop in loop.subscriptions[id] = nil }
        }
        _ = try await call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "AddMatch", arguments: [.string(matchRule)])
        return stream
    }

    /// Follows who owns the well-known `name` from now on (see ``ConnectionLoop/owners``); returns
    /// once its current owner is known.
    func follow(_ name: String) async throws(DBusError) {
        guard loop.perform({ loop in loop.owners[name] = loop.owners[name] ?? NameOwner() }) else {
            throw .disconnected("the bus connection is closed")
        }
        // The bus's announcements first, then the current owner: a change between the two is
        // announced after the answer, and the owner thread takes both in the order they came.
        _ = try await call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "AddMatch", arguments: [.string(ConnectionLoop.ownerChangeRule(for: name))])
        let message = try OutgoingMessage.methodCall(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetNameOwner", arguments: [.string(name)])
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let queued = loop.perform { loop in
                // Completed on the owner thread, when the answer is dispatched.
                // The answer is at least as new as any announcement before it.
                let box = PendingReply { [loop] result in
                    loop.owners[name]?.owner = (try? result.get())?.first?.string
                    continuation.resume()
                }
                loop.sendWithReply(message, timeout: ConnectionLoop.defaultTimeout, box: box)
            }
            if !queued { continuation.resume() }
        }
    }
}
