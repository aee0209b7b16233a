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
    }

    private final class Received: Sendable {
        let list = Mutex<[Notification]>([])
    }

    private let connection: DBusConnection
    private let received = Received()

    /// Connects to the bus at `address` and owns the notification service's name there.
    public init(busAddress: String) async throws {
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
                        urgency: urgency.flatMap { if case .byte(let value) = $0 { value } else { nil } }))
                return id
            }
            reply.send([.uint32(id)])
        }
        let interface = DBusInterface(
            name: "org.freedesktop.Notifications",
            methods: [
                notify,
                DBusMethod("CloseNotification", inputs: [.init("id", .uint32)]) { _, reply in reply.send([]) },
                DBusMethod("GetCapabilities", outputs: [.init("capabilities", .array(.string))]) { _, reply in
                    reply.send([.strings(["body"])])
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
            signals: [DBusSignal("NotificationClosed", arguments: [.init("id", .uint32), .init("reason", .uint32)])])
        connection.export(try DBusObject(path: "/org/freedesktop/Notifications", interfaces: [interface]))
        guard try await connection.requestName("org.freedesktop.Notifications") == 1 else {
            connection.close()
            throw MissingPrerequisite(description: "another notification server owns the name on the test bus")
        }
    }

    /// Every notification received so far, oldest first.
    public var notifications: [Notification] { received.list.withLock { $0 } }

    public func stop() { connection.close() }
}
