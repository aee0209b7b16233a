import Dictation
import Logging
import Output
import Recognition
import Speech

/// The core's desktop output through the Output module's tools: a ``DesktopOutput`` per session,
/// for the graphical session sttd's environment names (systemd's, once the desktop imported it).
/// (Text for the desktop's input method leaves as core events: see SpeechBusAdapter.)
struct DesktopDictationOutput: DictationOutput {
    let environment: [String: String]
    let typingTool: TypingTool?
    let paste: Bool
    let logger: Logger

    init(configuration: Configuration, environment: [String: String], logger: Logger) {
        // The tools get the session's variables, not sttd's secrets.
        self.environment = ChildEnvironment.filtered(environment)
        typingTool = TypingTool(rawValue: configuration.outputTool.rawValue)
        paste = configuration.paste
        self.logger = logger
    }

    func begin(_ mode: OutputMode) throws(SpeechError) -> any DictationOutputSession {
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
        return DesktopDictationSession(desktop: desktop, mode: mode, paste: paste, logger: logger)
    }
}

/// One session's typing or clipboard; each step returns its tool's failure for a person.
struct DesktopDictationSession: DictationOutputSession {
    let desktop: DesktopOutput
    let mode: OutputMode
    let paste: Bool
    let logger: Logger

    func type(_ text: String) async -> String? {
        guard mode == .type else { return nil }
        return Self.problem(await withCheckedContinuation { done in desktop.type(text) { done.resume(returning: $0) } })
    }

    func press(_ key: Key) async -> String? {
        guard mode == .type else { return nil }
        return Self.problem(
            await withCheckedContinuation { done in desktop.press([key]) { done.resume(returning: $0) } })
    }

    /// A backspace for each character (grapheme) typed, if the tool typed it and (on X11) its
    /// window still has the focus; otherwise the words leave the transcript only.
    func retract(_ typed: String) async -> String? {
        guard mode == .type, !typed.isEmpty else { return nil }
        let result = await withCheckedContinuation { done in desktop.retract(typed) { done.resume(returning: $0) } }
        switch result {
        case .failure(let error): return Self.problem(error)
        case .success(true): return nil
        case .success(false):
            logger.info("\"scratch that\": the words were not typed, or their window lost the focus; nothing deleted")
            return nil
        }
    }

    func finish(transcript: String?) async -> String? {
        guard mode == .clipboard, let transcript, !transcript.isEmpty else {
            await withCheckedContinuation { done in desktop.whenIdle { done.resume() } }
            return nil
        }
        return Self.problem(
            await withCheckedContinuation { done in
                desktop.copy(transcript, paste: paste) { done.resume(returning: $0) }
            })
    }

    private static func problem(_ error: OutputError?) -> String? {
        error.map { "\($0.message). \(OutputProblem.textIsKept)" }
    }
}
