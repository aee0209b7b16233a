import Logging
import Synchronization

/// An argument of a method or signal: a name and a type.
public struct DBusArgument: Sendable {
    public var name: String
    public var type: DBusType
    public init(_ name: String, _ type: DBusType) {
        self.name = name
        self.type = type
    }
}

/// A method call as a handler sees it: arguments already checked against the declaration.
public struct DBusMethodCall: Sendable {
    public var sender: String
    public var member: String
    public var arguments: [DBusValue]
}

/// Errors that know their D-Bus name; a handler throwing one replies with that name.
public protocol DBusErrorRepresentable: Error {
    var dbusError: DBusError { get }
}

extension DBusError: DBusErrorRepresentable {
    public var dbusError: DBusError { self }
}

/// A method of an interface: its signature and the code that serves it.
public struct DBusMethod: Sendable {
    /// Serves one call. Runs on the connection's thread, in the order calls arrived, and must not
    /// block: hand the work on and reply through the ``DBusReply`` when done, from any thread.
    public typealias Handler = @Sendable (DBusMethodCall, DBusReply) -> Void
    public var name: String
    public var inputs: [DBusArgument]
    public var outputs: [DBusArgument]
    public var handler: Handler

    public init(
        _ name: String, inputs: [DBusArgument] = [], outputs: [DBusArgument] = [],
        handler: @escaping Handler
    ) {
        self.name = name
        self.inputs = inputs
        self.outputs = outputs
        self.handler = handler
    }
}

/// A property of an interface. Writable properties have a setter that validates and may
/// normalize the new value; the binding stores what it returns and emits `PropertiesChanged`.
public struct DBusProperty: Sendable {
    /// Validates and may normalize a value a client sets. Runs on the connection's thread and
    /// must not block; a thrown error becomes the error reply.
    public typealias Setter = @Sendable (DBusValue) throws -> DBusValue
    /// How clients learn about changes (the `EmitsChangedSignal` annotation).
    public enum ChangeSignal: String, Sendable {
        case emits = "true", invalidates, const, none = "false"
    }

    public var name: String
    public var type: DBusType
    public var initialValue: DBusValue
    public var changeSignal: ChangeSignal
    public var setter: Setter?

    public init(
        _ name: String, _ initialValue: DBusValue, changeSignal: ChangeSignal = .emits, setter: Setter? = nil
    ) {
        self.name = name
        self.type = initialValue.type
        self.initialValue = initialValue
        self.changeSignal = changeSignal
        self.setter = setter
    }

    var access: String { setter == nil ? "read" : "readwrite" }
}

/// A signal of an interface.
public struct DBusSignal: Sendable {
    public var name: String
    public var arguments: [DBusArgument]
    public init(_ name: String, arguments: [DBusArgument] = []) {
        self.name = name
        self.arguments = arguments
    }
}

/// One interface: the single declaration from which dispatch and introspection both come.
public struct DBusInterface: Sendable {
    public var name: String
    public var methods: [DBusMethod]
    public var properties: [DBusProperty]
    public var signals: [DBusSignal]

    public init(
        name: String, methods: [DBusMethod] = [], properties: [DBusProperty] = [], signals: [DBusSignal] = []
    ) {
        self.name = name
        self.methods = methods
        self.properties = properties
        self.signals = signals
    }
}

/// What a gate is asked about: who reads or calls which member of one of the object's interfaces.
public struct DBusAccess: Sendable, Equatable {
    /// The kind of access.
    public enum Kind: Sendable, Equatable {
        case method, getProperty, getAllProperties, setProperty
    }
    /// The caller's unique name, e.g. `:1.42`.
    public var sender: String
    /// The interface (empty when a `Get` or `Set` named none).
    public var interface: String
    /// The method or property name; empty for `GetAll`.
    public var member: String
    public var kind: Kind

    public init(sender: String, interface: String, member: String, kind: Kind) {
        self.sender = sender
        self.interface = interface
        self.member = member
        self.kind = kind
    }
}

/// Decides whether a call to an object's own interfaces may go ahead (Introspectable, Peer and
/// the standard interfaces' properties are never gated). Runs on the connection's thread and
/// must not block: it answers through the ``DBusDecision`` exactly once, either before returning
/// or later from any thread. A call decided later waits without holding up the connection
/// thread; later calls from the same sender wait behind it, so each sender's calls still reach
/// the handlers in the order they were sent.
public typealias DBusGate = @Sendable (DBusAccess, DBusDecision) -> Void

/// A gate's answer about one call: ``allow()`` or ``refuse(_:)``, once (later answers are ignored).
public final class DBusDecision: Sendable {
    private enum State { case waiting, decided(DBusError?), deferred }
    private let state = Mutex<State>(.waiting)
    /// Resumes the call on the connection thread when the answer comes after the gate returned.
    private let resume: @Sendable (DBusError?) -> Void

    init(resume: @escaping @Sendable (DBusError?) -> Void) { self.resume = resume }

    /// Lets the call through.
    public func allow() { decide(nil) }

    /// Refuses the call with `error`.
    public func refuse(_ error: DBusError) { decide(error) }

    /// Lets the call through (nil) or refuses it with the error.
    public func decide(_ error: DBusError?) {
        let wasDeferred = state.withLock { state -> Bool in
            switch state {
            case .waiting:
                state = .decided(error)
                return false
            case .deferred:
                state = .decided(error)
                return true
            case .decided:
                return false  // a second decision is ignored
            }
        }
        if wasDeferred { resume(error) }
    }

    enum Outcome { case decided(DBusError?), deferred }

    /// After the gate returned: the decision if it came already, else marks the call deferred.
    func deferUnlessDecided() -> Outcome {
        state.withLock { state in
            if case .decided(let error) = state { return .decided(error) }
            state = .deferred
            return .deferred
        }
    }
}

/// Shows one caller a property's value when it reads it with `Get` or `GetAll`: the stored value,
/// another value, or an error instead. `access` names the caller, the property and the kind of
/// read (for `GetAll`, one call per property). Runs on the connection's thread and must not block.
public typealias DBusPropertyReader =
    @Sendable (_ access: DBusAccess, _ stored: DBusValue) -> Result<DBusValue, DBusError>

/// Holds the property reader at its own type, as ``GateBox`` does for the gate.
private final class ReaderBox: Sendable {
    let read: DBusPropertyReader
    init(_ read: @escaping DBusPropertyReader) { self.read = read }
}

/// Holds the gate at its own type: a closure kept in a generic container and called from there
/// was seen to leak per call on this toolchain (about 500 bytes a call under load).
private final class GateBox: Sendable {
    let gate: DBusGate
    init(_ gate: @escaping DBusGate) { self.gate = gate }
}

/// A method call taken apart on the connection thread, so it can wait for a gate's decision
/// without holding a libdbus message.
struct IncomingCall: Sendable {
    var address: ReplyAddress
    var sender: String
    var interface: String?
    var member: String
    var signature: String
    var arguments: [DBusValue]

    /// Takes the message apart; its arguments only if `decodes(signature)` says they will be used.
    init(_ message: Message, decodes: (_ interface: String?, _ member: String, _ signature: String) -> Bool) {
        address = ReplyAddress(of: message)
        sender = message.sender ?? ""
        interface = message.interface
        member = message.member ?? ""
        signature = message.signature
        // A call refused for its signature never needs its arguments: decoding them anyway
        // (fuzzed calls carry megabytes of nested garbage) only churns the heap.
        arguments = decodes(interface, member, signature) ? message.arguments() : []
    }
}

/// An object exported on a connection. Property values live here, so `Get` and `GetAll` are
/// answered on the connection's thread without waiting for the service.
///
/// Emitting a signal or setting a property that the interfaces do not declare, or with values
/// of the wrong types, is a programming error: it is logged, nothing is sent, and debug builds
/// stop on an assertion.
public final class DBusObject: Sendable {
    public let path: String
    public let interfaces: [DBusInterface]
    private let logger: Logger
    private let values: Mutex<[String: [String: DBusValue]]>
    private let loop = Mutex<ConnectionLoop?>(nil)
    private let gate = Mutex<GateBox?>(nil)
    private let reader = Mutex<ReaderBox?>(nil)
    private let ownInterfaceNames: Set<String>
    /// Calls waiting behind a deferred call of the same sender (connection thread only; the
    /// lock is uncontended). Bounded per sender by ``maxWaitingPerSender``.
    private let waiting = Mutex<[String: [IncomingCall]]>([:])
    /// Senders with calls waiting for a gate's decision (tests check that none are left behind).
    var sendersWaiting: Int { waiting.withLock { $0.count } }
    /// How many calls of one sender may wait behind a deferred one; beyond, calls are refused
    /// with `LimitsExceeded` (a client that floods while a prompt is open gains nothing by it).
    static let maxWaitingPerSender = 32

    public init(path: String, interfaces: [DBusInterface], logger: Logger = Logger(label: "sttd.dbus"))
        throws(DBusError)
    {
        try Validate.path(path)
        for interface in interfaces {
            try Validate.interface(interface.name)
            for member in interface.methods.map(\.name) + interface.properties.map(\.name)
                + interface.signals.map(\.name)
            {
                try Validate.member(member)
            }
        }
        self.path = path
        self.interfaces = interfaces
        self.ownInterfaceNames = Set(interfaces.map(\.name))
        self.introspectionXML = Introspection.object(interfaces)
        self.logger = logger
        var values: [String: [String: DBusValue]] = [:]
        for interface in interfaces {
            values[interface.name] = Dictionary(
                uniqueKeysWithValues: interface.properties.map { ($0.name, $0.initialValue) })
        }
        self.values = Mutex(values)
    }

    func attach(to loop: ConnectionLoop) { self.loop.withLock { $0 = loop } }

    /// Installs the gate every later call to the object's own interfaces passes (see ``DBusGate``).
    public func install(gate: @escaping DBusGate) {
        let box = GateBox(gate)
        self.gate.withLock { $0 = box }
    }

    /// Installs what callers see when they read properties of the object's own interfaces (see
    /// ``DBusPropertyReader``); without one, everyone reads the stored values.
    public func install(reader: @escaping DBusPropertyReader) {
        let box = ReaderBox(reader)
        self.reader.withLock { $0 = box }
    }

    // MARK: Service side

    /// The current value of a property.
    public func property(_ name: String, interface: String? = nil) -> DBusValue? {
        guard let owner = interface ?? owningInterface(ofProperty: name) else { return nil }
        return values.withLock { $0[owner]?[name] }
    }

    /// Sets properties of one interface (by default the one declaring the first name) and emits
    /// one `PropertiesChanged` for those that changed, to `destination` only if given. All or
    /// none are set.
    public func setProperties(_ changes: [(String, DBusValue)], interface: String? = nil, destination: String? = nil) {
        guard let first = changes.first else { return }
        if let problem = check(properties: changes, interface: interface) { return report(problem) }
        do {
            for (_, value) in changes { try Marshal.check(value, depth: 0) }
        } catch {
            // Data, not a declaration, is at fault (e.g. a NUL in a string): no assertion.
            return logger.error(
                "Cannot set a property to a value D-Bus cannot carry",
                metadata: ["path": "\(path)", "property": "\(first.0)", "error": "\(error.message)"])
        }
        guard let owner = interface ?? owningInterface(ofProperty: first.0) else { return }
        store(changes, interface: owner, destination: destination)
    }

    /// Sets one property, emitting `PropertiesChanged` (to `destination` only, if given) if its
    /// value changed.
    public func setProperty(_ name: String, _ value: DBusValue, interface: String? = nil, destination: String? = nil) {
        setProperties([(name, value)], interface: interface, destination: destination)
    }

    /// Emits a signal from this object (from the interface declaring it unless `interface` says);
    /// true if it was sent or queued. `droppable` marks high-rate signals such as meter levels:
    /// sent on the calling thread when the connection has nothing queued, refused rather than
    /// queued when it falls behind (see ``ConnectionLoop``). With a `destination` the signal is
    /// unicast: the bus delivers it to that connection only.
    @discardableResult
    public func emit(
        _ signal: String, interface: String? = nil, _ arguments: [DBusValue], droppable: Bool = false,
        destination: String? = nil
    ) -> Bool {
        if let problem = check(signal: signal, interface: interface, arguments: arguments) {
            report(problem)
            return false
        }
        guard let owner = interface ?? owningInterface(ofSignal: signal) else { return false }
        let message: OutgoingMessage
        do {
            message = try .signal(
                path: path, interface: owner, member: signal, arguments: arguments, destination: destination)
        } catch {
            // Data, not a declaration, is at fault (e.g. a NUL in a string): no assertion.
            logger.error(
                "Cannot send a signal with a value D-Bus cannot carry",
                metadata: ["path": "\(path)", "signal": "\(signal)", "error": "\(error.message)"])
            return false
        }
        guard let loop = loop.withLock({ $0 }) else { return false }
        if droppable { return loop.sendDroppable(message) }
        return loop.perform({ $0.send(message) })
    }

    /// The introspection XML of this object (built once: `gdbus call` introspects before every call).
    public let introspectionXML: String

    // MARK: Checks against the declaration

    /// Signals of the standard interfaces an object may emit itself.
    private static let standardDeclarations = [
        DBusInterface(
            name: "org.freedesktop.DBus.Properties",
            signals: [
                DBusSignal(
                    "PropertiesChanged",
                    arguments: [
                        DBusArgument("interface_name", .string),
                        DBusArgument("changed_properties", .dictionary(key: .string, value: .variant)),
                        DBusArgument("invalidated_properties", .array(.string)),
                    ])
            ])
    ]

    /// What is wrong with emitting this signal, or nil if it matches its declaration.
    func check(signal name: String, interface: String? = nil, arguments: [DBusValue]) -> String? {
        var candidates = interfaces
        if let interface {
            candidates = (interfaces + Self.standardDeclarations).filter { $0.name == interface }
            if candidates.isEmpty { return "\(path) has no interface \(interface)" }
        }
        guard let declaration = candidates.lazy.flatMap(\.signals).first(where: { $0.name == name }) else {
            return "\(path) declares no signal \(name)" + (interface.map { " on \($0)" } ?? "")
        }
        let expected = declaration.arguments.map(\.type)
        let actual = arguments.map(\.type)
        guard actual == expected else {
            return "signal \(name) takes (\(signatureString(expected))) but was given (\(signatureString(actual)))"
        }
        return nil
    }

    /// What is wrong with setting these properties, or nil if they match their declarations.
    func check(properties changes: [(String, DBusValue)], interface: String? = nil) -> String? {
        guard let first = changes.first else { return nil }
        guard let owner = interface ?? owningInterface(ofProperty: first.0) else {
            return "\(path) declares no property \(first.0)"
        }
        guard let declaration = interfaces.first(where: { $0.name == owner }) else {
            return "\(path) has no interface \(owner)"
        }
        for (name, value) in changes {
            guard let property = declaration.properties.first(where: { $0.name == name }) else {
                return "\(owner) declares no property \(name)"
            }
            guard value.type == property.type else {
                return "property \(name) has type '\(property.type)', not '\(value.type)'"
            }
        }
        return nil
    }

    private func report(_ problem: String) {
        logger.error("D-Bus declaration not followed", metadata: ["path": "\(path)", "problem": "\(problem)"])
        assertionFailure(problem)
    }

    private func owningInterface(ofProperty name: String) -> String? {
        interfaces.first { $0.properties.contains { $0.name == name } }?.name
    }

    private func owningInterface(ofSignal name: String) -> String? {
        interfaces.first { $0.signals.contains { $0.name == name } }?.name
    }

    /// Stores checked values and queues `PropertiesChanged` for those that changed.
    private func store(_ changes: [(String, DBusValue)], interface owner: String, destination: String? = nil) {
        guard let declaration = interfaces.first(where: { $0.name == owner }) else { return }
        values.withLock { values in
            var changed: [(String, DBusValue)] = []
            var invalidated: [String] = []
            for (name, value) in changes where values[owner]?[name] != value {
                values[owner]?[name] = value
                switch declaration.properties.first(where: { $0.name == name })?.changeSignal {
                case .emits?: changed.append((name, value))
                case .invalidates?: invalidated.append(name)
                default: break
                }
            }
            guard !changed.isEmpty || !invalidated.isEmpty, let loop = loop.withLock({ $0 }),
                let signal = try? OutgoingMessage.signal(
                    path: path, interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged",
                    arguments: [.string(owner), .vardict(changed), .strings(invalidated)], destination: destination)
            else { return }
            // Queued under the lock, so the signals leave in the order the values were stored.
            loop.perform { $0.send(signal) }
        }
    }

    // MARK: Connection thread

    func handle(_ message: Message, on loop: ConnectionLoop) {
        admit(IncomingCall(message, decodes: acceptsSignature), loop)
    }

    /// Whether a call with this signature reaches a handler (only then are its arguments read).
    private func acceptsSignature(_ interface: String?, _ member: String, _ signature: String) -> Bool {
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
    private func admit(_ call: IncomingCall, _ loop: ConnectionLoop) {
        guard let gate = gate.withLock({ $0 }), let access = access(for: call) else { return dispatch(call, loop) }
        let queued = waiting.withLock { waiting -> Bool? in
            guard waiting[call.sender] != nil else { return nil }
            guard waiting[call.sender]!.count < Self.maxWaitingPerSender else { return false }
            waiting[call.sender]!.append(call)
            return true
        }
        switch queued {
        case true?: return
        case false?:
            return reply(to: call, loop, outputs: []).fail(
                DBusError(
                    name: "org.freedesktop.DBus.Error.LimitsExceeded",
                    message: "too many calls are waiting for a decision about this caller"))
        case nil:
            ask(gate, access, call, loop)
        }
    }

    /// Asks the gate about one call; true if the decision comes later (the call now waits).
    @discardableResult
    private func ask(_ gate: GateBox, _ access: DBusAccess, _ call: IncomingCall, _ loop: ConnectionLoop) -> Bool {
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
        waiting.withLock { $0[call.sender] = $0[call.sender] ?? [] }
        return true
    }

    private func drainWaiting(of sender: String, _ gate: GateBox, _ loop: ConnectionLoop) {
        var calls = waiting.withLock { $0.removeValue(forKey: sender) } ?? []
        while !calls.isEmpty {
            let call = calls.removeFirst()
            guard let access = access(for: call) else {
                dispatch(call, loop)
                continue
            }
            if ask(gate, access, call, loop) {
                // Deferred again: the rest keep waiting behind it, in order.
                let rest = calls
                waiting.withLock { $0[sender, default: []].append(contentsOf: rest) }
                return
            }
        }
    }

    private func proceed(_ call: IncomingCall, _ error: DBusError?, _ loop: ConnectionLoop) {
        if let error {
            let outputs = interfaces.lazy.flatMap(\.methods).first { $0.name == call.member }?.outputs.map(\.type) ?? []
            return reply(to: call, loop, outputs: outputs).fail(error)
        }
        dispatch(call, loop)
    }

    /// What the gate is asked for a call, or nil for calls it does not guard.
    private func access(for call: IncomingCall) -> DBusAccess? {
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

    private func reply(to call: IncomingCall, _ loop: ConnectionLoop, outputs: [DBusType]) -> DBusReply {
        DBusReply(to: call.address, member: call.member, outputs: outputs, loop: loop)
    }

    private func dispatch(_ call: IncomingCall, _ loop: ConnectionLoop) {
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

    private func invoke(_ method: DBusMethod, _ message: IncomingCall, _ loop: ConnectionLoop) {
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

    private static let standardInterfaces: Set<String> = [
        "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer",
    ]

    private func handleProperties(_ member: String, _ message: IncomingCall, _ loop: ConnectionLoop) {
        let arguments = message.arguments
        switch (member, message.signature) {
        case ("Get", "ss"):
            let reply = DBusReply(to: message.address, member: member, outputs: [.variant], loop: loop)
            let name = arguments[1].string ?? ""
            guard let found = lookUp(arguments[0].string ?? "", name, reply) else { return }
            let stored = values.withLock { $0[found.interface]?[name] } ?? found.property.initialValue
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
                switch shown(current[property.name] ?? property.initialValue, to: access) {
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
            store([(name, stored)], interface: found.interface)
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
    private func shown(_ stored: DBusValue, to access: DBusAccess) -> Result<DBusValue, DBusError> {
        guard let reader = reader.withLock({ $0 }) else { return .success(stored) }
        let result = reader.read(access, stored)
        if case .success(let value) = result, value.type != stored.type {
            report("the reader of \(access.member) returned type '\(value.type)', not '\(stored.type)'")
            return .failure(DBusError.failed("the service produced an invalid value for \(access.member)"))
        }
        return result
    }

    private func lookUp(_ interfaceName: String, _ name: String, _ reply: DBusReply)
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
