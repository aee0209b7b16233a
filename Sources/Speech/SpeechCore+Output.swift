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

    func typeFinal(_ text: String) {
        guard var output = activeOutput, output.mode == .type else { return }
        let text = Transcript.normalized(text)
        guard !text.isEmpty else { return }
        output.session.type(output.typedAny ? " " + text : text)
        output.typedAny = true
        activeOutput = output
    }

    /// The pending interim, shown where the next final will be typed (an input method's preedit).
    func showInterim(_ text: String) {
        guard let output = activeOutput, output.mode == .type else { return }
        let text = Transcript.normalized(text)
        output.session.preedit(text.isEmpty || !output.typedAny ? text : " " + text)
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
