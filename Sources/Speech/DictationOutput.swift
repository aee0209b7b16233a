import Dictation

/// Where a session's text goes on the desktop: typed into the focused window, or put on the
/// clipboard at stop. The Output module implements it; the core calls it and knows no tool.
public protocol DictationOutput: Sendable {
    /// Opens `mode` for one session, checking first that it can work in this desktop session.
    /// Throws `InvalidConfiguration` naming what to install. `failed` is called (on any thread)
    /// with a message for a person when a tool fails during the session.
    func begin(_ mode: OutputMode, failed: @escaping @Sendable (String) -> Void) throws(SpeechError)
        -> any DictationOutputSession
}

/// One session's output.
public protocol DictationOutputSession: Sendable {
    /// Types `text` (a final with its leading separator) after everything before it; returns at once.
    func type(_ text: String)

    /// Presses `key` after everything before it.
    func press(_ key: Key)

    /// Takes back `typed` (the last text typed, with its separator) from before the cursor.
    func retract(_ typed: String)

    /// Shows `text` (the pending interim with its leading separator; empty: nothing) where the
    /// next final will go, replacing what was shown. Only an input method can; tools ignore it.
    func preedit(_ text: String)

    /// The session is over with `transcript` (nil when it was cancelled): clipboard output puts
    /// it on the clipboard. `done` is called once everything is delivered or has failed.
    func finish(transcript: String?, done: @escaping @Sendable () -> Void)
}

extension DictationOutputSession {
    public func preedit(_ text: String) {}
}
