/// A D-Bus error: a name like `org.freedesktop.DBus.Error.InvalidArgs` and a message for a person.
public struct DBusError: Error, Hashable, Sendable, CustomStringConvertible {
    public var name: String
    public var message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { "\(name): \(message)" }

    /// `org.freedesktop.DBus.Error.<kind>` with `message`.
    static func standard(_ kind: String, _ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error." + kind, message: message)
    }
    public static func invalidArgs(_ message: String) -> DBusError { standard("InvalidArgs", message) }
    public static func failed(_ message: String) -> DBusError { standard("Failed", message) }
    public static func unknownMethod(_ message: String) -> DBusError { standard("UnknownMethod", message) }
    public static func unknownInterface(_ message: String) -> DBusError { standard("UnknownInterface", message) }
    public static func unknownObject(_ message: String) -> DBusError { standard("UnknownObject", message) }
    public static func unknownProperty(_ message: String) -> DBusError { standard("UnknownProperty", message) }
    public static func propertyReadOnly(_ message: String) -> DBusError { standard("PropertyReadOnly", message) }
    public static func disconnected(_ message: String) -> DBusError { standard("Disconnected", message) }
    public static func noReply(_ message: String) -> DBusError { standard("NoReply", message) }
    public static func limitsExceeded(_ message: String) -> DBusError { standard("LimitsExceeded", message) }

    /// Whether the error says that no process owns the called name (and none could be activated).
    public var isServiceMissing: Bool {
        [
            "org.freedesktop.DBus.Error.ServiceUnknown",
            "org.freedesktop.DBus.Error.NameHasNoOwner",
            "org.freedesktop.DBus.Error.Spawn.ChildExited",
            "org.freedesktop.DBus.Error.Spawn.ExecFailed",
            "org.freedesktop.DBus.Error.Spawn.ServiceNotFound",
        ].contains(name)
    }
}
