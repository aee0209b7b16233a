import Dictation
import Logging
import Recognition

/// Desktop output: typing, preedit and the clipboard.
extension SpeechCore {
    func beginOutput(_ mode: OutputMode) throws(SpeechError) -> ActiveOutput? {
        guard mode != .none else { return nil }
        guard let output else {
            throw .invalidConfiguration("output = \"\(mode.rawValue)\" is not available in this build of sttd.")
        }
        let outputSession = try output.begin(mode) { [self] message in
            submit { core in core.outputFailed(message) }
        }
        return ActiveOutput(mode: mode, session: outputSession)
    }

    /// Types a final as the transcript joined it (with its separator).
    func typeFinal(_ typed: String) {
        guard let output = activeOutput, output.mode == .type, !typed.isEmpty else { return }
        output.session.type(typed)
    }

    /// The pending interim, shown where the next final will be typed (an input method's preedit).
    func showInterim(_ preedit: String) {
        guard let output = activeOutput, output.mode == .type else { return }
        output.session.preedit(preedit)
    }

    func press(_ key: Key) {
        guard let output = activeOutput, output.mode == .type else { return }
        output.session.press(key)
    }

    /// Takes back what was typed for a retracted final.
    func retractTyped(_ typed: String) {
        guard let output = activeOutput, output.mode == .type else { return }
        output.session.retract(typed)
    }

    /// A tool failed: the session goes on and the text stays in the transcript and history.
    func outputFailed(_ message: String) {
        logger.warning(
            "desktop output failed; the text is kept in the transcript and history",
            metadata: ["reason": "\(message)"])
        let error = SpeechError.invalidConfiguration(message)
        setLastError(error)
        publish(.outputFailed(error))
    }
}
