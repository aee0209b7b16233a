import Foundation

/// A person at a desktop who is not root, with a fresh home folder: the tests' own user when that
/// is not root, else the system user `sttd-newcomer` (created once). Commands run as them through
/// `setpriv`, with only the environment they are given.
public struct LoginUser: Sendable {
    public static let name = "sttd-newcomer"

    public let uid: uid_t
    public let gid: gid_t
    /// Their home: a new folder they own.
    public let home: String

    /// The user (as root: the system user `name`), with a new home; fails loudly when they
    /// cannot be made. SwayDesktop runs sway as `sttd-desktop`.
    public static func withFreshHome(named name: String = LoginUser.name) async throws -> LoginUser {
        let (uid, gid) = try await account(name)
        let home = try makeTemporaryDirectory("sttd-newcomer-home")
        chmod(home, 0o700)
        guard chown(home, uid, gid) == 0 else {
            throw MissingPrerequisite(description: "cannot give \(home) to uid \(uid): \(String(cString: strerror(errno)))")
        }
        return LoginUser(uid: uid, gid: gid, home: home)
    }

    private static func account(_ name: String) async throws -> (uid_t, gid_t) {
        if getuid() != 0 { return (getuid(), getgid()) }
        if let entry = getpwnam(name) { return (entry.pointee.pw_uid, entry.pointee.pw_gid) }
        let useradd = try requireFile("/usr/sbin/useradd", package: "passwd")
        let added = try await TestSupport.run(
            useradd, ["--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent", "--shell",
                "/usr/sbin/nologin", name])
        guard added.status == 0 || added.status == 9, let entry = getpwnam(name) else {
            throw MissingPrerequisite(description: "useradd \(name) failed: \(added.stderr)")
        }
        return (entry.pointee.pw_uid, entry.pointee.pw_gid)
    }

    /// `executable arguments` as this user: the command line to give ``ChildProcess`` or ``run``.
    public func command(_ executable: String, _ arguments: [String]) throws -> (String, [String]) {
        guard getuid() != uid else { return (executable, arguments) }
        let setpriv = try requireTool("setpriv", package: "util-linux")
        return (setpriv, ["--reuid=\(uid)", "--regid=\(gid)", "--clear-groups", "--", executable] + arguments)
    }

    /// Runs a command as this user and waits for it.
    public func run(
        _ executable: String, _ arguments: [String], environment: [String: String], timeout: TimeInterval = 120
    ) async throws -> CommandResult {
        let (program, arguments) = try command(executable, arguments)
        return try await TestSupport.run(program, arguments, environment: environment, timeout: timeout)
    }

    /// Makes a folder this user owns (and its missing parents inside their home).
    public func makeDirectory(_ path: String) throws {
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        var folder = path
        while folder.hasPrefix(home + "/") {
            chown(folder, uid, gid)
            folder = (folder as NSString).deletingLastPathComponent
        }
    }

    /// Writes a file this user owns.
    public func write(_ text: String, to path: String) throws {
        try makeDirectory((path as NSString).deletingLastPathComponent)
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        chown(path, uid, gid)
    }

    /// The environment a login gives this user: systemd's environment.d generator reads their
    /// `~/.config/environment.d` as the user manager does at login.
    public func loginEnvironment() async throws -> [String: String] {
        let generator = try requireFile(
            "/usr/lib/systemd/user-environment-generators/30-systemd-environment-d-generator", package: "systemd")
        let base = ["HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"]
        let generated = try await run(generator, [], environment: base, timeout: 30)
        guard generated.status == 0 else {
            throw MissingPrerequisite(description: "the environment.d generator failed: \(generated.stderr)")
        }
        var environment = base
        for line in generated.stdout.split(whereSeparator: \.isNewline) {
            guard let equals = line.firstIndex(of: "=") else { continue }
            environment[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return environment
    }
}
