import DBus
import Logging
import SpeechAPI
import Synchronization

/// The desktop's input method as sttd knows it: the one host program (`sttd-ibus`) that last
/// called `SetInputMethodState`, with what it said. Text of sessions with `output = type` goes
/// to it as unicast signals while it is active, so that no other peer on the bus receives it.
///
/// Updated on the bus thread (calls, departures) and read on the core's (output), hence the lock.
public final class InputMethodRoute: Sendable {
    private struct Attached {
        var name: String
        var state: InputMethodState
    }
    private let attached = Mutex<Attached?>(nil)
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
        let previous = attached.withLock { attached in
            defer { attached = Attached(name: sender, state: state) }
            return attached
        }
        if previous?.state.summary != state.summary || previous == nil { show(state.summary) }
        if previous?.name != sender {
            logger.info("input method attached", metadata: ["sender": "\(sender)", "active": "\(state.active)"])
        } else if previous?.state != state {
            logger.debug(
                "input method state",
                metadata: ["active": "\(state.active)", "focused": "\(state.focused)", "secret": "\(state.secret)"])
        }
    }

    /// `name` left the bus: if it was the input method, there is none now.
    func departed(_ name: String) {
        let wasAttached = attached.withLock { attached in
            guard attached?.name == name else { return false }
            attached = nil
            return true
        }
        guard wasAttached else { return }
        logger.info("input method left the bus", metadata: ["sender": "\(name)"])
        show("")
    }

    private func show(_ summary: String) {
        object.withLock { $0 }?.set(.inputMethod, summary)
    }

    /// What the input method last said; nil when none is attached or it is not active.
    public var activeState: InputMethodState? {
        attached.withLock { attached in attached.flatMap { $0.state.active ? $0.state : nil } }
    }

    /// Shows `text` as preedit in the focused field (empty: clears it); false when no input method
    /// is active.
    @discardableResult
    public func preedit(_ text: String) -> Bool { send(.inputMethodPreedit(text: text)) }

    /// Commits `text` into the focused field; false when no input method is active.
    @discardableResult
    public func commit(_ text: String) -> Bool { send(.inputMethodCommit(text: text)) }

    /// Deletes `characters` Unicode characters before the cursor; false when no input method is active.
    @discardableResult
    public func delete(characters: Int) -> Bool { send(.inputMethodDelete(characters: UInt32(clamping: characters))) }

    /// Presses a key (X keysym name) in the focused field; false when no input method is active.
    @discardableResult
    public func press(keysym: String) -> Bool { send(.inputMethodKey(keysym: keysym)) }

    private func send(_ signal: SpeechSignal) -> Bool {
        guard let name = attached.withLock({ $0?.state.active == true ? $0?.name : nil }),
            let object = object.withLock({ $0 })
        else { return false }
        object.emit(signal, to: name)
        return true
    }
}
