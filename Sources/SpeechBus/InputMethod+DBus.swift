import Speech
import SpeechAPI

extension InputMethodReport {
    /// `SetInputMethodState`'s argument as the core takes it.
    init(_ state: InputMethodState) {
        self.init(active: state.active, focused: state.focused, secret: state.secret, pushToTalk: state.pushToTalk)
    }

    /// The `InputMethod` property's value for this report (see ``InputMethodState/summary``).
    var summary: String {
        InputMethodState(active: active, focused: focused, secret: secret, pushToTalk: pushToTalk).summary
    }
}

extension InputMethodText {
    /// The unicast signal that carries it to an IBus engine.
    var signal: SpeechSignal {
        switch self {
        case .preedit(let text): .inputMethodPreedit(text: text)
        case .commit(let text): .inputMethodCommit(text: text)
        case .delete(let characters): .inputMethodDelete(characters: UInt32(clamping: characters))
        case .key(let keysym): .inputMethodKey(keysym: keysym)
        }
    }
}
