/// The reply of a method that answers with no values.
public struct DBusNoReply: Sendable {}

/// A method's name and its arguments' names and types, as introspection shows them.
public struct DBusMethodSignature: Sendable {
    public let name: String
    public let inputs: [DBusArgument]
    public let outputs: [DBusArgument]
}

/// One method of an interface, declared once for its server and its clients: the Swift types
/// are the signature (`DBusMethodSpec<Bool, UInt32>` answers a `b` to a `u`), so a server and a
/// client that both use the spec cannot disagree about it. The reply type comes first, so a
/// method without arguments is `DBusMethodSpec<String>`.
public struct DBusMethodSpec<Output: Sendable, each Input: DBusTyped>: Sendable {
    public let signature: DBusMethodSignature
    public var name: String { signature.name }

    /// A method answering one `Output` value named `output`; `inputs` name the arguments.
    public init(_ name: String, inputs: String..., output: String) where Output: DBusTyped {
        signature = DBusMethodSignature(
            name: name, inputs: Self.arguments(inputs), outputs: [DBusArgument(output, Output.dbusType)])
    }

    /// A method answering with no values.
    public init(_ name: String, inputs: String...) where Output == DBusNoReply {
        signature = DBusMethodSignature(name: name, inputs: Self.arguments(inputs), outputs: [])
    }

    private static func arguments(_ names: [String]) -> [DBusArgument] {
        var types: [DBusType] = []
        for type in repeat (each Input).self { types.append(type.dbusType) }
        precondition(names.count == types.count, "\(names) does not name each of the \(types.count) arguments")
        return zip(names, types).map { DBusArgument($0, $1) }
    }
}

/// One signal of an interface, declared once for the code that emits it and the code that
/// decodes it.
public struct DBusSignalSpec<each Argument: DBusTyped>: Sendable {
    public let declaration: DBusSignal
    public var name: String { declaration.name }

    public init(_ name: String, _ argumentNames: String...) {
        var types: [DBusType] = []
        for type in repeat (each Argument).self { types.append(type.dbusType) }
        precondition(argumentNames.count == types.count, "\(name) does not name each of its \(types.count) arguments")
        declaration = DBusSignal(name, arguments: zip(argumentNames, types).map { DBusArgument($0, $1) })
    }
}

extension DBusSignalSpec where repeat each Argument: DBusEncodable {
    /// The signal's arguments, in order.
    public func values(_ arguments: repeat each Argument) -> [DBusValue] {
        var values: [DBusValue] = []
        for argument in repeat each arguments { values.append(argument.dbusValue) }
        return values
    }
}

extension DBusSignalSpec where repeat each Argument: DBusDecodable {
    /// The arguments of a received signal; nil for another member or arguments of other types.
    public func decode(_ message: DBusSignalMessage) -> (repeat each Argument)? {
        guard message.member == name, message.arguments.map(\.type) == declaration.arguments.map(\.type) else {
            return nil
        }
        return try? DBusMethod.decode(message.arguments, as: (repeat (each Argument).self))
    }
}

// MARK: Serving

extension DBusMethod {
    /// A method served by an async function: the arguments are decoded into the spec's types (a
    /// value that does not decode is answered with its `InvalidArgs`), `perform` runs, and its
    /// result is the reply; a thrown ``DBusErrorRepresentable`` becomes its error reply.
    ///
    /// `perform` starts on the connection's thread (see ``DBusCallTasks``), so calls reach
    /// whatever it awaits first in the order they arrived.
    public static func serving<Output: DBusEncodable, each Input: DBusDecodable>(
        _ spec: DBusMethodSpec<Output, repeat each Input>, tasks: DBusCallTasks,
        _ perform: @escaping @Sendable (_ sender: String, repeat each Input) async throws -> Output
    ) -> DBusMethod {
        DBusMethod(spec.signature) { call, reply in
            do throws(DBusError) {
                let arguments = try decode(call.arguments, as: (repeat (each Input).self))
                tasks.start(reply) { reply.send([try await perform(call.sender, repeat each arguments).dbusValue]) }
            } catch {
                reply.fail(error)
            }
        }
    }

    /// A method with no reply values served by an async function (see the other `serving`).
    public static func serving<each Input: DBusDecodable>(
        _ spec: DBusMethodSpec<DBusNoReply, repeat each Input>, tasks: DBusCallTasks,
        _ perform: @escaping @Sendable (_ sender: String, repeat each Input) async throws -> Void
    ) -> DBusMethod {
        DBusMethod(spec.signature) { call, reply in
            do throws(DBusError) {
                let arguments = try decode(call.arguments, as: (repeat (each Input).self))
                tasks.start(reply) {
                    try await perform(call.sender, repeat each arguments)
                    reply.send([])
                }
            } catch {
                reply.fail(error)
            }
        }
    }

    /// A method answered at once on the connection's thread (it must not block): for objects
    /// whose calls must be handled in the order they arrived, such as an IBus engine's.
    public static func answering<Output: DBusEncodable, each Input: DBusDecodable>(
        _ spec: DBusMethodSpec<Output, repeat each Input>,
        _ answer: @escaping @Sendable (_ sender: String, repeat each Input) throws(DBusError) -> Output
    ) -> DBusMethod {
        DBusMethod(spec.signature) { call, reply in
            do throws(DBusError) {
                let arguments = try decode(call.arguments, as: (repeat (each Input).self))
                reply.send([try answer(call.sender, repeat each arguments).dbusValue])
            } catch {
                reply.fail(error)
            }
        }
    }

    /// A method with no reply values answered at once (see the other `answering`).
    public static func answering<each Input: DBusDecodable>(
        _ spec: DBusMethodSpec<DBusNoReply, repeat each Input>,
        _ answer: @escaping @Sendable (_ sender: String, repeat each Input) throws(DBusError) -> Void
    ) -> DBusMethod {
        DBusMethod(spec.signature) { call, reply in
            do throws(DBusError) {
                let arguments = try decode(call.arguments, as: (repeat (each Input).self))
                try answer(call.sender, repeat each arguments)
                reply.send([])
            } catch {
                reply.fail(error)
            }
        }
    }

    /// A method declared for introspection only (an installed XML file): a call is refused.
    public static func declared(_ signature: DBusMethodSignature) -> DBusMethod {
        DBusMethod(signature) { _, reply in reply.fail(DBusError.failed("\(signature.name) is not served here")) }
    }

    init(_ signature: DBusMethodSignature, handler: @escaping Handler) {
        self.init(signature.name, inputs: signature.inputs, outputs: signature.outputs, handler: handler)
    }
}

// MARK: Calling

extension DBusConnection {
    /// Calls a method declared by `spec` and decodes its reply; an error reply is thrown, and so
    /// is a reply of another type (`InvalidArgs`).
    public func call<Output: DBusDecodable, each Input: DBusEncodable>(
        _ spec: DBusMethodSpec<Output, repeat each Input>, destination: String, path: String, interface: String,
        _ arguments: repeat each Input, timeout: Duration = .seconds(25)
    ) async throws(DBusError) -> Output {
        let reply = try await call(
            destination: destination, path: path, interface: interface, member: spec.name,
            arguments: Self.values(repeat each arguments), timeout: timeout)
        guard reply.count == 1, reply[0].type == Output.dbusType else {
            throw .invalidArgs("\(spec.name) answered '\(reply.map(\.type))', not '\(Output.dbusType)'")
        }
        return try Output(dbusValue: reply[0])
    }

    /// Calls a method declared by `spec` that answers with no values (a reply with some is
    /// `InvalidArgs`).
    public func call<each Input: DBusEncodable>(
        _ spec: DBusMethodSpec<DBusNoReply, repeat each Input>, destination: String, path: String,
        interface: String, _ arguments: repeat each Input, timeout: Duration = .seconds(25)
    ) async throws(DBusError) {
        let reply = try await call(
            destination: destination, path: path, interface: interface, member: spec.name,
            arguments: Self.values(repeat each arguments), timeout: timeout)
        guard reply.isEmpty else { throw .invalidArgs("\(spec.name) answered '\(reply.map(\.type))', not nothing") }
    }

    private static func values<each Value: DBusEncodable>(_ values: repeat each Value) -> [DBusValue] {
        var encoded: [DBusValue] = []
        for value in repeat each values { encoded.append(value.dbusValue) }
        return encoded
    }

    /// Whether some connection owns `name` on the bus now.
    public func nameHasOwner(_ name: String) async throws(DBusError) -> Bool {
        try await call(
            FreedesktopDBus.nameHasOwner, destination: FreedesktopDBus.name, path: FreedesktopDBus.path,
            interface: FreedesktopDBus.name, name)
    }
}

/// The bus itself, `org.freedesktop.DBus`.
enum FreedesktopDBus {
    static let name = "org.freedesktop.DBus"
    static let path = "/org/freedesktop/DBus"
    static let nameHasOwner = DBusMethodSpec<Bool, String>("NameHasOwner", inputs: "name", output: "has_owner")
}
