import DBus
import Synchronization

/// A minimal desktop notification server (`org.freedesktop.Notifications`) on a test bus: it
/// records every `Notify` call and answers as a real server does (ids, replacement).
public final class NotificationServer: Sendable {
    /// One `Notify` call as received.
    public struct Notification: Sendable, Equatable {
        public var id: UInt32
        public var replacesID: UInt32
        public var appName: String
        public var summary: String
        public var body: String
        public var urgency: UInt8?
        /// Action keys and labels, alternating, as sent.
        public var actions: [String]
        public var expireTimeout: Int32
    }

    private final class Received: Sendable {
        let list = Mutex<[Notification]>([])
        let closed = Mutex<[UInt32]>([])
    }

    private let connection: DBusConnection
    private let object: DBusObject
    private let received = Received()

    /// Connects to the bus at `address` and owns the notification service's name there.
    /// `actions`: whether it advertises the `actions` capability (buttons in notifications).
    public init(busAddress: String, actions: Bool = false) async throws {
        connection = try await DBusConnection.connect(to: .address(busAddress))
        let received = received
        let notify = DBusMethod(
            "Notify",
            inputs: [
                .init("app_name", .string), .init("replaces_id", .uint32), .init("app_icon", .string),
                .init("summary", .string), .init("body", .string), .init("actions", .array(.string)),
                .init("hints", .dictionary(key: .string, value: .variant)), .init("expire_timeout", .int32),
            ],
            outputs: [.init("id", .uint32)]
        ) { call, reply in
            let arguments = call.arguments
            let urgency = arguments[6].stringVariantDictionary?.first { $0.key == "urgency" }?.value
            let id = received.list.withLock { list -> UInt32 in
                let replaces = arguments[1].uint32 ?? 0
                let id = replaces != 0 ? replaces : UInt32(list.count + 1)
                list.append(
                    Notification(
                        id: id, replacesID: replaces, appName: arguments[0].string ?? "",
                        summary: arguments[3].string ?? "", body: arguments[4].string ?? "",
                        urgency: urgency.flatMap { if case .byte(let value) = $0 { value } else { nil } },
                        actions: arguments[5].strings ?? [],
                        expireTimeout: { if case .int32(let value) = arguments[7] { value } else { 0 } }()))
                return id
            }
            reply.send([.uint32(id)])
        }
        let interface = DBusInterface(
            name: "org.freedesktop.Notifications",
            methods: [
                notify,
                DBusMethod("CloseNotification", inputs: [.init("id", .uint32)]) { call, reply in
                    received.closed.withLock { $0.append(call.arguments[0].uint32 ?? 0) }
                    reply.send([])
                },
                DBusMethod("GetCapabilities", outputs: [.init("capabilities", .array(.string))]) { _, reply in
                    reply.send([.strings(actions ? ["body", "actions"] : ["body"])])
                },
                DBusMethod(
                    "GetServerInformation",
                    outputs: [
                        .init("name", .string), .init("vendor", .string), .init("version", .string),
                        .init("spec_version", .string),
                    ]
                ) { _, reply in
                    reply.send([.string("sttd-test"), .string("sttd"), .string("1"), .string("1.2")])
                },
            ],
            signals: [
                DBusSignal("NotificationClosed", arguments: [.init("id", .uint32), .init("reason", .uint32)]),
                DBusSignal("ActionInvoked", arguments: [.init("id", .uint32), .init("action_key", .string)]),
            ])
        object = try DBusObject(path: "/org/freedesktop/Notifications", interfaces: [interface])
        connection.export(object)
        guard try await connection.requestName("org.freedesktop.Notifications") == 1 else {
            connection.close()
            throw MissingPrerequisite(description: "another notification server owns the name on the test bus")
        }
    }

    /// Every notification received so far, oldest first.
    public var notifications: [Notification] { received.list.withLock { $0 } }

    /// Ids the service closed with `CloseNotification`.
    public var closedByService: [UInt32] { received.closed.withLock { $0 } }

    /// The user clicks an action: `ActionInvoked`, then `NotificationClosed` (reason 3), as servers do.
    public func invokeAction(_ key: String, on id: UInt32) {
        object.emit("ActionInvoked", [.uint32(id), .string(key)])
        object.emit("NotificationClosed", [.uint32(id), .uint32(3)])
    }

    /// The user dismisses the notification (reason 2).
    public func dismiss(_ id: UInt32) {
        object.emit("NotificationClosed", [.uint32(id), .uint32(2)])
    }

    public func stop() { connection.close() }
}
