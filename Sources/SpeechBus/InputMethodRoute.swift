import DBus
import Logging
import SpeechAPI
import Synchronization

/// The desktop's input method as sttd knows it. Each host program that calls
/// `SetInputMethodState` is an input method with its last report kept; the one that reported
/// most recently is *the* input method, and when it leaves the bus the newest of those still on
/// it takes over at once (a program that reports and exits cannot cut `sttd-ibus` off).
///
/// Text of sessions with `output = type` goes to the input method as unicast signals while it
/// is active. A unicast signal is not private: a bus monitor run by the same user sees it too,
/// as it sees every message of that user's bus.
///
/// Updated on the bus thread (calls, departures) and read on the core's (output), hence the lock.
public final class InputMethodRoute: Sendable {
    /// At most this many input methods are remembered; beyond it the one that reported longest
    /// ago is forgotten (a desktop runs one, perhaps two during an `ibus restart`).
    public static let limit = 8

    private struct Engine {
        var name: String
        var state: InputMethodState
    }
    /// Oldest report first; the last is the input method.
    private let engines = Mutex<[Engine]>([])
    private let object = Mutex<DBusObject?>(nil)
    private let logger: Logger

    public init(logger: Logger = Logger(label: "sttd")) {
        self.logger = logger
    }

    /// Where the signals come from: the adapter's object, once declared.
    func attach(_ object: DBusObject) {
        self.object.withLock { $0 = object }
    }

    /// `SetInputMethodState` from `sender`, a host program: it is the input method from now on.
    func update(from sender: String, _ state: InputMethodState) {
        let previous = engines.withLock { engines in
            let current = engines.last
            engines.removeAll { $0.name == sender }
            engines.append(Engine(name: sender, state: state))
            if engines.count > Self.limit { engines.removeFirst() }
            return current
        }
        if previous?.state.summary != state.summary || previous == nil { show(state.summary) }
        if previous?.name != sender {
            logger.info("input method attached", metadata: ["sender": "\(sender)", "active": "\(state.active)"])
        } else if previous?.state != state {
            logger.debug(
                "input method state",
                metadata: [
                    "active": "\(state.active)", "focused": "\(state.focused)", "secret": "\(state.secret)",
                    "push_to_talk": "\(state.pushToTalk)",
                ])
        }
    }

    /// `name` left the bus: it is no input method any more. If it was the current one, the newest
    /// still on the bus takes over. Returns its last report, if it was one.
    @discardableResult
    func departed(_ name: String) -> InputMethodState? {
        let (left, wasCurrent, next) = engines.withLock { engines in
            let wasCurrent = engines.last?.name == name
            let left = engines.first { $0.name == name }?.state
            engines.removeAll { $0.name == name }
            return (left, wasCurrent, engines.last)
        }
        guard let left else { return nil }
        guard wasCurrent else { return left }
        if let next {
            logger.info(
                "input method left the bus; the one before it takes over",
                metadata: ["sender": "\(name)", "now": "\(next.name)"])
        } else {
            logger.info("input method left the bus", metadata: ["sender": "\(name)"])
        }
        show(next?.state.summary ?? "")
        return left
    }

    /// Whether `name` has reported as an input method and is still on the bus (as far as sttd heard).
    func isInputMethod(_ name: String) -> Bool { engines.withLock { $0.contains { $0.name == name } } }

    private func show(_ summary: String) {
        object.withLock { $0 }?.set(.inputMethod, summary)
    }

    /// What the input method last said; nil when none is attached or it is not active.
    public var activeState: InputMethodState? {
        engines.withLock { engines in engines.last.flatMap { $0.state.active ? $0.state : nil } }
    }

    /// Whether the input method says a password or PIN field has the focus, active or not (GNOME
    /// switches it off in such a field): nothing may be typed there, by any route.
    public var secretFieldFocused: Bool {
        engines.withLock { engines in engines.last.map { $0.state.focused && $0.state.secret } ?? false }
    }

    /// Shows `text` as preedit in the focused field (empty: clears it); false when no input method
    /// is active.
    @discardableResult
    public func preedit(_ text: String) -> Bool { send(.inputMethodPreedit(text: text)) }

    /// Commits `text` into the focused field; false when no input method is active.
    @discardableResult
    public func commit(_ text: String) -> Bool { send(.inputMethodCommit(text: text)) }

    /// Asks the input method to delete `characters` Unicode characters before the cursor, which
    /// it does only if they are the last text it committed into the field that still has the
    /// focus; false when no input method is active.
    @discardableResult
    public func delete(characters: Int) -> Bool { send(.inputMethodDelete(characters: UInt32(clamping: characters))) }

    /// Presses a key (X keysym name) in the focused field; false when no input method is active.
    @discardableResult
    public func press(keysym: String) -> Bool { send(.inputMethodKey(keysym: keysym)) }

    private func send(_ signal: SpeechSignal) -> Bool {
        guard let name = engines.withLock({ $0.last?.state.active == true ? $0.last?.name : nil }),
            let object = object.withLock({ $0 })
        else { return false }
        object.emit(signal, to: name)
        return true
    }
}
