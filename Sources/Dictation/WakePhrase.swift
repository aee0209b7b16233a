/// The phrase that starts a hands-free session, and the rule that hears it in an engine's text.
///
/// The engine decodes only the first seconds of each utterance while sttd waits, so the phrase
/// must begin the text; a few letters may differ, as engines spell a phrase they half hear
/// ("Star dictation", "Start dick tation").
public struct WakePhrase: Sendable, Equatable {
    /// As configured.
    public let phrase: String
    /// The phrase's letters and digits, lowercase, its words joined without spaces.
    let letters: [Character]
    let wordCount: Int

    /// Words people say before a command, skipped when one begins the text.
    static let fillers: Set<String> = ["uh", "um", "okay", "ok", "hey"]
    /// One edit allowed per this many letters: 2 for "start dictation", 0 under 7 letters.
    static let lettersPerEdit = 7
    /// A single word shorter than this sounds like too many others.
    static let singleWordMinimumLetters = 10
    /// What fits in the 3 s the engine decodes after a pause.
    static let maximumWords = 5
    static let maximumLetters = 40

    public init(_ phrase: String) throws(WakePhraseRefusal) {
        let words = Self.spokenWords(of: Words.split(phrase)).map(\.key)
        let letters = Array(words.joined())
        if words.isEmpty {
            throw phrase.allSatisfy(\.isWhitespace)
                ? WakePhraseRefusal(
                    "No wake phrase is set: add `[hands_free] wake_phrase = \"wake up computer\"` to config.toml, then `systemctl --user restart sttd`."
                )
                : WakePhraseRefusal("The wake phrase “\(phrase)” has no letters or digits to listen for. \(Self.fix)")
        }
        if words.count == 1 && letters.count < Self.singleWordMinimumLetters {
            throw WakePhraseRefusal(
                "“\(phrase)” is a single short word; sttd would wake on every word that sounds like it. Use two words or more, like “wake up computer”: set `[hands_free] wake_phrase` in config.toml, then `systemctl --user restart sttd`."
            )
        }
        if words.count > Self.maximumWords || letters.count > Self.maximumLetters {
            throw WakePhraseRefusal(
                "The wake phrase “\(phrase)” has \(words.count) words and \(letters.count) letters; it may have at most \(Self.maximumWords) words and \(Self.maximumLetters) letters, to fit in the 3 seconds sttd listens to after a pause. \(Self.fix)"
            )
        }
        if let command = Self.voiceCommand(beginning: words) {
            let what = command.action.isCommand ? "the voice command" : "the dictation word"
            let opening = command.words == words ? "is" : "begins with"
            throw WakePhraseRefusal(
                "The wake phrase “\(phrase)” \(opening) \(what) “\(command.words.joined(separator: " "))”, which sttd acts on while you dictate. \(Self.fix)"
            )
        }
        self.phrase = phrase
        self.letters = letters
        self.wordCount = words.count
    }

    /// How a refusal ends: what to change, and how sttd reads the change.
    static let fix =
        "Choose another, like “wake up computer”: set `[hands_free] wake_phrase` in config.toml, then `systemctl --user restart sttd`."

    /// The longest phrase of the built-in English book that `words` begin with.
    static func voiceCommand(beginning words: [String]) -> (words: [String], action: SpokenAction)? {
        // Two phrases of one length that both begin `words` are the same, so the longest is unique.
        PhraseBook.english.actions.filter { words.starts(with: $0.key) }.max { $0.key.count < $1.key.count }
            .map { ($0.key, $0.value) }
    }

    /// Whether `segmentText`, an engine's text of the start of an utterance, begins with the
    /// phrase (after at most one filler word); nil when it does not.
    public func match(_ segmentText: String) -> WakeMatch? {
        guard let nearest = nearest(segmentText), nearest.distance <= letters.count / Self.lettersPerEdit else {
            return nil
        }
        return nearest
    }

    /// The reading of `segmentText` closest to the phrase, whether or not it is close enough to
    /// wake (for measuring near misses); nil when no reading's first letter agrees.
    public func nearest(_ segmentText: String) -> WakeMatch? {
        let pieces = Words.split(segmentText)
        let spoken = Self.spokenWords(of: pieces)
        let starts = spoken.first.map { Self.fillers.contains($0.key) } == true ? [0, 1] : [0]
        // Counts around the phrase's own: an engine splits a word in two or runs two together.
        let counts = [wordCount, wordCount - 1, wordCount + 1].filter { $0 >= 1 }
        var best: (distance: Int, last: SpokenWord)?
        for start in starts {
            for count in counts where start + count <= spoken.count {
                let heard = Array(spoken[start..<start + count].map(\.key).joined())
                guard heard.first == letters.first else { continue }
                let distance = Self.editDistance(letters, heard)
                if distance < best?.distance ?? Int.max { best = (distance, spoken[start + count - 1]) }
            }
        }
        guard let best else { return nil }
        return WakeMatch(remainder: Self.remainder(after: best.last, in: pieces), distance: best.distance)
    }

    /// A word as matched (letters and digits, lowercase), and where the engine's text goes on.
    struct SpokenWord {
        var key: String
        /// The index of the whitespace-separated piece the word is in.
        var piece: Int
        /// The piece's core after the word ("-dictation" after "start" in "start-dictation").
        var rest: Substring
    }

    /// Hyphens split words ("start-dictation"); other marks inside a word go (so "don't" is
    /// "dont"), as an engine may write a phrase either way.
    static func spokenWords(of pieces: [Word]) -> [SpokenWord] {
        var words: [SpokenWord] = []
        for (index, piece) in pieces.enumerated() {
            for part in piece.core.split(whereSeparator: isHyphen) {
                let key = String(part.lowercased().filter(Words.isWordCharacter))
                if !key.isEmpty { words.append(SpokenWord(key: key, piece: index, rest: piece.core[part.endIndex...])) }
            }
        }
        return words
    }

    static func isHyphen(_ character: Character) -> Bool { "-‐‑–—".contains(character) }

    /// The engine's text after `word`, without the marks that closed the phrase ("Dear Anna,"
    /// from "Start dictation. Dear Anna,"); an opening quote or bracket stays.
    static func remainder(after word: SpokenWord, in pieces: [Word]) -> String {
        let tail = Word(core: String(word.rest) + pieces[word.piece].trail)
        let text = Words.render([tail] + pieces[(word.piece + 1)...])
        return String(text.drop { $0.isWhitespace || Word.allMarks.contains($0) || isHyphen($0) || $0 == "…" })
    }

    /// Levenshtein distance: insertions, deletions and substitutions, one each.
    static func editDistance(_ a: [Character], _ b: [Character]) -> Int {
        var previous = Array(0...b.count)
        for (i, letter) in a.enumerated() {
            var current = [i + 1]
            for (j, other) in b.enumerated() {
                current.append(min(previous[j] + (letter == other ? 0 : 1), previous[j + 1] + 1, current[j] + 1))
            }
            previous = current
        }
        return previous[b.count]
    }
}

/// The phrase heard: the words the engine wrote after it, and how far its letters were off.
public struct WakeMatch: Sendable, Equatable {
    /// The engine's text after the phrase, for the session it starts; may be empty.
    public var remainder: String
    /// Letter edits between the phrase and what the engine wrote for it.
    public var distance: Int

    public init(remainder: String, distance: Int) {
        self.remainder = remainder
        self.distance = distance
    }
}

/// Why a wake phrase cannot be used; the description names the fix.
public struct WakePhraseRefusal: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String

    public init(_ description: String) { self.description = description }
}
