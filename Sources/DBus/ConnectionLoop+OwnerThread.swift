import CDBus
import Foundation
import Logging
import Synchronization

/// The owner thread: the only thread that touches the libdbus connection (but for droppable sends).
extension ConnectionLoop {
    func send(_ message: Message) {
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

    func fail(_ ready: (Result<String, DBusError>) -> Void, _ error: CDBus.DBusError, bus: DBusConnection.Bus) {
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

    func install(on connection: OpaquePointer) {
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

    static func from(_ data: UnsafeMutableRawPointer?) -> ConnectionLoop {
        Unmanaged<ConnectionLoop>.fromOpaque(data!).takeUnretainedValue()
    }

    static func deadline(of timeout: OpaquePointer) -> ContinuousClock.Instant {
        .now + .milliseconds(Int(dbus_timeout_get_interval(timeout)))
    }

    func filter(_ raw: OpaquePointer) -> DBusHandlerResult {
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
    func noteOwnerChange(_ message: Message) {
        guard message.sender == Self.busDriver, message.interface == Self.busDriver,
            message.member == "NameOwnerChanged"
        else { return }
        guard let change = NameOwnerChange(arguments: message.arguments()), owners[change.name] != nil else { return }
        owners[change.name]?.owner = change.newOwner
    }

    func dispatchToObject(_ message: Message) {
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

    func loop() {
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

    func dispatchAll() {
        guard let raw else { return }
        while dbus_connection_dispatch(raw) == DBUS_DISPATCH_DATA_REMAINS {}
    }

    func pollOnce() {
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
            waitMilliseconds = remaining <= .zero ? 0 : Int32(clamping: Int64(remaining / .milliseconds(1)) + 1)
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

    func teardown() {
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
