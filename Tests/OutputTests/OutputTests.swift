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

@Suite("Real windows", .serialized)
struct RealWindowTests {
    @Test(arguments: DesktopKind.allCases)
    func consecutiveTypingArrivesExactlyInOrder(_ kind: DesktopKind) async throws {
        let window = try await ReceivingWindow.open(kind)
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
        let expected = "Hello world. café Straße ✓ naïve 😀 it's 100% (ok) <yes> line break tab end."
        #expect(await window.waitForText(expected), "received \(window.text.debugDescription)")
    }

    @Test(arguments: DesktopKind.allCases)
    func nonASCIIArrivesExactlyEveryTime(_ kind: DesktopKind) async throws {
        let window = try await ReceivingWindow.open(kind)
        defer { window.close() }
        let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
        var expected = ""
        for round in 0..<8 {
            let text = "\(round) café Straße ✓ naïve 😀 "
            #expect(await typed(output, text) == nil)
            expected += text
        }
        #expect(await window.waitForText(expected), "received \(window.text.debugDescription)")
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
        let window = try await ReceivingWindow.open(kind)
        defer { window.close() }
        try DesktopClipboard.set("what the user copied", on: kind)
        let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
        try output.checkClipboard(paste: true)
        #expect(await copied(output, "pasted text ✓ Straße", paste: true) == nil)
        #expect(await window.waitForText("pasted text ✓ Straße"), "received \(window.text.debugDescription)")
        #expect(try DesktopClipboard.clipboard(kind) == "what the user copied")
        // Typing after a paste comes after it.
        #expect(await typed(output, " then typed") == nil)
        #expect(await window.waitForText("pasted text ✓ Straße then typed"), "received \(window.text.debugDescription)")
        #expect(try DesktopClipboard.clipboard(kind) == "what the user copied")
    }

    @Test func x11PasteFallbackRestoresTheClipboard() async throws {
        let window = try await ReceivingWindow.open(.x11)
        defer { window.close() }
        try DesktopClipboard.set("keep me", on: .x11)
        let output = DesktopOutput(environment: window.environment, typingTool: .xdotool, logger: logger)
        #expect(await typed(output, "naïve") == nil)
        #expect(await window.waitForText("naïve"), "received \(window.text.debugDescription)")
        #expect(try DesktopClipboard.clipboard(.x11) == "keep me")
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

    @Test func typingWithXdotoolNeedsXclipForWhatItPastes() {
        // xdotool present, xclip missing: a PATH holding only a link to xdotool.
        let directory = NSTemporaryDirectory() + "sttd-path-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try? FileManager.default.createSymbolicLink(
            atPath: "\(directory)/xdotool", withDestinationPath: "/usr/bin/xdotool")
        let output = DesktopOutput(environment: ["DISPLAY": ":0", "PATH": directory], typingTool: nil, logger: logger)
        #expect(
            throws: OutputError(
                .unavailable,
                "typing with xdotool needs xclip, which is not installed: install the Debian package xclip (sudo apt install xclip)"
            )
        ) {
            try output.checkTyping()
        }
    }
}
