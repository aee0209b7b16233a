import CSttdSystem
import Foundation

/// A child process started with `posix_spawn`, with a clean signal mask.
///
/// Foundation's `Process` passes on the test runner's blocked signals (so children ignore
/// SIGTERM) and busy-waits in `waitUntilExit` off the main thread; tests need neither.
public final class ChildProcess: @unchecked Sendable {
    // Safety: `status` is guarded by `lock`; `pid` is immutable.
    public let pid: pid_t
    private let lock = NSLock()
    private var status: Int32?

    /// Starts `executable`; input comes from `stdin`, output goes to the given files (or /dev/null).
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        stdin: String = "/dev/null", stdout: String = "/dev/null", stderr: String = "/dev/null"
    ) throws {
        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let env = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { env.forEach { free($0) } }
        var pid: pid_t = 0
        let result = sttd_spawn(&pid, executable, argv, env, stdin, stdout, stderr)
        guard result == 0 else {
            throw MissingPrerequisite(description: "cannot start \(executable): \(String(cString: strerror(result)))")
        }
        self.pid = pid
    }

    /// The exit status if the child has ended (shell style: 128+N for signal N).
    public var exitStatus: Int32? {
        lock.withLock {
            if status == nil {
                var raw: Int32 = 0
                if waitpid(pid, &raw, WNOHANG) == pid {
                    let signal = raw & 0x7f
                    status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
                }
            }
            return status
        }
    }

    public var isRunning: Bool { exitStatus == nil }

    public func signal(_ signal: Int32) {
        if isRunning { kill(pid, signal) }
    }

    /// Waits for the child to end; nil if it is still running after `timeout`.
    public func wait(timeout: TimeInterval = 30) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let status = exitStatus { return status }
            usleep(5_000)
        }
        return exitStatus
    }

    /// Waits for the child to end without holding a thread of the shared pool (a test blocking
    /// both of a 2-core machine's pool threads stalls every other test's tasks and timers);
    /// nil if it is still running after `timeout`.
    public func exit(timeout: Duration = .seconds(30)) async -> Int32? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let status = exitStatus { return status }
            try? await Task.sleep(for: .milliseconds(5))
        }
        return exitStatus
    }

    /// SIGTERM, then SIGKILL if it has not ended within `grace`.
    public func stop(grace: TimeInterval = 5) {
        signal(SIGTERM)
        if wait(timeout: grace) == nil {
            signal(SIGKILL)
            // Clean-up: a child that outlives even SIGKILL is left to init; nothing to fail here.
            _ = wait(timeout: 5)
        }
    }

    deinit { stop(grace: 2) }
}

/// The processes whose parent is `pid`, from /proc.
public func childProcesses(of pid: pid_t) -> [pid_t] {
    let entries = (try? FileManager.default.contentsOfDirectory(atPath: "/proc")) ?? []
    return entries.compactMap { entry in
        guard let child = pid_t(entry),
            let stat = try? String(contentsOfFile: "/proc/\(entry)/stat", encoding: .utf8),
            let end = stat.range(of: ") ")
        else { return nil }
        // Fields after the command name (which may contain spaces): state, then the parent.
        let fields = stat[end.upperBound...].split(separator: " ")
        return fields.count > 1 && pid_t(fields[1]) == pid ? child : nil
    }
}
