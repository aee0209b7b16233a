import Dictation

/// The transcript's effects: what the ``TranscriptEditor`` asks for, carried out on the desktop,
/// in history and on the bus.
extension SpeechCore {
    /// The running session's `[text]` rules (none once it has ended).
    var sessionDictation: Dictation { session?.dictation ?? Dictation(rules: DictationRules()) }

    /// Carries out `effects` in order: a final is stored before it is typed and before anyone hears of it.
    func perform(_ effects: [TranscriptEditor.Effect]) {
        for effect in effects {
            switch effect {
            case .store(let text, let result):
                store(text, of: result)
            case .type(let typed):
                typeFinal(typed)
            case .showInterim(let preedit):
                showInterim(preedit)
            case .press(let key):
                press(key)
            case .retract(let typed):
                retractFromHistory()
                retractTyped(typed)
            case .nothingToRetract:
                logger.info("\"scratch that\" said with nothing to remove (none yet, or sent with a key)")
            case .publish(let event):
                publish(event)
            case .stopListening:
                logger.info("\"stop listening\" said: stopping")
                call({ .stop($0) }, reply: { _, _ in })
            }
        }
    }
}
