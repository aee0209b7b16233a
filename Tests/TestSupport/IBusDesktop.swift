import Foundation
import Synchronization

/// The X11 test desktop with a private ibus-daemon whose engines include `sttd` (from
/// `sttd-ibus --component-xml`), selected as the input method, for one sttd: ibus-daemon, its
/// engine and the GTK windows share sttd's session bus and config folder. Holds the X11 desktop
/// until ``close()``.
public final class IBusDesktop: @unchecked Sendable {
    // Safety: immutable after init; `closed` is atomic.
    /// What a GTK client needs: DISPLAY, the ibus-daemon's config folder, GTK_IM_MODULE=ibus.
    public let environment: [String: String]
    private let directory: String
    private let daemon: ChildProcess
    private let closed = Atomic<Bool>(false)
    private let fields = Mutex<[IBusField]>([])
    private let terminals = Mutex<[ChildProcess]>([])

    /// Starts ibus-daemon for `sttd` and selects the `sttd` engine. Fails loudly when a part is missing.
    public static func start(for sttd: SttdFixture) async throws -> IBusDesktop {
        var environment = try DesktopKind.x11.environment()
        await DesktopKind.x11.hold()
        do {
            environment.merge(
                sttd.environment.filter { ["DBUS_SESSION_BUS_ADDRESS", "HOME", "XDG_CONFIG_HOME"].contains($0.key) }
            ) { $1 }
            return try await IBusDesktop(environment: environment)
        } catch {
            DesktopKind.x11.release()
            throw error
        }
    }

    private init(environment base: [String: String]) async throws {
        try Self.requireModule("gtk-3.0/3.0.0/immodules/im-ibus.so", of: "GTK 3", package: "ibus-gtk3")
        directory = try makeTemporaryDirectory("sttd-ibus")
        try await Self.writeComponent(into: directory)
        var environment = base
        environment["IBUS_COMPONENT_PATH"] = "/usr/share/ibus/component:\(directory)/component"
        environment["XDG_CACHE_HOME"] = "\(directory)/cache"
        environment["GTK_IM_MODULE"] = "ibus"
        environment["NO_AT_BRIDGE"] = "1"
        environment["LC_ALL"] = "C.UTF-8"
        self.environment = environment
        daemon = try await Self.startDaemon(environment: environment, log: "\(directory)/ibus-daemon.log")
    }

    /// Writes `sttd-ibus --component-xml` to `directory`/component/sttd.xml, for IBUS_COMPONENT_PATH.
    static func writeComponent(into directory: String) async throws {
        try FileManager.default.createDirectory(atPath: "\(directory)/component", withIntermediateDirectories: true)
        let xml = try await run(try builtExecutable("sttd-ibus"), ["--component-xml"])
        guard xml.status == 0 else {
            throw MissingPrerequisite(description: "sttd-ibus --component-xml: \(xml.stderr)")
        }
        try xml.stdout.write(toFile: "\(directory)/component/sttd.xml", atomically: true, encoding: .utf8)
    }

    /// Starts ibus-daemon in `environment` (whose IBUS_COMPONENT_PATH lists sttd's component)
    /// and selects the `sttd` engine; its log, with the engine's, goes to `log`.
    static func startDaemon(environment: [String: String], log: String) async throws -> ChildProcess {
        let ibus = try requireTool("ibus", package: "ibus")
        // -s: no panel and no config program (no dconf headless); -v: the engine's log goes to ours.
        let daemon = try ChildProcess(
            try requireTool("ibus-daemon", package: "ibus"),
            ["--single", "--verbose", "--cache=refresh", "--panel=disable", "--emoji-extension=disable"],
            environment: environment, stdout: log, stderr: log)
        let selected = try await happens(within: .seconds(20)) {
            guard daemon.isRunning else { return false }
            _ = try await run(ibus, ["engine", IBusDesktop.engine], environment: environment, timeout: 10)
            let current = try await run(ibus, ["engine"], environment: environment, timeout: 10)
            return current.stdout.trimmingCharacters(in: .whitespacesAndNewlines) == IBusDesktop.engine
        }
        guard selected else {
            daemon.stop(grace: 2)
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? "(no log)"
            throw MissingPrerequisite(description: "ibus-daemon did not select the sttd engine: \(text)")
        }
        return daemon
    }

    static let engine = "sttd"

    /// ibus-daemon's log, with the engine's (`sttd-ibus`) in it.
    public var log: String {
        (try? String(contentsOfFile: "\(directory)/ibus-daemon.log", encoding: .utf8)) ?? "(no log)"
    }

    /// Opens `app`'s window with one field, using IBus (Qt as im-config sets it up: QT_IM_MODULE,
    /// XMODIFIERS), and gives it the keyboard focus; it closes at the latest with the desktop.
    public func openField(_ app: DesktopApp = .gtk3, password: Bool = false) async throws -> IBusField {
        var environment = environment
        if DesktopApp.qt.contains(app) {
            environment.merge(["QT_IM_MODULE": "ibus", "XMODIFIERS": "@im=ibus", "QT_QPA_PLATFORM": "xcb"]) { $1 }
        }
        // Without it GTK 4's field gets the focus and no text.
        if app == .gtk4 {
            try Self.requireModule("gtk-4.0/4.0.0/immodules/libim-ibus.so", of: "GTK 4", package: "ibus-gtk4")
        }
        let field = try await app.openField(environment: environment, password: password)
        fields.withLock { $0.append(field) }
        try await field.focus()
        return field
    }

    /// Fails naming `package` unless a toolkit's IBus module (`path` under /usr/lib/<triplet>) is installed.
    private static func requireModule(_ path: String, of toolkit: String, package: String) throws {
        let libraries = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib")) ?? []
        guard libraries.contains(where: { FileManager.default.fileExists(atPath: "/usr/lib/\($0)/\(path)") }) else {
            throw MissingPrerequisite(
                description: "\(toolkit)'s IBus module is missing: `sudo apt install \(package)` (scripts/setup test)")
        }
    }

    /// Kills the engine (`sttd-ibus`, ibus-daemon's child) at once, as a crash would.
    public func killEngine() async throws {
        let pgrep = try requireTool("pgrep", package: "procps")
        // By its process name: the multicall binary started through the link must run as sttd-ibus.
        let found = try await run(pgrep, ["-P", "\(daemon.pid)", "-x", "sttd-ibus"], timeout: 10)
        let pids = found.stdout.split(whereSeparator: \.isNewline).compactMap { pid_t($0) }
        guard !pids.isEmpty else {
            throw MissingPrerequisite(description: "no sttd-ibus runs under ibus-daemon: \(log)")
        }
        for pid in pids { kill(pid, SIGKILL) }
    }

    /// Opens an xterm that uses no input method (this desktop runs no XIM server) and gives it
    /// the keyboard focus: a window the engine never hears of. It closes with the desktop.
    public func focusWindowWithoutInputMethod() async throws {
        var environment = environment
        environment["XMODIFIERS"] = ""
        let terminal = try await openFocusedXterm(
            environment: environment, title: "sttd-no-im-\(UInt32.random(in: 0...UInt32.max))")
        terminals.withLock { $0.append(terminal) }
    }

    /// Stops ibus-daemon (and so its engine) and lets the next test have the desktop.
    public func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        for field in fields.withLock({ $0 }) { field.close() }
        for terminal in terminals.withLock({ $0 }) { terminal.stop() }
        daemon.stop(grace: 2)
        try? FileManager.default.removeItem(atPath: directory)
        DesktopKind.x11.release()
    }

    deinit { close() }
}

extension SttdFixture {
    /// The runtime folder and session bus a desktop shares with this sttd, which must have been
    /// started with `environment` (naming the Wayland `display`).
    func waylandSession(display: String, environment: String) throws -> (runtime: String, session: String) {
        guard self.environment["WAYLAND_DISPLAY"] == display, let runtime = self.environment["XDG_RUNTIME_DIR"],
            let session = self.environment["DBUS_SESSION_BUS_ADDRESS"]
        else { throw MissingPrerequisite(description: "start sttd with \(environment)") }
        return (runtime, session)
    }
}

/// A window with one field whose input method is IBus — GTK 3 (`Tests/Clients/ibus_field.py`),
/// GTK 4 (`gtk4_field.py`) or Qt (`qt_field.py`) — with what it holds and the preedits it showed.
public final class IBusField: @unchecked Sendable {
    // Safety: immutable after init.
    private let process: ChildProcess
    private let directory: String
    private let environment: [String: String]
    /// The X window id ("wayland" on a Wayland desktop, where windows have no id a client can name).
    public let windowID: String

    /// What the field recorded.
    public struct Record: Decodable, Sendable {
        public var text: String
        public var preedit: String
        /// How many times a non-empty preedit was shown.
        public var preedits: Int
        /// The last 50 non-empty preedits.
        public var preedit_seen: [String]
        public var focus: Bool
    }

    /// Starts the window in `environment` and waits until it is shown; the desktop focuses it.
    /// `client` is a script in Tests/Clients taking READY STATE [--purpose password] after
    /// `options`, and `flags` after them, writing the record below; `launcher` is the command
    /// that runs the interpreter (a terminal's, for a terminal app); `needs` names its packages
    /// for a failure.
    init(
        environment: [String: String], password: Bool, client: String = "ibus_field.py", options: [String] = [],
        flags: [String] = [], launcher: [String] = [], needs: String = "python3-gi, gir1.2-gtk-3.0"
    ) async throws {
        self.environment = environment
        directory = try makeTemporaryDirectory("sttd-field")
        let script = "\(DeepgramSDKClient.packageRoot)/Tests/Clients/\(client)"
        let ready = "\(directory)/ready"
        let command = launcher + ["/usr/bin/python3"]
        process = try ChildProcess(
            command[0],
            Array(command.dropFirst()) + [script] + options + [ready, "\(directory)/state"]
                + (password ? ["--purpose", "password"] : []) + flags,
            // The scripts import field_state.py: no __pycache__ in the source tree.
            environment: environment.merging(["PYTHONDONTWRITEBYTECODE": "1"]) { $1 },
            stderr: "\(directory)/field.log")
        guard await happens(within: .seconds(20), { FileManager.default.fileExists(atPath: ready) }) else {
            let log = (try? String(contentsOfFile: "\(directory)/field.log", encoding: .utf8)) ?? ""
            process.stop(grace: 2)
            throw MissingPrerequisite(
                description: "the test field \(client) \(options) did not start (needs \(needs)): \(log)")
        }
        windowID = ((try? String(contentsOfFile: ready, encoding: .utf8)) ?? "").trimmingCharacters(
            in: .whitespacesAndNewlines)
    }

    /// The window's process (the terminal's, for a terminal app), by which a compositor finds it.
    public var pid: pid_t { process.pid }

    /// The window's own log (GTK's warnings).
    var log: String { (try? String(contentsOfFile: "\(directory)/field.log", encoding: .utf8)) ?? "" }

    /// Gives this window the keyboard focus on the X11 desktop (no window manager: it stays there).
    public func focus() async throws {
        let xdotool = try requireTool("xdotool", package: "xdotool")
        let focused = try await happens(within: .seconds(10)) {
            let focus = try await run(
                xdotool, ["windowfocus", "--sync", windowID], environment: environment, timeout: 5)
            let pointer = try await run(
                xdotool, ["mousemove", "--window", windowID, "20", "20"], environment: environment, timeout: 5)
            return focus.status == 0 && pointer.status == 0 && record?.focus == true
        }
        guard focused else { throw MissingPrerequisite(description: "could not focus the GTK test field \(windowID)") }
    }

    /// Types keys with xdotool (XTEST), as a keyboard would.
    public func xdotool(_ arguments: [String]) async throws {
        let xdotool = try requireTool("xdotool", package: "xdotool")
        let result = try await run(xdotool, arguments, environment: environment, timeout: 20)
        guard result.status == 0 else {
            throw MissingPrerequisite(description: "xdotool \(arguments): \(result.stderr)")
        }
    }

    /// What the field recorded last; nil before its first record.
    public var record: Record? {
        guard let data = FileManager.default.contents(atPath: "\(directory)/state") else { return nil }
        return try? JSONDecoder().decode(Record.self, from: data)
    }

    public var text: String { record?.text ?? "" }

    /// Waits (up to `timeout`) until the field holds exactly `expected`; throws ``WaitTimedOut``,
    /// with what it holds and `context` (worked out only then), if it does not.
    public func waitForText(
        _ expected: String, timeout: Duration = .seconds(15), context: @autoclosure () -> String = "",
        fileID: String = #fileID, line: Int = #line
    ) async throws {
        guard await happens(within: timeout, { text == expected }) else {
            let note = context()
            throw WaitTimedOut(
                "the field to hold \(expected.debugDescription); it holds \(text.debugDescription)"
                    + (note.isEmpty ? "" : "\n\(note)"), after: timeout, fileID: fileID, line: line)
        }
    }

    public func close() {
        process.stop(grace: 2)
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { close() }
}
