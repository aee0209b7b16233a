import DBus
import Foundation
import Synchronization

/// A headless KDE Plasma compositor (KWin 5.27, `kwin_wayland --virtual`) in one sttd's session,
/// with IBus as its input method the way a Plasma user sets it up: kwinrc's `[Wayland]
/// InputMethod` names sttd's desktop entry (`packaging/io.github.sttd.IBusWayland.desktop`,
/// which System Settings' Virtual Keyboard page writes there), and KWin starts `ibus-wayland`
/// from it: only KWin's own child may bind `zwp_input_method_v1`. ibus-daemon (with
/// `sttd-ibus --component-xml` among its components) runs in sttd's session with the `sttd`
/// engine selected. Apps' fields talk text-input-v3 (GTK) or v2/v3 (Qt) to KWin, which hands
/// them to ibus-wayland. Holds KWin and ibus-daemon until ``close()``.
///
/// `/usr/bin/kwin_wayland` carries the file capability `cap_sys_resource=ep`; where the bounding
/// set lacks it (containers) exec fails with EPERM, so the fixture runs a plain copy.
public final class KdeDesktop: @unchecked Sendable {
    // Safety: immutable after init; `closed` is atomic.
    /// The Wayland socket's name, in sttd's runtime folder; sttd's environment names it too.
    public static let display = "wayland-kde-sttd"
    static let desktopEntry = "io.github.sttd.IBusWayland.desktop"
    static let engine = "sttd"

    /// What sttd sees in a Plasma Wayland session, with a PATH holding no typing tool.
    public static var sttdEnvironment: [String: String] {
        [
            "WAYLAND_DISPLAY": display, "DISPLAY": "", "XDG_CURRENT_DESKTOP": "KDE", "XDG_SESSION_TYPE": "wayland",
            "PATH": "/nonexistent",
        ]
    }

    /// The apps whose fields the tests dictate into.
    public typealias App = DesktopApp

    /// What an app needs: the Wayland display and runtime folder, and a home and config folder of
    /// its own, which hold no IBus address: text reaching it came through KWin.
    public let clientEnvironment: [String: String]
    /// What a shell of this Plasma session sees: ibus-daemon's address, the component folder,
    /// the config folder with kwinrc in it.
    public let sessionEnvironment: [String: String]
    private let directory: String
    /// ibus-daemon, unless the input method started it (``start(for:ibusRunning:)``).
    private let daemon: ChildProcess?
    private let environment: [String: String]
    private let kwin: ChildProcess
    private let connection: DBusConnection
    private let closed = Atomic<Bool>(false)

    /// Starts ibus-daemon and KWin for `sttd` (started with ``sttdEnvironment``). Fails loudly
    /// when a part is missing. With `ibusRunning` false, KWin starts first, as at a login where
    /// ibus-daemon comes later: the input method (`sttd-ibus --wayland`) must start it; the engine
    /// is then selected in it.
    public static func start(for sttd: SttdFixture, ibusRunning: Bool = true) async throws -> KdeDesktop {
        try await KdeDesktop(sttd: sttd, ibusRunning: ibusRunning)
    }

    private init(sttd: SttdFixture, ibusRunning: Bool) async throws {
        let kwinPath = try requireTool("kwin_wayland", package: "kwin-wayland")
        let ibus = try requireTool("ibus", package: "ibus")
        _ = try requireFile("/usr/libexec/ibus-wayland", package: "ibus-wayland")
        let (runtime, session) = try sttd.waylandSession(
            display: Self.display, environment: "KdeDesktop.sttdEnvironment")
        let directory = try makeTemporaryDirectory("sttd-kde")
        self.directory = directory
        let kwinCopy = "\(directory)/kwin_wayland"
        try FileManager.default.copyItem(atPath: kwinPath, toPath: kwinCopy)

        try await IBusDesktop.writeComponent(into: directory)
        // Where make install puts the entry ($DATADIR/applications), and the kwinrc key Plasma's
        // Virtual Keyboard page writes.
        let entry = "\(directory)/share/applications/\(Self.desktopEntry)"
        try FileManager.default.createDirectory(
            atPath: "\(directory)/share/applications", withIntermediateDirectories: true)
        // As make install writes it, naming the built sttd-ibus.
        let bindir = (try builtExecutable("sttd-ibus") as NSString).deletingLastPathComponent
        try String(contentsOfFile: "\(DeepgramSDKClient.packageRoot)/packaging/\(Self.desktopEntry)", encoding: .utf8)
            .replacingOccurrences(of: "@bindir@", with: bindir)
            .write(toFile: entry, atomically: true, encoding: .utf8)
        let config = sttd.environment["XDG_CONFIG_HOME"] ?? "\(sttd.home)/config"
        try FileManager.default.createDirectory(atPath: config, withIntermediateDirectories: true)
        try "[Wayland]\nInputMethod[$e]=\(entry)\n".write(
            toFile: "\(config)/kwinrc", atomically: true, encoding: .utf8)

        var environment: [String: String] = [
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "HOME": sttd.home,
            "XDG_CONFIG_HOME": config, "XDG_DATA_HOME": sttd.environment["XDG_DATA_HOME"] ?? "\(sttd.home)/data",
            "XDG_DATA_DIRS": "\(directory)/share:/usr/local/share:/usr/share",
            "XDG_CACHE_HOME": "\(directory)/cache", "XDG_RUNTIME_DIR": runtime, "DBUS_SESSION_BUS_ADDRESS": session,
            "IBUS_COMPONENT_PATH": "/usr/share/ibus/component:\(directory)/component",
            "NO_AT_BRIDGE": "1", "LC_ALL": "C.UTF-8",
            // As in a Plasma session; the engine finds ibus-daemon's address by the display's name.
            "WAYLAND_DISPLAY": Self.display,
        ]
        if ibusRunning {
            let daemon = try await IBusDesktop.startDaemon(
                environment: environment, log: "\(directory)/ibus-daemon.log")
            self.daemon = daemon
            let address = try await run(ibus, ["address"], environment: environment, timeout: 10)
            guard address.status == 0 else {
                daemon.stop(grace: 2)
                throw MissingPrerequisite(description: "ibus address: \(address.stderr)")
            }
            // ibus-wayland (KWin's child, with KWin's environment) finds ibus-daemon here.
            environment["IBUS_ADDRESS"] = address.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
        } else {
            daemon = nil
        }
        environment["XDG_SESSION_TYPE"] = "wayland"
        sessionEnvironment = environment.merging(["XDG_CURRENT_DESKTOP": "KDE"]) { $1 }
        // QPainter: no OpenGL rendering (llvmpipe) on a busy 2-core machine.
        environment["KWIN_COMPOSE"] = "Q"
        environment["QT_LOGGING_RULES"] = "kwin_scripting.debug=true"
        // The push-to-talk tests press keys through org_kde_kwin_fake_input, which KWin otherwise
        // offers only to the programs whose desktop entries ask for it.
        environment["KWIN_WAYLAND_NO_PERMISSION_CHECKS"] = "1"
        self.environment = environment
        kwin = try ChildProcess(
            kwinCopy,
            [
                "--virtual", "--width", "1024", "--height", "768", "--no-lockscreen", "--no-global-shortcuts",
                "--socket", Self.display,
            ], environment: environment, stdout: "\(directory)/kwin.log", stderr: "\(directory)/kwin.log")
        connection = try await DBusConnection.connect(to: .address(session))

        var client = environment.filter {
            ["PATH", "XDG_RUNTIME_DIR", "DBUS_SESSION_BUS_ADDRESS", "NO_AT_BRIDGE", "LC_ALL"].contains($0.key)
        }
        client["HOME"] = directory
        client["XDG_CONFIG_HOME"] = "\(directory)/client-config"
        client["WAYLAND_DISPLAY"] = Self.display
        client["GDK_BACKEND"] = "wayland"
        client["QT_QPA_PLATFORM"] = "wayland"
        client["GSETTINGS_BACKEND"] = "memory"
        client["GTK_A11Y"] = "none"
        clientEnvironment = client

        let kwin = kwin
        let up = try await happens(within: .seconds(60)) {
            guard kwin.isRunning else { return false }
            guard FileManager.default.fileExists(atPath: "\(runtime)/\(Self.display)"),
                !childProcesses(of: kwin.pid).isEmpty
            else { return false }
            return try await hasOwner("org.kde.KWin")
        }
        guard up else {
            let log = self.log
            close()
            throw MissingPrerequisite(
                description: "kwin_wayland did not start with ibus-wayland (kwin-wayland, ibus-wayland): \(log)")
        }
        if !ibusRunning {
            // The input method started ibus-daemon; Dictation is selected in it as a user has it.
            let selected = try await happens(within: .seconds(30)) {
                _ = try await run(ibus, ["engine", Self.engine], environment: environment, timeout: 10)
                let current = try await run(ibus, ["engine"], environment: environment, timeout: 10)
                return current.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == Self.engine
            }
            guard selected else {
                let log = self.log
                close()
                throw MissingPrerequisite(description: "no ibus-daemon with the sttd engine came up: \(log)")
            }
        }
    }

    /// ibus-daemon's process, as its address file names it (whoever started it).
    public var ibusDaemonPID: pid_t? {
        guard let ibus = try? requireTool("ibus", package: "ibus"),
            let address = try? run(ibus, ["address"], environment: environment, timeout: 10),
            address.status == 0
        else { return nil }
        let folder = "\(environment["XDG_CONFIG_HOME"] ?? "")/ibus/bus"
        let files = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        for file in files {
            let text = (try? String(contentsOfFile: "\(folder)/\(file)", encoding: .utf8)) ?? ""
            guard text.contains(address.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) else { continue }
            for line in text.split(separator: "\n") where line.hasPrefix("IBUS_DAEMON_PID=") {
                return pid_t(line.dropFirst("IBUS_DAEMON_PID=".count))
            }
        }
        return nil
    }

    /// KWin's log, then ibus-daemon's (with the engine's in it).
    public var log: String { Self.read(directory) }

    /// Opens `app`'s window with one field (a password field: not a terminal) and waits until it
    /// has the keyboard focus.
    public func openField(_ app: App = .gtk3, password: Bool = false) async throws -> IBusField {
        let field = try await app.openField(environment: clientEnvironment, password: password)
        // KWin focuses a new window; a script activates it where it did not.
        if await !happens(within: .seconds(5), { field.record?.focus == true }) {
            do { try await focus(field) } catch {
                field.close()
                throw error
            }
        }
        return field
    }

    /// Gives `field`'s window the keyboard focus, as a click on it would: a KWin script makes it
    /// the active window (found by its process).
    public func focus(_ field: IBusField) async throws {
        var focused = false
        for _ in 0..<3 where !focused {
            try await runScript(
                """
                for (const client of workspace.clientList())
                    if (client.pid === \(field.pid)) workspace.activeClient = client;
                """)
            focused = await happens(within: .seconds(5)) { field.record?.focus == true }
        }
        guard focused else {
            throw MissingPrerequisite(description: "could not focus the test field \(field.pid): \(field.log)\n\(log)")
        }
    }

    /// Runs JavaScript in KWin (`org.kde.kwin.Scripting`), as a KWin script does. The script
    /// stays loaded: KWin reads its file in the background after `start`, and unloading it then
    /// would cancel it. Its `print` goes to ``log``.
    public func runScript(_ source: String) async throws {
        let name = "sttd-test-\(UUID().uuidString.prefix(8))"
        let path = "\(directory)/\(name).js"
        try source.write(toFile: path, atomically: true, encoding: .utf8)
        let loaded = try await connection.call(
            destination: "org.kde.KWin", path: "/Scripting", interface: "org.kde.kwin.Scripting", member: "loadScript",
            arguments: [.string(path), .string(name)])
        guard case .int32(let id)? = loaded.first, id >= 0 else {
            throw MissingPrerequisite(description: "KWin did not load the script: \(loaded)")
        }
        _ = try await connection.call(
            destination: "org.kde.KWin", path: "/Scripting", interface: "org.kde.kwin.Scripting", member: "start")
    }

    /// Stops KWin (and so ibus-wayland) and ibus-daemon (and so the engine).
    public func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let children = childProcesses(of: kwin.pid)
        let startedDaemon = daemon == nil ? ibusDaemonPID : nil
        kwin.stop(grace: 5)
        for child in children { kill(child, SIGTERM) }
        daemon?.stop(grace: 2)
        // ibus-daemon, started by the input method, ends its own children (the engine, its panel).
        if let startedDaemon { kill(startedDaemon, SIGTERM) }
        connection.close()
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { close() }

    private func hasOwner(_ name: String) async throws -> Bool {
        let reply = try await connection.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "NameHasOwner", arguments: [.string(name)])
        return reply.first?.boolean == true
    }

    private static func read(_ directory: String) -> String {
        ["kwin.log", "ibus-daemon.log"].map {
            "\($0):\n" + ((try? String(contentsOfFile: "\(directory)/\($0)", encoding: .utf8)) ?? "(none)")
        }.joined(separator: "\n")
    }
}
