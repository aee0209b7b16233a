/// A session's transcript: stable finals, then the current interim.
public struct Transcript: Sendable, Equatable {
    public private(set) var finals: [String] = []
    public private(set) var interim = ""

    public init() {}

    /// Finals joined by single spaces, then the interim (contract §3).
    public var text: String {
        (interim.isEmpty ? finals : finals + [interim]).joined(separator: " ")
    }

    /// Finals only: what `StopTranscribing` returns.
    public var finalText: String { finals.joined(separator: " ") }

    /// Applies a result: a final is appended and clears the interim; an interim replaces the last one.
    /// Returns false if nothing visible changed.
    @discardableResult
    public mutating func apply(_ result: RecognitionResult) -> Bool {
        let text = Self.normalized(result.text)
        let before = self
        if result.isFinal {
            if !text.isEmpty { finals.append(text) }
            interim = ""
        } else {
            interim = text
        }
        return self != before
    }

    /// Drops the interim (cancel, or a session that ended without finalizing it).
    public mutating func dropInterim() { interim = "" }

    /// Clears everything.
    public mutating func reset() { self = Transcript() }

    /// Collapses runs of whitespace so joins stay single-spaced.
    public static func normalized(_ text: String) -> String {
        text.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }
}
