import DBus

/// A typed client of `io.github.sttd.Speech1`: `try await proxy.call(Speech1.getHistory, 10)`.
/// There is no method per call: the specs in ``Speech1`` are the one list.
public struct SpeechProxy: Sendable {
    public let connection: DBusConnection
    /// How long a call may take before it fails with `NoReply`.
    public var timeout: Duration

    public init(connection: DBusConnection, timeout: Duration = .seconds(30)) {
        self.connection = connection
        self.timeout = timeout
    }

    /// Calls a method that answers one value.
    @discardableResult
    public func call<Output: DBusDecodable, each Input: DBusEncodable>(
        _ spec: DBusMethodSpec<Output, repeat each Input>, _ arguments: repeat each Input
    ) async throws(DBusError) -> Output {
        try await connection.call(
            spec, destination: SpeechAPI.busName, path: SpeechAPI.objectPath, interface: SpeechAPI.interface,
            repeat each arguments, timeout: timeout)
    }

    /// Calls a method that answers with no values.
    public func call<each Input: DBusEncodable>(
        _ spec: DBusMethodSpec<DBusNoReply, repeat each Input>, _ arguments: repeat each Input
    ) async throws(DBusError) {
        try await connection.call(
            spec, destination: SpeechAPI.busName, path: SpeechAPI.objectPath, interface: SpeechAPI.interface,
            repeat each arguments, timeout: timeout)
    }

    /// The current value of a property; nil if its value is not of the property's type.
    public func property<Value>(_ property: SpeechProperty<Value>) async throws(DBusError) -> Value? {
        let value = try await connection.call(
            Properties.get, destination: SpeechAPI.busName, path: SpeechAPI.objectPath,
            interface: Properties.interface, SpeechAPI.interface, property.name, timeout: timeout)
        return try? Value(dbusValue: value.value)
    }

    /// Sets a writable property; the service's refusal is thrown.
    public func set<Value>(_ property: SpeechProperty<Value>, _ value: Value) async throws(DBusError) {
        try await connection.call(
            Properties.set, destination: SpeechAPI.busName, path: SpeechAPI.objectPath,
            interface: Properties.interface, SpeechAPI.interface, property.name, DBusVariant(value.dbusValue),
            timeout: timeout)
    }

    /// Every property, in the service's order.
    public func allProperties() async throws(DBusError) -> [(String, DBusValue)] {
        let reply = try await connection.call(
            destination: SpeechAPI.busName, path: SpeechAPI.objectPath, interface: Properties.interface,
            member: "GetAll", arguments: [.string(SpeechAPI.interface)], timeout: timeout)
        return reply.first?.stringVariantDictionary ?? []
    }

    /// The interface's signals as they arrive, from whoever owns sttd's name. Subscribes before
    /// returning, so no signal sent after this call is missed.
    public func signals() async throws(DBusError)
        -> AsyncCompactMapSequence<AsyncStream<DBusSignalMessage>, SpeechSignal>
    {
        try await connection.signals(
            sender: SpeechAPI.busName, path: SpeechAPI.objectPath, interface: SpeechAPI.interface
        ).compactMap { SpeechSignal($0) }
    }
}

/// `org.freedesktop.DBus.Properties`, as far as a client of sttd uses it.
enum Properties {
    static let interface = "org.freedesktop.DBus.Properties"
    static let get = DBusMethodSpec<DBusVariant, String, String>("Get", inputs: "interface", "name", output: "value")
    static let set = DBusMethodSpec<DBusNoReply, String, String, DBusVariant>(
        "Set", inputs: "interface", "name", "value")
}
