import CSttdSystem
import Dictation
import Foundation
import Logging

/// Types and copies a session's text into the desktop the environment names.
///
/// Tools: wtype on wlroots compositors, ydotool on GNOME/KDE Wayland (through /dev/uinput),
/// xdotool on X11 (with xmodmap binding the characters the keymap lacks, see ``X11Keymap``);
/// wl-copy/wl-paste or xclip for the clipboard. wtype and xdotool type every character exactly;
/// ydotool's key codes assume a US layout, so its text is pasted and the previous clipboard text
/// is put back afterwards.
///
/// The clipboard: wl-copy and xclip leave a process that owns the selection until another
/// program takes it, so copied text outlives sttd's process (sttd's unit has `KillMode=process`
/// so that stopping sttd leaves them running).
///
/// Every request runs on one worker thread this object owns, in the order the calls were made;
/// calls return at once. At most ``queueCapacity`` requests wait behind the running one: a
/// request beyond that fails at once with ``OutputError/Kind/queueFull`` (its text is not typed;
/// the caller still has it, e.g. in the transcript).
public final class DesktopOutput: Sendable {
    /// How many requests may wait behind the running one.
    public static let queueCapacity = 64

    let engine: OutputEngine
    private let worker: SerialWorker
    /// What this output typed, for "scratch that" (see ``retract(_:done:)``).
    let ledger = SharedTypedLedger()

    /// environment: the variables of the user's graphical session (WAYLAND_DISPLAY, DISPLAY,
    /// XDG_CURRENT_DESKTOP, XDG_RUNTIME_DIR, PATH...). typingTool: the config override (nil = choose).
    public init(environment: [String: String], typingTool: TypingTool?, logger: Logger) {
        engine = OutputEngine(environment: environment, override: typingTool, logger: logger)
        worker = SerialWorker(name: "sttd-output", capacity: Self.queueCapacity)
    }

    deinit { worker.close() }

    /// The typing tool this session uses, or why there is none.
    public func typingTool() throws(OutputError) -> TypingTool { try engine.typingTool() }

    /// Checks now that typing can work in this session (tool chosen and installed, and what its
    /// fallback needs); throws naming the package to install.
    public func checkTyping() throws(OutputError) { try engine.checkTyping() }

    /// Same for the clipboard (and, with paste, for pasting).
    public func checkClipboard(paste: Bool) throws(OutputError) { try engine.checkClipboard(paste: paste) }

    /// Types `text` into the focused window after everything queued before it; returns at once.
    /// Control characters become spaces. `done` (on the worker thread) gets nil or the failure.
    public func type(_ text: String, done: @escaping @Sendable (OutputError?) -> Void) {
        let (engine, ledger) = (engine, ledger)
        enqueue(done) { () throws(OutputError) in
            let window = engine.focusedWindow()
            do throws(OutputError) {
                try engine.type(text)
            } catch {
                // A failed run may have typed part of the text: nothing before it can be taken back.
                ledger.clear()
                throw error
            }
            // A line break is an Enter press: like any key, it makes what was typed the window's.
            if text.contains("\n") { ledger.clear() } else { ledger.typed(text, into: window) }
        }
    }

    /// Presses `keys` in order in the focused window, after everything queued before.
    public func press(_ keys: [Key], done: @escaping @Sendable (OutputError?) -> Void) {
        let (engine, ledger) = (engine, ledger)
        enqueue(done) { () throws(OutputError) in
            // After a key ("press enter") the text before the cursor is no longer ours to delete.
            ledger.clear()
            try engine.press(keys)
        }
    }

    /// Puts `text` on the CLIPBOARD selection (PRIMARY untouched); with paste, pastes it into the
    /// focused window with ctrl+v and then restores the previous clipboard content. Queued after
    /// earlier requests.
    public func copy(_ text: String, paste: Bool, done: @escaping @Sendable (OutputError?) -> Void) {
        let engine = engine
        enqueue(done) { () throws(OutputError) in try engine.copy(text, paste: paste) }
    }

    /// Calls `done` (on the worker thread) once everything queued before has run.
    public func whenIdle(_ done: @escaping @Sendable () -> Void) {
        if !worker.submit(done) { done() }
    }

    func enqueue(
        _ done: @escaping @Sendable (OutputError?) -> Void, _ job: @escaping @Sendable () throws(OutputError) -> Void
    ) {
        let accepted = worker.submit {
            do throws(OutputError) {
                try job()
                done(nil)
            } catch {
                done(error)
            }
        }
        if !accepted {
            done(
                OutputError(
                    .queueFull,
                    "typing fell behind: \(Self.queueCapacity) requests are already waiting, so this text was not typed"
                ))
        }
    }
}

/// The tools and the steps; everything here runs on the worker thread (or in the checks).
final class OutputEngine: Sendable {
    /// A lead-in pause for wtype after it uploads its keymap: without it the focused client may
    /// drop the first keys (docs/desktop.md → "Typing and the clipboard" has the measurements).
    static let wtypeLeadIn = 30
    /// How long a pasted text stays on the clipboard before the previous content comes back: the
    /// window asks for the content only after it sees ctrl+v.
    static let pasteSettle = Duration.milliseconds(150)
    static let clipboardTimeout = Duration.seconds(3)

    static func seconds(_ duration: Duration) -> Double { duration / .seconds(1) }

    private let environment: [String: String]
    private let override: TypingTool?
    private let logger: Logger
    let runner: ToolRunner

    init(environment: [String: String], override: TypingTool?, logger: Logger) {
        self.environment = environment
        self.override = override
        self.logger = logger
        runner = ToolRunner(environment: environment)
    }

    private var waylandDisplay: String? { environment["WAYLAND_DISPLAY"].flatMap { $0.isEmpty ? nil : $0 } }
    private var x11Display: String? { environment["DISPLAY"].flatMap { $0.isEmpty ? nil : $0 } }

    /// The desktops named by XDG_CURRENT_DESKTOP, lowercased (it is a colon-separated list).
    private var desktops: [String] {
        (environment["XDG_CURRENT_DESKTOP"] ?? "").lowercased().split(separator: ":").map(String.init)
    }

    /// Desktops whose compositor has no virtual-keyboard protocol for clients: typing needs uinput.
    private static let uinputDesktops: Set<String> = [
        "gnome", "kde", "plasma", "unity", "budgie", "budgie-desktop", "cinnamon", "pantheon", "cosmic", "ubuntu",
    ]

    func typingTool() throws(OutputError) -> TypingTool {
        if let override { return override }
        if waylandDisplay != nil {
            return desktops.contains(where: Self.uinputDesktops.contains) ? .ydotool : .wtype
        }
        if x11Display != nil { return .xdotool }
        throw noSession
    }

    /// The clipboard of the windows a typing tool reaches.
    private func clipboardTool(for tool: TypingTool?) throws(OutputError) -> ClipboardTool {
        if tool == .xdotool, x11Display != nil { return .xclip }
        if waylandDisplay != nil { return .wlClipboard }
        if x11Display != nil { return .xclip }
        throw noSession
    }

    private var noSession: OutputError {
        OutputError(
            .unavailable,
            "no graphical session: neither WAYLAND_DISPLAY nor DISPLAY is set for sttd (run `systemctl --user import-environment WAYLAND_DISPLAY DISPLAY XDG_CURRENT_DESKTOP` in the session, or `dbus-update-activation-environment --systemd --all`)"
        )
    }

    private func require(_ executable: String, package: String, for purpose: String) throws(OutputError) {
        guard runner.find(executable) != nil else {
            throw OutputError(
                .unavailable,
                "\(purpose) needs \(executable), which is not installed: install the Debian package \(package) (sudo apt install \(package))"
            )
        }
    }

    private func requireClipboard(_ clipboard: ClipboardTool, for purpose: String) throws(OutputError) {
        for executable in clipboard.executables {
            try require(executable, package: clipboard.package, for: purpose)
        }
    }

    private func requireTool(_ tool: TypingTool, for purpose: String) throws(OutputError) {
        try require(tool.rawValue, package: tool.package, for: purpose)
        switch tool {
        case .wtype:
            guard waylandDisplay != nil else {
                throw OutputError(
                    .unavailable, "wtype needs a Wayland session, but WAYLAND_DISPLAY is not set for sttd")
            }
        case .xdotool:
            guard x11Display != nil else {
                throw OutputError(.unavailable, "xdotool needs an X11 session, but DISPLAY is not set for sttd")
            }
        case .ydotool:
            guard access("/dev/uinput", W_OK) == 0 else {
                throw OutputError(
                    .unavailable,
                    "ydotool needs write access to /dev/uinput (\(String(cString: strerror(errno)))): give your user access, e.g. a udev rule KERNEL==\"uinput\", GROUP=\"input\", MODE=\"0660\" and add yourself to the input group"
                )
            }
        }
    }

    func checkTyping() throws(OutputError) {
        let tool = try typingTool()
        let purpose = "typing with \(tool.rawValue)"
        try requireTool(tool, for: purpose)
        switch tool {
        case .wtype: break
        case .xdotool: try requireKeymapTool()
        // ydotool pastes.
        case .ydotool: try requireClipboard(clipboardTool(for: tool), for: purpose)
        }
    }

    /// xmodmap binds what the X keymap lacks before xdotool types (see ``X11Keymap``).
    private func requireKeymapTool() throws(OutputError) {
        try require("xmodmap", package: "x11-xserver-utils", for: "typing with xdotool")
    }

    func checkClipboard(paste: Bool) throws(OutputError) {
        let tool = paste ? try typingTool() : nil
        try requireClipboard(clipboardTool(for: tool), for: "the clipboard")
        if let tool { try requireTool(tool, for: "pasting with \(tool.rawValue)") }
    }

    // MARK: - Steps (worker thread)

    /// Types `text`; each line break in it is an Enter key press.
    func type(_ text: String) throws(OutputError) {
        for (index, line) in OutputText.sanitized(text).split(separator: "\n", omittingEmptySubsequences: false)
            .enumerated()
        {
            if index > 0 { try press([.enter]) }
            try typeLine(String(line))
        }
    }

    /// Presses keys in order, a hundred to a tool run.
    func press(_ keys: [Key]) throws(OutputError) {
        guard !keys.isEmpty else { return }
        let tool = try typingTool()
        for start in stride(from: 0, to: keys.count, by: 100) {
            let chunk = keys[start..<min(start + 100, keys.count)]
            let arguments: [String] =
                switch tool {
                case .xdotool: ["key", "--delay", "0"] + chunk.map(\.keysym)
                case .wtype: ["-s", "\(Self.wtypeLeadIn)"] + chunk.flatMap { ["-k", $0.keysym] }
                case .ydotool: ["key"] + chunk.map(Self.ydotoolName)
                }
            try check(
                runner.run(tool.rawValue, arguments, timeout: .seconds(5) + .milliseconds(20 * chunk.count)), tool)
        }
        logger.debug("Output: keys pressed", metadata: ["tool": "\(tool.rawValue)", "keys": "\(keys.count)"])
    }

    /// ydotool 0.1.8's name for a key (libevdevPlus's table; an unknown name types its first letter).
    static func ydotoolName(_ key: Key) -> String {
        switch key {
        case .escape: "esc"
        case .pageUp: "pageup"
        case .pageDown: "pagedown"
        default: key.rawValue
        }
    }

    private func typeLine(_ text: String) throws(OutputError) {
        guard !text.isEmpty else { return }
        let tool = try typingTool()
        let start = ContinuousClock.now
        let timeout = Duration.seconds(5) + .milliseconds(20 * text.unicodeScalars.count)
        let method: String
        switch tool {
        case .wtype:
            // wtype maps every character to a keysym in a keymap of its own: exact on any layout.
            method = "typed"
            // After `--` the text is data. wtype decodes it with the C library's multibyte
            // functions, so it needs a UTF-8 locale whatever the session's is.
            try check(
                runner.run(
                    "wtype", ["-s", "\(Self.wtypeLeadIn)", "--", text], extraEnvironment: ["LC_ALL": "C.UTF-8"],
                    timeout: timeout), tool)
        case .xdotool:
            // Characters the keymap lacks are bound first, so xdotool never remaps a key while a
            // window may still look it up. It decodes the text in the C library's locale.
            method = "typed"
            try requireKeymapTool()
            try X11Keymap.of(display: x11Display ?? "").type(text, runner: runner) { (part) throws(OutputError) in
                try check(
                    runner.run(
                        "xdotool", ["type", "--delay", "0", "--file", "-"], stdin: Array(part.utf8),
                        extraEnvironment: ["LC_ALL": "C.UTF-8"], timeout: timeout), tool)
            }
        case .ydotool:
            // ydotool sends US key codes, which come out wrong on other layouts: it only pastes.
            method = "pasted"
            try paste(text, with: tool)
        }
        logger.debug(
            "Output: text \(method)",
            metadata: [
                "tool": "\(tool.rawValue)", "characters": "\(text.count)", "duration": "\(ContinuousClock.now - start)",
            ])
    }

    func copy(_ text: String, paste: Bool) throws(OutputError) {
        let text = OutputText.sanitized(text)
        if paste {
            guard !text.isEmpty else { return }
            try self.paste(text, with: typingTool())
        } else {
            let clipboard = try clipboardTool(for: nil)
            let bytes = Array(text.utf8)
            try setClipboard(bytes, clipboard: clipboard)
            // On the clipboard when this returns (a session's Stop replies after it), not a moment later.
            if !bytes.isEmpty { try waitUntilClipboard(holds: bytes, clipboard) }
        }
    }

    private func check(_ run: ToolRun, _ tool: TypingTool) throws(OutputError) {
        // ydotool 0.1.8 exits 0 after some errors, but says so on stderr.
        guard run.succeeded, !run.stderr.contains(": error:") else {
            throw OutputError(.failed, "\(tool.rawValue) failed: \(run.reason)")
        }
    }

    /// Pastes `text` into the focused window through the clipboard and puts the previous content back.
    private func paste(_ text: String, with tool: TypingTool) throws(OutputError) {
        let clipboard = try clipboardTool(for: tool)
        let previous = readClipboard(clipboard)
        let bytes = Array(text.utf8)
        try setClipboard(bytes, clipboard: clipboard)
        // Restore even when pasting fails; a failure to restore is reported after the paste's own.
        var failure: OutputError?
        do throws(OutputError) {
            try waitUntilClipboard(holds: bytes, clipboard)
            try check(runner.run(tool.rawValue, chord(tool), timeout: .seconds(5)), tool)
            Thread.sleep(forTimeInterval: Self.seconds(Self.pasteSettle))
        } catch {
            failure = error
        }
        do throws(OutputError) {
            if let previous {
                try setClipboard(previous, clipboard: clipboard)
            } else {
                try clearClipboard(clipboard)
            }
        } catch {
            failure =
                failure ?? OutputError(.failed, "the clipboard could not be restored after pasting: \(error.message)")
        }
        if let failure { throw failure }
    }

    private func chord(_ tool: TypingTool) -> [String] {
        switch tool {
        case .wtype: ["-s", "\(Self.wtypeLeadIn)", "-M", "ctrl", "-k", "v", "-m", "ctrl"]
        case .xdotool: ["key", "ctrl+v"]
        case .ydotool: ["key", "ctrl+v"]
        }
    }
}
