import Foundation

/// A Flatpak-like sandbox made with `bwrap`: a tmpfs root, `/usr` and `/etc` read-only, a
/// `/.flatpak-info` naming the app, and the test bus's socket bound in. Commands run in it are
/// what a Flatpak app would be to sttd: a process whose root holds `.flatpak-info`.
public struct FlatpakSandbox: Sendable {
    public let appID: String
    public let busAddress: String
    private let busSocket: String
    private let infoFile: String
    private let bwrap: String
    private let gdbus: String

    /// `busAddress` must be a `unix:path=…` address (the private test bus).
    public init(appID: String, busAddress: String) throws {
        bwrap = try requireTool("bwrap", package: "bubblewrap")
        gdbus = try requireTool("gdbus", package: "libglib2.0-bin")
        guard busAddress.hasPrefix("unix:path=") else {
            throw MissingPrerequisite(description: "the sandbox needs a unix:path= bus address, not \(busAddress)")
        }
        self.appID = appID
        self.busAddress = busAddress
        busSocket = String(busAddress.dropFirst("unix:path=".count))
        let directory = try makeTemporaryDirectory("sttd-flatpak")
        infoFile = "\(directory)/flatpak-info"
        try "[Application]\nname=\(appID)\nruntime=runtime/org.freedesktop.Platform/x86_64/23.08\n".write(
            toFile: infoFile, atomically: true, encoding: .utf8)
    }

    /// Where the test clients (`Tests/Clients`) are inside the sandbox.
    static let clientsInside = "/run/sttd-test-clients"
    static let clients = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Clients").path

    /// The `bwrap` command line that runs `command` inside the sandbox.
    public func commandLine(_ command: [String]) -> [String] {
        [
            "--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
            "--ro-bind", Self.clients, Self.clientsInside,
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--proc", "/proc", "--dev", "/dev", "--ro-bind", infoFile, "/.flatpak-info",
            "--bind", busSocket, busSocket, "--setenv", "DBUS_SESSION_BUS_ADDRESS", busAddress,
            "--die-with-parent", "--",
        ] + command
    }

    /// Starts a Python client of `Tests/Clients` inside the sandbox; its output goes to `stdout`.
    public func startClient(_ script: String, _ arguments: [String], stdout: String) throws -> ChildProcess {
        let python = try requireFile("/usr/bin/python3", package: "python3-dbus")
        return try ChildProcess(
            bwrap, commandLine([python, "\(Self.clientsInside)/\(script)"] + arguments), stdout: stdout,
            stderr: "\(stdout).errors")
    }

    /// Calls a method of sttd with `gdbus` from inside the sandbox, on a thread of its own (the
    /// call may wait for a consent prompt). `arguments` are in GVariant text, e.g. `{}`.
    public func callSttd(
        _ method: String, _ arguments: [String] = [], interface: String = "io.github.sttd.Speech1",
        timeout: TimeInterval = 40
    ) async throws -> CommandResult {
        let command = commandLine(
            [
                gdbus, "call", "--address", busAddress, "--dest", "io.github.sttd.Speech1", "--object-path",
                "/io/github/sttd/Speech1", "--timeout", "30", "--method", "\(interface).\(method)",
            ] + arguments)
        let bwrap = bwrap
        return try await withCheckedThrowingContinuation { continuation in
            // `run` blocks until the process exits: not on a pool thread.
            let thread = Thread {
                continuation.resume(with: Result { try run(bwrap, command, timeout: timeout) })
            }
            thread.name = "sandboxed-call"
            thread.start()
        }
    }

    /// Reads a property of sttd from inside the sandbox.
    public func getSttdProperty(_ name: String) async throws -> CommandResult {
        try await callSttd(
            "Get", ["io.github.sttd.Speech1", name], interface: "org.freedesktop.DBus.Properties")
    }
}

extension FlatpakSandbox {
    /// Starts an app in the sandbox that keeps one connection to the bus for as long as it runs
    /// (`Tests/Clients/app.py`), as a real app does: its session is its own until it leaves.
    public func launchApp() throws -> SandboxedApp {
        let python = try requireFile("/usr/bin/python3", package: "python3-dbus")
        return try SandboxedApp(
            bwrap: bwrap, commandLine: commandLine([python, "\(Self.clientsInside)/app.py", busAddress]))
    }
}

/// An app running in a ``FlatpakSandbox`` with one long-lived bus connection, told what to call one
/// request at a time (see `Tests/Clients/app.py` for the requests).
public final class SandboxedApp: @unchecked Sendable {
    // Safety: `answered` is guarded by `lock`; the rest is immutable.
    /// One answer: the value, or the D-Bus error's name and message.
    public struct Answer: Sendable, CustomStringConvertible {
        public var value: String?
        public var error: String?
        public var message: String
        public var description: String { error.map { "\($0): \(message)" } ?? "value \(value ?? "nil")" }
        /// The answer holds this error.
        public func failed(with name: String) -> Bool { error == name }
    }

    public let process: ChildProcess
    private let directory: String
    private let requests: Int32
    private let lock = NSLock()
    private var answered = 0

    init(bwrap: String, commandLine: [String]) throws {
        directory = try makeTemporaryDirectory("sttd-app")
        let fifo = "\(directory)/requests"
        guard mkfifo(fifo, 0o600) == 0 else {
            throw MissingPrerequisite(
                description: "cannot make a FIFO in \(directory): \(String(cString: strerror(errno)))")
        }
        // Read-write, so opening does not wait for the reader; the app reads until the test ends.
        requests = open(fifo, O_RDWR | O_CLOEXEC)
        guard requests >= 0 else { throw MissingPrerequisite(description: "cannot open the FIFO \(fifo)") }
        process = try ChildProcess(
            bwrap, commandLine, stdin: fifo, stdout: "\(directory)/answers", stderr: "\(directory)/errors")
    }

    deinit {
        process.stop(grace: 2)
        close(requests)
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// What the app wrote to stderr (for failure messages).
    public var errors: String { (try? String(contentsOfFile: "\(directory)/errors", encoding: .utf8)) ?? "" }

    /// Sends one request and waits (at most `timeout`) for its answer.
    public func request(_ request: [String: Any], timeout: Duration = .seconds(40)) async throws -> Answer {
        let line = try JSONSerialization.data(withJSONObject: request) + Data("\n".utf8)
        let index = lock.withLock {
            defer { answered += 1 }
            return answered
        }
        let written = line.withUnsafeBytes { write(requests, $0.baseAddress, $0.count) }
        guard written == line.count else { throw MissingPrerequisite(description: "cannot write to the app") }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            let lines = ((try? String(contentsOfFile: "\(directory)/answers", encoding: .utf8)) ?? "")
                .split(separator: "\n")
            if lines.count > index,
                let object = try? JSONSerialization.jsonObject(with: Data(lines[index].utf8)) as? [String: Any]
            {
                let value = object["value"].map { value -> String in
                    if let text = value as? String { return text }
                    if value is NSNull { return "" }
                    let data = try? JSONSerialization.data(withJSONObject: value, options: [.fragmentsAllowed])
                    return data.map { String(decoding: $0, as: UTF8.self) } ?? "\(value)"
                }
                return Answer(
                    value: value, error: object["error"] as? String, message: object["message"] as? String ?? "")
            }
            guard process.isRunning else {
                throw MissingPrerequisite(description: "the sandboxed app exited: \(errors)")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        throw MissingPrerequisite(
            description: "the sandboxed app did not answer \(request) within \(timeout): \(errors)")
    }

    /// Calls a method of sttd; Start and Toggle get `options` (strings, booleans, unsigned
    /// numbers, string lists).
    public func call(_ member: String, options: [String: Any] = [:]) async throws -> Answer {
        try await request(["call": member, "options": options])
    }

    /// Reads a property of sttd.
    public func get(_ property: String) async throws -> Answer { try await request(["get": property]) }

    /// The app's unique bus name.
    public func uniqueName() async throws -> String { try await request(["name": true]).value ?? "" }

    /// Leaves the bus at once, as an app that crashes or is closed does; returns once it has gone.
    public func leave() async throws {
        process.signal(SIGKILL)
        guard await process.exit(timeout: .seconds(10)) != nil else {
            throw WaitTimedOut("the sandboxed app to end on SIGKILL", after: .seconds(10))
        }
    }
}
