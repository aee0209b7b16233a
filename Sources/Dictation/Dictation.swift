/// What one final asks for, in order.
public enum Edit: Equatable, Sendable {
    /// Text to add (may end in line breaks; never empty).
    case text(String)
    case press(Key)
    /// Remove the previous utterance's text.
    case scratchThat
    case stopListening
}

/// A spoken phrase and what is written instead (`[text] replacements`).
public struct Replacement: Sendable, Equatable {
    let spoken: [String]
    public let written: String

    /// nil when `spoken` has no words.
    public init?(spoken: String, written: String) {
        self.spoken = Words.keys(of: spoken)
        self.written = written
        if self.spoken.isEmpty { return nil }
    }
}

/// The `[text]` rules a session applies to its engine's text.
public struct DictationRules: Sendable, Equatable {
    /// Voice commands ("new line", "scratch that", "press enter", "stop listening").
    public var commands = true
    /// Spoken punctuation and case words ("comma", "question mark", "cap", "all caps").
    public var spokenPunctuation = false
    /// The phrases of the session's language.
    public var phrases = PhraseBook.english
    public var replacements: [Replacement] = []
    /// Names and terms the text is corrected toward (offline engines' near-misses).
    public var vocabulary: [String] = []

    public init(
        commands: Bool = true, spokenPunctuation: Bool = false, phrases: PhraseBook = .english,
        replacements: [Replacement] = [], vocabulary: [String] = []
    ) {
        self.commands = commands
        self.spokenPunctuation = spokenPunctuation
        self.phrases = phrases
        self.replacements = replacements
        self.vocabulary = vocabulary
    }
}

/// Turns an engine's final into edits, and an interim into the text to show meanwhile.
///
/// Rules:
/// - A command counts only at the end of an utterance ("…, new line." but not "a new line of
///   products"); several may end one ("… new line new paragraph"). The engine's clause marks
///   before it, and its punctuation on the command's words, are dropped.
/// - A command that presses a key, deletes text or ends the session ("press enter", "submit",
///   "scratch that", "stop listening") counts only as an utterance of its own, as in Dragon: in
///   "Please read it before you submit." or "Can you delete that?" it is text, exactly as said.
///   Layout words ("new line") and spoken punctuation may end or sit inside an utterance.
/// - "literal" right before a command (or a spoken mark) makes its words text.
/// - "scratch that" removes the previous utterance (``Edit/scratchThat``).
/// - Replacements, then vocabulary, then spoken punctuation apply to the words before the commands.
public struct Dictation: Sendable {
    public let rules: DictationRules
    private let vocabulary: Vocabulary

    public init(rules: DictationRules) {
        self.rules = rules
        vocabulary = Vocabulary(rules.vocabulary)
    }

    /// The edits a final asks for. `wholeUtterance`: the final is an utterance of its own (it
    /// starts after a pause and ends at one), so it may press keys, delete or stop.
    public func edits(for final: String, wholeUtterance: Bool = true) -> [Edit] {
        let (body, commands) = split(final, wholeUtterance: wholeUtterance)
        var text = body
        var edits: [Edit] = []
        func flush() {
            if !text.isEmpty { edits.append(.text(text)) }
            text = ""
        }
        for command in commands {
            switch command {
            case .newLine: text += "\n"
            case .newParagraph: text += "\n\n"
            case .scratchThat:
                if text.isEmpty { edits.append(.scratchThat) } else { text = "" }
            case .press(let key):
                flush()
                edits.append(.press(key))
            case .stopListening:
                flush()
                edits.append(.stopListening)
            case .literal, .mark, .capitalize, .upperCase:
                break
            }
        }
        flush()
        return edits
    }

    /// What an interim shows: its words as they would be written, without the commands it would
    /// carry out as an utterance of its own (`wholeUtterance`) or at the end of one.
    public func preview(_ interim: String, wholeUtterance: Bool = true) -> String {
        split(interim, wholeUtterance: wholeUtterance).body
    }

    /// Whether `final` is nothing but commands that need an utterance of their own ("press
    /// enter", "new line submit"): such a final that may not end its utterance waits to learn.
    public func isOnlyOwnUtteranceCommands(_ final: String) -> Bool {
        let (body, commands) = split(final, wholeUtterance: true)
        return body.isEmpty && commands.contains(where: \.needsOwnUtterance)
    }

    /// The written words, and the commands that end the utterance in spoken order.
    func split(_ text: String, wholeUtterance: Bool = true) -> (body: String, commands: [SpokenAction]) {
        var words = Words.split(text)
        var commands: [SpokenAction] = []
        if rules.commands {
            // The commands that end the text, last spoken first, and a "literal" before them.
            var found: [(action: SpokenAction, count: Int)] = []
            var end = words.count
            var literal: Int?
            while let (action, count) = trailingCommand(words[..<end]) {
                let before = end - count
                if before > 0, rules.phrases.actions[[words[before - 1].key]] == .literal {
                    literal = before - 1
                    break
                }
                found.append((action, count))
                end = before
            }
            // A command that needs an utterance of its own, with everything said before it, stays text.
            var taken = found.count
            if !wholeUtterance || end > 0, let own = found.firstIndex(where: { $0.action.needsOwnUtterance }) {
                taken = own
            }
            for (action, count) in found.prefix(taken) {
                commands.insert(action, at: 0)
                words.removeLast(count)
                if !words.isEmpty { words[words.count - 1].dropTrailing(Word.softMarks) }
            }
            // "literal new line": the command's words stay as text.
            if let literal { words.remove(at: literal) }
        }
        words = replaced(words)
        words = vocabulary.corrected(words)
        if rules.spokenPunctuation { words = punctuated(words) }
        return (Words.render(words), commands)
    }

    /// The command phrase that ends `words`, longest first.
    private func trailingCommand(_ words: ArraySlice<Word>) -> (SpokenAction, Int)? {
        for count in stride(from: min(rules.phrases.longest, words.count), through: 1, by: -1) {
            if let action = rules.phrases.actions[words.suffix(count).map(\.key)], action.isCommand {
                return (action, count)
            }
        }
        return nil
    }

    /// The phrase (not a command) that starts at `index`, longest first.
    private func phrase(at index: Int, in words: [Word]) -> (SpokenAction, Int)? {
        for count in stride(from: min(rules.phrases.longest, words.count - index), through: 1, by: -1) {
            if let action = rules.phrases.actions[words[index..<index + count].map(\.key)], !action.isCommand {
                return (action, count)
            }
        }
        return nil
    }

    // MARK: Replacements

    private func replaced(_ words: [Word]) -> [Word] {
        guard !rules.replacements.isEmpty else { return words }
        var result: [Word] = []
        var index = 0
        while index < words.count {
            let match = rules.replacements
                .filter { index + $0.spoken.count <= words.count }
                .filter { Array(words[index..<index + $0.spoken.count].map(\.key)) == $0.spoken }
                .max { $0.spoken.count < $1.spoken.count }
            guard let match else {
                result.append(words[index])
                index += 1
                continue
            }
            let matched = Array(words[index..<index + match.spoken.count])
            index += match.spoken.count
            if match.written.isEmpty {
                // A dropped filler takes its commas along but leaves a sentence's end.
                var trail = matched.last?.trail ?? ""
                trail.removeAll { Word.softMarks.contains($0) }
                if !trail.isEmpty, !result.isEmpty {
                    result[result.count - 1].dropTrailing(Word.allMarks)
                    result[result.count - 1].trail += trail
                }
                continue
            }
            result.append(
                Word(
                    lead: matched[0].lead, core: Self.cased(match.written, like: matched.map(\.core)),
                    trail: matched[matched.count - 1].trail))
        }
        return result
    }

    /// `written` in the case the words were spoken in: capitalized or all caps, when `written`
    /// itself is all lowercase (a written form with capitals is kept as it is).
    static func cased(_ written: String, like spoken: [String]) -> String {
        guard written == written.lowercased(), let first = spoken.first?.first else { return written }
        let letters = spoken.joined().filter(\.isLetter)
        if letters.count > 1, letters.allSatisfy(\.isUppercase) { return written.uppercased() }
        return first.isUppercase ? written.prefix(1).uppercased() + written.dropFirst() : written
    }

    // MARK: Spoken punctuation

    private func punctuated(_ words: [Word]) -> [Word] {
        var result: [Word] = []
        var lead = ""
        var startSentence = false
        var caseNext: SpokenAction?
        var index = 0
        func append(_ word: Word) {
            var word = word
            word.lead = lead + word.lead
            lead = ""
            if caseNext == .upperCase {
                word.core = word.core.uppercased()
            } else if caseNext == .capitalize || startSentence {
                word.core = word.core.prefix(1).uppercased() + word.core.dropFirst()
            }
            caseNext = nil
            startSentence = false
            result.append(word)
        }
        while index < words.count {
            guard let (action, count) = phrase(at: index, in: words) else {
                append(words[index])
                index += 1
                continue
            }
            let next = index + count
            switch action {
            case .literal where next < words.count:
                // "literal comma": the next phrase's words (or the next word) as written.
                let length = phrase(at: next, in: words)?.1 ?? 1
                for word in words[next..<next + length] { append(word) }
                index = next + length
            case .capitalize where next < words.count, .upperCase where next < words.count:
                caseNext = action
                index = next
            case .mark(.openQuote):
                lead += SpokenAction.Mark.openQuote.text
                index = next
            case .mark(let mark):
                if result.isEmpty {
                    result.append(Word(lead: "", core: "", trail: mark.text, glued: true))
                } else {
                    result[result.count - 1].dropTrailing(mark == .closeQuote ? [] : Word.allMarks)
                    result[result.count - 1].trail += mark.text
                }
                if mark.endsSentence { startSentence = true }
                index = next
            default:
                append(words[index])
                index += 1
            }
        }
        if !lead.isEmpty { result.append(Word(lead: lead, core: "")) }
        return result
    }
}
