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
        self.logger = logger
        var values: [String: [String: DBusValue]] = [:]
        for interface in interfaces {
            values[interface.name] = Dictionary(
                uniqueKeysWithValues: interface.properties.map { ($0.name, $0.initialValue) })
        }
        self.values = Mutex(values)
    }

    func attach(to loop: ConnectionLoop) { self.loop.withLock { $0 = loop } }

    // MARK: Service side

    /// The current value of a property.
    public func property(_ name: String, interface: String? = nil) -> DBusValue? {
        guard let owner = interface ?? owningInterface(ofProperty: name) else { return nil }
        return values.withLock { $0[owner]?[name] }
    }

    /// Sets properties of one interface (by default the one declaring the first name) and emits
    /// one `PropertiesChanged` for those that changed. All or none are set.
    public func setProperties(_ changes: [(String, DBusValue)], interface: String? = nil) {
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
        store(changes, interface: owner)
    }

    /// Sets one property, emitting `PropertiesChanged` if its value changed.
    public func setProperty(_ name: String, _ value: DBusValue, interface: String? = nil) {
        setProperties([(name, value)], interface: interface)
    }

    /// Emits a signal from this object (from the interface declaring it unless `interface` says);
    /// true if it was queued. `droppable` marks high-rate signals such as meter levels, which the
    /// connection refuses rather than queue when it falls behind (see ``ConnectionLoop``).
    @discardableResult
    public func emit(_ signal: String, interface: String? = nil, _ arguments: [DBusValue], droppable: Bool = false)
        -> Bool
    {
        if let problem = check(signal: signal, interface: interface, arguments: arguments) {
            report(problem)
            return false
        }
        guard let owner = interface ?? owningInterface(ofSignal: signal) else { return false }
        let message: OutgoingMessage
        do {
            message = try .signal(path: path, interface: owner, member: signal, arguments: arguments)
        } catch {
            // Data, not a declaration, is at fault (e.g. a NUL in a string): no assertion.
            logger.error(
                "Cannot send a signal with a value D-Bus cannot carry",
                metadata: ["path": "\(path)", "signal": "\(signal)", "error": "\(error.message)"])
            return false
        }
        guard let loop = loop.withLock({ $0 }) else { return false }
        return loop.perform({ $0.send(message) }, droppable: droppable)
    }

    /// The introspection XML of this object.
    public var introspectionXML: String { Introspection.object(interfaces) }

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
    private func store(_ changes: [(String, DBusValue)], interface owner: String) {
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
                    arguments: [.string(owner), .vardict(changed), .strings(invalidated)])
            else { return }
            // Queued under the lock, so the signals leave in the order the values were stored.
            loop.perform { $0.send(signal) }
        }
    }

    // MARK: Connection thread

    func handle(_ message: Message, on loop: ConnectionLoop) {
        let member = message.member ?? ""
        switch message.interface {
        case "org.freedesktop.DBus.Introspectable":
            let reply = loop.reply(to: message, member: member, outputs: [.string])
            guard member == "Introspect" else {
                return reply.fail(
                    DBusError.unknownMethod("No method \(member) on org.freedesktop.DBus.Introspectable"))
            }
            guard message.signature.isEmpty else {
                return reply.fail(DBusError.invalidArgs("Introspect takes no arguments"))
            }
            reply.send([.string(introspectionXML)])
        case "org.freedesktop.DBus.Properties":
            handleProperties(member, message, loop)
        case let name?:
            guard let interface = interfaces.first(where: { $0.name == name }) else {
                return loop.reply(to: message, member: member, outputs: []).fail(
                    DBusError.unknownInterface("No interface \(name) at \(path)"))
            }
            guard let method = interface.methods.first(where: { $0.name == member }) else {
                return loop.reply(to: message, member: member, outputs: []).fail(
                    DBusError.unknownMethod("No method \(member) on interface \(name)"))
            }
            invoke(method, message, loop)
        case nil:
            guard let method = interfaces.lazy.flatMap(\.methods).first(where: { $0.name == member }) else {
                return loop.reply(to: message, member: member, outputs: []).fail(
                    DBusError.unknownMethod("No method \(member) at \(path)"))
            }
            invoke(method, message, loop)
        }
    }

    private func invoke(_ method: DBusMethod, _ message: Message, _ loop: ConnectionLoop) {
        let reply = loop.reply(to: message, member: method.name, outputs: method.outputs.map(\.type))
        let expected = signatureString(method.inputs.map(\.type))
        guard message.signature == expected else {
            return reply.fail(
                DBusError.invalidArgs(
                    "\(method.name) takes arguments (\(expected)) but was called with (\(message.signature))"))
        }
        let call = DBusMethodCall(
            sender: message.sender ?? "", member: method.name, arguments: message.arguments())
        // Called here, on the connection's thread, so calls reach the service in the order they
        // arrived; the handler hands the work on and replies later, from any thread.
        method.handler(call, reply)
    }

    private static let standardInterfaces: Set<String> = [
        "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer",
    ]

    private func handleProperties(_ member: String, _ message: Message, _ loop: ConnectionLoop) {
        let arguments = message.arguments()
        switch (member, message.signature) {
        case ("Get", "ss"):
            let reply = loop.reply(to: message, member: member, outputs: [.variant])
            let name = arguments[1].string ?? ""
            guard let found = lookUp(arguments[0].string ?? "", name, reply) else { return }
            reply.send([.variant(values.withLock { $0[found.interface]?[name] } ?? found.property.initialValue)])
        case ("GetAll", "s"):
            let reply = loop.reply(
                to: message, member: member, outputs: [.dictionary(key: .string, value: .variant)])
            let interfaceName = arguments[0].string ?? ""
            if Self.standardInterfaces.contains(interfaceName) { return reply.send([.vardict([])]) }
            guard let interface = interfaces.first(where: { $0.name == interfaceName }) else {
                return reply.fail(DBusError.unknownInterface("No interface \(interfaceName) at \(path)"))
            }
            let current = values.withLock { $0[interface.name] ?? [:] }
            reply.send([.vardict(interface.properties.map { ($0.name, current[$0.name] ?? $0.initialValue) })])
        case ("Set", "ssv"):
            let reply = loop.reply(to: message, member: member, outputs: [])
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
            loop.reply(to: message, member: member, outputs: []).fail(
                DBusError.invalidArgs(
                    "\(member) takes arguments (\(expected)) but was called with (\(message.signature))"))
        default:
            loop.reply(to: message, member: member, outputs: []).fail(
                DBusError.unknownMethod("No method \(member) on org.freedesktop.DBus.Properties"))
        }
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
