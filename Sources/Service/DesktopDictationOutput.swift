import Dictation
import Logging
import Output
import Recognition
import Speech
import SpeechAPI
import SpeechBus
import Synchronization

/// The core's desktop output: typed text goes through the desktop's input method when `sttd-ibus`
/// is active (see ``InputMethodDictationSession``), otherwise through the Output module's tools,
/// a ``DesktopOutput`` per session, for the graphical session sttd's environment names (systemd's,
/// once the desktop imported it).
struct DesktopDictationOutput: DictationOutput {
    let environment: [String: String]
    let typingTool: TypingTool?
    let paste: Bool
    let inputMethod: InputMethodRoute?
    let logger: Logger

    init(
        configuration: Configuration, environment: [String: String], inputMethod: InputMethodRoute? = nil,
        logger: Logger
    ) {
        // The tools get the session's variables, not sttd's secrets.
        self.environment = ChildEnvironment.filtered(environment)
        typingTool = TypingTool(rawValue: configuration.outputTool.rawValue)
        paste = configuration.paste
        self.inputMethod = inputMethod
        self.logger = logger
    }

    func begin(_ mode: OutputMode, failed: @escaping @Sendable (String) -> Void) throws(SpeechError)
        -> any DictationOutputSession
    {
        if mode == .type, inputMethod?.secretFieldFocused == true { throw Self.secretField }
        if mode == .type, let inputMethod, inputMethod.activeState != nil {
            return InputMethodDictationSession(route: inputMethod, failed: failed)
        }
        let desktop = DesktopOutput(environment: environment, typingTool: typingTool, logger: logger)
        do throws(OutputError) {
            switch mode {
            case .type: try desktop.checkTyping()
            case .clipboard: try desktop.checkClipboard(paste: paste)
            case .none: break
            }
        } catch {
            throw .invalidConfiguration("output = \"\(mode.rawValue)\" cannot work here: \(error.message)")
        }
        return DesktopDictationSession(
            desktop: desktop, mode: mode, paste: paste, inputMethod: inputMethod, logger: logger, failed: failed)
    }

    static let secretField = SpeechError.notAuthorized(
        "The focused field is for a password or PIN, and dictation never types into one. Click into another field and start again."
    )
}

/// One session's typing through the input method: the interim as preedit, each final committed
/// into the field focused when it arrives. Such a session delivers only through the input method:
/// once it has left or is no longer active, later text stays in the transcript and history, and
/// the typing tools (which type into any window, password fields included) never type it.
private final class InputMethodDictationSession: DictationOutputSession {
    private let route: InputMethodRoute
    private let failed: @Sendable (String) -> Void
    /// Each problem is reported once per session.
    private let reported = Mutex<Set<Untyped>>([])

    private enum Untyped: Hashable { case secret, noField, inputMethodGone }

    init(route: InputMethodRoute, failed: @escaping @Sendable (String) -> Void) {
        self.route = route
        self.failed = failed
    }

    func type(_ text: String) {
        guard let state = route.activeState else { return report(route.secretFieldFocused ? .secret : .inputMethodGone) }
        // The input method drops text for no field or a secret one.
        if !state.focused || state.secret { report(state.focused ? .secret : .noField) }
        if !route.commit(text) { report(.inputMethodGone) }
    }

    func preedit(_ text: String) {
        route.preedit(text)
    }

    func press(_ key: Key) {
        if !route.press(keysym: key.keysym) { report(.inputMethodGone) }
    }

    /// IBus deletes surrounding text in Unicode characters (GTK counts code points); the input
    /// method deletes only if it is the text it last committed into the field still focused.
    func retract(_ typed: String) {
        route.delete(characters: typed.unicodeScalars.count)
    }

    func finish(transcript: String?, done: @escaping @Sendable () -> Void) {
        route.preedit("")
        done()
    }

    private func report(_ problem: Untyped) {
        guard reported.withLock({ $0.insert(problem).inserted }) else { return }
        let kept = "Nothing is lost: the text is in `sttctl transcript` and `sttctl history`."
        switch problem {
        case .secret:
            failed("Dictated text was not typed: the focused field is for a password or PIN. \(kept)")
        case .noField:
            failed("Dictated text was not typed: no text field had the keyboard focus. \(kept)")
        case .inputMethodGone:
            failed(
                "Dictated text was not typed: the input method this session types through is no longer active, and sttd does not switch to typing tools mid-session. \(kept)"
            )
        }
    }
}

/// One session's typing or clipboard, reporting each distinct failure once.
final class DesktopDictationSession: DictationOutputSession {
    private let desktop: DesktopOutput
    private let mode: OutputMode
    private let paste: Bool
    /// Says when a password field has the focus (the input method may be off there): the tools
    /// type into whatever has the focus, so nothing is typed then.
    private let inputMethod: InputMethodRoute?
    private let failed: @Sendable (String) -> Void
    private let logger: Logger
    private let lastReported = Mutex<String?>(nil)

    init(
        desktop: DesktopOutput, mode: OutputMode, paste: Bool, inputMethod: InputMethodRoute? = nil, logger: Logger,
        failed: @escaping @Sendable (String) -> Void
    ) {
        self.desktop = desktop
        self.mode = mode
        self.paste = paste
        self.inputMethod = inputMethod
        self.logger = logger
        self.failed = failed
    }

    func type(_ text: String) {
        guard mode == .type, !inSecretField() else { return }
        desktop.type(text) { [self] error in report(error) }
    }

    func press(_ key: Key) {
        guard mode == .type, !inSecretField() else { return }
        desktop.press([key]) { [self] error in report(error) }
    }

    private func inSecretField() -> Bool {
        guard inputMethod?.secretFieldFocused == true else { return false }
        report(message: "Dictated text was not typed: the focused field is for a password or PIN")
        return true
    }

    /// A backspace for each character (grapheme) typed, if the tool typed it and (on X11) its
    /// window still has the focus; otherwise the words leave the transcript only.
    func retract(_ typed: String) {
        guard mode == .type, !typed.isEmpty else { return }
        desktop.retract(typed) { [self] result in
            switch result {
            case .failure(let error): report(error)
            case .success(true): break
            case .success(false):
                logger.info("\"scratch that\": the words were not typed, or their window lost the focus; nothing deleted")
            }
        }
    }

    func finish(transcript: String?, done: @escaping @Sendable () -> Void) {
        guard mode == .clipboard, let transcript, !transcript.isEmpty else {
            return desktop.whenIdle(done)
        }
        desktop.copy(transcript, paste: paste) { [self] error in
            report(error)
            done()
        }
    }

    private func report(_ error: OutputError?) {
        guard let error else { return }
        report(message: error.message)
    }

    private func report(message: String) {
        // A display that went away fails every final the same way: one warning is enough.
        let isNew = lastReported.withLock { last in
            defer { last = message }
            return last != message
        }
        if isNew {
            failed("\(message). Nothing is lost: the text is in `sttctl transcript` and `sttctl history`.")
        }
    }
}
