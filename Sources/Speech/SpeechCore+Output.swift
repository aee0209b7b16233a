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
        /// reported once per session. The one exception is sttd's Wayland input method saying
        /// ``InputMethodReport/toolsAllowed`` (see ``InputMethodRoute``).
        case inputMethod(InputMethodRoute)
        /// Through the Output module's tools.
        case tools(OutputLane)
    }
}

enum InputMethodProblem: Hashable { case secret, noField, inputMethodGone }

/// A session typing through an input method. While sttd's Wayland input method says no field
/// has the focus and the focused window's app is opted in to the typing tools, finals and keys
/// go through a tools lane of the session instead, started the first time it is needed (so a
/// missing tool troubles only sessions that need it).
struct InputMethodRoute {
    var reported: Set<InputMethodProblem> = []
    var tools = OptInTools.notStarted
    /// Where each final went, newest last, so that "scratch that" takes a final back where it
    /// went (the tools, or the input method, whose own ledger decides). Bounded: a final beyond
    /// it is taken back through the input method, which refuses what it did not commit.
    var finals: [Destination] = []
    static let finalsRemembered = 64

    enum OptInTools {
        case notStarted
        case running(OutputLane)
        /// They cannot type here (said once); such text is dropped as for no field.
        case unavailable
    }

    enum Destination { case inputMethod, tools }

    mutating func typed(to destination: Destination) {
        finals.append(destination)
        if finals.count > Self.finalsRemembered { finals.removeFirst() }
    }
}

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
            return ActiveOutput(mode: mode, route: .inputMethod(InputMethodRoute()))
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
            if let lane = optInToolsLane() {
                updateInputMethodRoute { $0.typed(to: .tools) }
                return toTools(.type(typed), lane)
            }
            updateInputMethodRoute { $0.typed(to: .inputMethod) }
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
            if let lane = optInToolsLane() { return toTools(.press(key), lane) }
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
            // An empty final was typed nowhere (see typeFinal), so it has no destination to take back.
            let went = typed.isEmpty ? nil : updateInputMethodRoute { $0.finals.popLast() } ?? nil
            guard went == .tools else {
                toInputMethod(.delete(characters: typed.unicodeScalars.count))
                return
            }
            // The tools type into whatever has the focus: only while it is still such a window.
            guard let lane = optInToolsLane() else {
                logger.info(
                    "\"scratch that\": the words went into a window that no longer has the focus; nothing deleted")
                return
            }
            if !typed.isEmpty { lane.send(.retract(typed)) }
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
        case .inputMethod(let route):
            toInputMethod(.preedit(""))
            if case .running(let lane) = route.tools {
                lane.finish(transcript: transcript, then: outcome)
            } else if let outcome {
                submit { core in core.handle(outcome) }
            }
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

    /// The tools lane of an input-method session, when its text goes there now: sttd's Wayland
    /// input method says no field has the focus and the window's app is opted in. Started here
    /// the first time; nil when text goes to the input method, or the tools cannot type here.
    private func optInToolsLane() -> OutputLane? {
        guard let current = inputMethods.active, case .wayland = current.id, !current.report.focused,
            current.report.toolsAllowed, case .inputMethod(var route)? = activeOutput?.route
        else { return nil }
        switch route.tools {
        case .running(let lane): return lane
        case .unavailable: return nil
        case .notStarted: break
        }
        let lane: OutputLane?
        do {
            guard let output else { return nil }
            lane = OutputLane.start(try output.begin(.type), on: self)
            if lane != nil {
                logger.info("no field has the focus in an app opted in to the typing tools; typing through them")
            }
        } catch {
            lane = nil
            let message = "\(Self.optInToolsFailed) \(error.message) \(OutputProblem.textIsKept)"
            submit { core in core.outputFailed(message) }
        }
        route.tools = lane.map { .running($0) } ?? .unavailable
        activeOutput?.route = .inputMethod(route)
        return lane
    }

    static let optInToolsFailed = "Dictated text for an app in [wayland] typing_tools_for_apps was not typed:"

    /// Changes the route of an input-method session; nil when the session has none.
    @discardableResult
    private func updateInputMethodRoute<Result>(_ change: (inout InputMethodRoute) -> Result) -> Result? {
        guard case .inputMethod(var route)? = activeOutput?.route else { return nil }
        let result = change(&route)
        activeOutput?.route = .inputMethod(route)
        return result
    }

    /// Reports `problem` of an input-method session, once per session, after what is being done now.
    private func reportOnce(_ problem: InputMethodProblem) {
        guard updateInputMethodRoute({ $0.reported.insert(problem).inserted }) == true else { return }
        let message: String
        switch problem {
        case .secret: message = OutputProblem.secretField
        case .noField: message = OutputProblem.noField
        case .inputMethodGone: message = OutputProblem.inputMethodGone
        }
        submit { core in core.outputFailed(message) }
    }
}
