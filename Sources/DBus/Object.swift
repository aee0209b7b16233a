import CDBus
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
    public typealias Handler = @Sendable (DBusMethodCall) async throws -> [DBusValue]
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
    public typealias Setter = @Sendable (DBusValue) async throws -> DBusValue
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

/// Sends the single reply a method call gets.
struct Responder: Sendable {
    let message: Message
    let loop: ConnectionLoop

    func reply(_ values: [DBusValue]) {
        guard message.expectsReply, let reply = message.methodReturn() else { return }
        do {
            try reply.append(values)
        } catch {
            return fail(.failed("the service produced an invalid reply: \(error.message)"))
        }
        loop.perform { $0.send(reply) }
    }

    func fail(_ error: DBusError) {
        guard message.expectsReply, let reply = message.errorReply(error) else { return }
        loop.perform { $0.send(reply) }
    }
}

/// An object exported on a connection. Property values live here, so `Get` and `GetAll` are
/// answered on the connection's thread without waiting for the service.
public final class DBusObject: Sendable {
    public let path: String
    public let interfaces: [DBusInterface]
    private let values: Mutex<[String: [String: DBusValue]]>
    private let loop = Mutex<ConnectionLoop?>(nil)

    public init(path: String, interfaces: [DBusInterface]) throws(DBusError) {
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

    /// Sets properties of one interface and emits one `PropertiesChanged` for those that changed.
    public func setProperties(_ changes: [(String, DBusValue)], interface: String? = nil) {
        guard let first = changes.first, let owner = interface ?? owningInterface(ofProperty: first.0),
            let declaration = interfaces.first(where: { $0.name == owner })
        else { return }
        var changed: [(String, DBusValue)] = []
        values.withLock { values in
            for (name, value) in changes {
                guard let property = declaration.properties.first(where: { $0.name == name }),
                    property.type == value.type, values[owner]?[name] != value
                else { continue }
                values[owner]?[name] = value
                if property.changeSignal == .emits { changed.append((name, value)) }
            }
        }
        guard !changed.isEmpty else { return }
        emit(
            "PropertiesChanged", interface: "org.freedesktop.DBus.Properties",
            [.string(owner), .vardict(changed), .strings([])])
    }

    /// Sets one property, emitting `PropertiesChanged` if its value changed.
    public func setProperty(_ name: String, _ value: DBusValue, interface: String? = nil) {
        setProperties([(name, value)], interface: interface)
    }

    /// Emits a signal from this object.
    public func emit(_ signal: String, interface: String? = nil, _ arguments: [DBusValue]) {
        guard let loop = loop.withLock({ $0 }), let owner = interface ?? interfaces.first?.name else { return }
        guard let message = try? Message.signal(path: path, interface: owner, member: signal),
            (try? message.append(arguments)) != nil
        else { return }
        loop.perform { $0.send(message) }
    }

    /// The introspection XML of this object.
    public var introspectionXML: String { Introspection.object(interfaces) }

    private func owningInterface(ofProperty name: String) -> String? {
        interfaces.first { $0.properties.contains { $0.name == name } }?.name
    }

    // MARK: Connection thread

    func handle(_ message: Message) {
        guard let loop = loop.withLock({ $0 }) else { return }
        let responder = Responder(message: message, loop: loop)
        let member = message.member ?? ""
        switch message.interface {
        case "org.freedesktop.DBus.Introspectable":
            guard member == "Introspect" else {
                return responder.fail(.unknownMethod("No method \(member) on org.freedesktop.DBus.Introspectable"))
            }
            guard message.signature.isEmpty else {
                return responder.fail(.invalidArgs("Introspect takes no arguments"))
            }
            responder.reply([.string(introspectionXML)])
        case "org.freedesktop.DBus.Properties":
            handleProperties(member, message, responder)
        case let name?:
            guard let interface = interfaces.first(where: { $0.name == name }) else {
                return responder.fail(.unknownInterface("No interface \(name) at \(path)"))
            }
            guard let method = interface.methods.first(where: { $0.name == member }) else {
                return responder.fail(.unknownMethod("No method \(member) on interface \(name)"))
            }
            invoke(method, message, responder)
        case nil:
            guard let method = interfaces.lazy.flatMap(\.methods).first(where: { $0.name == member }) else {
                return responder.fail(.unknownMethod("No method \(member) at \(path)"))
            }
            invoke(method, message, responder)
        }
    }

    private func invoke(_ method: DBusMethod, _ message: Message, _ responder: Responder) {
        let expected = signatureString(method.inputs.map(\.type))
        guard message.signature == expected else {
            return responder.fail(
                .invalidArgs(
                    "\(method.name) takes arguments (\(expected)) but was called with (\(message.signature))"))
        }
        let call = DBusMethodCall(
            sender: message.sender ?? "", member: method.name, arguments: message.arguments())
        let outputTypes = method.outputs.map(\.type)
        // Started here, on the connection's thread, and run until the handler first suspends
        // (typically on entering the service's actor): calls reach the service in the order they
        // arrived. A plain `Task` would let two calls from one client overtake each other.
        // Handlers must therefore not block before their first await, nor wait for this thread.
        Task.immediate {
            do {
                let results = try await method.handler(call)
                guard results.map(\.type) == outputTypes else {
                    return responder.fail(.failed("\(method.name) produced a reply of the wrong type"))
                }
                responder.reply(results)
            } catch {
                responder.fail(Self.dbusError(for: error))
            }
        }
    }

    static func dbusError(for error: any Error) -> DBusError {
        (error as? any DBusErrorRepresentable)?.dbusError ?? .failed("\(error)")
    }

    private static let standardInterfaces: Set<String> = [
        "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer",
    ]

    private func handleProperties(_ member: String, _ message: Message, _ responder: Responder) {
        let arguments = message.arguments()
        switch (member, message.signature) {
        case ("Get", "ss"):
            guard let name = arguments[1].string, let found = lookUp(arguments[0].string ?? "", name, responder) else {
                return
            }
            responder.reply([.variant(values.withLock { $0[found.interface]?[name] } ?? found.property.initialValue)])
        case ("GetAll", "s"):
            let interfaceName = arguments[0].string ?? ""
            if Self.standardInterfaces.contains(interfaceName) { return responder.reply([.vardict([])]) }
            guard let interface = interfaces.first(where: { $0.name == interfaceName }) else {
                return responder.fail(.unknownInterface("No interface \(interfaceName) at \(path)"))
            }
            let current = values.withLock { $0[interface.name] ?? [:] }
            responder.reply([
                .vardict(interface.properties.map { ($0.name, current[$0.name] ?? $0.initialValue) })
            ])
        case ("Set", "ssv"):
            guard let name = arguments[1].string, let found = lookUp(arguments[0].string ?? "", name, responder),
                let value = arguments[2].variantValue
            else { return }
            guard let setter = found.property.setter else {
                return responder.fail(.propertyReadOnly("Property \(name) is read-only"))
            }
            guard value.type == found.property.type else {
                return responder.fail(
                    .invalidArgs("Property \(name) has type '\(found.property.type)', not '\(value.type)'"))
            }
            Task.immediate {
                do {
                    let stored = try await setter(value)
                    self.setProperty(name, stored, interface: found.interface)
                    responder.reply([])
                } catch {
                    responder.fail(Self.dbusError(for: error))
                }
            }
        case ("Get", _), ("GetAll", _), ("Set", _):
            let expected = ["Get": "ss", "GetAll": "s", "Set": "ssv"][member]!
            responder.fail(
                .invalidArgs("\(member) takes arguments (\(expected)) but was called with (\(message.signature))"))
        default:
            responder.fail(.unknownMethod("No method \(member) on org.freedesktop.DBus.Properties"))
        }
    }

    private func lookUp(_ interfaceName: String, _ name: String, _ responder: Responder)
        -> (interface: String, property: DBusProperty)?
    {
        let candidates = interfaceName.isEmpty ? interfaces : interfaces.filter { $0.name == interfaceName }
        if candidates.isEmpty && !Self.standardInterfaces.contains(interfaceName) {
            responder.fail(.unknownInterface("No interface \(interfaceName) at \(path)"))
            return nil
        }
        for interface in candidates {
            if let property = interface.properties.first(where: { $0.name == name }) {
                return (interface.name, property)
            }
        }
        responder.fail(.unknownProperty("No property \(name) on interface \(interfaceName)"))
        return nil
    }
}
