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

    /// Starts `executable`; output goes to the given files (or /dev/null).
    public init(
        _ executable: String, _ arguments: [String], environment: [String: String]? = nil,
        stdout: String = "/dev/null", stderr: String = "/dev/null"
    ) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, stdout, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, stderr, O_WRONLY | O_CREAT | O_APPEND, 0o644)

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        var defaults = sigset_t()
        sigfillset(&defaults)
        sigdelset(&defaults, SIGKILL)
        sigdelset(&defaults, SIGSTOP)
        posix_spawnattr_setsigdefault(&attributes, &defaults)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        let argv = ([executable] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let env = (environment ?? ProcessInfo.processInfo.environment).map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { env.forEach { free($0) } }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, executable, &actions, &attributes, argv, env)
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
    @discardableResult
    public func wait(timeout: TimeInterval = 30) -> Int32? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let status = exitStatus { return status }
            usleep(5_000)
        }
        return exitStatus
    }

    /// SIGTERM, then SIGKILL if it has not ended within `grace`.
    public func stop(grace: TimeInterval = 5) {
        signal(SIGTERM)
        if wait(timeout: grace) == nil {
            signal(SIGKILL)
            wait(timeout: 5)
        }
    }

    deinit { stop(grace: 2) }
}
