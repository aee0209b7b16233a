import Logging
import Output
import Recognition
import Speech
import Synchronization

/// The core's desktop output on the Output module's tools: a ``DesktopOutput`` per session, for
/// the graphical session sttd's environment names (systemd's, once the desktop imported it).
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

    func begin(_ mode: OutputMode, failed: @escaping @Sendable (String) -> Void) throws(SpeechError)
        -> any DictationOutputSession
    {
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
}

/// One session's typing or clipboard, reporting each distinct failure once.
private final class DesktopDictationSession: DictationOutputSession {
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
        desktop.type(text) { [self] error in report(error) }
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
