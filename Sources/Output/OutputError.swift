import Problems

/// Why output cannot work or failed; `message` names the problem and the fix.
public typealias OutputError = Problem<OutputFailure>

/// What kind of output problem it is, so a caller can map it (e.g. refuse a session vs. warn).
public enum OutputFailure: Sendable, Equatable {
    /// The session cannot type or copy at all (no display, tool not installed, no uinput).
    case unavailable
    /// A tool ran and failed, or did not finish in time.
    case failed
    /// The queue was full: the request was refused and nothing of it was typed.
    case queueFull
}
