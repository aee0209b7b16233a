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

    /// Reads a property whose value the service keeps itself. Runs on the connection's thread
    /// and must not block.
    public typealias Getter = @Sendable () -> DBusValue

    public var name: String
    public var type: DBusType
    public var initialValue: DBusValue
    public var changeSignal: ChangeSignal
    public var setter: Setter?
    /// Set for a property the service keeps (the object stores no copy of it), nil for one the
    /// object stores.
    public var getter: Getter?

    /// A property the object stores, starting at `initialValue`.
    public init(
        _ name: String, _ initialValue: DBusValue, changeSignal: ChangeSignal = .emits, setter: Setter? = nil
    ) {
        self.name = name
        self.type = initialValue.type
        self.initialValue = initialValue
        self.changeSignal = changeSignal
        self.setter = setter
    }

    /// A property the service keeps: every read calls `getter`; a write calls `setter`, which
    /// stores the value where the getter finds it, and emits `PropertiesChanged` if it changed.
    public init(
        _ name: String, _ type: DBusType, changeSignal: ChangeSignal = .emits, getter: @escaping Getter,
        setter: Setter? = nil
    ) {
        self.init(name, getter(), changeSignal: changeSignal, setter: setter)
        precondition(self.type == type, "\(name) is declared '\(type)' but reads '\(self.type)'")
        self.getter = getter
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
    /// What a member is for, by member name: introspection shows it as gdbus-codegen's
    /// `org.gtk.GDBus.DocString` annotation (for rules a signature cannot say, such as who may call).
    public var documentation: [String: String]

    public init(
        name: String, methods: [DBusMethod] = [], properties: [DBusProperty] = [], signals: [DBusSignal] = [],
        documentation: [String: String] = [:]
    ) {
        self.name = name
        self.methods = methods
        self.properties = properties
        self.signals = signals
        self.documentation = documentation
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
    enum State { case waiting, decided(DBusError?), deferred }
    let state = Mutex<State>(.waiting)
    /// Resumes the call on the connection thread when the answer comes after the gate returned.
    let resume: @Sendable (DBusError?) -> Void

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
final class ReaderBox: Sendable {
    let read: DBusPropertyReader
    init(_ read: @escaping DBusPropertyReader) { self.read = read }
}

/// Holds the gate at its own type: a closure kept in a generic container and called from there
/// leaked on every call with this toolchain.
final class GateBox: Sendable {
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
