import Logging
import Synchronization

/// Serving calls on the connection thread: gate, property reads and writes, methods.
extension DBusObject {
    func handle(_ message: Message, on loop: ConnectionLoop) {
        admit(IncomingCall(message, decodes: acceptsSignature), loop)
    }

    /// Whether a call with this signature reaches a handler (only then are its arguments read).
    func acceptsSignature(_ interface: String?, _ member: String, _ signature: String) -> Bool {
        switch interface {
        case "org.freedesktop.DBus.Properties":
            return ["Get": "ss", "GetAll": "s", "Set": "ssv"][member] == signature
        case "org.freedesktop.DBus.Introspectable":
            return false
        default:
            let candidates = interfaces.filter { interface == nil || $0.name == interface }
            guard let method = candidates.lazy.flatMap(\.methods).first(where: { $0.name == member }) else {
                return false
            }
            return signatureString(method.inputs.map(\.type)) == signature
        }
    }

    /// Passes a call through the gate, keeping each sender's calls in order.
    func admit(_ call: IncomingCall, _ loop: ConnectionLoop) {
        guard let gate = gate.withLock({ $0 }), let access = access(for: call) else { return dispatch(call, loop) }
        let queued = waiting.withLock { waiting -> Bool? in
            guard waiting.isDeferring(call.sender) else { return nil }
            return waiting.append(call)
        }
        switch queued {
        case true?: return
        case false?:
            return reply(to: call, loop, outputs: []).fail(
                DBusError.limitsExceeded("too many calls are waiting for a decision about their caller"))
        case nil:
            ask(gate, access, call, loop)
        }
    }

    /// Asks the gate about one call; true if the decision comes later (the call now waits).
    @discardableResult
    func ask(_ gate: GateBox, _ access: DBusAccess, _ call: IncomingCall, _ loop: ConnectionLoop) -> Bool {
        let decision = DBusDecision { [self] error in
            // Deferred: finish it on the connection thread, then the sender's waiting calls.
            loop.perform { [self] loop in
                proceed(call, error, loop)
                drainWaiting(of: call.sender, gate, loop)
            }
        }
        gate.gate(access, decision)
        if case .decided(let error) = decision.deferUnlessDecided() {
            proceed(call, error, loop)
            return false
        }
        waiting.withLock { $0.startDeferring(call.sender) }
        return true
    }

    func drainWaiting(of sender: String, _ gate: GateBox, _ loop: ConnectionLoop) {
        var calls = waiting.withLock { $0.take(sender) }
        while !calls.isEmpty {
            let call = calls.removeFirst()
            guard let access = access(for: call) else {
                dispatch(call, loop)
                continue
            }
            if ask(gate, access, call, loop) {
                // Deferred again: the rest keep waiting behind it, in order.
                let rest = calls
                waiting.withLock { $0.putBack(rest, for: sender) }
                return
            }
        }
    }

    func proceed(_ call: IncomingCall, _ error: DBusError?, _ loop: ConnectionLoop) {
        if let error {
            let outputs = interfaces.lazy.flatMap(\.methods).first { $0.name == call.member }?.outputs.map(\.type) ?? []
            return reply(to: call, loop, outputs: outputs).fail(error)
        }
        dispatch(call, loop)
    }

    /// What the gate is asked for a call, or nil for calls it does not guard.
    func access(for call: IncomingCall) -> DBusAccess? {
        let own = ownInterfaceNames
        switch call.interface {
        case "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer":
            return nil
        case "org.freedesktop.DBus.Properties":
            let target = call.arguments.first?.string ?? ""
            guard target.isEmpty || own.contains(target) else { return nil }
            let name = call.arguments.count > 1 ? call.arguments[1].string ?? "" : ""
            switch call.member {
            case "Get": return DBusAccess(sender: call.sender, interface: target, member: name, kind: .getProperty)
            case "GetAll":
                return DBusAccess(sender: call.sender, interface: target, member: "", kind: .getAllProperties)
            case "Set": return DBusAccess(sender: call.sender, interface: target, member: name, kind: .setProperty)
            default: return nil
            }
        case let name?:
            guard own.contains(name) else { return nil }
            return DBusAccess(sender: call.sender, interface: name, member: call.member, kind: .method)
        case nil:
            guard let owner = interfaces.first(where: { $0.methods.contains { $0.name == call.member } }) else {
                return nil
            }
            return DBusAccess(sender: call.sender, interface: owner.name, member: call.member, kind: .method)
        }
    }

    func reply(to call: IncomingCall, _ loop: ConnectionLoop, outputs: [DBusType]) -> DBusReply {
        DBusReply(to: call.address, member: call.member, outputs: outputs, loop: loop)
    }

    func dispatch(_ call: IncomingCall, _ loop: ConnectionLoop) {
        let member = call.member
        switch call.interface {
        case "org.freedesktop.DBus.Introspectable":
            let reply = reply(to: call, loop, outputs: [.string])
            guard member == "Introspect" else {
                return reply.fail(
                    DBusError.unknownMethod("No method \(member) on org.freedesktop.DBus.Introspectable"))
            }
            guard call.signature.isEmpty else {
                return reply.fail(DBusError.invalidArgs("Introspect takes no arguments"))
            }
            reply.send([.string(introspectionXML)])
        case "org.freedesktop.DBus.Properties":
            handleProperties(member, call, loop)
        case let name?:
            guard let interface = interfaces.first(where: { $0.name == name }) else {
                return reply(to: call, loop, outputs: []).fail(
                    DBusError.unknownInterface("No interface \(name) at \(path)"))
            }
            guard let method = interface.methods.first(where: { $0.name == member }) else {
                return reply(to: call, loop, outputs: []).fail(
                    DBusError.unknownMethod("No method \(member) on interface \(name)"))
            }
            invoke(method, call, loop)
        case nil:
            guard let method = interfaces.lazy.flatMap(\.methods).first(where: { $0.name == member }) else {
                return reply(to: call, loop, outputs: []).fail(
                    DBusError.unknownMethod("No method \(member) at \(path)"))
            }
            invoke(method, call, loop)
        }
    }

    func invoke(_ method: DBusMethod, _ message: IncomingCall, _ loop: ConnectionLoop) {
        let reply = DBusReply(to: message.address, member: method.name, outputs: method.outputs.map(\.type), loop: loop)
        let expected = signatureString(method.inputs.map(\.type))
        guard message.signature == expected else {
            return reply.fail(
                DBusError.invalidArgs(
                    "\(method.name) takes arguments (\(expected)) but was called with (\(message.signature))"))
        }
        let call = DBusMethodCall(sender: message.sender, member: method.name, arguments: message.arguments)
        // Called here, on the connection's thread, so calls reach the service in the order they
        // arrived; the handler hands the work on and replies later, from any thread.
        method.handler(call, reply)
    }

    static let standardInterfaces: Set<String> = [
        "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer",
    ]

    func handleProperties(_ member: String, _ message: IncomingCall, _ loop: ConnectionLoop) {
        let arguments = message.arguments
        switch (member, message.signature) {
        case ("Get", "ss"):
            let reply = DBusReply(to: message.address, member: member, outputs: [.variant], loop: loop)
            let name = arguments[1].string ?? ""
            guard let found = lookUp(arguments[0].string ?? "", name, reply) else { return }
            let stored =
                found.property.getter?() ?? values.withLock { $0[found.interface]?[name] }
                ?? found.property.initialValue
            let access = DBusAccess(
                sender: message.sender, interface: found.interface, member: name, kind: .getProperty)
            switch shown(stored, to: access) {
            case .success(let value): reply.send([.variant(value)])
            case .failure(let error): reply.fail(error)
            }
        case ("GetAll", "s"):
            let reply = DBusReply(
                to: message.address, member: member, outputs: [.dictionary(key: .string, value: .variant)], loop: loop)
            let interfaceName = arguments[0].string ?? ""
            if Self.standardInterfaces.contains(interfaceName) { return reply.send([.vardict([])]) }
            guard let interface = interfaces.first(where: { $0.name == interfaceName }) else {
                return reply.fail(DBusError.unknownInterface("No interface \(interfaceName) at \(path)"))
            }
            let current = values.withLock { $0[interface.name] ?? [:] }
            var shownValues: [(String, DBusValue)] = []
            for property in interface.properties {
                let access = DBusAccess(
                    sender: message.sender, interface: interface.name, member: property.name, kind: .getAllProperties)
                switch shown(property.getter?() ?? current[property.name] ?? property.initialValue, to: access) {
                case .success(let value): shownValues.append((property.name, value))
                case .failure(let error): return reply.fail(error)
                }
            }
            reply.send([.vardict(shownValues)])
        case ("Set", "ssv"):
            let reply = DBusReply(to: message.address, member: member, outputs: [], loop: loop)
            let name = arguments[1].string ?? ""
            guard let found = lookUp(arguments[0].string ?? "", name, reply) else { return }
            guard let setter = found.property.setter else {
                return reply.fail(DBusError.propertyReadOnly("Property \(name) is read-only"))
            }
            guard let value = arguments[2].variantValue, value.type == found.property.type else {
                let given = arguments[2].variantValue?.type.signature ?? ""
                return reply.fail(
                    DBusError.invalidArgs("Property \(name) has type '\(found.property.type)', not '\(given)'"))
            }
            let before = found.property.getter?()
            let stored: DBusValue
            do {
                stored = try setter(value)
                try Marshal.check(stored, depth: 0)
            } catch {
                return reply.fail(error)
            }
            guard stored.type == found.property.type else {
                reply.fail(DBusError.failed("the service produced an invalid value for \(name)"))
                return report(
                    "the setter of \(name) returned type '\(stored.type)', not '\(found.property.type)'")
            }
            if found.property.getter == nil {
                store([(name, stored)], interface: found.interface)
            } else if stored != before {
                announce([(name, stored)], interface: found.interface)
            }
            reply.send([])
        case ("Get", _), ("GetAll", _), ("Set", _):
            let expected = ["Get": "ss", "GetAll": "s", "Set": "ssv"][member]!
            DBusReply(to: message.address, member: member, outputs: [], loop: loop).fail(
                DBusError.invalidArgs(
                    "\(member) takes arguments (\(expected)) but was called with (\(message.signature))"))
        default:
            DBusReply(to: message.address, member: member, outputs: [], loop: loop).fail(
                DBusError.unknownMethod("No method \(member) on org.freedesktop.DBus.Properties"))
        }
    }

    /// What the installed reader shows `access`'s caller instead of `stored`; a value of the wrong
    /// type is a programming error, answered with an error (never with the stored value, which
    /// the reader may have meant to hide).
    func shown(_ stored: DBusValue, to access: DBusAccess) -> Result<DBusValue, DBusError> {
        guard let reader = reader.withLock({ $0 }) else { return .success(stored) }
        let result = reader.read(access, stored)
        if case .success(let value) = result, value.type != stored.type {
            report("the reader of \(access.member) returned type '\(value.type)', not '\(stored.type)'")
            return .failure(DBusError.failed("the service produced an invalid value for \(access.member)"))
        }
        return result
    }

    func lookUp(_ interfaceName: String, _ name: String, _ reply: DBusReply)
        -> (interface: String, property: DBusProperty)?
    {
        let candidates = interfaceName.isEmpty ? interfaces : interfaces.filter { $0.name == interfaceName }
        if candidates.isEmpty && !Self.standardInterfaces.contains(interfaceName) {
            reply.fail(DBusError.unknownInterface("No interface \(interfaceName) at \(path)"))
            return nil
        }
        for interface in candidates {
            if let property = interface.properties.first(where: { $0.name == name }) {
                return (interface.name, property)
            }
        }
        reply.fail(DBusError.unknownProperty("No property \(name) on interface \(interfaceName)"))
        return nil
    }
}

/// Calls waiting behind a deferred call of the same sender, in order, bounded per sender
/// (``DBusObject/maxWaitingPerSender``) and in all (``DBusObject/maxWaiting``).
struct WaitingCalls {
    private var bySender: [String: [IncomingCall]] = [:]
    private var total = 0

    var senders: Int { bySender.count }

    func isDeferring(_ sender: String) -> Bool { bySender[sender] != nil }

    mutating func startDeferring(_ sender: String) { bySender[sender] = bySender[sender] ?? [] }

    /// Queues `call` behind its sender's deferred call; false when either bound is reached.
    mutating func append(_ call: IncomingCall) -> Bool {
        guard total < DBusObject.maxWaiting, bySender[call.sender, default: []].count < DBusObject.maxWaitingPerSender
        else { return false }
        bySender[call.sender, default: []].append(call)
        total += 1
        return true
    }

    /// The sender's waiting calls; it defers no more.
    mutating func take(_ sender: String) -> [IncomingCall] {
        let calls = bySender.removeValue(forKey: sender) ?? []
        total -= calls.count
        return calls
    }

    /// Calls taken that must wait again behind a new deferred call, in order.
    mutating func putBack(_ calls: [IncomingCall], for sender: String) {
        bySender[sender, default: []].append(contentsOf: calls)
        total += calls.count
    }
}
