import Foundation
import Logging
import Output
import Synchronization
import TestSupport
import Testing

/// Types `text` and waits for the worker's answer.
func typed(_ output: DesktopOutput, _ text: String) async -> OutputError? {
    await withCheckedContinuation { continuation in output.type(text) { continuation.resume(returning: $0) } }
}

func copied(_ output: DesktopOutput, _ text: String, paste: Bool) async -> OutputError? {
    await withCheckedContinuation { continuation in
        output.copy(text, paste: paste) { continuation.resume(returning: $0) }
    }
}

let logger = Logger(label: "output-tests")

/// Every kind of window text is typed into: a plain terminal on each desktop and a GUI field on X11.
let typingTargets: [(DesktopKind, WindowApp)] = [(.x11, .terminal), (.x11, .textField), (.wayland, .terminal)]

/// The X display's core keyboard map, as `xmodmap -pk` prints it.
func x11Keymap() throws -> String {
    let result = try run(
        try requireTool("xmodmap", package: "x11-xserver-utils"), ["-pk"], environment: DesktopKind.x11.environment(),
        timeout: 10)
    guard result.status == 0 else { throw MissingPrerequisite(description: "xmodmap -pk failed: \(result.stderr)") }
    return result.stdout
}

/// Whether `after` is the keymap `before` with, at most, keycodes emptied (other tests' bindings
/// may still have been there before) and none holding a character of `text`.
func keymapRestored(_ before: String, _ after: String, text: String) -> Bool {
    func keycodes(_ map: String) -> [Substring] { map.split(separator: "\n").filter { $0.first == " " } }
    let emptied = zip(keycodes(before), keycodes(after)).allSatisfy { old, new in
        old == new || new.split(whereSeparator: \.isWhitespace).count == 1
    }
    let keysyms = text.unicodeScalars.filter { $0.value >= 0x100 }.map {
        "0x\(String(0x0100_0000 | $0.value, radix: 16)) "
    }
    return emptied && keycodes(before).count == keycodes(after).count && !keysyms.contains { after.contains($0) }
}

@Suite("Real windows", .serialized)
struct RealWindowTests {
    @Test(arguments: typingTargets)
    func consecutiveTypingArrivesExactlyInOrder(_ kind: DesktopKind, _ app: WindowApp) async throws {
        let window = try await ReceivingWindow.open(kind, app)
        defer { window.close() }
        let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
        try output.checkTyping()
        let parts = [
            "Hello world.", " café Straße ✓ naïve 😀", " it's 100% (ok) <yes>", " line\nbreak\ttab\r\nend", ".",
        ]
        // Queued back to back without waiting: order is the worker's job. The last answer comes
        // after all earlier ones.
        let answers = Mutex<[OutputError?]>([])
        for part in parts.dropLast() {
            output.type(part) { error in answers.withLock { $0.append(error) } }
        }
        #expect(await typed(output, parts.last!) == nil)
        #expect(answers.withLock { $0 } == [OutputError?](repeating: nil, count: parts.count - 1))
        // A line break is Enter; a tab is a space (never a key that moves the focus).
        let expected = "Hello world. café Straße ✓ naïve 😀 it's 100% (ok) <yes> line\nbreak tab\nend."
        try await window.waitForText(expected)
    }

    @Test(arguments: typingTargets)
    func nonASCIIArrivesExactlyEveryTime(_ kind: DesktopKind, _ app: WindowApp) async throws {
        let window = try await ReceivingWindow.open(kind, app)
        defer { window.close() }
        let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
        var expected = ""
        for round in 0..<8 {
            let text = "\(round) café Straße ✓ naïve 😀 "
            #expect(await typed(output, text) == nil)
            expected += text
        }
        try await window.waitForText(expected)
    }

    @Test(arguments: DesktopKind.allCases)
    func copySetsClipboardAndLeavesPrimary(_ kind: DesktopKind) async throws {
        let window = try await ReceivingWindow.open(kind)
        defer { window.close() }
        try DesktopClipboard.set("primary before", on: kind, primary: true)
        try DesktopClipboard.set("clipboard before", on: kind)
        let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
        try output.checkClipboard(paste: false)
        #expect(await copied(output, "the transcript ✓ café", paste: false) == nil)
        #expect(try DesktopClipboard.clipboard(kind) == "the transcript ✓ café")
        #expect(try DesktopClipboard.primary(kind) == "primary before")
        #expect(window.text.isEmpty, "copy without paste typed \(window.text.debugDescription)")
    }

    @Test(arguments: DesktopKind.allCases)
    func pasteLandsAndRestoresThePreviousClipboard(_ kind: DesktopKind) async throws {
        // ctrl+v: what a GUI field pastes on (a terminal takes it as a control character).
        let window = try await ReceivingWindow.open(kind, .textField)
        defer { window.close() }
        try DesktopClipboard.set("what the user copied", on: kind)
        let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
        try output.checkClipboard(paste: true)
        #expect(await copied(output, "pasted text ✓ Straße", paste: true) == nil)
        try await window.waitForText("pasted text ✓ Straße")
        #expect(try DesktopClipboard.clipboard(kind) == "what the user copied")
        // Typing after a paste comes after it.
        #expect(await typed(output, " then typed") == nil)
        try await window.waitForText("pasted text ✓ Straße then typed")
        #expect(try DesktopClipboard.clipboard(kind) == "what the user copied")
    }

    @Test func x11TypingLeavesTheSelectionsAloneAndRestoresTheKeymap() async throws {
        let window = try await ReceivingWindow.open(.x11)
        defer { window.close() }
        try DesktopClipboard.set("keep me", on: .x11)
        try DesktopClipboard.set("and me", on: .x11, primary: true)
        let before = try x11Keymap()
        let output = DesktopOutput(environment: window.environment, typingTool: .xdotool, logger: logger)
        #expect(await typed(output, "naïve “quoted” 日本 É") == nil)
        try await window.waitForText("naïve “quoted” 日本 É")
        #expect(try DesktopClipboard.clipboard(.x11) == "keep me")
        #expect(try DesktopClipboard.primary(.x11) == "and me")
        // The characters stay bound for a while after the last key, then the keycodes are empty again.
        try await waitFor("the keymap to be restored", timeout: .seconds(20)) {
            keymapRestored(before, try x11Keymap(), text: "“”日本")
        }
    }

    @Test func x11TypesMoreNewCharactersThanTheKeymapHasSpareKeys() async throws {
        let window = try await ReceivingWindow.open(.x11)
        defer { window.close() }
        let before = try x11Keymap()
        let spare = before.split(separator: "\n").filter { $0.split(whereSeparator: \.isWhitespace).count == 1 }.count
        // More distinct characters than the keymap has spare keys: typed in parts.
        let text = String(String.UnicodeScalarView((0..<(spare + 8)).map { Unicode.Scalar(0x4E00 + $0 * 7)! }))
        let output = DesktopOutput(environment: window.environment, typingTool: .xdotool, logger: logger)
        #expect(await typed(output, "a \(text) b") == nil)
        try await window.waitForText("a \(text) b")
        try await waitFor("the keymap to be restored", timeout: .seconds(20)) {
            keymapRestored(before, try x11Keymap(), text: text)
        }
    }

    @Test func deadDisplayIsReportedAsAFailure() async throws {
        var environment = try DesktopKind.x11.environment()
        environment["DISPLAY"] = ":97"
        let output = DesktopOutput(environment: environment, typingTool: nil, logger: logger)
        try output.checkTyping()  // installed; the display only fails when used
        let error = await typed(output, "hello")
        #expect(error?.kind == .failed, "\(String(describing: error))")
        #expect(error?.message.contains("xdotool") == true, "\(String(describing: error))")
    }

    @Test func deadWaylandDisplayIsReportedAsAFailure() async throws {
        var environment = try DesktopKind.wayland.environment()
        environment["WAYLAND_DISPLAY"] = "wayland-97"
        let output = DesktopOutput(environment: environment, typingTool: nil, logger: logger)
        let error = await typed(output, "hello")
        #expect(error?.kind == .failed, "\(String(describing: error))")
        #expect(await copied(output, "hello", paste: false)?.kind == .failed)
    }
}

@Suite("Tool choice and checks")
struct ToolChoiceTests {
    let empty = "/nonexistent-\(UUID().uuidString)"

    @Test(arguments: [
        (["WAYLAND_DISPLAY": "wayland-0", "XDG_CURRENT_DESKTOP": "sway", "DISPLAY": ":0"], TypingTool.wtype),
        (["WAYLAND_DISPLAY": "wayland-1", "XDG_CURRENT_DESKTOP": "Hyprland"], .wtype),
        (["WAYLAND_DISPLAY": "wayland-1", "XDG_CURRENT_DESKTOP": "river"], .wtype),
        (["WAYLAND_DISPLAY": "wayland-0", "XDG_CURRENT_DESKTOP": "ubuntu:GNOME", "DISPLAY": ":0"], .ydotool),
        (["WAYLAND_DISPLAY": "wayland-0", "XDG_CURRENT_DESKTOP": "KDE"], .ydotool),
        (["DISPLAY": ":0", "XDG_CURRENT_DESKTOP": "GNOME"], .xdotool),
        (["DISPLAY": ":1"], .xdotool),
    ])
    func choosesFromTheSession(_ environment: [String: String], _ expected: TypingTool) throws {
        let output = DesktopOutput(environment: environment, typingTool: nil, logger: logger)
        #expect(try output.typingTool() == expected)
    }

    @Test func overrideWins() throws {
        let output = DesktopOutput(
            environment: ["WAYLAND_DISPLAY": "wayland-0", "XDG_CURRENT_DESKTOP": "sway"], typingTool: .xdotool,
            logger: logger)
        #expect(try output.typingTool() == .xdotool)
    }

    @Test func noSessionNamesTheFix() {
        let output = DesktopOutput(environment: ["PATH": "/usr/bin"], typingTool: nil, logger: logger)
        #expect(throws: OutputError.self) { try output.checkTyping() }
        do {
            try output.checkClipboard(paste: false)
            Issue.record("no session accepted")
        } catch {
            #expect(error.kind == .unavailable)
            #expect(error.message.contains("import-environment"), "\(error)")
        }
    }

    @Test(arguments: [
        (["DISPLAY": ":0"], "xdotool", "xclip"),
        (["WAYLAND_DISPLAY": "wayland-0", "XDG_CURRENT_DESKTOP": "sway"], "wtype", "wl-clipboard"),
        (["WAYLAND_DISPLAY": "wayland-0", "XDG_CURRENT_DESKTOP": "GNOME"], "ydotool", "wl-clipboard"),
    ])
    func missingToolsNameTheirPackage(_ session: [String: String], _ typing: String, _ clipboard: String) async {
        var environment = session
        environment["PATH"] = empty
        let output = DesktopOutput(environment: environment, typingTool: nil, logger: logger)
        do {
            try output.checkTyping()
            Issue.record("typing accepted without \(typing)")
        } catch {
            #expect(error.kind == .unavailable)
            #expect(error.message.contains("Debian package \(typing)"), "\(error)")
        }
        do {
            try output.checkClipboard(paste: false)
            Issue.record("clipboard accepted without \(clipboard)")
        } catch {
            #expect(error.message.contains("Debian package \(clipboard)"), "\(error)")
        }
        // Used anyway: the request fails, it does not hang or crash.
        let error = await typed(output, "hello")
        #expect(error != nil)
    }

    @Test func typingWithXdotoolNeedsXmodmapForWhatTheKeymapLacks() {
        // xdotool present, xmodmap missing: a PATH holding only a link to xdotool.
        let directory = NSTemporaryDirectory() + "sttd-path-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try? FileManager.default.createSymbolicLink(
            atPath: "\(directory)/xdotool", withDestinationPath: "/usr/bin/xdotool")
        let output = DesktopOutput(environment: ["DISPLAY": ":0", "PATH": directory], typingTool: nil, logger: logger)
        #expect(
            throws: OutputError(
                .unavailable,
                "typing with xdotool needs xmodmap, which is not installed: install the Debian package x11-xserver-utils (sudo apt install x11-xserver-utils)"
            )
        ) {
            try output.checkTyping()
        }
    }
}
