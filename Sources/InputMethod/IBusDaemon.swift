import CSttdSystem
import DBus
import Foundation
import Logging

/// ibus-daemon for this session: the running one, or one started here (as `ibus-daemon -drx`
/// does, with IBus's own panel) when none answers.
struct IBusDaemon {
    let environment: [String: String]
    let logger: Logger

    /// A connection to ibus-daemon's bus, and its address.
    func connect() async throws(IBusError) -> (DBusConnection, String) {
        if let running = await reach(environment) { return running }
        // A stale IBUS_ADDRESS must not hide the new daemon's address file.
        var environment = environment
        environment["IBUS_ADDRESS"] = nil
        let path = try executable("ibus-daemon")
        logger.notice("no ibus-daemon answers; starting one", metadata: ["command": "ibus-daemon --daemonize --xim"])
        let starter = try spawn(path, [path, "--daemonize", "--xim"], environment: environment, fds: [0, 1, 2])
        // --daemonize: this process ends once the daemon runs on its own.
        var status: Int32 = 0
        _ = sttd_wait_child(starter, 5000, &status)
        let deadline = ContinuousClock.now + WaylandFrontEnd.daemonWait
        while ContinuousClock.now < deadline {
            if let started = await reach(environment) { return started }
            try? await Task.sleep(for: .milliseconds(100))
        }
        throw IBusError(
            "ibus-daemon, started here, did not answer within \(WaylandFrontEnd.daemonWait): "
                + "run `ibus-daemon -drx` to see why")
    }

    private func reach(_ environment: [String: String]) async -> (DBusConnection, String)? {
        guard let address = try? IBus.address(environment: environment),
            let connection = try? await DBusConnection.connect(to: .address(address), logger: logger)
        else { return nil }
        return (connection, address)
    }

    private func executable(_ name: String) throws(IBusError) -> String {
        let folders = (environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") + ["/usr/bin"]
        let paths = folders.map { folder -> String in "\(folder)/\(name)" }
        guard let path = paths.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
            throw IBusError("no \(name) on PATH: install the ibus package")
        }
        return path
    }
}
