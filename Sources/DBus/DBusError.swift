/// A D-Bus error: a name like `org.freedesktop.DBus.Error.InvalidArgs` and a message for a person.
public struct DBusError: Error, Hashable, Sendable, CustomStringConvertible {
    public var name: String
    public var message: String

    public init(name: String, message: String) {
        self.name = name
        self.message = message
    }

    public var description: String { "\(name): \(message)" }

    public static func invalidArgs(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.InvalidArgs", message: message)
    }
    public static func failed(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.Failed", message: message)
    }
    public static func unknownMethod(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.UnknownMethod", message: message)
    }
    public static func unknownInterface(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.UnknownInterface", message: message)
    }
    public static func unknownObject(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.UnknownObject", message: message)
    }
    public static func unknownProperty(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.UnknownProperty", message: message)
    }
    public static func propertyReadOnly(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.PropertyReadOnly", message: message)
    }
    public static func disconnected(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.Disconnected", message: message)
    }
    public static func noReply(_ message: String) -> DBusError {
        DBusError(name: "org.freedesktop.DBus.Error.NoReply", message: message)
    }

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
