/// A word as an engine wrote it: the punctuation before and after it, and the word.
struct Word: Equatable {
    var lead = ""
    var core: String
    var trail = ""
    /// Written without a space before it (a spoken mark with no word before it in the utterance).
    var glued = false

    /// What phrases are matched against: the word in lowercase, without punctuation.
    var key: String { core.lowercased() }
    var text: String { lead + core + trail }

    /// Punctuation an engine puts between clauses, dropped next to a command or a spoken mark.
    static let softMarks: Set<Character> = [",", ";", ":"]
    static let allMarks: Set<Character> = [",", ";", ":", ".", "!", "?"]

    /// Drops the engine's trailing marks in `marks`.
    mutating func dropTrailing(_ marks: Set<Character>) {
        while let last = trail.last, marks.contains(last) { trail.removeLast() }
    }
}

/// Splitting text into words and putting it back together.
enum Words {
    /// The words of `text`; a piece without letters or digits (a symbol, an emoji, " - ") is a
    /// word as it is.
    static func split(_ text: String) -> [Word] {
        var words: [Word] = []
        for piece in text.split(whereSeparator: \.isWhitespace) {
            guard let first = piece.firstIndex(where: isWordCharacter),
                let last = piece.lastIndex(where: isWordCharacter)
            else {
                // A symbol, an emoji or a lone mark is a word of its own.
                words.append(Word(core: String(piece)))
                continue
            }
            words.append(
                Word(
                    lead: String(piece[..<first]), core: String(piece[first...last]),
                    trail: String(piece[piece.index(after: last)...])))
        }
        return words
    }

    /// A phrase's words as matched: lowercase, punctuation dropped.
    static func keys(of phrase: String) -> [String] {
        split(phrase).map(\.key).filter { !$0.isEmpty }
    }

    /// The words with a space between them, none before a mark the grammar wrote alone.
    static func render(_ words: [Word]) -> String {
        var text = ""
        for word in words where !word.text.isEmpty {
            if !text.isEmpty && !word.glued { text += " " }
            text += word.text
        }
        return text
    }

    static func isWordCharacter(_ character: Character) -> Bool {
        character.isLetter || character.isNumber
    }
}
