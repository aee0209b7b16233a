import DBus
import Foundation
import SpeechAPI
import Synchronization

/// Who a D-Bus caller is, worked out the way xdg-desktop-portal does it: from the process the
/// bus daemon vouches for, never from anything the caller says about itself.
enum AppIdentity: Sendable, Hashable, CustomStringConvertible {
    /// An unsandboxed process of the same user: it could open the microphone through PulseAudio
    /// anyway, so it is never asked.
    case host
    /// A Flatpak app, by its app id (`[Application] name=` of `/.flatpak-info`).
    case flatpak(String)
    /// A Snap, by its snap name (from the AppArmor label or the cgroup).
    case snap(String)
    /// A caller whose identity could not be read (its process is gone, another user, or the
    /// sandbox's metadata is unreadable): treated as sandboxed, and never allowed.
    case unknown(reason: String)

    /// The app id decisions are stored under (`snap.NAME` for snaps, as xdg-desktop-portal names
    /// them); nil for host and unknown callers.
    var appID: String? {
        switch self {
        case .flatpak(let id): id
        case .snap(let name): "snap.\(name)"
        case .host, .unknown: nil
        }
    }

    var isSandboxed: Bool { self != .host }

    /// As `ActiveClient` shows it: the app id, `host`, or `unknown`.
    var description: String {
        switch self {
        case .host: "host"
        case .flatpak, .snap: appID ?? ""
        case .unknown: "unknown"
        }
    }

    // MARK: Pure parsing (unit-tested)

    /// The app id in a `.flatpak-info` keyfile: `name` in the `[Application]` group.
    static func flatpakAppID(keyfile text: String) -> String? {
        var inApplication = false
        for rawLine in text.split(whereSeparator: \.isNewline) {
            let line = rawLine.trimmingCharacters(in: .whitespaces)
            if line.isEmpty || line.hasPrefix("#") { continue }
            if line.hasPrefix("[") {
                inApplication = line == "[Application]"
                continue
            }
            guard inApplication, let equals = line.firstIndex(of: "=") else { continue }
            let key = line[..<equals].trimmingCharacters(in: .whitespaces)
            guard key == "name" else { continue }
            let value = line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            return isValidAppID(value) ? value : nil
        }
        return nil
    }

    /// The snap name in an AppArmor label such as `snap.firefox.firefox (enforce)`.
    static func snapName(appArmorLabel label: String) -> String? {
        let profile = label.split(separator: " ").first.map(String.init) ?? ""
        return snapName(dotted: profile)
    }

    /// The snap name in `/proc/PID/cgroup`: a path component `snap.NAME.APP-….scope` (systemd
    /// puts each snap app in such a scope).
    static func snapName(cgroup text: String) -> String? {
        for line in text.split(whereSeparator: \.isNewline) {
            // Each line is `hierarchy:controllers:path`; the path may itself not contain ':'.
            guard let path = line.split(separator: ":", maxSplits: 2, omittingEmptySubsequences: false).last else {
                continue
            }
            for component in path.split(separator: "/").reversed() {
                if let name = snapName(dotted: String(component)) { return name }
            }
        }
        return nil
    }

    private static func snapName(dotted text: String) -> String? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count >= 3, parts[0] == "snap" else { return nil }
        let name = String(parts[1])
        // Snap names: lowercase letters, digits and dashes (an instance key may follow `_`).
        let allowed = Set("abcdefghijklmnopqrstuvwxyz0123456789-_")
        guard !name.isEmpty, name.count <= 64, name.allSatisfy(allowed.contains) else { return nil }
        return name
    }

    /// Whether `id` is a well-formed app id (see ``AppID/isWellFormed(_:)``).
    static func isValidAppID(_ id: String) -> Bool { AppID.isWellFormed(id) }

    /// Whether `id` names an app decisions can be kept for: a Flatpak app id or `snap.NAME`.
    static func isValidDecisionID(_ id: String) -> Bool {
        isValidAppID(id)
    }

    // MARK: Reading /proc

    /// The identity of process `pid` owned by `uid`, as seen by a service running as `ownUID`.
    /// `proc` is the procfs mount (tests point it elsewhere).
    static func of(pid: UInt32, uid: UInt32, ownUID: UInt32, proc: String = "/proc") -> AppIdentity {
        guard uid == ownUID else { return .unknown(reason: "the caller runs as another user (uid \(uid))") }
        guard pid > 0 else { return .unknown(reason: "the bus did not say which process is calling") }
        let base = "\(proc)/\(pid)"
        guard access(base, F_OK) == 0 else {
            return .unknown(reason: "the calling process \(pid) is gone")
        }
        if let info = readSmallFile("\(base)/root/.flatpak-info") {
            guard let id = flatpakAppID(keyfile: info) else {
                return .unknown(reason: "the Flatpak sandbox of process \(pid) names no valid app")
            }
            return .flatpak(id)
        }
        // An existing but unreadable .flatpak-info is a sandbox we cannot identify.
        if access("\(base)/root/.flatpak-info", F_OK) == 0 {
            return .unknown(reason: "cannot read the Flatpak metadata of process \(pid)")
        }
        if let label = readSmallFile("\(base)/attr/current"),
            let name = snapName(appArmorLabel: label.trimmingCharacters(in: .whitespacesAndNewlines))
        {
            return .snap(name)
        }
        if let cgroup = readSmallFile("\(base)/cgroup"), let name = snapName(cgroup: cgroup) {
            return .snap(name)
        }
        // Reading the root failed for a process that exists: it is not ours to inspect.
        guard let root = opendir("\(base)/root") else {
            return .unknown(reason: "cannot inspect process \(pid)")
        }
        closedir(root)
        return .host
    }

    /// A small file's text (at most `limit` bytes), or nil if it cannot be read.
    ///
    /// Plain `read(2)`: `String(contentsOfFile:)` leaks its buffer (4 KB) when reading fails, as
    /// reading `/proc/PID/attr/current` does without a security module, once per new caller.
    static func readSmallFile(_ path: String, limit: Int = 64 * 1024) -> String? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while bytes.count < limit {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, min($0.count, limit - bytes.count)) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            if count == 0 { break }
            bytes += chunk[..<count]
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// Caller identities by unique bus name. Unique names are never reused on a bus, so an identity
/// read once stays right for that connection even if its pid is later reused.
///
/// The remaining race: between the caller's connection and our reading of `/proc/PID`, the
/// caller could exit and its pid be reused by another process. This dbus-daemon's credentials
/// carry no process fd (`ProcessFD`), so it cannot be closed here; the window is one lookup.
///
/// Bounded: at most ``limit`` entries; when full, the oldest entry is dropped (it is read again
/// if that caller calls again). Entries go when the bus says their name has gone, and an identity
/// whose caller left while it was being read is not kept: a table of callers that left would
/// only grow (to ``limit``) under short-lived peers.
final class IdentityCache: Sendable {
    static let limit = 512
    private struct State {
        var identities: [String: AppIdentity] = [:]
        var order: [String] = []
        /// Names being read now: how many reads, and whether the bus said the name left meanwhile.
        var reading: [String: (count: Int, left: Bool)] = [:]
    }
    private let state = Mutex(State())

    init() {}

    func identity(of uniqueName: String) -> AppIdentity? { state.withLock { $0.identities[uniqueName] } }

    func store(_ identity: AppIdentity, for uniqueName: String) {
        state.withLock { state in
            if state.identities.updateValue(identity, forKey: uniqueName) == nil { state.order.append(uniqueName) }
            while state.order.count > Self.limit {
                state.identities[state.order.removeFirst()] = nil
            }
        }
    }

    /// Marks the start of reading `uniqueName`'s identity; end it with ``endReading(_:keeping:)``.
    func beginReading(_ uniqueName: String) {
        state.withLock { $0.reading[uniqueName, default: (0, false)].count += 1 }
    }

    /// Ends a read begun with ``beginReading(_:)``, storing `identity` (if given) unless the name
    /// left the bus meanwhile.
    func endReading(_ uniqueName: String, keeping identity: AppIdentity?) {
        let left = state.withLock { state -> Bool in
            guard let reading = state.reading[uniqueName] else { return false }
            state.reading[uniqueName] = reading.count > 1 ? (reading.count - 1, reading.left) : nil
            return reading.left
        }
        if let identity, !left { store(identity, for: uniqueName) }
    }

    /// Forgets a name the bus has released.
    func forget(_ uniqueName: String) {
        state.withLock { state in
            state.reading[uniqueName]?.left = true
            guard state.identities.removeValue(forKey: uniqueName) != nil else { return }
            state.order.removeAll { $0 == uniqueName }
        }
    }

    var count: Int { state.withLock { $0.identities.count } }

    /// Names being read now (tests check that nothing is left behind).
    var readingCount: Int { state.withLock { $0.reading.count } }
}
