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
        let (seconds, attoseconds) = timeout.components
        guard seconds >= 0, seconds < Int64(Int32.max / 1000) else { return seconds < 0 ? 1 : Int32.max }
        let whole = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        let rest = attoseconds % 1_000_000_000_000_000
        return Int32(max(1, whole + (rest > 0 ? 1 : 0)))
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
    private func follow(_ name: String) async throws(DBusError) {
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

/// Who owns a followed well-known name, as far as the owner thread has heard (nil: nobody).
struct NameOwner {
    var owner: String?
}

/// One subscriber to signals.
struct SignalSubscription: Sendable {
    /// Whose signals a subscriber takes.
    enum Sender: Sendable, Equatable {
        case anyone
        /// A unique name, or the bus itself (`org.freedesktop.DBus`, the sender of its own signals).
        case exactly(String)
        /// Whoever owns this well-known name at the time.
        case ownerOf(String)

        init(name: String) {
            self = name.hasPrefix(":") || name == ConnectionLoop.busDriver ? .exactly(name) : .ownerOf(name)
        }
    }

    private static let nextID = Atomic<UInt64>(0)
    let id = SignalSubscription.nextID.add(1, ordering: .relaxed).newValue
    let sender: Sender
    let path: String?
    let interface: String?
    let member: String?
    let continuation: AsyncStream<DBusSignalMessage>.Continuation

    /// `owner` tells who owns a followed well-known name now.
    func matches(_ message: Message, owner: (String) -> String?) -> Bool {
        guard
            (path == nil || path == message.path) && (interface == nil || interface == message.interface)
                && (member == nil || member == message.member)
        else { return false }
        switch sender {
        case .anyone: return true
        case .exactly(let name): return message.sender == name
        case .ownerOf(let name): return message.sender != nil && message.sender == owner(name)
        }
    }
}

/// A reply not yet received; completes exactly once.
final class PendingReply: Sendable {
    private let handler: Mutex<(@Sendable (Result<[DBusValue], DBusError>) -> Void)?>
    init(_ handler: @escaping @Sendable (Result<[DBusValue], DBusError>) -> Void) {
        self.handler = Mutex(handler)
    }
    func complete(_ result: Result<[DBusValue], DBusError>) {
        let handler = self.handler.withLock { handler in
            defer { handler = nil }
            return handler
        }
        handler?(result)
    }
}

/// The owner thread's event loop around one libdbus connection.
///
/// Other threads hand the owner thread jobs through ``perform(_:droppable:)``; the queue is
/// bounded. Up to the soft bound (4096 jobs) every job is taken. Beyond it, droppable jobs
/// (high-rate signals such as meter levels, whose next value supersedes them) are refused and
/// counted, with one warning per overflow episode; an episode ends when the owner thread drains
/// the queue. Other jobs (replies, property changes, ordinary signals) are still taken up to the
/// hard bound (65 536): a queue that long means the owner thread is wedged, so the connection is
/// closed with an error logged. ``DBusConnection/waitUntilDisconnected()`` then returns at once,
/// the service shuts down and its supervisor restarts it.
///
/// `@unchecked Sendable`: the properties marked "owner thread" are read and written only on the
/// thread running ``run(bus:ready:)``; other threads reach them only through `perform`, which
/// queues a job under `shared`'s lock and wakes the thread through the self-pipe.
///
/// One exception, for high-rate signals (meter levels, ten a second while listening): when no
/// job is queued or running, ``sendDroppable(_:)`` hands the signal to libdbus on the calling
/// thread. Waking the owner thread for each cost a fifth of sttd's CPU while listening; the
/// single-owner rule guards against a thread blocked in `read_write_dispatch`, which this loop
/// never calls (it polls outside libdbus, and `dbus_connection_send` only writes what the
/// socket takes at once, leaving the rest to the owner thread).
final class ConnectionLoop: @unchecked Sendable {
    typealias Job = @Sendable (ConnectionLoop) -> Void

    /// How many jobs may wait for the owner thread.
    struct Bounds: Sendable {
        /// Beyond this many queued jobs, droppable jobs are refused.
        var soft: Int
        /// Beyond this many, the owner thread is taken to be wedged and the connection closes.
        var hard: Int
        static let standard = Bounds(soft: 4096, hard: 65_536)
    }

    private struct Shared {
        var jobs: [Job] = []
        var ended = false
        var closeRequested = false
        var endWaiters: [CheckedContinuation<Void, Never>] = []
        /// The owner thread is running jobs it took from `jobs`.
        var running = false
        var droppedJobs = 0
        // Set from the first refused job until the owner thread drains the queue.
        var overflowing = false
        var droppedThisEpisode = 0

        /// Counts a refused droppable job; true if it is the first of an overflow episode.
        mutating func refuseDroppable() -> Bool {
            droppedJobs += 1
            droppedThisEpisode += 1
            defer { overflowing = true }
            return !overflowing
        }
    }
    private let shared = Mutex(Shared())
    /// The connection while other threads may send on it: set once it is up, cleared (waiting
    /// for a send in progress) before it closes.
    private let direct = Mutex(DirectConnection(raw: nil))
    /// Unsent bytes in libdbus past which a droppable signal is dropped, not sent directly.
    static let directBacklogLimit = 1 << 20
    private let bounds: Bounds
    let logger: Logger
    // A self-pipe: other threads write a byte to wake the owner thread out of poll().
    private let wakeFD: Int32
    private let wakeWriteFD: Int32

    // Owner thread only.
    private(set) var raw: OpaquePointer?
    private var watches: [OpaquePointer] = []
    private var timeouts: [OpaquePointer: ContinuousClock.Instant] = [:]
    var objects: [String: DBusObject] = [:]
    var subscriptions: [UInt64: SignalSubscription] = [:]
    /// Well-known names whose owner subscribers follow, kept up to date from the bus's
    /// `NameOwnerChanged` in the order messages arrive.
    var owners: [String: NameOwner] = [:]
    private var disconnected = false

    init(bounds: Bounds = .standard, logger: Logger) throws(DBusError) {
        self.bounds = bounds
        self.logger = logger
        dbus_threads_init_default()
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw .failed("cannot create a pipe: \(String(cString: strerror(errno)))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        (wakeFD, wakeWriteFD) = (fds[0], fds[1])
    }

    deinit {
        close(wakeFD)
        close(wakeWriteFD)
    }

    var hasEnded: Bool { shared.withLock { $0.ended } }

    /// How many droppable jobs have been refused since the loop started.
    var droppedJobs: Int { shared.withLock { $0.droppedJobs } }

    /// How many droppable signals were sent on their emitter's thread.
    var directSends: Int { direct.withLock { $0.sent } }

    private enum Admission {
        case queued(first: Bool)
        case ended
        case dropped(firstInEpisode: Bool)
        case wedged(queued: Int, waiters: [CheckedContinuation<Void, Never>])
    }

    /// Queues a job for the owner thread; false if the loop has ended or the job was refused
    /// under the queue's bounds (see the type's documentation).
    @discardableResult
    func perform(_ job: @escaping Job, droppable: Bool = false) -> Bool {
        let admission = shared.withLock { shared -> Admission in
            guard !shared.ended else { return .ended }
            let count = shared.jobs.count
            if droppable && count >= bounds.soft { return .dropped(firstInEpisode: shared.refuseDroppable()) }
            if count >= bounds.hard {
                // Refuse everything from now on; the owner thread closes the connection if it
                // ever comes back, and waiters learn now that the connection is gone.
                shared.ended = true
                shared.closeRequested = true
                defer { shared.endWaiters.removeAll() }
                return .wedged(queued: count, waiters: shared.endWaiters)
            }
            shared.jobs.append(job)
            return .queued(first: count == 0)
        }
        switch admission {
        case .queued(let first):
            // The thread takes every queued job per wake-up: one byte for the first is enough.
            if first { wake() }
            return true
        case .ended:
            return false
        case .dropped(let firstInEpisode):
            if firstInEpisode { warnDropping(["queued": "\(bounds.soft)"]) }
            return false
        case .wedged(let queued, let waiters):
            logger.error(
                "The D-Bus connection thread is not taking its work; closing the connection",
                metadata: ["queued": "\(queued)"])
            wake()
            for waiter in waiters { waiter.resume() }
            return false
        }
    }

    /// Sends a high-rate signal that may be dropped: on the calling thread when nothing is queued
    /// for the owner thread or running there (so it follows everything emitted before it), else
    /// as a droppable job. False if it was dropped.
    func sendDroppable(_ outgoing: OutgoingMessage) -> Bool {
        guard shared.withLock({ !$0.ended && $0.jobs.isEmpty && !$0.running }) else {
            return perform({ $0.send(outgoing) }, droppable: true)
        }
        let message: Message
        do {
            message = try outgoing.build()
        } catch {
            logger.error("Cannot build a D-Bus message", metadata: ["error": "\(error.message)"])
            return false
        }
        let sent = direct.withLock { direct -> Bool? in
            guard let raw = direct.raw else { return nil }
            // The bus is not reading: another reading would only wait behind the others.
            guard dbus_connection_get_outgoing_size(raw) < Self.directBacklogLimit else { return false }
            dbus_connection_send(raw, message.raw, nil)
            direct.sent += 1
            return true
        }
        switch sent {
        case true?: return true
        case false?:
            if shared.withLock({ $0.refuseDroppable() }) {
                warnDropping(["unsentBytes": "\(Self.directBacklogLimit)"])
            }
            return false
        case nil:
            // Not up yet, or closing.
            return perform({ $0.send(outgoing) }, droppable: true)
        }
    }

    private func warnDropping(_ metadata: Logger.Metadata) {
        logger.warning(
            "The D-Bus connection is falling behind; dropping high-rate signals until it catches up",
            metadata: metadata)
    }

    func requestClose() {
        shared.withLock { $0.closeRequested = true }
        wake()
    }

    func waitUntilEnded() async {
        await withCheckedContinuation { continuation in
            let ended = shared.withLock { shared -> Bool in
                if !shared.ended { shared.endWaiters.append(continuation) }
                return shared.ended
            }
            if ended { continuation.resume() }
        }
    }

    private func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWriteFD, &byte, 1)
    }

    // MARK: Owner thread

    private func send(_ message: Message) {
        guard let raw, !disconnected else { return }
        dbus_connection_send(raw, message.raw, nil)
    }

    func send(_ outgoing: OutgoingMessage) {
        guard raw != nil, !disconnected else { return }
        do {
            send(try outgoing.build())
        } catch {
            logger.error("Cannot build a D-Bus message", metadata: ["error": "\(error.message)"])
        }
    }

    /// Builds and sends the reply to a method call.
    func sendReply(_ outcome: DBusReply.Outcome, to address: ReplyAddress) {
        guard raw != nil, !disconnected else { return }
        let message: Message? =
            switch outcome {
            case .values(let values):
                Message.methodReturn(to: address, values)
                    ?? Message.error(to: address, .failed("out of memory marshalling the reply"))
            case .error(let error): Message.error(to: address, error)
            }
        guard let message else {
            return logger.error("Cannot build a D-Bus reply: out of memory", metadata: ["serial": "\(address.serial)"])
        }
        send(message)
    }

    /// The reply object for a method call that has just arrived.
    func reply(to call: Message, member: String, outputs: [DBusType]) -> DBusReply {
        DBusReply(to: ReplyAddress(of: call), member: member, outputs: outputs, loop: self)
    }

    func sendWithReply(_ outgoing: OutgoingMessage, timeout: Int32, box: PendingReply) {
        guard let raw, !disconnected else {
            box.complete(.failure(.disconnected("the bus connection is closed")))
            return
        }
        let message: Message
        do {
            message = try outgoing.build()
        } catch {
            box.complete(.failure(error))
            return
        }
        var pending: OpaquePointer? = nil
        guard dbus_connection_send_with_reply(raw, message.raw, &pending, timeout) != 0, let pending else {
            box.complete(.failure(.disconnected("the bus connection is closed")))
            return
        }
        let userData = Unmanaged.passRetained(box).toOpaque()
        dbus_pending_call_set_notify(
            pending,
            { pending, userData in
                let box = Unmanaged<PendingReply>.fromOpaque(userData!).takeUnretainedValue()
                guard let reply = dbus_pending_call_steal_reply(pending).map(Message.init(adopting:)) else {
                    box.complete(.failure(.noReply("no reply")))
                    return
                }
                if reply.type == DBUS_MESSAGE_TYPE_ERROR {
                    let text = reply.arguments().first?.string ?? ""
                    box.complete(
                        .failure(DBusError(name: reply.errorName ?? "org.freedesktop.DBus.Error.Failed", message: text))
                    )
                } else {
                    box.complete(.success(reply.arguments()))
                }
            }, userData,
            { userData in Unmanaged<PendingReply>.fromOpaque(userData!).release() })
        dbus_pending_call_unref(pending)
    }

    func run(bus: DBusConnection.Bus, ready: (Result<String, DBusError>) -> Void) {
        var error = CDBus.DBusError()
        dbus_error_init(&error)
        defer { dbus_error_free(&error) }
        let connection: OpaquePointer?
        switch bus {
        case .session:
            connection = dbus_bus_get_private(DBUS_BUS_SESSION, &error)
        case .address(let address):
            connection = dbus_connection_open_private(address, &error)
            if let connection, dbus_bus_register(connection, &error) == 0 {
                dbus_connection_close(connection)
                dbus_connection_unref(connection)
                return fail(ready, error, bus: bus)
            }
        }
        guard let connection else { return fail(ready, error, bus: bus) }
        raw = connection
        dbus_connection_set_exit_on_disconnect(connection, 0)
        install(on: connection)
        direct.withLock { $0.raw = connection }
        ready(.success(dbus_bus_get_unique_name(connection).map { String(cString: $0) } ?? ""))
        loop()
        teardown()
    }

    private func fail(_ ready: (Result<String, DBusError>) -> Void, _ error: CDBus.DBusError, bus: DBusConnection.Bus) {
        let detail = error.message.map { String(cString: $0) } ?? "unknown error"
        let hint =
            switch bus {
            case .session: "is a session bus running and DBUS_SESSION_BUS_ADDRESS set?"
            case .address: "is the bus address right?"
            }
        shared.withLock { $0.ended = true }
        ready(
            .failure(
                DBusError(
                    name: "org.freedesktop.DBus.Error.NoServer",
                    message: "cannot connect to the D-Bus bus: \(detail) (\(hint))")))
    }

    private func install(on connection: OpaquePointer) {
        let me = Unmanaged.passUnretained(self).toOpaque()
        dbus_connection_set_watch_functions(
            connection,
            { watch, data in
                ConnectionLoop.from(data).watches.append(watch!)
                return 1
            },
            { watch, data in ConnectionLoop.from(data).watches.removeAll { $0 == watch } },
            nil, me, nil)
        dbus_connection_set_timeout_functions(
            connection,
            { timeout, data in
                ConnectionLoop.from(data).timeouts[timeout!] = ConnectionLoop.deadline(of: timeout!)
                return 1
            },
            { timeout, data in ConnectionLoop.from(data).timeouts[timeout!] = nil },
            { timeout, data in ConnectionLoop.from(data).timeouts[timeout!] = ConnectionLoop.deadline(of: timeout!) },
            me, nil)
        dbus_connection_set_wakeup_main_function(connection, { data in ConnectionLoop.from(data).wake() }, me, nil)
        dbus_connection_add_filter(
            connection, { _, message, data in ConnectionLoop.from(data).filter(message!) }, me, nil)
        var vtable = DBusObjectPathVTable()
        vtable.message_function = { _, message, data in
            ConnectionLoop.from(data).dispatchToObject(Message(retaining: message!))
            return DBUS_HANDLER_RESULT_HANDLED
        }
        dbus_connection_register_fallback(connection, "/", &vtable, me)
    }

    private static func from(_ data: UnsafeMutableRawPointer?) -> ConnectionLoop {
        Unmanaged<ConnectionLoop>.fromOpaque(data!).takeUnretainedValue()
    }

    private static func deadline(of timeout: OpaquePointer) -> ContinuousClock.Instant {
        .now + .milliseconds(Int(dbus_timeout_get_interval(timeout)))
    }

    private func filter(_ raw: OpaquePointer) -> DBusHandlerResult {
        let message = Message(retaining: raw)
        guard message.type == DBUS_MESSAGE_TYPE_SIGNAL else { return DBUS_HANDLER_RESULT_NOT_YET_HANDLED }
        if message.interface == "org.freedesktop.DBus.Local", message.member == "Disconnected" {
            disconnected = true
            return DBUS_HANDLER_RESULT_HANDLED
        }
        if !owners.isEmpty { noteOwnerChange(message) }
        let interested = subscriptions.values.filter { $0.matches(message) { self.owners[$0]?.owner } }
        if !interested.isEmpty {
            let signal = DBusSignalMessage(
                sender: message.sender ?? "", path: message.path ?? "", interface: message.interface ?? "",
                member: message.member ?? "", arguments: message.arguments())
            for subscription in interested { subscription.continuation.yield(signal) }
        }
        return DBUS_HANDLER_RESULT_NOT_YET_HANDLED
    }

    static let busDriver = "org.freedesktop.DBus"
    /// libdbus's default call timeout (25 s).
    static let defaultTimeout: Int32 = 25_000

    /// The match rule for the bus's announcements about `name`'s owner.
    static func ownerChangeRule(for name: String) -> String {
        "type='signal',sender='\(busDriver)',path='/org/freedesktop/DBus',interface='\(busDriver)',member='NameOwnerChanged',arg0='\(name)'"
    }

    /// Takes the bus's word (and only the bus's) that a followed name changed owner.
    private func noteOwnerChange(_ message: Message) {
        guard message.sender == Self.busDriver, message.interface == Self.busDriver,
            message.member == "NameOwnerChanged"
        else { return }
        let arguments = message.arguments()
        guard arguments.count == 3, let name = arguments[0].string, owners[name] != nil,
            let newOwner = arguments[2].string
        else { return }
        owners[name]?.owner = newOwner.isEmpty ? nil : newOwner
    }

    private func dispatchToObject(_ message: Message) {
        guard message.type == DBUS_MESSAGE_TYPE_METHOD_CALL, let path = message.path else { return }
        if let object = objects[path] {
            object.handle(message, on: self)
            return
        }
        if message.interface == "org.freedesktop.DBus.Introspectable" && message.member == "Introspect" {
            let prefix = path == "/" ? "/" : path + "/"
            let children = Set(
                objects.keys.filter { $0.hasPrefix(prefix) }.compactMap {
                    $0.dropFirst(prefix.count).split(separator: "/").first.map(String.init)
                })
            if !children.isEmpty {
                reply(to: message, member: "Introspect", outputs: [.string]).send([
                    .string(Introspection.node(children: children.sorted()))
                ])
                return
            }
        }
        reply(to: message, member: message.member ?? "", outputs: []).fail(
            DBusError.unknownObject("No object at path \(path)"))
    }

    private func loop() {
        while true {
            let (jobs, closeRequested, dropped) = shared.withLock { shared -> ([Job], Bool, Int?) in
                defer { shared.jobs = [] }
                shared.running = !shared.jobs.isEmpty
                // Draining the queue ends an overflow episode.
                var dropped: Int? = nil
                if shared.overflowing {
                    dropped = shared.droppedThisEpisode
                    shared.overflowing = false
                    shared.droppedThisEpisode = 0
                }
                return (shared.jobs, shared.closeRequested, dropped)
            }
            if let dropped {
                logger.notice("The D-Bus connection caught up", metadata: ["droppedSignals": "\(dropped)"])
            }
            if !jobs.isEmpty {
                for job in jobs { job(self) }
                shared.withLock { $0.running = false }
            }
            dispatchAll()
            if disconnected { break }
            if closeRequested {
                if let raw { dbus_connection_flush(raw) }
                break
            }
            pollOnce()
        }
    }

    private func dispatchAll() {
        guard let raw else { return }
        while dbus_connection_dispatch(raw) == DBUS_DISPATCH_DATA_REMAINS {}
    }

    private func pollOnce() {
        let active = watches.filter { dbus_watch_get_enabled($0) != 0 }
        var fds = [pollfd(fd: wakeFD, events: Int16(POLLIN), revents: 0)]
        for watch in active {
            let flags = dbus_watch_get_flags(watch)
            var events: Int16 = 0
            if flags & DBUS_WATCH_READABLE.rawValue != 0 { events |= Int16(POLLIN) }
            if flags & DBUS_WATCH_WRITABLE.rawValue != 0 { events |= Int16(POLLOUT) }
            fds.append(pollfd(fd: dbus_watch_get_unix_fd(watch), events: events, revents: 0))
        }
        let now = ContinuousClock.now
        let enabledDeadlines = timeouts.filter { dbus_timeout_get_enabled($0.key) != 0 }.map(\.value)
        var waitMilliseconds: Int32 = -1
        if let earliest = enabledDeadlines.min() {
            let remaining = now.duration(to: earliest)
            waitMilliseconds =
                remaining <= .zero
                ? 0
                : Int32(
                    clamping: remaining.components.seconds * 1000 + remaining.components.attoseconds
                        / 1_000_000_000_000_000 + 1)
        }
        let count = poll(&fds, nfds_t(fds.count), waitMilliseconds)
        if count < 0 { return }  // EINTR: go round again
        if fds[0].revents != 0 {
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { sink in
                while read(wakeFD, sink.baseAddress, sink.count) > 0 {}
            }
        }
        for (index, watch) in active.enumerated() {
            let revents = fds[index + 1].revents
            guard revents != 0, watches.contains(watch) else { continue }
            var flags: UInt32 = 0
            if revents & Int16(POLLIN) != 0 { flags |= DBUS_WATCH_READABLE.rawValue }
            if revents & Int16(POLLOUT) != 0 { flags |= DBUS_WATCH_WRITABLE.rawValue }
            if revents & Int16(POLLERR) != 0 { flags |= DBUS_WATCH_ERROR.rawValue }
            if revents & Int16(POLLHUP) != 0 { flags |= DBUS_WATCH_HANGUP.rawValue }
            dbus_watch_handle(watch, flags)
        }
        let expired = ContinuousClock.now
        for (timeout, deadline) in timeouts where deadline <= expired && dbus_timeout_get_enabled(timeout) != 0 {
            timeouts[timeout] = ConnectionLoop.deadline(of: timeout)
            dbus_timeout_handle(timeout)
        }
    }

    private func teardown() {
        direct.withLock { $0.raw = nil }
        let (jobs, waiters) = shared.withLock { shared -> ([Job], [CheckedContinuation<Void, Never>]) in
            shared.ended = true
            defer { shared.jobs.removeAll(); shared.endWaiters.removeAll() }
            return (shared.jobs, shared.endWaiters)
        }
        disconnected = true
        // Jobs queued while ending fail fast (send paths check `disconnected`).
        for job in jobs { job(self) }
        for subscription in subscriptions.values { subscription.continuation.finish() }
        subscriptions.removeAll()
        if let raw {
            dbus_connection_close(raw)
            dispatchAll()  // completes pending calls with errors
            dbus_connection_unref(raw)
        }
        raw = nil
        objects.removeAll()
        for waiter in waiters { waiter.resume() }
    }
}

/// The libdbus connection as other threads may use it, with a count of their sends.
private struct DirectConnection: @unchecked Sendable {
    // @unchecked: used only under `ConnectionLoop.direct`'s lock; libdbus locks the connection.
    var raw: OpaquePointer?
    var sent = 0
}
