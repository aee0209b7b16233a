import CSttdSystem
import DBus
import Foundation
import Logging
import Synchronization

/// `sttd-ibus --wayland`: what KDE Plasma starts as its input method (sttd's desktop entry).
///
/// KWin gives its input method a socket (`WAYLAND_SOCKET`) on which it may bind
/// `zwp_input_method_v1`. This makes sure ibus-daemon runs (KWin starts the input method once,
/// at login, perhaps before ibus-daemon), then runs ibus-wayland behind a ``WaylandProxy`` that
/// tells the engine each field's purpose: ibus-wayland 1.5.27 drops it, so a password field would
/// get dictation.
struct WaylandFrontEnd: Sendable {
    static let inputMethodPath = "/usr/libexec/ibus-wayland"
    /// How long ibus-daemon, once started here, may take to answer.
    static let daemonWait = Duration.seconds(20)

    let environment: [String: String]
    let logger: Logger

    init(environment: [String: String], logger: Logger) {
        self.environment = environment
        self.logger = logger
    }

    /// Runs ibus-wayland until it or KWin ends; returns its exit status.
    func run() async throws(IBusError) -> Int32 {
        guard let text = environment["WAYLAND_SOCKET"], let compositor = Int32(text), fcntl(compositor, F_GETFD) >= 0
        else {
            throw IBusError(
                "no WAYLAND_SOCKET from the compositor: KWin starts `sttd-ibus --wayland` as its input method "
                    + "(kwinrc [Wayland] InputMethod names sttd's IBus Wayland entry)")
        }
        var ownEnvironment = environment
        ownEnvironment["WAYLAND_SOCKET"] = nil
        let (ibus, address) = try await IBusDaemon(environment: ownEnvironment, logger: logger).connect()
        defer { ibus.close() }
        let announcer = try await PurposeAnnouncer(ibus: ibus, logger: logger)

        var pair: [Int32] = [-1, -1]
        guard sttd_socketpair(&pair) == 0 else { throw IBusError("cannot make a socket pair: \(errnoText())") }
        var childEnvironment = ownEnvironment
        childEnvironment["WAYLAND_SOCKET"] = "3"
        childEnvironment["IBUS_ADDRESS"] = address
        let path = environment["STTD_IBUS_WAYLAND"] ?? Self.inputMethodPath
        let child: pid_t
        do {
            child = try spawn(path, [path], environment: childEnvironment, fds: [0, 1, 2, pair[1]])
        } catch {
            close(pair[0])
            close(pair[1])
            throw error
        }
        close(pair[1])
        let signals = forwardSignals(to: child)
        logger.info("ibus-wayland runs behind the purpose proxy", metadata: ["pid": "\(child)"])

        let proxy = WaylandProxy(
            compositor: compositor, inputMethod: pair[0], logger: logger, announce: { announcer.announce($0) })
        let reason = await withDiscardingTaskGroup { group in
            group.addTask { await announcer.run() }
            let reason = await withCheckedContinuation { continuation in
                let thread = Thread { continuation.resume(returning: proxy.run()) }
                thread.name = "wayland-proxy"
                thread.start()
            }
            announcer.finish()
            return reason
        }
        logger.notice("\(reason); exiting")
        // Ended first, so that ibus-wayland does not abort on a closed socket (it is not reaped
        // yet, so its pid is still its own).
        kill(child, SIGTERM)
        close(pair[0])
        close(compositor)
        signals.forEach { $0.cancel() }
        var status: Int32 = 0
        if sttd_wait_child(child, 3000, &status) != 1 {
            kill(child, SIGKILL)
            _ = sttd_wait_child(child, 3000, &status)
        }
        return status & 0x7f == 0 ? (status >> 8) & 0xff : 128 + status & 0x7f
    }

    /// SIGTERM, SIGINT and SIGHUP go on to ibus-wayland; its end (its socket closing) ends this.
    private func forwardSignals(to child: pid_t) -> [any DispatchSourceSignal] {
        [SIGTERM, SIGINT, SIGHUP].map { number in
            signal(number, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: number)
            source.setEventHandler { kill(child, number) }
            source.resume()
            return source
        }
    }
}

/// Starts `path` with `fds[i]` as its descriptor i, every other descriptor closed.
func spawn(_ path: String, _ arguments: [String], environment: [String: String], fds: [Int32]) throws(IBusError)
    -> pid_t
{
    var pid: pid_t = 0
    let argv = arguments.map { strdup($0) } + [nil]
    let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
    defer { (argv + envp).forEach { free($0) } }
    let result = sttd_spawn_mapped(&pid, path, argv, envp, fds, Int32(fds.count))
    guard result == 0 else { throw IBusError("cannot start \(path): \(String(cString: strerror(result)))") }
    return pid
}

func errnoText() -> String { String(cString: strerror(errno)) }

/// Tells the engine (on ibus-daemon's bus) the purpose of KWin's focused field, one
/// announcement at a time, each with the newest purpose; again whenever the engine (re)starts,
/// since it takes a field's purpose as unknown until told.
final class PurposeAnnouncer: Sendable {
    private let purpose = Mutex<UInt32?>(0)
    private let ibus: DBusConnection
    private let logger: Logger
    private let pending: AsyncStream<@Sendable () -> Void>
    /// Bounded: an announcement beyond 64 waiting is dropped and its caller does not wait (the
    /// newest purpose still goes with the next one).
    private let requests: AsyncStream<@Sendable () -> Void>.Continuation

    init(ibus: DBusConnection, logger: Logger) async throws(IBusError) {
        do {
            let reply = try await ibus.requestName(IBus.waylandProxyName)
            if reply != 1 { logger.warning("another sttd-ibus --wayland runs on this ibus-daemon") }
        } catch {
            throw IBusError("cannot own \(IBus.waylandProxyName) on ibus-daemon's bus: \(error.message)")
        }
        self.ibus = ibus
        self.logger = logger
        (pending, requests) = AsyncStream.makeStream(
            of: (@Sendable () -> Void).self, bufferingPolicy: .bufferingOldest(64))
        requests.yield {}
    }

    /// Announces until ``finish()``: each request, and again whenever the engine gets a new owner.
    func run() async {
        let changes = try? await ibus.signals(
            interface: "org.freedesktop.DBus", member: "NameOwnerChanged", argument0: IBus.componentName)
        await withDiscardingTaskGroup { group in
            if let changes {
                group.addTask { [requests] in
                    for await change in changes {
                        guard let change = NameOwnerChange(arguments: change.arguments),
                            change.name == IBus.componentName, change.newOwner != nil
                        else { continue }
                        requests.yield {}
                    }
                }
            }
            for await done in pending { await announce(then: done) }
            group.cancelAll()
        }
    }

    private func announce(then done: @Sendable () -> Void) async {
        let current = purpose.withLock { $0 }
        do {
            try await ibus.call(
                IBus.setPurpose, destination: IBus.componentName, path: IBus.waylandPath,
                interface: IBus.waylandInterface, current ?? 0, current != nil, timeout: .seconds(5))
        } catch {
            // No engine yet: it asks for the purpose again when it starts.
            logger.debug("the engine did not take the field's purpose", metadata: ["error": "\(error)"])
        }
        done()
    }

    /// Blocks the proxy's thread until the engine has `purpose` (or the call failed, bounded).
    func announce(_ purpose: UInt32?) {
        self.purpose.withLock { $0 = purpose }
        let done = DispatchSemaphore(value: 0)
        if case .enqueued = requests.yield({ done.signal() }) { done.wait() }
    }

    func finish() { requests.finish() }
}
