/// A failure of one kind, with one sentence for a person: what went wrong and what to do (e.g. the
/// Debian package to install). Each module names its kinds (`CaptureError` is
/// `Problem<CaptureFailure>`), so a caller can map them without parsing the message.
public struct Problem<Kind: Sendable & Equatable>: Error, Sendable, Equatable, CustomStringConvertible {
    public var kind: Kind
    public var message: String

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public var description: String { message }
}
