import Foundation

/// A prerequisite of a test is missing; the message names the setup step.
public struct MissingPrerequisite: Error, CustomStringConvertible {
    public var description: String
    public init(description: String) { self.description = description }
}

/// Finds a tool on PATH or fails loudly, naming the Debian package and `scripts/setup`.
public func requireTool(_ name: String, package: String) throws -> String {
    for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") {
        let candidate = "\(directory)/\(name)"
        if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
    }
    throw MissingPrerequisite(
        description: "'\(name)' is not installed: run `sudo scripts/setup test` (Debian package \(package))")
}

/// Fails loudly if a file a test needs is missing.
public func requireFile(_ path: String, package: String) throws -> String {
    guard FileManager.default.fileExists(atPath: path) else {
        throw MissingPrerequisite(
            description: "\(path) is missing: run `sudo scripts/setup test` (Debian package \(package))")
    }
    return path
}

/// A fresh temporary directory, removed by the caller.
public func makeTemporaryDirectory(_ prefix: String = "sttd-test") throws -> String {
    let path = NSTemporaryDirectory() + "\(prefix)-\(UUID().uuidString.prefix(8))"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}

/// Where `swift build` put the executables (next to the test bundle).
public var buildDirectory: String {
    if let explicit = ProcessInfo.processInfo.environment["STTD_BUILD_DIR"] { return explicit }
    let executable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
    var directory = executable.deletingLastPathComponent()
    // The test binary lives inside `<name>.xctest/` on some toolchains.
    if directory.lastPathComponent.hasSuffix(".xctest") { directory = directory.deletingLastPathComponent() }
    return directory.path
}

/// The commands `make install` links to the one `sttd` binary, which runs them by name.
public let multicallCommands: Set<String> = ["sttctl", "sttd-ibus"]

/// The path of a built executable of this package, or a loud failure.
public func builtExecutable(_ name: String) throws -> String {
    let path = "\(buildDirectory)/\(name)"
    if multicallCommands.contains(name) { try linkToSttd(path) }
    guard FileManager.default.isExecutableFile(atPath: path) else {
        throw MissingPrerequisite(
            description: "\(path) is not built: run `swift build` before `swift test` (make test does)")
    }
    return path
}

/// `swift build` makes only `sttd`, so the links are made next to it (as relative links, like
/// the installed ones), replacing a binary that a build from before the multicall binary left.
func linkToSttd(_ path: String) throws {
    guard (try? FileManager.default.destinationOfSymbolicLink(atPath: path)) != "sttd" else { return }
    // Made aside and renamed over: tests running at once never see the name missing.
    let aside = "\(path).\(getpid()).\(UUID().uuidString.prefix(8))"
    try FileManager.default.createSymbolicLink(atPath: aside, withDestinationPath: "sttd")
    guard rename(aside, path) == 0 else {
        unlink(aside)
        throw MissingPrerequisite(description: "cannot link \(path) to sttd: \(String(cString: strerror(errno)))")
    }
}

/// Result of running a command to completion.
public struct CommandResult: Sendable {
    public var status: Int32
    public var stdout: String
    public var stderr: String
}

/// Runs a command and waits for it, with a time limit.
@discardableResult
public func run(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
    timeout: TimeInterval = 60
) throws -> CommandResult {
    let command = try StartedCommand(executable, arguments, environment: environment)
    return try command.result(command.child.wait(timeout: timeout), timeout: timeout)
}

/// Runs a command and waits for it without holding a thread, with a time limit.
@discardableResult
public func run(
    _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
    timeout: TimeInterval = 60
) async throws -> CommandResult {
    let command = try StartedCommand(executable, arguments, environment: environment)
    return try command.result(await command.child.exit(timeout: .seconds(timeout)), timeout: timeout)
}

/// A command whose output goes to a temporary directory, removed once the result is read.
private struct StartedCommand {
    let child: ChildProcess
    let description: String
    let directory: String

    init(_ executable: String, _ arguments: [String], environment: [String: String]?) throws {
        directory = try makeTemporaryDirectory("sttd-run")
        description = ([executable] + arguments).joined(separator: " ")
        do {
            child = try ChildProcess(
                executable, arguments, environment: environment, stdout: "\(directory)/out",
                stderr: "\(directory)/err")
        } catch {
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    func result(_ status: Int32?, timeout: TimeInterval) throws -> CommandResult {
        defer { try? FileManager.default.removeItem(atPath: directory) }
        guard let status else {
            child.stop(grace: 1)
            throw MissingPrerequisite(description: "\(description) did not finish in \(timeout) s")
        }
        func read(_ name: String) -> String {
            (try? String(contentsOfFile: "\(directory)/\(name)", encoding: .utf8)) ?? ""
        }
        return CommandResult(status: status, stdout: read("out"), stderr: read("err"))
    }
}

/// A private `dbus-daemon` for one test suite.
public final class PrivateBus: @unchecked Sendable {
    // Safety: immutable after init.
    public let address: String
    public let directory: String
    private let process: ChildProcess

    /// Starts a bus; `serviceDirectory` enables activation from the files in it. A bus that
    /// admits every user also serves processes a test runs as another user (``LoginUser``).
    public init(
        serviceDirectory: String? = nil, environment: [String: String] = [:], admitsEveryUser: Bool = false
    ) throws {
        let daemon = try requireTool("dbus-daemon", package: "dbus-daemon")
        directory = try makeTemporaryDirectory("sttd-bus")
        if admitsEveryUser { chmod(directory, 0o755) }
        let servicedir = serviceDirectory.map { "<servicedir>\($0)</servicedir>" } ?? ""
        let config = """
            <!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
             "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
            <busconfig>
              <type>session</type>
              <listen>unix:path=\(directory)/bus</listen>
              <auth>EXTERNAL</auth>
              \(servicedir)
              <!-- As Debian's session bus: many connections per user, many calls each. -->
              <limit name="max_connections_per_user">100000</limit>
              <limit name="max_replies_per_connection">50000</limit>
              <policy context="default">
                \(admitsEveryUser ? "<allow user=\"*\"/>" : "")
                <allow send_destination="*" eavesdrop="true"/>
                <allow eavesdrop="true"/>
                <allow own="*"/>
              </policy>
            </busconfig>
            """
        try config.write(toFile: "\(directory)/bus.conf", atomically: true, encoding: .utf8)
        var env = ProcessInfo.processInfo.environment
        env.merge(environment) { $1 }
        process = try ChildProcess(
            daemon, ["--config-file=\(directory)/bus.conf", "--nofork", "--nopidfile"], environment: env,
            stderr: "\(directory)/daemon.log")
        address = "unix:path=\(directory)/bus"
        try waitFor("\(directory)/bus", what: "dbus-daemon")
    }

    public func stop() {
        process.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// Freezes the daemon (it stops reading its clients' sockets) until ``resume()``.
    public func freeze() { kill(process.pid, SIGSTOP) }

    public func resume() { kill(process.pid, SIGCONT) }

    deinit {
        resume()
        stop()
    }
}

/// Waits up to 10 s until a Unix socket accepts connections (the file appears at bind(),
/// a moment before the daemon listens).
func waitFor(_ path: String, what: String) throws {
    for _ in 0..<1000 {
        if acceptsConnections(path) { return }
        usleep(10_000)
    }
    throw MissingPrerequisite(description: "\(what) did not listen on \(path) within 10 s")
}

private func acceptsConnections(_ path: String) -> Bool {
    let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = sockaddr_un()
    address.sun_family = sa_family_t(AF_UNIX)
    let capacity = MemoryLayout.size(ofValue: address.sun_path)
    guard path.utf8.count < capacity else { return false }
    withUnsafeMutableBytes(of: &address.sun_path) { buffer in
        buffer.copyBytes(from: path.utf8)
        buffer[path.utf8.count] = 0
    }
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
            connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) == 0
        }
    }
}

/// A headless PulseAudio whose null sink `mic` is the microphone: its monitor `mic.monitor`
/// is the default source, so what is played into `mic` is what sttd hears.
public final class HeadlessPulse: @unchecked Sendable {
    // Safety: `process` is only replaced in `start()`/`stop()`, which tests call from one task.
    public let directory: String
    public var server: String { "unix:\(directory)/native" }
    private var process: ChildProcess?
    private let sharedMemory: Bool

    /// - Parameter sharedMemory: pass audio to clients in shared memory, as desktops do (the
    ///   benchmarks); tests send it through the socket, which works under any user and sandbox.
    public init(sharedMemory: Bool = false) throws {
        directory = try makeTemporaryDirectory("sttd-pulse")
        self.sharedMemory = sharedMemory
        try start()
    }

    /// The environment for PulseAudio clients of this server.
    public var clientEnvironment: [String: String] {
        ["PULSE_SERVER": server, "PULSE_RUNTIME_PATH": directory, "PULSE_COOKIE": "\(directory)/cookie"]
    }

    public var isRunning: Bool { process?.isRunning ?? false }

    public func start() throws {
        let pulseaudio = try requireTool("pulseaudio", package: "pulseaudio")
        let pactl = try requireTool("pactl", package: "pulseaudio-utils")
        try? FileManager.default.removeItem(atPath: "\(directory)/native")
        let arguments = [
            "-n", "--daemonize=no", "--exit-idle-time=-1", "--use-pid-file=no", "--disable-shm=\(!sharedMemory)",
            "-L", "module-native-protocol-unix auth-anonymous=1 socket=\(directory)/native",
            "-L",
            "module-null-sink sink_name=mic rate=16000 channels=1 sink_properties=device.description=Virtual-microphone",
        ]
        var env = ProcessInfo.processInfo.environment
        env["HOME"] = directory
        env["XDG_RUNTIME_DIR"] = directory
        env["DBUS_SESSION_BUS_ADDRESS"] = "disabled:"
        process = try ChildProcess(pulseaudio, arguments, environment: env, stderr: "\(directory)/pulseaudio.log")
        try waitFor("\(directory)/native", what: "pulseaudio")
        try pactlCommand(pactl, ["set-default-source", "mic.monitor"])
    }

    /// Kills the server at once (as a crash would) and waits until it has gone.
    public func kill() throws {
        guard let process, process.isRunning else { return }
        process.signal(SIGKILL)
        guard process.wait() != nil else { throw WaitTimedOut("pulseaudio to end after SIGKILL", after: .seconds(30)) }
    }

    public func stop() {
        process?.stop()
    }

    /// Starts playing a sound file into the virtual microphone (or another sink) and returns at once.
    public func startPlaying(_ file: String, device: String = "mic") throws -> ChildProcess {
        let paplay = try requireTool("paplay", package: "pulseaudio-utils")
        return try ChildProcess(paplay, ["--device=\(device)", file], environment: environmentForClients())
    }

    /// Plays a sound file into the virtual microphone (or another sink) and waits until it has played.
    public func play(_ file: String, device: String = "mic") throws {
        let paplay = try requireTool("paplay", package: "pulseaudio-utils")
        let result = try run(paplay, ["--device=\(device)", file], environment: environmentForClients(), timeout: 120)
        guard result.status == 0 else {
            throw MissingPrerequisite(description: "paplay failed: \(result.stderr)")
        }
    }

    /// ``play(_:device:)`` from a task: waits without holding one of the pool's threads (a
    /// 2-core machine has two, and a blocked one stalls every other test's tasks).
    public func play(_ file: String, device: String = "mic") async throws {
        let paplay = try requireTool("paplay", package: "pulseaudio-utils")
        let result = try await run(
            paplay, ["--device=\(device)", file], environment: environmentForClients(), timeout: 120)
        guard result.status == 0 else {
            throw MissingPrerequisite(description: "paplay failed: \(result.stderr)")
        }
    }

    /// The environment for a service of this server living in `home` (config and data inside it).
    public func serviceEnvironment(home: String) -> [String: String] {
        var environment = environmentForClients()
        environment["HOME"] = home
        environment["XDG_CONFIG_HOME"] = "\(home)/config"
        environment["XDG_DATA_HOME"] = "\(home)/data"
        return environment
    }

    public func environmentForClients() -> [String: String] {
        var env = ProcessInfo.processInfo.environment
        env.merge(clientEnvironment) { $1 }
        return env
    }

    /// Runs `pactl` against this server; returns its output.
    @discardableResult
    public func pactl(_ arguments: [String]) throws -> String {
        let pactl = try requireTool("pactl", package: "pulseaudio-utils")
        let result = try run(pactl, arguments, environment: environmentForClients(), timeout: 10)
        guard result.status == 0 else {
            throw MissingPrerequisite(description: "pactl \(arguments.joined(separator: " ")) failed: \(result.stderr)")
        }
        return result.stdout
    }

    private func pactlCommand(_ pactl: String, _ arguments: [String]) throws {
        let result = try run(pactl, arguments, environment: environmentForClients(), timeout: 10)
        guard result.status == 0 else {
            throw MissingPrerequisite(description: "pactl \(arguments.joined(separator: " ")) failed: \(result.stderr)")
        }
    }

    deinit {
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }
}
