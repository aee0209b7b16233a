import Dictation
import Foundation
import Synchronization

/// What a session's typing tools typed, newest last, so that "scratch that" deletes only text
/// sttd typed itself. A typing tool knows nothing of fields: the ledger is all sttd has.
struct TypedLedger: Sendable {
    /// At most this many texts are remembered; older ones can no longer be taken back.
    static let limit = 64

    struct Entry: Sendable, Equatable {
        var text: String
        /// The window that had the focus when it was typed.
        var window: FocusedWindow
    }
    private(set) var entries: [Entry] = []

    mutating func typed(_ text: String, into window: FocusedWindow) {
        entries.append(Entry(text: text, window: window))
        if entries.count > Self.limit { entries.removeFirst() }
    }

    mutating func clear() { entries.removeAll() }

    /// Takes the newest entry if it is `text`; nil otherwise (it was never typed, or something
    /// typed or pressed since makes it unsafe to delete).
    mutating func takeLast(_ text: String) -> Entry? {
        guard entries.last?.text == text else {
            clear()
            return nil
        }
        return entries.removeLast()
    }
}

/// A session's ``TypedLedger``, shared by the jobs of its worker thread.
final class SharedTypedLedger: Sendable {
    private let ledger = Mutex(TypedLedger())

    func typed(_ text: String, into window: FocusedWindow) { ledger.withLock { $0.typed(text, into: window) } }
    func clear() { ledger.withLock { $0.clear() } }
    func takeLast(_ text: String) -> TypedLedger.Entry? { ledger.withLock { $0.takeLast(text) } }
}

extension DesktopOutput {
    /// Takes back `typed` with a BackSpace per character, after everything queued before it, but
    /// only if this output typed it successfully, nothing was typed or pressed since, and (on X11)
    /// the window it went into still has the focus. `done` gets whether it was deleted, or the
    /// tool's failure. On Wayland no tool can tell which window has the focus: there the
    /// BackSpaces go to whatever window has it.
    public func retract(_ typed: String, done: @escaping @Sendable (Result<Bool, OutputError>) -> Void) {
        let (engine, ledger) = (engine, ledger)
        let outcome = Mutex<Bool>(false)
        enqueue({ error in done(error.map { .failure($0) } ?? .success(outcome.withLock { $0 })) }) {
            () throws(OutputError) in
            guard let entry = ledger.takeLast(typed) else { return }
            if case .unknown = entry.window {
                ledger.clear()
                return
            }
            if case .x11 = entry.window, engine.focusedWindow() != entry.window {
                ledger.clear()
                return
            }
            try engine.press(Array(repeating: .backspace, count: typed.count))
            outcome.withLock { $0 = true }
        }
    }
}

/// Which window has the keyboard focus, as far as sttd can tell.
enum FocusedWindow: Sendable, Equatable {
    /// X11, by window id.
    case x11(String)
    /// X11, but it could not be read: nothing typed then may be taken back.
    case unknown
    /// Wayland: no tool can tell.
    case notKnowable
}

extension OutputEngine {
    /// The window with the keyboard focus when xdotool types (`xdotool getwindowfocus`, which
    /// needs no window manager).
    func focusedWindow() -> FocusedWindow {
        guard (try? typingTool()) == .xdotool else { return .notKnowable }
        guard let run = try? runner.run("xdotool", ["getwindowfocus"], timeout: .seconds(2)), run.succeeded else {
            return .unknown
        }
        let window = String(decoding: run.stdout, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return window.isEmpty ? .unknown : .x11(window)
    }
}
