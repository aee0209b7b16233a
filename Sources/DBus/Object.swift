import Logging
import Synchronization

/// An object exported on a connection. Property values live here, so `Get` and `GetAll` are
/// answered on the connection's thread without waiting for the service.
///
/// Emitting a signal or setting a property that the interfaces do not declare, or with values
/// of the wrong types, is a programming error: it is logged, nothing is sent, and debug builds
/// stop on an assertion.
public final class DBusObject: Sendable {
    public let path: String
    public let interfaces: [DBusInterface]
    let logger: Logger
    let values: Mutex<[String: [String: DBusValue]]>
    let loop = Mutex<ConnectionLoop?>(nil)
    let gate = Mutex<GateBox?>(nil)
    let reader = Mutex<ReaderBox?>(nil)
    let ownInterfaceNames: Set<String>
    /// Calls waiting behind a deferred call of the same sender (connection thread only; the
    /// lock is uncontended). Bounded per sender by ``maxWaitingPerSender`` and in all by
    /// ``maxWaiting``.
    let waiting = Mutex(WaitingCalls())
    /// Senders with calls waiting for a gate's decision (tests check that none are left behind).
    var sendersWaiting: Int { waiting.withLock { $0.senders } }
    /// How many calls of one sender may wait behind a deferred one, and how many may wait in
    /// all; beyond, calls are refused with `LimitsExceeded` (clients that flood while a prompt
    /// is open, from one connection or many, gain nothing by it and cost no memory).
    static let maxWaitingPerSender = 32
    static let maxWaiting = 1024

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
    func setProperties(_ changes: [(String, DBusValue)], interface: String? = nil, destination: String? = nil) {
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
    static let standardDeclarations = Introspection.standardInterfaces.filter { !$0.signals.isEmpty }

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
            guard property.getter == nil else { return "property \(name) is kept by the service, not the object" }
        }
        return nil
    }

    func report(_ problem: String) {
        logger.error("D-Bus declaration not followed", metadata: ["path": "\(path)", "problem": "\(problem)"])
        assertionFailure(problem)
    }

    func owningInterface(ofProperty name: String) -> String? {
        interfaces.first { $0.properties.contains { $0.name == name } }?.name
    }

    func owningInterface(ofSignal name: String) -> String? {
        interfaces.first { $0.signals.contains { $0.name == name } }?.name
    }

    /// Stores checked values and queues `PropertiesChanged` for those that changed.
    func store(_ changes: [(String, DBusValue)], interface owner: String, destination: String? = nil) {
        values.withLock { values in
            let changed = changes.filter { values[owner]?[$0.0] != $0.1 }
            for (name, value) in changed { values[owner]?[name] = value }
            // Queued under the lock, so the signals leave in the order the values were stored.
            announce(changed, interface: owner, destination: destination)
        }
    }

    /// Queues `PropertiesChanged` for values that changed, as each property's declaration says.
    func announce(_ changes: [(String, DBusValue)], interface owner: String, destination: String? = nil) {
        guard let declaration = interfaces.first(where: { $0.name == owner }) else { return }
        var changed: [(String, DBusValue)] = []
        var invalidated: [String] = []
        for (name, value) in changes {
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
        loop.perform { $0.send(signal) }
    }
}
