import Foundation
import Synchronization

/// The characters an X display's keyboard map lacks, bound to spare keycodes before xdotool types
/// them and unbound once no window can still be reading them.
///
/// xdotool types a character the map lacks by binding it to a spare keycode for one key press and
/// unbinding it right after. A window looks a key up when it processes the event, and Xlib
/// re-reads the map lazily after a mapping change, so a window that gets to the key after the
/// unbinding sees an empty key and drops the character (xterm does). Bound here
/// first, every character is in the map xdotool reads when it starts, so it never changes the
/// map while it types; the bindings stay until ``settle`` after the last text typed on the display.
///
/// One per display, shared by all sessions. Every step holds the lock, so a text is typed whole
/// before another session's, and nothing is unbound while xdotool types.
final class X11Keymap: @unchecked Sendable {
    // Safety: `bound`, `lastTyped`, `restoreScheduled` and `runner` are only touched with `lock` held.

    /// How long a binding outlives the last key typed with it: a window still processing earlier
    /// keys must find it (docs/desktop.md → "Typing and the clipboard" has the measurements). Keeping them
    /// longer costs nothing.
    static let settle = Duration.seconds(2)
    static let timeout = Duration.seconds(5)

    private static let displays = Mutex<[String: X11Keymap]>([:])

    /// The keymap of `display` (the DISPLAY value).
    static func of(display: String) -> X11Keymap {
        displays.withLock { displays in
            if let keymap = displays[display] { return keymap }
            let keymap = X11Keymap()
            displays[display] = keymap
            return keymap
        }
    }

    private let lock = NSLock()
    private let timer = DispatchQueue(label: "sttd-x11-keymap")
    /// Characters this process bound, with their keycode.
    private var bound: [Unicode.Scalar: Int] = [:]
    private var lastTyped = ContinuousClock.now
    private var restoreScheduled = false
    /// The tools of the session that typed last (the same display): they unbind afterwards.
    private var runner: ToolRunner?

    /// Calls `type` with `text`, or with consecutive parts of it, each time with every character
    /// of the part in the keymap. A part ends where the spare keycodes run out; the next one is
    /// typed once the previous part's bindings are no longer read (``settle``).
    func type(_ text: String, runner: ToolRunner, _ type: (String) throws(OutputError) -> Void) throws(OutputError) {
        lock.lock()
        defer { lock.unlock() }
        self.runner = runner
        defer { scheduleRestore() }
        var rest = Array(text.unicodeScalars)[...]
        while !rest.isEmpty {
            let map = try KeyboardMap.read(runner)
            // Another program may have changed a key this process bound: it is no longer ours.
            bound = bound.filter { map.keycode($0.value, holds: $0.key) }
            // The lowest spare keycode stays free: xdotool, run by anyone, binds what it lacks there.
            let spare = map.spareKeycodes.count > 1 ? Array(map.spareKeycodes.dropFirst()) : map.spareKeycodes
            var missing: [Unicode.Scalar] = []
            var end = rest.startIndex
            while end < rest.endIndex {
                let scalar = rest[end]
                if !map.characters.contains(scalar) && !missing.contains(scalar) {
                    guard missing.count < spare.count else { break }
                    missing.append(scalar)
                }
                end += 1
            }
            if end == rest.startIndex {
                // The spare keycodes hold earlier characters: free them once no window reads them.
                guard !bound.isEmpty else {
                    throw OutputError(
                        .failed,
                        "xdotool cannot type “\(rest[end])”: the X keyboard map has no spare keycode to bind it to")
                }
                Thread.sleep(forTimeInterval: max(0, OutputEngine.seconds(lastTyped + Self.settle - .now)))
                try unbind(runner)
                continue
            }
            if !missing.isEmpty { try bind(Array(zip(missing, spare)), runner) }
            do throws(OutputError) {
                try type(String(String.UnicodeScalarView(rest[..<end])))
            } catch {
                lastTyped = .now  // a tool that failed may have typed some of the keys
                throw error
            }
            lastTyped = .now
            rest = rest[end...]
        }
    }

    private func bind(_ keys: [(Unicode.Scalar, Int)], _ runner: ToolRunner) throws(OutputError) {
        // Recorded first: keys bound before a failure are unbound with the rest.
        for (scalar, keycode) in keys { bound[scalar] = keycode }
        try xmodmap(keys.map { "keycode \($0.1) = \(Self.keysymName($0.0))" }, runner)
    }

    /// Empties the keycodes this process bound that still hold what it bound there.
    private func unbind(_ runner: ToolRunner) throws(OutputError) {
        guard !bound.isEmpty else { return }
        let map = try KeyboardMap.read(runner)
        let keycodes = Set(bound.filter { map.keycode($0.value, holds: $0.key) }.values)
        bound = [:]
        if !keycodes.isEmpty { try xmodmap(keycodes.sorted().map { "keycode \($0) =" }, runner) }
    }

    private func scheduleRestore() {
        guard !bound.isEmpty, !restoreScheduled else { return }
        restoreScheduled = true
        let delay = OutputEngine.seconds(lastTyped + Self.settle - .now)
        timer.asyncAfter(deadline: .now() + max(delay, 0)) { [self] in restoreIfSettled() }
    }

    private func restoreIfSettled() {
        lock.lock()
        defer { lock.unlock() }
        restoreScheduled = false
        guard let runner, !bound.isEmpty else { return }
        guard ContinuousClock.now >= lastTyped + Self.settle else { return scheduleRestore() }
        // A display that went away took its keymap with it; nothing is left to restore.
        do throws(OutputError) { try unbind(runner) } catch { bound = [:] }
    }

    private func xmodmap(_ expressions: [String], _ runner: ToolRunner) throws(OutputError) {
        let run = try runner.run("xmodmap", expressions.flatMap { ["-e", $0] }, timeout: Self.timeout)
        guard run.succeeded else {
            throw OutputError(
                .failed, "typing with xdotool: xmodmap could not change the X keyboard map: \(run.reason)")
        }
    }

    /// The keysym X gives `scalar` (xdotool looks the same one up): Latin-1 keysyms are the code
    /// point, others U+ plus 0x1000000; xmodmap takes both as "U" and the hex code point.
    static func keysymName(_ scalar: Unicode.Scalar) -> String {
        let hex = String(scalar.value, radix: 16, uppercase: true)
        return "U" + String(repeating: "0", count: max(0, 4 - hex.count)) + hex
    }

    static func keysym(_ scalar: Unicode.Scalar) -> UInt32 {
        switch scalar.value {
        case 0x20...0x7e, 0xa0...0xff: scalar.value
        default: 0x0100_0000 | scalar.value
        }
    }

    /// The character a keysym types, for the keysyms that are a code point (Latin-1, Unicode);
    /// nil for the others (a character only such a keysym has is bound once more, which is harmless).
    static func character(_ keysym: UInt32) -> Unicode.Scalar? {
        switch keysym {
        case 0x20...0x7e, 0xa0...0xff: Unicode.Scalar(keysym)
        case 0x0100_0000...0x0110_ffff: Unicode.Scalar(keysym & 0x00ff_ffff)
        default: nil
        }
    }
}

/// The core keyboard map, as `xmodmap -pk` prints it.
struct KeyboardMap: Equatable {
    /// Every keycode's keysyms (NoSymbol left out), all keycodes of the display.
    let keysyms: [Int: [UInt32]]
    /// Keycodes without any keysym, ascending.
    let spareKeycodes: [Int]
    /// The characters some key types (of the keysyms that are a code point).
    let characters: Set<Unicode.Scalar>

    func keycode(_ keycode: Int, holds scalar: Unicode.Scalar) -> Bool {
        keysyms[keycode]?.contains(X11Keymap.keysym(scalar)) == true
    }

    static func read(_ runner: ToolRunner) throws(OutputError) -> KeyboardMap {
        let run = try runner.run("xmodmap", ["-pk"], timeout: X11Keymap.timeout)
        guard run.succeeded, let map = KeyboardMap(xmodmap: String(decoding: run.stdout, as: UTF8.self)) else {
            throw OutputError(.failed, "typing with xdotool: xmodmap could not read the X keyboard map: \(run.reason)")
        }
        return map
    }

    /// Parses lines such as "     38    \t0x0061 (a)\t0x0041 (A)\t..." (a spare keycode has none).
    init?(xmodmap output: String) {
        var keysyms: [Int: [UInt32]] = [:]
        for line in output.split(separator: "\n") {
            let fields = line.split(whereSeparator: \.isWhitespace)
            guard let first = fields.first, let keycode = Int(first) else { continue }
            keysyms[keycode] = fields.dropFirst().compactMap { field in
                guard field.hasPrefix("0x"), let value = UInt32(field.dropFirst(2), radix: 16), value != 0 else {
                    return nil
                }
                return value
            }
        }
        guard !keysyms.isEmpty else { return nil }
        self.keysyms = keysyms
        spareKeycodes = keysyms.filter { $0.value.isEmpty }.keys.sorted()
        characters = Set(keysyms.values.joined().compactMap(X11Keymap.character))
    }
}
