import DBus
import Foundation
import History
import Synchronization

/// A remembered per-app decision.
public enum ConsentDecision: String, Sendable, CaseIterable {
    case allow, deny

    /// As the permission store keeps it (xdg-desktop-portal's device permissions use yes/no).
    var permission: String { self == .allow ? "yes" : "no" }

    init?(permissions: [String]) {
        switch permissions.first {
        case "yes": self = .allow
        case "no": self = .deny
        default: return nil
        }
    }
}

/// Where per-app decisions are remembered across restarts.
public protocol ConsentStore: Sendable {
    /// For the log: which store this is.
    var description: String { get }
    /// Every remembered decision, by app id.
    func decisions() async throws(DBusError) -> [String: ConsentDecision]
    /// Remembers `decision` for `app`, or forgets the app's decision when nil.
    func set(_ decision: ConsentDecision?, for app: String) async throws(DBusError)
}

extension ConsentStore {
    /// The remembered decision for one app, if any.
    public func decision(for app: String) async throws(DBusError) -> ConsentDecision? {
        try await decisions()[app]
    }
}

/// The desktop's permission store (`org.freedesktop.impl.portal.PermissionStore`, from
/// xdg-desktop-portal / flatpak), table `sttd`, resource `microphone`: `flatpak permission-show
/// sttd` lists the decisions and `flatpak permission-reset APP` clears them.
public struct PermissionStoreConsent: ConsentStore {
    public static let busName = "org.freedesktop.impl.portal.PermissionStore"
    static let path = "/org/freedesktop/impl/portal/PermissionStore"
    public static let table = "sttd"
    public static let resource = "microphone"

    let connection: DBusConnection

    public init(connection: DBusConnection) { self.connection = connection }

    public var description: String { "the desktop permission store (table \(Self.table), id \(Self.resource))" }

    /// Whether a permission store is running or can be started on the bus.
    public static func isAvailable(on connection: DBusConnection) async -> Bool {
        let owned = try? await busCall(connection, "NameHasOwner", [.string(busName)]).first?.boolean
        if owned == true { return true }
        let activatable = try? await busCall(connection, "ListActivatableNames", []).first?.strings
        return activatable?.contains(busName) == true
    }

    static func busCall(_ connection: DBusConnection, _ member: String, _ arguments: [DBusValue])
        async throws(DBusError) -> [DBusValue]
    {
        try await connection.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: member, arguments: arguments, timeout: .seconds(5))
    }

    func call(_ member: String, _ arguments: [DBusValue]) async throws(DBusError) -> [DBusValue] {
        try await connection.call(
            destination: Self.busName, path: Self.path, interface: Self.busName, member: member, arguments: arguments,
            timeout: .seconds(10))
    }

    public func decisions() async throws(DBusError) -> [String: ConsentDecision] {
        let reply: [DBusValue]
        do {
            reply = try await call("Lookup", [.string(Self.table), .string(Self.resource)])
        } catch  where error.name.hasSuffix(".NotFound") {
            return [:]  // no table or no entry yet: nothing decided
        }
        guard case .dictionary(_, _, let entries)? = reply.first else { return [:] }
        var result: [String: ConsentDecision] = [:]
        for entry in entries {
            guard let app = entry.key.string, let decision = entry.value.strings.flatMap(ConsentDecision.init)
            else { continue }
            result[app] = decision
        }
        return result
    }

    public func set(_ decision: ConsentDecision?, for app: String) async throws(DBusError) {
        if let decision {
            _ = try await call(
                "SetPermission",
                [
                    .string(Self.table), .boolean(true), .string(Self.resource), .string(app),
                    .strings([decision.permission]),
                ])
        } else {
            do {
                _ = try await call("DeletePermission", [.string(Self.table), .string(Self.resource), .string(app)])
            } catch  where error.name.hasSuffix(".NotFound") {
                // Nothing to forget.
            }
        }
    }
}

/// sttd's own store when the desktop has no permission store: a small text file,
/// `$XDG_DATA_HOME/sttd/consent`, one `APP_ID yes|no` per line, replaced atomically.
final class FileConsentStore: ConsentStore {
    let path: String
    // Serializes read-modify-write of the file within this process.
    let lock = Mutex(())

    init(path: String) { self.path = path }

    /// `consent` in ``DataDirectory``, where history is too.
    static func defaultPath(environment: [String: String]) -> String {
        "\(DataDirectory.path(environment: environment))/consent"
    }

    var description: String { "sttd's own file \(path)" }

    /// Parses the file's text; lines that do not parse are skipped.
    static func parse(_ text: String) -> [String: ConsentDecision] {
        var result: [String: ConsentDecision] = [:]
        for line in text.split(whereSeparator: \.isNewline) {
            let fields = line.split(separator: " ")
            guard fields.count == 2, AppIdentity.isValidDecisionID(String(fields[0])),
                let decision = ConsentDecision(permissions: [String(fields[1])])
            else { continue }
            result[String(fields[0])] = decision
        }
        return result
    }

    static func render(_ decisions: [String: ConsentDecision]) -> String {
        decisions.keys.sorted().map { "\($0) \(decisions[$0]!.permission)\n" }.joined()
    }

    func read() throws(DBusError) -> [String: ConsentDecision] {
        guard FileManager.default.fileExists(atPath: path) else { return [:] }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw DBusError.failed("cannot read \(path)")
        }
        return Self.parse(text)
    }

    func decisions() async throws(DBusError) -> [String: ConsentDecision] {
        try lock.withLock { _ throws(DBusError) in try read() }
    }

    func set(_ decision: ConsentDecision?, for app: String) async throws(DBusError) {
        try lock.withLock { _ throws(DBusError) in
            var decisions = try read()
            decisions[app] = decision
            do {
                try FileManager.default.createDirectory(
                    atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true,
                    attributes: [.posixPermissions: 0o700])
                try Data(Self.render(decisions).utf8).write(to: URL(fileURLWithPath: path), options: .atomic)
            } catch {
                throw DBusError.failed("cannot write \(path): \(error.localizedDescription)")
            }
        }
    }
}
