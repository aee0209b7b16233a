import Dictation

/// Where a session's text goes on the desktop through tools: typed into the focused window, or
/// put on the clipboard at stop. The Output module implements it; the core calls it and knows no
/// tool. (Text for an input method leaves as core events instead: see SpeechCore+Output.swift.)
public protocol DictationOutput: Sendable {
    /// Opens `mode` for one session, checking first that it can work in this desktop session.
    /// Throws `InvalidConfiguration` naming what to install.
    func begin(_ mode: OutputMode) throws(SpeechError) -> any DictationOutputSession
}

/// One session's output. The core calls it one step at a time, in order, off its executor (see
/// ``OutputLane``). Each step returns when it is done, with a problem for a person (a tool
/// failed; the session goes on) or nil.
public protocol DictationOutputSession: Sendable {
    /// Types `text` (a final with its leading separator).
    func type(_ text: String) async -> String?

    /// Presses `key`.
    func press(_ key: Key) async -> String?

    /// Takes back `typed` (the last text typed, with its separator) from before the cursor.
    func retract(_ typed: String) async -> String?

    /// The session is over with `transcript` (nil when it was cancelled): clipboard output puts
    /// it on the clipboard. Returns once everything is delivered or has failed.
    func finish(transcript: String?) async -> String?
}

/// What output problems tell a person.
public enum OutputProblem {
    /// Ends every problem's message: the words are not lost.
    public static let textIsKept = "Nothing is lost: the text is in `sttctl transcript` and `sttctl history`."

    static let secretField = "Dictated text was not typed: the focused field is for a password or PIN. \(textIsKept)"
    static let noField = "Dictated text was not typed: no text field had the keyboard focus. \(textIsKept)"
    static let inputMethodGone =
        "Dictated text was not typed: the input method this session types through is no longer active, and sttd does not switch to typing tools mid-session. \(textIsKept)"
}
