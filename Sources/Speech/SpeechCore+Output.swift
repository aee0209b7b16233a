import Dictation
import Logging
import Recognition

/// The desktop output of the running (or just ended) session.
struct ActiveOutput {
    let mode: OutputMode
    var route: Route

    enum Route {
        /// Through the input method, as ``SpeechEvent/inputMethodText(_:to:)`` events. Such a
        /// session delivers only through the input method: once it has left or is no longer
        /// active, later text stays in the transcript and history, and the typing tools (which
        /// type into any window, password fields included) never type it. Each problem is
        /// reported once per session.
        case inputMethod(reported: Set<InputMethodProblem>)
        /// Through the Output module's tools.
        case tools(OutputLane)
    }
}

enum InputMethodProblem: Hashable { case secret, noField, inputMethodGone }

/// Desktop output: typed text goes through the desktop's input method when one is active,
/// otherwise through the tools; the clipboard at the end.
extension SpeechCore {
    static let secretField = SpeechError.notAuthorized(
        "The focused field is for a password or PIN, and dictation never types into one. Click into another field and start again."
    )

    func beginOutput(_ mode: OutputMode) throws(SpeechError) -> ActiveOutput? {
        guard mode != .none else { return nil }
        guard let output else {
            throw .invalidConfiguration("output = \"\(mode.rawValue)\" is not available in this build of sttd.")
        }
        if mode == .type, inputMethods.secretFieldFocused { throw Self.secretField }
        if mode == .type, inputMethods.active != nil {
            return ActiveOutput(mode: mode, route: .inputMethod(reported: []))
        }
        guard let lane = OutputLane.start(try output.begin(mode), on: self) else {
            throw .internal(Self.shuttingDown)
        }
        return ActiveOutput(mode: mode, route: .tools(lane))
    }

    /// Types a final as the transcript joined it (with its separator).
    func typeFinal(_ typed: String) {
        guard let output = activeOutput, output.mode == .type, !typed.isEmpty else { return }
        switch output.route {
        case .inputMethod:
            guard let current = inputMethods.active else {
                return reportOnce(inputMethods.secretFieldFocused ? .secret : .inputMethodGone)
            }
            // The input method drops text for no field or a secret one.
            if !current.report.focused || current.report.secret {
                reportOnce(current.report.focused ? .secret : .noField)
            }
            publish(.inputMethodText(.commit(typed), to: current.id))
        case .tools(let lane):
            toTools(.type(typed), lane)
        }
    }

    /// The pending interim with its separator, shown where the next final will be typed (an input
    /// method's preedit; tools cannot).
    func showInterim(_ preedit: String) {
        guard let output = activeOutput, output.mode == .type, case .inputMethod = output.route else { return }
        toInputMethod(.preedit(preedit))
    }

    func press(_ key: Key) {
        guard let output = activeOutput, output.mode == .type else { return }
        switch output.route {
        case .inputMethod:
            if !toInputMethod(.key(key.keysym)) { reportOnce(.inputMethodGone) }
        case .tools(let lane):
            toTools(.press(key), lane)
        }
    }

    /// Takes back what was typed for a retracted final. IBus deletes surrounding text in Unicode
    /// characters (GTK counts code points).
    func retractTyped(_ typed: String) {
        guard let output = activeOutput, output.mode == .type else { return }
        switch output.route {
        case .inputMethod:
            toInputMethod(.delete(characters: typed.unicodeScalars.count))
        case .tools(let lane):
            if !typed.isEmpty { lane.send(.retract(typed)) }
        }
    }

    /// Ends the session's output: clears the preedit, or puts `transcript` on the clipboard. The
    /// machine hears `outcome` (if any) once the text is on the desktop: a Stop's reply comes
    /// after the last final was typed or the transcript is on the clipboard.
    func endOutput(transcript: String?, then outcome: Machine.Event?) {
        guard let output = activeOutput else {
            if let outcome { handle(outcome) }
            return
        }
        activeOutput = nil
        switch output.route {
        case .inputMethod:
            toInputMethod(.preedit(""))
            if let outcome { submit { core in core.handle(outcome) } }
        case .tools(let lane):
            lane.finish(transcript: transcript, then: outcome)
        }
    }

    /// A tool failed, or the input method could not take the text: the session goes on and the
    /// text stays in the transcript and history.
    func outputFailed(_ message: String) {
        logger.warning(
            "desktop output failed; the text is kept in the transcript and history",
            metadata: ["reason": "\(message)"])
        let error = SpeechError.invalidConfiguration(message)
        setLastError(error)
        publish(.outputFailed(error))
    }

    /// Types or presses through the tools, unless the input method says a password field has the
    /// focus (it may be off there; the tools type into whatever has the focus).
    private func toTools(_ step: OutputLane.Step, _ lane: OutputLane) {
        if inputMethods.secretFieldFocused { lane.refuse(OutputProblem.secretField) } else { lane.send(step) }
    }

    /// Sends `text` to the input method; false when none is active.
    @discardableResult
    private func toInputMethod(_ text: InputMethodText) -> Bool {
        guard let current = inputMethods.active else { return false }
        publish(.inputMethodText(text, to: current.id))
        return true
    }

    /// Reports `problem` of an input-method session, once per session, after what is being done now.
    private func reportOnce(_ problem: InputMethodProblem) {
        guard case .inputMethod(var reported)? = activeOutput?.route, reported.insert(problem).inserted else { return }
        activeOutput?.route = .inputMethod(reported: reported)
        let message: String
        switch problem {
        case .secret: message = OutputProblem.secretField
        case .noField: message = OutputProblem.noField
        case .inputMethodGone: message = OutputProblem.inputMethodGone
        }
        submit { core in core.outputFailed(message) }
    }
}
