import DBus
import Foundation
import SpeechAPI
import Synchronization

/// A running `sttd` on a private bus with its own headless PulseAudio, and a client connection.
public final class SttdFixture: @unchecked Sendable {
    // Safety: `sttd` is replaced only by `restartService()`, which tests call from one task.
    public static let name = SpeechAPI.busName
    public static let path = SpeechAPI.objectPath
    public static let interface = SpeechAPI.interface

    public let bus: PrivateBus
    public let pulse: HeadlessPulse
    public let client: DBusConnection
    /// The typed client of the main interface, on ``client``.
    public let speech: SpeechProxy
    public let home: String
    public private(set) var sttd: ChildProcess
    public let environment: [String: String]
    /// Who sttd and `sttctl` run as: the test's own user, or a ``LoginUser`` (then the bus admits
    /// every user, and properties are read as that user).
    public let user: LoginUser?

    /// Starts everything; `config` is written to the config file if given.
    /// `prepare` runs with the home folder before sttd starts (e.g. to seed its data).
    public init(
        config: String? = nil, environment extra: [String: String] = [:], sharedMemoryAudio: Bool = false,
        runAs user: LoginUser? = nil, prepare: (String) throws -> Void = { _ in }
    ) async throws {
        self.user = user
        home = try makeTemporaryDirectory("sttd-home")
        try prepare(home)
        pulse = try HeadlessPulse(sharedMemory: sharedMemoryAudio)
        bus = try PrivateBus(admitsEveryUser: user != nil)
        var env = ProcessInfo.processInfo.environment
        env.merge(pulse.clientEnvironment) { $1 }
        env["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        env["HOME"] = home
        env["XDG_CONFIG_HOME"] = "\(home)/config"
        env["XDG_DATA_HOME"] = "\(home)/data"
        env["XDG_RUNTIME_DIR"] = home
        env["STTD_LOG_LEVEL"] = "trace"
        env.merge(extra) { $1 }
        if let config {
            try FileManager.default.createDirectory(atPath: "\(home)/config/sttd", withIntermediateDirectories: true)
            try config.write(toFile: "\(home)/config/sttd/config.toml", atomically: true, encoding: .utf8)
        }
        environment = env
        if let user {
            let owned = try await run(
                try requireTool("chown", package: "coreutils"), ["-R", "\(user.uid):\(user.gid)", home])
            guard owned.status == 0 else { throw MissingPrerequisite(description: "chown \(home): \(owned.stderr)") }
        }
        sttd = try Self.startService(environment: env, home: home, as: user)
        client = try await DBusConnection.connect(to: .address(bus.address))
        speech = SpeechProxy(connection: client)
        try await waitForService()
    }

    /// Where this service keeps its history.
    public var historyPath: String { "\(home)/data/sttd/history.sqlite" }

    /// The service's log so far.
    public var log: String { (try? String(contentsOfFile: "\(home)/sttd.log", encoding: .utf8)) ?? "" }

    /// Waits until the service owns its name (up to 10 s).
    public func waitForService() async throws {
        for _ in 0..<200 {
            if (try? await client.nameHasOwner(Self.name)) == true { return }
            if !sttd.isRunning { throw MissingPrerequisite(description: "sttd exited early: \(log)") }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw MissingPrerequisite(description: "sttd did not take its bus name within 10 s: \(log)")
    }

    /// Kills and starts sttd again (same bus, same files).
    public func restartService(signal: Int32 = SIGKILL) async throws {
        sttd.signal(signal)
        guard await sttd.exit(timeout: .seconds(10)) != nil else {
            throw WaitTimedOut("sttd to exit on signal \(signal) before its restart", after: .seconds(10))
        }
        sttd = try Self.startService(environment: environment, home: home, as: user)
        try await waitForService()
    }

    private static func startService(environment: [String: String], home: String, as user: LoginUser?) throws
        -> ChildProcess
    {
        let sttd = try builtExecutable("sttd")
        let (program, arguments) = try user?.command(sttd, []) ?? (sttd, [])
        return try ChildProcess(program, arguments, environment: environment, stderr: "\(home)/sttd.log")
    }

    /// Calls a method of the main interface.
    @discardableResult
    public func call(_ member: String, _ arguments: [DBusValue] = [], interface: String = SttdFixture.interface)
        async throws -> [DBusValue]
    {
        try await client.call(
            destination: Self.name, path: Self.path, interface: interface, member: member, arguments: arguments,
            timeout: .seconds(30))
    }

    public func property(_ name: String) async throws -> DBusValue? {
        if let user { return try await property(name, as: user) }
        return try await call(
            "Get", [.string(Self.interface), .string(name)], interface: "org.freedesktop.DBus.Properties"
        ).first?.variantValue
    }

    /// A string property read by `busctl` run as `user` (sttd answers another user as a stranger).
    private func property(_ name: String, as user: LoginUser) async throws -> DBusValue? {
        let busctl = try requireTool("busctl", package: "systemd")
        let got = try await user.run(
            busctl, ["--address=\(bus.address)", "get-property", Self.name, Self.path, Self.interface, name],
            environment: environment, timeout: 30)
        guard got.status == 0, got.stdout.hasPrefix("s \""),
            let value = try? JSONDecoder().decode(
                String.self, from: Data(got.stdout.dropFirst(2).trimmingCharacters(in: .whitespacesAndNewlines).utf8))
        else { throw MissingPrerequisite(description: "busctl get-property \(name): \(got)") }
        return .string(value)
    }

    public func set(_ name: String, _ value: DBusValue) async throws {
        try await call(
            "Set", [.string(Self.interface), .string(name), .variant(value)],
            interface: "org.freedesktop.DBus.Properties")
    }

    /// Starts recording the service's signals; read them from the returned recorder.
    public func record() async throws -> SignalRecorder {
        let recorder = SignalRecorder()
        let stream = try await client.signals(sender: Self.name, path: Self.path)
        recorder.consume(stream)
        return recorder
    }

    /// Runs `sttctl` against this service, in its environment or in `environment` if given.
    public func sttctl(_ arguments: [String], environment: [String: String]? = nil, timeout: TimeInterval = 60)
        throws -> CommandResult
    {
        let sttctl = try builtExecutable("sttctl")
        let (program, arguments) = try user?.command(sttctl, arguments) ?? (sttctl, arguments)
        return try run(program, arguments, environment: environment ?? self.environment, timeout: timeout)
    }

    deinit {
        sttd.stop()
        client.close()
        bus.stop()
        pulse.stop()
        try? FileManager.default.removeItem(atPath: home)
    }
}

/// Collects signals in arrival order.
public final class SignalRecorder: Sendable {
    private let received = Mutex<[(signal: DBusSignalMessage, at: ContinuousClock.Instant)]>([])

    func consume(_ stream: AsyncStream<DBusSignalMessage>) {
        Task { [self] in
            for await signal in stream { received.withLock { $0.append((signal, .now)) } }
        }
    }

    public var signals: [DBusSignalMessage] { received.withLock { $0.map(\.signal) } }

    /// The signals with the moment each arrived here.
    public var arrivals: [(signal: DBusSignalMessage, at: ContinuousClock.Instant)] { received.withLock { $0 } }

    public func signals(named member: String) -> [DBusSignalMessage] { signals.filter { $0.member == member } }

    /// `PropertiesChanged` values of one property, in order.
    public func changes(of property: String) -> [DBusValue] {
        signals(named: "PropertiesChanged").compactMap { signal in
            signal.arguments.count == 3
                ? signal.arguments[1].stringVariantDictionary?.first { $0.key == property }?.value : nil
        }
    }

    /// Waits until `condition` holds for the signals so far; throws ``WaitTimedOut`` (naming
    /// `what` and the signals that did come) if it does not within `timeout`.
    public func wait(
        _ what: @autoclosure () -> String = "the awaited signals", timeout: Duration = .seconds(30),
        fileID: String = #fileID, line: Int = #line, until condition: @Sendable ([DBusSignalMessage]) -> Bool
    ) async throws {
        guard await happens(within: timeout, condition) else {
            let seen = describeLast(signals.map { $0.member })
            throw WaitTimedOut("\(what()); signals received: \(seen)", after: timeout, fileID: fileID, line: line)
        }
    }

    /// Whether `condition` comes to hold for the signals within `timeout`: for checking that a
    /// signal does *not* come, or acting on whether it did (use the answer); to expect one, ``wait(_:timeout:fileID:line:until:)``.
    public func happens(
        within timeout: Duration, _ condition: @Sendable ([DBusSignalMessage]) -> Bool
    ) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if condition(signals) { return true }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return condition(signals)
    }
}
