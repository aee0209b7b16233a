import DBus
import Foundation
import Synchronization

/// A headless GNOME Shell (Wayland, `gnome-shell --headless --wayland --no-x11 --virtual-monitor`)
/// in one sttd's session, as a GNOME login has it: gnome-shell shares sttd's session bus, home,
/// config folder and runtime folder, starts ibus-daemon itself (whose components include
/// `sttd-ibus --component-xml`) and takes its input sources from GSettings (keyfile backend):
/// the keyboard layout, then Dictation. GTK windows on its Wayland display use GTK's default
/// input method module (text-input-v3: gnome-shell hands the field to IBus). Holds gnome-shell,
/// its private system bus and the logind stand-in until ``close()``.
///
/// gnome-shell needs a system bus with logind on it: a private `dbus-daemon` with
/// python3-dbusmock's `logind` template (no real system bus is touched). The tests drive it
/// through `org.gnome.Shell.Eval`, which gnome-shell 43 answers only in unsafe mode; a
/// three-line extension of this fixture turns that on (gnome-shell 43 has no option for it).
/// Through Eval the fixture gives the seat a keyboard (a headless shell has no input device, and
/// a Wayland window gets the keyboard focus only from a seat with a keyboard), selects the
/// Dictation input source (Super+Space does it on a desktop) and activates a window, as a
/// click on it would (mutter does not focus a new window that no user input led to).
public final class GnomeDesktop: @unchecked Sendable {
    // Safety: immutable after init; `closed` is atomic.
    /// The Wayland display's name; sttd's environment names it too (``sttdEnvironment``).
    public static let display = "wayland-sttd"

    /// What sttd sees in a GNOME Wayland session (its runtime folder is the fixture's own, which
    /// gnome-shell shares), with a PATH holding no typing tool.
    public static var sttdEnvironment: [String: String] {
        ["WAYLAND_DISPLAY": display, "DISPLAY": "", "XDG_CURRENT_DESKTOP": "GNOME", "PATH": "/nonexistent"]
    }

    /// What a GTK client needs: WAYLAND_DISPLAY, XDG_RUNTIME_DIR, the session bus; no
    /// GTK_IM_MODULE, and no way to reach ibus-daemon itself (its own config folder has no IBus
    /// address), so text reaching it came through gnome-shell.
    public let clientEnvironment: [String: String]
    private let directory: String
    private let systemBus: PrivateBus
    private let logind: ChildProcess
    private let shell: ChildProcess
    private let connection: DBusConnection
    private let closed = Atomic<Bool>(false)
    /// Where ibus-daemon writes its address (`ibus/bus` in its config folder).
    private let ibusAddressFolder: String

    static let engine = "sttd"
    static let extensionID = "sttd-test@sttd.github.io"

    /// A login of a user other than the test's: gnome-shell (and so ibus-daemon and the engine)
    /// runs as `user`, in the environment their login gets, with their home, caches and config.
    /// The fixture then names no component: ibus-daemon finds sttd's where the install put it.
    public struct Login: Sendable {
        public let user: LoginUser
        public let environment: [String: String]

        public init(user: LoginUser, environment: [String: String]) {
            self.user = user
            self.environment = environment
        }
    }

    /// Starts gnome-shell for `sttd` (started with ``sttdEnvironment``) and selects Dictation.
    /// Fails loudly when a part is missing.
    public static func start(for sttd: SttdFixture, login: Login? = nil) async throws -> GnomeDesktop {
        try await GnomeDesktop(sttd: sttd, login: login)
    }

    private init(sttd: SttdFixture, login: Login?) async throws {
        let gnomeShell = try requireTool("gnome-shell", package: "gnome-shell")
        _ = try requireTool("ibus-daemon", package: "ibus")
        let python = try requireFile("/usr/bin/python3", package: "python3")
        let dbusmock = try await run(python, ["-c", "import dbusmock"], timeout: 30)
        guard dbusmock.status == 0 else {
            throw MissingPrerequisite(
                description:
                    "python3-dbusmock is missing: run `sudo scripts/setup test` (Debian package python3-dbusmock)")
        }
        let (runtime, session) = try sttd.waylandSession(
            display: Self.display, environment: "GnomeDesktop.sttdEnvironment")
        let directory = try makeTemporaryDirectory("sttd-gnome")
        self.directory = directory
        chmod(directory, 0o755)
        try Self.writeExtension(to: "\(directory)/share/gnome-shell/extensions/\(Self.extensionID)")
        // GSettings' keyfile backend reads these; they are the keys Settings → Keyboard writes.
        let settings = """
            [org/gnome/desktop/input-sources]
            sources=[('xkb', 'us'), ('ibus', '\(Self.engine)')]

            [org/gnome/shell]
            enabled-extensions=['\(Self.extensionID)']
            """
        let systemBus = try PrivateBus(admitsEveryUser: login != nil)
        self.systemBus = systemBus
        var environment: [String: String] = [
            "XDG_DATA_DIRS": "\(directory)/share:/usr/local/share:/usr/share",
            "DBUS_SESSION_BUS_ADDRESS": session, "DBUS_SYSTEM_BUS_ADDRESS": systemBus.address,
            "GSETTINGS_BACKEND": "keyfile", "NO_AT_BRIDGE": "1", "LC_ALL": "C.UTF-8",
        ]
        if let login {
            environment.merge(login.environment) { own, _ in own }
            let userRuntime = try makeTemporaryDirectory("sttd-gnome-runtime")
            chmod(userRuntime, 0o700)
            chown(userRuntime, login.user.uid, login.user.gid)
            environment["XDG_RUNTIME_DIR"] = userRuntime
            try login.user.write(settings, to: "\(login.user.home)/.config/glib-2.0/settings/keyfile")
        } else {
            try await IBusDesktop.writeComponent(into: directory)
            let config = sttd.environment["XDG_CONFIG_HOME"] ?? "\(sttd.home)/config"
            try FileManager.default.createDirectory(
                atPath: "\(config)/glib-2.0/settings", withIntermediateDirectories: true)
            try settings.write(toFile: "\(config)/glib-2.0/settings/keyfile", atomically: true, encoding: .utf8)
            environment.merge([
                "PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin", "HOME": sttd.home,
                "XDG_CONFIG_HOME": config, "XDG_DATA_HOME": sttd.environment["XDG_DATA_HOME"] ?? "\(sttd.home)/data",
                "XDG_CACHE_HOME": "\(directory)/cache", "XDG_RUNTIME_DIR": runtime,
                // ibus-daemon (started by gnome-shell, with its environment) reads sttd's component here.
                "IBUS_COMPONENT_PATH": "/usr/share/ibus/component:\(directory)/component",
            ]) { own, _ in own }
        }
        let logind = try ChildProcess(
            python, ["-m", "dbusmock", "--template", "logind", "--system"], environment: environment,
            stdout: "\(directory)/logind.log", stderr: "\(directory)/logind.log")
        self.logind = logind
        connection = try await DBusConnection.connect(to: .address(session))
        let system = try await DBusConnection.connect(to: .address(systemBus.address))
        defer { system.close() }
        let logindUp = try await happens(within: .seconds(30)) {
            guard logind.isRunning else { return false }
            return try await Self.hasOwner("org.freedesktop.login1", on: system)
        }
        guard logindUp else {
            throw MissingPrerequisite(
                description: "dbusmock's logind did not start: \(Self.read("\(directory)/logind.log"))")
        }

        environment["XDG_SESSION_TYPE"] = "wayland"
        ibusAddressFolder = (environment["XDG_CONFIG_HOME"] ?? "\(environment["HOME"] ?? "")/.config") + "/ibus/bus"
        let shellArguments = [
            "--headless", "--wayland", "--no-x11", "--virtual-monitor", "1024x768", "--wayland-display", Self.display,
        ]
        let (program, arguments) = try login?.user.command(gnomeShell, shellArguments) ?? (gnomeShell, shellArguments)
        shell = try ChildProcess(
            program, arguments, environment: environment, stdout: "\(directory)/gnome-shell.log",
            stderr: "\(directory)/gnome-shell.log")
        var client = environment.filter {
            ["PATH", "HOME", "XDG_RUNTIME_DIR", "XDG_DATA_DIRS", "DBUS_SESSION_BUS_ADDRESS", "NO_AT_BRIDGE", "LC_ALL"]
                .contains($0.key)
        }
        // The test's windows write nothing into another user's home.
        if login != nil { client["HOME"] = directory }
        client["WAYLAND_DISPLAY"] = Self.display
        client["GDK_BACKEND"] = "wayland"
        client["XDG_CONFIG_HOME"] = "\(directory)/client-config"
        client["GSETTINGS_BACKEND"] = "memory"
        clientEnvironment = client

        do {
            try await prepareShell()
        } catch let error as MissingPrerequisite {
            close()
            throw error
        } catch {
            let log = self.log
            close()
            throw MissingPrerequisite(description: "preparing gnome-shell: \(error)\n\(log)")
        }
    }

    /// Waits until gnome-shell runs with the extension on, then gives the seat a keyboard, hides
    /// the overview it starts in and selects Dictation.
    private func prepareShell() async throws {
        // Starting takes a few seconds (more on a busy 2-core machine).
        let up = try await happens(within: .seconds(90)) {
            try requireShellRunning()
            return (try? await eval("global.context.unsafe_mode && !imports.ui.main.layoutManager._startingUp"))
                == "true"
        }
        guard up else {
            throw MissingPrerequisite(
                description: "headless gnome-shell did not start (or its extension did not load): \(log)")
        }
        _ = try await eval(
            """
            const Clutter = imports.gi.Clutter;
            if (!global.sttdTestKeyboard)
                global.sttdTestKeyboard = Clutter.get_default_backend().get_default_seat()
                    .create_virtual_device(Clutter.InputDeviceType.KEYBOARD_DEVICE);
            "ok"
            """)
        // It starts in the overview, as a GNOME login does.
        let hidden = try await happens(within: .seconds(30)) {
            try await eval(
                """
                const overview = imports.ui.main.overview;
                if (overview.visible)
                    overview.hide();
                overview.visible
                """) == "false"
        }
        guard hidden else { throw MissingPrerequisite(description: "gnome-shell's overview did not hide: \(log)") }
        // The source appears once ibus-daemon has listed its engines; IBus then switches engine.
        var last = ""
        let selected = try await happens(within: .seconds(60)) {
            try requireShellRunning()
            last = try await eval(
                """
                const manager = imports.ui.status.keyboard.getInputSourceManager();
                const source = Object.values(manager.inputSources).find(s => s.type === 'ibus' && s.id === '\(Self.engine)');
                if (source && manager.currentSource !== source)
                    source.activate(true);
                // The engine IBus reported in global-engine-changed.
                const engine = imports.misc.ibusManager.getIBusManager()._currentEngineName;
                `${manager.currentSource ? manager.currentSource.id : 'none'} ${engine}`
                """)
            return last == "\"\(Self.engine) \(Self.engine)\""
        }
        guard selected else {
            throw MissingPrerequisite(
                description:
                    "gnome-shell did not select the \(Self.engine) input source (source, engine: \(last)): \(log)")
        }
    }

    private func requireShellRunning() throws {
        if let status = shell.exitStatus {
            throw MissingPrerequisite(description: "gnome-shell exited (status \(status)): \(log)")
        }
    }

    /// Runs JavaScript in gnome-shell (`org.gnome.Shell.Eval`); its result as JSON.
    public func eval(_ script: String) async throws -> String {
        let reply = try await connection.call(
            destination: "org.gnome.Shell", path: "/org/gnome/Shell", interface: "org.gnome.Shell", member: "Eval",
            arguments: [.string(script)], timeout: .seconds(20))
        guard reply.count == 2, let success = reply[0].boolean, let result = reply[1].string else {
            throw MissingPrerequisite(description: "org.gnome.Shell.Eval replied \(reply)")
        }
        guard success else { throw MissingPrerequisite(description: "org.gnome.Shell.Eval failed: \(result)") }
        return result
    }

    /// gnome-shell's log, with ibus-daemon's in it.
    public var log: String { Self.read("\(directory)/gnome-shell.log") }

    /// Opens `app`'s window with one field and activates it, as a click on it would. Qt gets
    /// QT_IM_MODULE=ibus (mutter offers Qt's text-input-v2 nothing), as im-config sets it.
    public func openField(_ app: DesktopApp = .gtk3, password: Bool = false) async throws -> IBusField {
        var environment = clientEnvironment
        if DesktopApp.qt.contains(app) {
            environment.merge(["QT_IM_MODULE": "ibus", "QT_QPA_PLATFORM": "wayland"]) { $1 }
            environment["IBUS_ADDRESS_FILE"] = try await ibusAddressFile()
        }
        let field = try await app.openField(environment: environment, password: password)
        var focused = false
        var found = ""
        for _ in 0..<5 where !focused {
            // Mutter makes a new window its focus window without telling the window (no
            // wl_keyboard.enter) when no user input led to it; unfocusing and activating it, as
            // a click elsewhere and then on it would, does tell it.
            found = try await eval(
                """
                const window = global.get_window_actors().map(a => a.meta_window)
                    .find(w => w.get_title() === 'sttd test field');
                if (window) {
                    global.display.unset_input_focus(global.get_current_time());
                    imports.ui.main.activateWindow(window);
                }
                String(!!window)
                """)
            focused = await happens(within: .seconds(5)) { field.record?.focus == true }
        }
        guard focused else {
            field.close()
            throw MissingPrerequisite(
                description: "could not focus the GTK test field (window found: \(found)): \(field.log)\n\(log)")
        }
        return field
    }

    /// The file ibus-daemon wrote its address to for this display (`<machine-id>-unix-<display>`;
    /// it writes one for display 0 too). Qt's IBus plugin reads only that file, from its own
    /// config folder: a login shares the folder, the test's windows do not (theirs is their own).
    private func ibusAddressFile() async throws -> String {
        let folder = ibusAddressFolder
        var files: [String] = []
        let written = await happens(within: .seconds(30)) {
            files = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
            return files.contains { $0.hasSuffix("-unix-\(Self.display)") }
        }
        guard written, let file = files.first(where: { $0.hasSuffix("-unix-\(Self.display)") }) else {
            throw MissingPrerequisite(description: "no IBus address for \(Self.display) in \(folder): \(files)\n\(log)")
        }
        return "\(folder)/\(file)"
    }

    /// Stops gnome-shell (and so ibus-daemon and its engine), the logind stand-in and the system bus.
    public func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        // ibus-daemon (gnome-shell's child) would outlive it until the session bus goes.
        let children = childProcesses(of: shell.pid)
        shell.stop(grace: 5)
        for child in children { kill(child, SIGTERM) }
        logind.stop(grace: 2)
        connection.close()
        systemBus.stop()
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { close() }

    private static func hasOwner(_ name: String, on connection: DBusConnection) async throws -> Bool {
        let reply = try await connection.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "NameHasOwner", arguments: [.string(name)])
        return reply.first?.boolean == true
    }

    private static func read(_ path: String) -> String {
        (try? String(contentsOfFile: path, encoding: .utf8)) ?? "(no log)"
    }

    /// The extension that puts gnome-shell in unsafe mode, so that Eval answers. Installed as a
    /// system extension (XDG_DATA_DIRS): gnome-shell checks only per-user ones for updates online.
    private static func writeExtension(to folder: String) throws {
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try """
        {"uuid": "\(extensionID)", "name": "sttd tests", "description": "Unsafe mode for sttd's tests (org.gnome.Shell.Eval)", "shell-version": ["43", "44"]}
        """.write(toFile: "\(folder)/metadata.json", atomically: true, encoding: .utf8)
        try """
        /* exported init */
        class Extension {
            enable() { global.context.unsafe_mode = true; }
            disable() { global.context.unsafe_mode = false; }
        }
        function init() { return new Extension(); }
        """.write(toFile: "\(folder)/extension.js", atomically: true, encoding: .utf8)
    }
}
