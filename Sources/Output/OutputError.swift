/// Why output cannot work or failed; `message` names the problem and the fix.
public struct OutputError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What kind of problem it is, so a caller can map it (e.g. refuse a session vs. warn).
    public enum Kind: Sendable, Equatable {
        /// The session cannot type or copy at all (no display, tool not installed, no uinput).
        case unavailable
        /// A tool ran and failed, or did not finish in time.
        case failed
        /// The queue was full: the request was refused and nothing of it was typed.
        case queueFull
    }

    public var kind: Kind
    /// One sentence for a person: what went wrong and what to do (e.g. the Debian package to install).
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}
