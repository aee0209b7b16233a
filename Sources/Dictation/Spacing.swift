/// How dictated pieces are joined, the one rule the transcript, the typed text and history
/// share: a space between words, none around a line break, none before closing punctuation.
public enum Spacing {
    /// Characters that attach to the word before them.
    static let closing: Set<Character> = [",", ".", ";", ":", "!", "?", ")", "]", "}", "…", "%"]
    /// Characters that attach to the word after them.
    static let opening: Set<Character> = ["(", "[", "{", "“", "¿", "¡"]

    /// What goes between `previous` and `next`: a space, or nothing.
    public static func separator(after previous: some StringProtocol, before next: some StringProtocol) -> String {
        guard let last = previous.last, let first = next.first else { return "" }
        if last == "\n" || first == "\n" || closing.contains(first) || opening.contains(last) { return "" }
        return " "
    }

    /// The pieces joined by their separators (empty pieces skipped).
    public static func join(_ pieces: some Sequence<String>) -> String {
        var text = ""
        for piece in pieces where !piece.isEmpty {
            text += separator(after: text, before: piece) + piece
        }
        return text
    }
}
