import Foundation
import Synchronization

/// A desktop the tests can type into, started by `scripts/desktop-env` (which `scripts/run-tests` uses).
public enum DesktopKind: String, Sendable, CaseIterable, CustomStringConvertible {
    /// Xvfb, no window manager.
    case x11
    /// A headless sway (wlroots).
    case wayland

    public var description: String { rawValue }

    /// The variables a typing or clipboard tool needs to reach this desktop (and PATH).
    public func environment() throws -> [String: String] {
        let outer = ProcessInfo.processInfo.environment
        func required(_ name: String) throws -> String {
            guard let value = outer[name], !value.isEmpty else {
                throw MissingPrerequisite(
                    description:
                        "\(name) is not set: run the tests under scripts/desktop-env (scripts/run-tests and `make test` do), after `sudo scripts/setup test`"
                )
            }
            return value
        }
        let path = outer["PATH"] ?? "/usr/bin:/bin"
        switch self {
        case .x11:
            return ["DISPLAY": try required("STTD_TEST_X11_DISPLAY"), "PATH": path]
        case .wayland:
            return [
                "WAYLAND_DISPLAY": try required("STTD_TEST_WAYLAND_DISPLAY"),
                "XDG_RUNTIME_DIR": try required("STTD_TEST_WAYLAND_RUNTIME_DIR"),
                "XDG_CURRENT_DESKTOP": "sway", "PATH": path,
            ]
        }
    }

    fileprivate var lock: AsyncLock { self == .x11 ? AsyncLock.x11 : AsyncLock.wayland }

    /// Holds this desktop for one test (windows of one desktop are opened one test at a time).
    public func hold() async { await lock.lock() }

    /// Lets the next test have the desktop.
    public func release() { lock.unlock() }
}

/// Which application a ``ReceivingWindow`` is.
public enum WindowApp: String, Sendable, CaseIterable, CustomStringConvertible {
    /// A terminal as its user has it (a UTF-8 locale, default settings): xterm on X11, foot on
    /// Wayland, running `stty raw -echo; cat > file`. It pastes only on its own keys
    /// (shift+Insert, ctrl+shift+v); ctrl+v is a control character to it.
    case terminal
    /// A GUI text field, which pastes CLIPBOARD on ctrl+v: a Tk text widget on X11. On Wayland
    /// foot set up to paste on ctrl+v stands in for one (no Wayland toolkit is installed).
    case textField

    public var description: String { rawValue }
}

/// A real window of a desktop that records every byte it receives as keyboard input or paste,
/// focused, and holding the desktop for the test until ``close()``: windows of one desktop are
/// opened one at a time across the process, so concurrent tests do not type into each other's
/// windows or clipboards.
///
/// ```swift
/// let window = try await ReceivingWindow.open(.wayland)
/// defer { window.close() }
/// let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
/// output.type("café") { _ in }
/// try await window.waitForText("café")
/// ```
public final class ReceivingWindow: @unchecked Sendable {
    // Safety: immutable after init except `closed`, which is guarded by `closeLock`.
    public let kind: DesktopKind
    /// What a tool needs to reach the desktop this window is on: DISPLAY, or WAYLAND_DISPLAY,
    /// XDG_RUNTIME_DIR and XDG_CURRENT_DESKTOP; and PATH.
    public let environment: [String: String]
    private let directory: String
    private let terminal: ChildProcess
    private let closeLock = NSLock()
    private var closed = false

    private var outputPath: String { "\(directory)/received" }

    /// Opens a window of `app` on `kind`, waits until its reader runs and it has the keyboard
    /// focus. Fails loudly when the desktop or a tool is missing.
    public static func open(_ kind: DesktopKind, _ app: WindowApp = .terminal) async throws -> ReceivingWindow {
        let environment = try kind.environment()
        await kind.lock.lock()
        do {
            return try await ReceivingWindow(kind, app, environment: environment)
        } catch {
            kind.lock.unlock()
            throw error
        }
    }

    private init(_ kind: DesktopKind, _ app: WindowApp, environment: [String: String]) async throws {
        self.kind = kind
        self.environment = environment
        directory = try makeTemporaryDirectory("sttd-window")
        let ready = "\(directory)/ready"
        // The reader: raw mode (no line buffering, no signals, no echo), then every byte to a file.
        let reader = [
            "/bin/sh", "-c",
            "stty raw -echo && echo \"${WINDOWID:-0}\" > \"$1.tmp\" && mv \"$1.tmp\" \"$1\" && exec cat > \"$2\"",
            "reader", ready, "\(directory)/received",
        ]
        var terminalEnvironment = environment
        terminalEnvironment["LC_ALL"] = "C.UTF-8"
        terminalEnvironment["HOME"] = directory
        let appID = "sttd-test-\(UUID().uuidString.prefix(8))"
        switch (kind, app) {
        case (.x11, .terminal):
            let xterm = try requireTool("xterm", package: "xterm")
            _ = try requireTool("xdotool", package: "xdotool")
            terminal = try ChildProcess(
                xterm, ["-geometry", "100x20+0+0", "-e"] + reader, environment: terminalEnvironment,
                stderr: "\(directory)/terminal.log")
        case (.x11, .textField):
            let wish = try requireTool("wish", package: "tk")
            _ = try requireTool("xdotool", package: "xdotool")
            try Self.textFieldScript.write(toFile: "\(directory)/field.tcl", atomically: true, encoding: .utf8)
            terminal = try ChildProcess(
                wish, ["\(directory)/field.tcl", ready, "\(directory)/received"], environment: terminalEnvironment,
                stderr: "\(directory)/terminal.log")
        case (.wayland, _):
            let foot = try requireTool("foot", package: "foot")
            _ = try requireTool("swaymsg", package: "sway")
            var configuration: [String] = []
            if app == .textField {
                try "[key-bindings]\nclipboard-paste=Control+v XF86Paste\n".write(
                    toFile: "\(directory)/foot.ini", atomically: true, encoding: .utf8)
                configuration = ["--config", "\(directory)/foot.ini"]
            }
            terminal = try ChildProcess(
                foot, configuration + ["--app-id", appID] + reader, environment: terminalEnvironment,
                stderr: "\(directory)/terminal.log")
        }
        do {
            guard await happens(within: .seconds(20), { FileManager.default.fileExists(atPath: ready) }) else {
                throw MissingPrerequisite(description: "the \(kind) test window did not start: \(terminalLog)")
            }
            let windowID = (try? String(contentsOfFile: ready, encoding: .utf8)) ?? ""
            try await focus(windowID: windowID, appID: appID)
        } catch {
            terminal.stop(grace: 2)
            try? FileManager.default.removeItem(atPath: directory)
            throw error
        }
    }

    /// A Tk text widget with the focus that writes its whole content to a file whenever it
    /// changes (arguments: the ready file, which gets the window's id, and the content file).
    private static let textFieldScript = #"""
        lassign $argv ready received
        text .t -width 80 -height 20
        pack .t
        focus -force .t
        update
        set last ""
        proc record {} {
            global received last
            set now [.t get 1.0 end-1c]
            if {$now ne $last} {
                set f [open $received.tmp w]
                fconfigure $f -encoding utf-8 -translation lf
                puts -nonewline $f $now
                close $f
                file rename -force $received.tmp $received
                set last $now
            }
            after 10 record
        }
        record
        set f [open $ready.tmp w]
        puts $f [format %d [wm frame .]]
        close $f
        file rename -force $ready.tmp $ready
        """#

    private var terminalLog: String {
        (try? String(contentsOfFile: "\(directory)/terminal.log", encoding: .utf8)) ?? "(no log)"
    }

    private func focus(windowID: String, appID: String) async throws {
        switch kind {
        case .x11:
            // No window manager: focus set on the window stays there (the pointer goes there too).
            let id = windowID.trimmingCharacters(in: .whitespacesAndNewlines)
            let xdotool = try requireTool("xdotool", package: "xdotool")
            let focused = try await happens(within: .seconds(10)) {
                try run(xdotool, ["windowfocus", "--sync", id], environment: environment, timeout: 5).status == 0
                    && run(xdotool, ["mousemove", "--window", id, "20", "20"], environment: environment, timeout: 5)
                        .status == 0
                    && run(xdotool, ["getwindowfocus"], environment: environment, timeout: 5).stdout
                        .trimmingCharacters(in: .whitespacesAndNewlines) == id
            }
            guard focused else { throw MissingPrerequisite(description: "could not focus the X11 test window \(id)") }
        case .wayland:
            // sway maps the window a moment after the reader starts; wtype's keys go to the focused one.
            let swaymsg = try requireTool("swaymsg", package: "sway")
            var swayEnvironment = environment
            swayEnvironment["SWAYSOCK"] = ProcessInfo.processInfo.environment["STTD_TEST_SWAYSOCK"]
            guard swayEnvironment["SWAYSOCK"] != nil else {
                throw MissingPrerequisite(
                    description: "STTD_TEST_SWAYSOCK is not set: run the tests under scripts/desktop-env")
            }
            let focused = try await happens(within: .seconds(10)) {
                try run(swaymsg, ["[app_id=\(appID)] focus"], environment: swayEnvironment, timeout: 5).status == 0
            }
            guard focused else { throw MissingPrerequisite(description: "sway did not focus the test window \(appID)") }
        }
    }

    /// Every byte the window received so far.
    public var bytes: [UInt8] { Array((FileManager.default.contents(atPath: outputPath)) ?? Data()) }

    /// What the window received so far, as UTF-8.
    /// What the window shows: a raw-mode terminal records keys as bytes, so here Enter (CR) is a
    /// line feed and BackSpace (DEL or BS) takes back the character before it, as an editor does.
    public var text: String { String(decoding: lines, as: UTF8.self) }

    private var lines: [UInt8] {
        var shown: [UInt8] = []
        for byte in bytes {
            switch byte {
            case 0x0D: shown.append(0x0A)
            case 0x7F, 0x08:
                // One UTF-8 character: its continuation bytes, then its lead byte.
                while let last = shown.last, last & 0xC0 == 0x80 { shown.removeLast() }
                if !shown.isEmpty { shown.removeLast() }
            default: shown.append(byte)
            }
        }
        return shown
    }

    /// Waits (up to `timeout`) until the window has received exactly `expected`; throws
    /// ``WaitTimedOut``, with what it received and `context` (worked out only then), if it has
    /// not by then, or has received something else that `expected` does not start with.
    public func waitForText(
        _ expected: String, timeout: Duration = .seconds(15), context: @autoclosure () -> String = "",
        fileID: String = #fileID, line: Int = #line
    ) async throws {
        let target = Array(expected.utf8)
        let settled = await happens(within: timeout) {
            let received = lines
            return received.count >= target.count || !target.starts(with: received)
        }
        // A moment more so that anything typed beyond the expected text shows up too.
        try? await Task.sleep(for: .milliseconds(200))
        guard lines == target else {
            let note = context()
            throw WaitTimedOut(
                "the window to receive \(expected.debugDescription); it received \(text.debugDescription)"
                    + (settled ? " instead" : " so far") + (note.isEmpty ? "" : "\n\(note)"), after: timeout,
                fileID: fileID, line: line)
        }
    }

    /// Closes the window and lets the next test have the desktop.
    public func close() {
        let wasClosed = closeLock.withLock {
            defer { closed = true }
            return closed
        }
        guard !wasClosed else { return }
        terminal.stop(grace: 2)
        try? FileManager.default.removeItem(atPath: directory)
        kind.lock.unlock()
    }

    deinit { close() }
}

/// Reading and setting a desktop's selections from tests.
public enum DesktopClipboard {
    /// The CLIPBOARD selection's text, or nil when it is empty.
    public static func clipboard(_ kind: DesktopKind) throws -> String? { try read(kind, primary: false) }

    /// The PRIMARY selection's text, or nil when it is empty.
    public static func primary(_ kind: DesktopKind) throws -> String? { try read(kind, primary: true) }

    /// Puts `text` on CLIPBOARD (or PRIMARY), owned by a tool in the background.
    public static func set(_ text: String, on kind: DesktopKind, primary: Bool = false) throws {
        let environment = try kind.environment()
        let result: CommandResult
        switch kind {
        case .x11:
            let directory = try makeTemporaryDirectory("sttd-clip")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try text.write(toFile: "\(directory)/text", atomically: true, encoding: .utf8)
            result = try run(
                try requireTool("xclip", package: "xclip"),
                ["-i", "-selection", primary ? "primary" : "clipboard", "\(directory)/text"], environment: environment,
                timeout: 10)
        case .wayland:
            result = try run(
                try requireTool("wl-copy", package: "wl-clipboard"), (primary ? ["--primary"] : []) + ["--", text],
                environment: environment, timeout: 10)
        }
        guard result.status == 0 else {
            throw MissingPrerequisite(description: "could not set the \(kind) clipboard: \(result.stderr)")
        }
        // xclip and wl-copy return before their background child owns the selection: a later
        // owner (the code under test) could otherwise be overtaken by this one.
        let deadline = ContinuousClock.now + .seconds(5)
        while try read(kind, primary: primary) != text {
            guard ContinuousClock.now < deadline else {
                throw MissingPrerequisite(description: "the \(kind) selection did not take \(text.debugDescription)")
            }
            usleep(10_000)
        }
    }

    private static func read(_ kind: DesktopKind, primary: Bool) throws -> String? {
        let environment = try kind.environment()
        let result: CommandResult
        switch kind {
        case .x11:
            result = try run(
                try requireTool("xclip", package: "xclip"), ["-o", "-selection", primary ? "primary" : "clipboard"],
                environment: environment, timeout: 10)
        case .wayland:
            result = try run(
                try requireTool("wl-paste", package: "wl-clipboard"), (primary ? ["--primary"] : []) + ["--no-newline"],
                environment: environment, timeout: 10)
        }
        return result.status == 0 ? result.stdout : nil
    }
}

/// A lock held across suspension points (a test holds a desktop for as long as it needs it).
final class AsyncLock: Sendable {
    static let x11 = AsyncLock()
    static let wayland = AsyncLock()

    private struct State {
        var locked = false
        var waiters: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    func lock() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let acquired = state.withLock { state in
                if state.locked {
                    state.waiters.append(continuation)
                    return false
                }
                state.locked = true
                return true
            }
            if acquired { continuation.resume() }
        }
    }

    func unlock() {
        let next = state.withLock { state -> CheckedContinuation<Void, Never>? in
            if state.waiters.isEmpty {
                state.locked = false
                return nil
            }
            return state.waiters.removeFirst()
        }
        next?.resume()
    }
}
