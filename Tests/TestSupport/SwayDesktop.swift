import Foundation
import Synchronization

/// A headless sway (wlroots, `WLR_BACKENDS=headless`, no XWayland) of one test's own, as the
/// Wayland input method tests need it: one seat that no other test's input method holds, a config
/// the test may add lines to (`bindsym`), and a keyboard on the seat (``keyboard``: a headless
/// seat has none, and without one no window gets the keyboard focus or enables text-input).
/// Apps' fields talk text-input-v3 to sway (no GTK_IM_MODULE or QT_IM_MODULE), and sway hands
/// them to whichever client holds `zwp_input_method_v2` on the seat.
///
/// sway refuses to run as root: then it runs as `sttd-desktop` (created if missing, as
/// `scripts/desktop-env` does) in a runtime folder of its own (mode 700). Its socket is linked
/// under ``display`` into the clients' runtime folder and, for an sttd, into sttd's, which names
/// it in ``sttdEnvironment``. Holds sway until ``close()``; ``stop()`` and ``restart()`` end it
/// and start it again behind the same name, as a logout and login would.
public final class SwayDesktop: @unchecked Sendable {
    // Safety: immutable after init but for `running`, `fields` and `browsers` (under mutexes).
    /// The Wayland socket's name in sttd's runtime folder and the clients'.
    public static let display = "wayland-sway-sttd"

    /// What sttd sees in a sway session, with a PATH holding no typing tool.
    public static var sttdEnvironment: [String: String] {
        ["WAYLAND_DISPLAY": display, "XDG_CURRENT_DESKTOP": "sway", "DISPLAY": "", "PATH": "/nonexistent"]
    }

    /// The absolute path of the Wayland socket (a link in the clients' runtime folder).
    public let socketPath: String
    /// What an app needs: the Wayland display and runtime folder, Wayland backends for GTK and
    /// Qt, and a home and config folder of its own; no GTK_IM_MODULE or QT_IM_MODULE.
    public let clientEnvironment: [String: String]
    private let directory: String
    private let swayRuntime: String
    private let swayEnvironment: [String: String]
    /// The links to sway's socket: the clients' and sttd's.
    private let links: [String]
    private let user: (uid: uid_t, gid: gid_t)?
    private let running = Mutex<Running?>(nil)
    private let starts = Atomic<Int>(0)
    private let fields = Mutex<[IBusField]>([])
    private let browsers = Mutex<[BrowserField]>([])

    private struct Running {
        var sway: ChildProcess
        var swaysock: String
        var keyboard: TestKeyboard
    }

    /// Starts sway, for `sttd` (started with ``sttdEnvironment``) if given, with `extra` lines
    /// at the end of its config. Fails loudly when a part is missing.
    public static func start(for sttd: SttdFixture? = nil, config extra: String = "") async throws -> SwayDesktop {
        let desktop = try SwayDesktop(sttd: sttd, config: extra)
        do {
            try await desktop.launch()
        } catch {
            desktop.close()
            throw error
        }
        return desktop
    }

    private init(sttd: SttdFixture?, config extra: String) throws {
        _ = try requireTool("sway", package: "sway")
        _ = try requireTool("swaymsg", package: "sway")
        user = getuid() == 0 ? try Self.desktopUser() : nil
        directory = try makeTemporaryDirectory("sttd-sway")
        chmod(directory, 0o755)
        swayRuntime = "\(directory)/sway-runtime"
        let swayHome = "\(directory)/sway-home"
        let clientRuntime = "\(directory)/client-runtime"
        try FileManager.default.createDirectory(
            atPath: "\(directory)/client-home/config", withIntermediateDirectories: true)
        for folder in [swayRuntime, swayHome, clientRuntime] {
            try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: false)
            chmod(folder, 0o700)
        }
        if let user {
            for folder in [swayRuntime, swayHome] { chown(folder, user.uid, user.gid) }
        }
        try """
        xwayland disable
        output * resolution 1280x800
        default_border none
        focus_follows_mouse no
        \(extra)

        """.write(toFile: "\(directory)/sway.conf", atomically: true, encoding: .utf8)
        chmod("\(directory)/sway.conf", 0o644)

        var sway = [
            "PATH": "/usr/bin:/bin", "HOME": swayHome, "XDG_RUNTIME_DIR": swayRuntime, "LC_ALL": "C.UTF-8",
            "WLR_BACKENDS": "headless", "WLR_LIBINPUT_NO_DEVICES": "1", "WLR_RENDERER": "pixman",
        ]
        socketPath = "\(clientRuntime)/\(Self.display)"
        var links = [socketPath]
        var client = [
            "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "HOME": "\(directory)/client-home",
            "XDG_CONFIG_HOME": "\(directory)/client-home/config", "XDG_RUNTIME_DIR": clientRuntime,
            "WAYLAND_DISPLAY": Self.display, "GDK_BACKEND": "wayland", "QT_QPA_PLATFORM": "wayland",
            "GSETTINGS_BACKEND": "memory", "NO_AT_BRIDGE": "1", "GTK_A11Y": "none", "LC_ALL": "C.UTF-8",
        ]
        if let sttd {
            let (runtime, session) = try sttd.waylandSession(
                display: Self.display, environment: "SwayDesktop.sttdEnvironment")
            links.append("\(runtime)/\(Self.display)")
            // What sway's `exec` runs (sttctl in a binding) reaches sttd's bus; so do the apps.
            sway["DBUS_SESSION_BUS_ADDRESS"] = session
            client["DBUS_SESSION_BUS_ADDRESS"] = session
        }
        self.links = links
        swayEnvironment = sway
        clientEnvironment = client
    }

    /// `sttd-desktop`, whom root runs sway as (sway refuses root); made once if missing.
    private static func desktopUser() throws -> (uid: uid_t, gid: gid_t) {
        let name = "sttd-desktop"
        if getpwnam(name) == nil {
            let useradd = try requireFile("/usr/sbin/useradd", package: "passwd")
            _ = try run(
                useradd,
                [
                    "--system", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
                    name,
                ])
        }
        guard let entry = getpwnam(name) else { throw MissingPrerequisite(description: "cannot create user \(name)") }
        return (entry.pointee.pw_uid, entry.pointee.pw_gid)
    }

    /// Starts sway, waits until it answers on its IPC socket, links its Wayland socket and gives
    /// its seat the keyboard.
    private func launch() async throws {
        let sway = try requireTool("sway", package: "sway")
        let (program, arguments): (String, [String])
        if let user {
            let setpriv = try requireTool("setpriv", package: "util-linux")
            (program, arguments) = (
                setpriv,
                [
                    "--reuid=\(user.uid)", "--regid=\(user.gid)", "--clear-groups", "--", sway, "--config",
                    "\(directory)/sway.conf",
                ]
            )
        } else {
            (program, arguments) = (sway, ["--config", "\(directory)/sway.conf"])
        }
        let start = starts.wrappingAdd(1, ordering: .relaxed).newValue
        let process = try ChildProcess(
            program, arguments, environment: swayEnvironment, stdout: "\(directory)/sway.\(start).log",
            stderr: "\(directory)/sway.\(start).log")
        let runtime = swayRuntime
        var found: (swaysock: String, socket: String)?
        // setpriv execs sway: the IPC socket carries the child's pid.
        let ipcSuffix = ".\(process.pid).sock"
        let up = try await happens(within: .seconds(30)) {
            if let status = process.exitStatus {
                throw MissingPrerequisite(description: "sway exited with status \(status): \(log)")
            }
            let names = (try? FileManager.default.contentsOfDirectory(atPath: runtime)) ?? []
            guard let swaysock = names.first(where: { $0.hasPrefix("sway-ipc.") && $0.hasSuffix(ipcSuffix) }),
                let socket = names.first(where: { $0.hasPrefix("wayland-") && !$0.hasSuffix(".lock") })
            else { return false }
            let version = try await run(
                try requireTool("swaymsg", package: "sway"), ["-t", "get_version"],
                environment: ["SWAYSOCK": "\(runtime)/\(swaysock)"], timeout: 10)
            if version.status == 0 { found = ("\(runtime)/\(swaysock)", "\(runtime)/\(socket)") }
            return version.status == 0
        }
        guard up, let found else {
            process.stop(grace: 2)
            throw MissingPrerequisite(description: "sway did not start (sway, setpriv): \(log)")
        }
        for link in links {
            unlink(link)
            guard symlink(found.socket, link) == 0 else {
                process.stop(grace: 2)
                throw MissingPrerequisite(description: "cannot link \(link): \(String(cString: strerror(errno)))")
            }
        }
        do {
            let keyboard = try TestKeyboard(socket: socketPath)
            running.withLock { $0 = Running(sway: process, swaysock: found.swaysock, keyboard: keyboard) }
        } catch {
            process.stop(grace: 2)
            throw error
        }
    }

    /// The keyboard on sway's seat (a new one after ``restart()``).
    public var keyboard: TestKeyboard {
        get throws {
            guard let keyboard = running.withLock({ $0?.keyboard }) else {
                throw MissingPrerequisite(description: "sway is stopped")
            }
            return keyboard
        }
    }

    /// sway's process id, while it runs.
    public var swayPID: pid_t? { running.withLock { $0?.sway.pid } }

    /// Runs `swaymsg` with `arguments` against this sway.
    @discardableResult
    public func swaymsg(_ arguments: [String]) async throws -> CommandResult {
        guard let swaysock = running.withLock({ $0?.swaysock }) else {
            throw MissingPrerequisite(description: "sway is stopped")
        }
        return try await run(
            try requireTool("swaymsg", package: "sway"), arguments, environment: ["SWAYSOCK": swaysock], timeout: 10)
    }

    /// Opens `app`'s window with one field (`password` for GTK and Qt, `invisible` for GTK,
    /// `appID` for Qt and foot, `echo` for foot: `tty_field.py --echo`) and gives it the
    /// keyboard focus; it closes at the latest with the desktop.
    public func openField(
        _ app: DesktopApp = .gtk3, password: Bool = false, invisible: Bool = false, appID: String? = nil,
        echo: Bool = false
    ) async throws -> IBusField {
        let appID = appID ?? (app == .foot ? "sttd-test-foot-\(UUID().uuidString.prefix(8))" : nil)
        let field = try await app.openField(
            environment: clientEnvironment, password: password, invisible: invisible, appID: appID, echo: echo)
        fields.withLock { $0.append(field) }
        // A terminal app asks for focus reports after foot took the focus: it hears only of the next.
        try await focus(field, refocus: app == .foot)
        return field
    }

    /// As ``openField(_:password:invisible:appID:)``, for the desktops' shared matrix.
    public func openField(_ app: DesktopApp, password: Bool) async throws -> IBusField {
        try await openField(app, password: password, invisible: false, appID: nil, echo: false)
    }

    /// Gives `field`'s window the keyboard focus (`[pid=N] focus`) and waits until the field
    /// reports it. With `refocus` the focus first goes to an empty workspace, so the window
    /// gains it anew even if it had it.
    public func focus(_ field: IBusField, refocus: Bool = false) async throws {
        try await focusWindow("[pid=\(field.pid)]", refocus: refocus) { field.record?.focus == true }
    }

    private func focusWindow(_ criteria: String, refocus: Bool, until focused: () -> Bool) async throws {
        var away = refocus
        for _ in 0..<3 {
            if away { try await swaymsg(["workspace", "sttd-away"]) }
            // Until the window is mapped sway finds no match.
            let matched = try await happens(within: .seconds(20)) {
                try await swaymsg(["\(criteria) focus"]).status == 0
            }
            guard matched else { throw MissingPrerequisite(description: "sway found no window \(criteria): \(log)") }
            if await happens(within: .seconds(5), focused) { return }
            away = true
        }
        throw MissingPrerequisite(description: "the window \(criteria) never reported the focus: \(log)")
    }

    /// Presses `keysym` on the seat's keyboard and holds it until the release.
    public func pressKey(keysym: UInt32) async throws -> HeldKey { try keyboard.pressKey(keysym: keysym) }

    /// Types `text` on the seat's keyboard into the focused window (ASCII; "\n" is Return,
    /// "\u{8}" BackSpace).
    public func typeKeys(_ text: String) async throws { try keyboard.typeKeys(text) }

    /// Binds a ``TestInputMethod`` on sway's seat.
    public func bindInputMethod() throws -> TestInputMethod { try TestInputMethod(socket: socketPath) }

    /// Ends sway (its clients lose the connection) and removes the links to its socket.
    public func stop() {
        guard let running = running.withLock({ $0.take() }) else { return }
        running.keyboard.close()
        running.sway.stop(grace: 5)
        for link in links { unlink(link) }
    }

    /// Starts sway again after ``stop()``: the socket has the same name in sttd's runtime folder.
    public func restart() async throws {
        stop()
        try await launch()
    }

    /// sway's logs, one per start.
    public var log: String {
        (1...max(1, starts.load(ordering: .relaxed))).map {
            "sway.\($0).log:\n"
                + ((try? String(contentsOfFile: "\(directory)/sway.\($0).log", encoding: .utf8)) ?? "(none)")
        }.joined(separator: "\n")
    }

    /// Closes the windows and browsers it opened, ends sway and removes its folder.
    public func close() {
        for field in fields.withLock({ $0 }) { field.close() }
        for browser in browsers.withLock({ $0 }) { browser.close() }
        stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { close() }
}

extension SwayDesktop: BrowserDesktop {
    /// Opens `browser` on the test page (text-input-v3, the only version sway offers) and
    /// focuses its window by its title.
    public func openBrowser(_ browser: BrowserField.Browser, password: Bool = false) async throws -> BrowserField {
        let field = try await BrowserField(
            browser, environment: clientEnvironment, display: .wayland(textInputV3Only: true), password: password
        ) { [self] in
            try await swaymsg(["[title=\"^\(browserPageTitle)\"] focus"])
        }
        browsers.withLock { $0.append(field) }
        return field
    }
}
