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
        if mode == .type, let inputMethod, let state = inputMethod.activeState {
            if state.focused && state.secret { throw Self.secretField }
            return InputMethodDictationSession(
                route: inputMethod,
                fallback: { DesktopOutput(environment: environment, typingTool: typingTool, logger: logger) },
                failed: failed)
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
        return DesktopDictationSession(desktop: desktop, mode: mode, paste: paste, failed: failed)
    }

    static let secretField = SpeechError.notAuthorized(
        "The focused field is for a password or PIN, and dictation never types into one. Click into another field and start again."
    )
}

/// One session's typing through the input method: the interim as preedit, each final committed
/// into the field focused when it arrives. When the input method is no longer active (the user
/// switched to another one, or `sttd-ibus` left), later text goes to the typing tools as without it.
private final class InputMethodDictationSession: DictationOutputSession {
    private let route: InputMethodRoute
    private let makeFallback: @Sendable () -> DesktopOutput
    private let failed: @Sendable (String) -> Void
    private struct State {
        var fallback: DesktopDictationSession?
        /// The typing tools cannot work here (reported once).
        var fallbackFailed = false
        var reportedUntyped = false
    }
    private let state = Mutex(State())

    init(
        route: InputMethodRoute, fallback: @escaping @Sendable () -> DesktopOutput,
        failed: @escaping @Sendable (String) -> Void
    ) {
        self.route = route
        makeFallback = fallback
        self.failed = failed
    }

    func type(_ text: String) {
        if let state = route.activeState {
            // The input method drops text for no field or a secret one; say so once per session.
            if !state.focused || state.secret { reportUntyped(secret: state.focused) }
            if route.commit(text) { return }
        }
        fallbackSession()?.type(text)
    }

    func preedit(_ text: String) {
        route.preedit(text)
    }

    func press(_ key: Key) {
        if route.press(keysym: key.keysym) { return }
        fallbackSession()?.press(key)
    }

    /// IBus deletes surrounding text in Unicode characters (GTK counts code points).
    func retract(_ typed: String) {
        if route.delete(characters: typed.unicodeScalars.count) { return }
        fallbackSession()?.retract(typed)
    }

    func finish(transcript: String?, done: @escaping @Sendable () -> Void) {
        route.preedit("")
        guard let fallback = state.withLock({ $0.fallback }) else { return done() }
        fallback.finish(transcript: transcript, done: done)
    }

    private func reportUntyped(secret: Bool) {
        let isNew = state.withLock { state in
            defer { state.reportedUntyped = true }
            return !state.reportedUntyped
        }
        guard isNew else { return }
        failed(
            secret
                ? "Dictated text was not typed: the focused field is for a password or PIN. Nothing is lost: the text is in `sttctl transcript` and `sttctl history`."
                : "Dictated text was not typed: no text field had the keyboard focus. Nothing is lost: the text is in `sttctl transcript` and `sttctl history`."
        )
    }

    /// The typing tools, opened at the first text the input method cannot take; nil (reported)
    /// when they cannot work here.
    private func fallbackSession() -> DesktopDictationSession? {
        let (session, problem) = state.withLock { state -> (DesktopDictationSession?, String?) in
            if let fallback = state.fallback { return (fallback, nil) }
            if state.fallbackFailed { return (nil, nil) }
            let desktop = makeFallback()
            do throws(OutputError) {
                try desktop.checkTyping()
            } catch {
                state.fallbackFailed = true
                return (nil, error.message)
            }
            let session = DesktopDictationSession(desktop: desktop, mode: .type, paste: false, failed: failed)
            state.fallback = session
            return (session, nil)
        }
        if let problem {
            failed(
                "The input method is no longer active and typing cannot work here: \(problem). Nothing is lost: the text is in `sttctl transcript` and `sttctl history`."
            )
        }
        return session
    }
}

/// One session's typing or clipboard, reporting each distinct failure once.
final class DesktopDictationSession: DictationOutputSession {
    private let desktop: DesktopOutput
    private let mode: OutputMode
    private let paste: Bool
    private let failed: @Sendable (String) -> Void
    private let lastReported = Mutex<String?>(nil)

    init(desktop: DesktopOutput, mode: OutputMode, paste: Bool, failed: @escaping @Sendable (String) -> Void) {
        self.desktop = desktop
        self.mode = mode
        self.paste = paste
        self.failed = failed
    }

    func type(_ text: String) {
        guard mode == .type else { return }
        desktop.type(text) { [self] error in report(error) }
    }

    func press(_ key: Key) {
        guard mode == .type else { return }
        desktop.press([key]) { [self] error in report(error) }
    }

    /// A backspace for each character (grapheme) typed.
    func retract(_ typed: String) {
        guard mode == .type, !typed.isEmpty else { return }
        desktop.press(Array(repeating: .backspace, count: typed.count)) { [self] error in report(error) }
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
        // A display that went away fails every final the same way: one warning is enough.
        let isNew = lastReported.withLock { last in
            defer { last = error.message }
            return last != error.message
        }
        if isNew {
            failed("\(error.message). Nothing is lost: the text is in `sttctl transcript` and `sttctl history`.")
        }
    }
}
