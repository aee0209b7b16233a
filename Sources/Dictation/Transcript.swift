/// A session's transcript: its utterances' text after commands, then the current interim.
///
/// Pieces are joined by ``Spacing`` (a space between words, none around a line break). A key
/// press seals what came before it: "scratch that" never reaches past text that was sent.
public struct Transcript: Sendable, Equatable {
    /// Each final's text as written (may end in line breaks; never empty).
    public private(set) var finals: [String] = []
    public private(set) var interim = ""
    /// Finals before this index are sealed.
    private var sealed = 0

    public init() {}

    /// The finals, then the interim: the `Transcript` property.
    public var text: String { Spacing.join(interim.isEmpty ? finals : finals + [interim]) }

    /// Finals only: what `StopTranscribing` returns.
    public var finalText: String { Spacing.join(finals) }

    /// What goes before `next` (a final or the interim) where the text so far ends.
    public func separator(before next: String) -> String {
        Spacing.separator(after: finals.last ?? "", before: next)
    }

    /// Replaces the interim; false when nothing changed.
    @discardableResult
    public mutating func setInterim(_ text: String) -> Bool {
        defer { interim = text }
        return interim != text
    }

    /// Appends a final (clearing the interim); returns it as typed: with its separator.
    @discardableResult
    public mutating func append(_ final: String) -> String {
        interim = ""
        guard !final.isEmpty else { return "" }
        let typed = separator(before: final) + final
        finals.append(final)
        return typed
    }

    /// Removes the last final unless a key press sealed it; returns it, and what was typed for it
    /// (with its separator).
    public mutating func retractLast() -> (final: String, typed: String)? {
        guard finals.count > sealed, let last = finals.popLast() else { return nil }
        return (last, separator(before: last) + last)
    }

    /// A key was pressed after the text so far.
    public mutating func seal() { sealed = finals.count }

    /// Drops the interim (cancel, or a session that ended without finalizing it).
    public mutating func dropInterim() { interim = "" }

    /// Clears everything.
    public mutating func reset() { self = Transcript() }
}
