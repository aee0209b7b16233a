import CSttdSystem
import Capture
import DBus
import Foundation
import History
import ListenServer
import Logging
import NIOCore
import NIOPosix
import Recognition
import ServiceLifecycle
import Speech
import SpeechAPI
import SpeechBus
import Synchronization
import UnixSignals

/// The bus connection as a service: ends the group when the bus goes away.
struct BusService: Service {
    struct BusLost: Error, CustomStringConvertible {
        var description: String { "the D-Bus connection was lost" }
    }

    let connection: DBusConnection

    func run() async throws {
        let shuttingDown = Atomic<Bool>(false)
        await withGracefulShutdownHandler {
            // A cancelled group (another service failed) must not wait on the bus forever.
            await withTaskCancellationHandler {
                await connection.waitUntilDisconnected()
            } onCancel: {
                shuttingDown.store(true, ordering: .relaxed)
                connection.close()
            }
        } onGracefulShutdown: {
            shuttingDown.store(true, ordering: .relaxed)
            connection.close()
        }
        // Losing the bus unasked is an error, so systemd restarts the service.
        if !shuttingDown.load(ordering: .relaxed) { throw BusLost() }
    }
}

/// The speech core's lifetime: its sessions run under it; shutdown stops the session with its
/// finals stored.
struct CoreService: Service {
    let core: SpeechCore

    func run() async throws {
        // No timers while idle: history is pruned at startup and after sessions, once a day.
        await withGracefulShutdownHandler {
            await core.run()
        } onGracefulShutdown: { [core] in
            core.shutDown {}
        }
    }
}

/// The bus's method calls in flight: at shutdown, waits until each is answered.
struct MethodCallsService: Service {
    let adapter: SpeechBusAdapter

    func run() async throws {
        try? await gracefulShutdown()
        await adapter.finish()
    }
}

/// Per-app consent: decides sandboxed callers' calls until shutdown.
struct ConsentService: Service {
    let consent: Consent

    func run() async throws {
        await withGracefulShutdownHandler {
            await consent.run()
        } onGracefulShutdown: { [consent] in
            consent.finish()
        }
    }
}

/// Desktop notifications, for as long as the core publishes events.
struct NotifierService: Service {
    let notifier: DesktopNotifier
    let events: AsyncStream<SpeechEvent>

    func run() async throws {
        await notifier.run(events)
        // The events end with the core. Returning before the group asks would count as an
        // unexpected exit and cancel the shutdown half-way.
        try? await gracefulShutdown()
    }
}

/// Checks a pocketsphinx model in a child process: pocketsphinx calls `exit()` on some corrupt
/// models, which must not take the service down.
public enum ModelCheck {
    public static let flag = "--check-model"

    /// Runs `sttd --check-model DIR` and reports whether it loaded the model within a minute.
    /// The child is polled from the calling task (a check takes about a second), so no thread
    /// sits in `waitpid`.
    @Sendable public static func inChildProcess(_ directory: String) async -> Bool {
        let argv = [String](["sttd", flag, directory]).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = ChildEnvironment.withEnvp(ChildEnvironment.current) { envp in
            sttd_spawn(&pid, "/proc/self/exe", argv, envp, "/dev/null", "/dev/null", "/dev/null")
        }
        guard spawned == 0 else { return false }
        var status: Int32 = 0
        let deadline = ContinuousClock.now + .seconds(60)
        while sttd_wait_child(pid, 0, &status) == 0 {
            guard ContinuousClock.now < deadline, (try? await eventLoopSleep(for: .milliseconds(20))) != nil else {
                kill(pid, SIGKILL)
                _ = sttd_wait_child(pid, 1_000, &status)
                return false
            }
        }
        // Exited normally (no signal) with status 0.
        return status & 0x7f == 0 && (status >> 8) & 0xff == 0
    }
}
