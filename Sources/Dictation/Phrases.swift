/// A key a voice command presses.
public enum Key: String, Sendable, CaseIterable {
    case enter, tab, escape, backspace, delete, up, down, left, right, home, end
    case pageUp = "page_up"
    case pageDown = "page_down"

    /// The X keysym name (xdotool, wtype, IBus).
    public var keysym: String {
        switch self {
        case .enter: "Return"
        case .tab: "Tab"
        case .escape: "Escape"
        case .backspace: "BackSpace"
        case .delete: "Delete"
        case .up: "Up"
        case .down: "Down"
        case .left: "Left"
        case .right: "Right"
        case .home: "Home"
        case .end: "End"
        case .pageUp: "Prior"
        case .pageDown: "Next"
        }
    }
}

/// What a spoken phrase means; the raw value is its name in `[text.phrases.LANG]`.
public enum SpokenAction: Hashable, Sendable {
    case newLine, newParagraph, scratchThat, stopListening, literal
    case press(Key)
    /// A punctuation mark (spoken punctuation).
    case mark(Mark)
    /// "cap <word>", "all caps <word>" (spoken punctuation).
    case capitalize, upperCase

    /// A punctuation mark and how it attaches.
    public enum Mark: String, Sendable, CaseIterable {
        case comma, period, questionMark = "question_mark", exclamationMark = "exclamation_mark", colon, semicolon
        case openQuote = "open_quote", closeQuote = "close_quote"

        var text: String {
            switch self {
            case .comma: ","
            case .period: "."
            case .questionMark: "?"
            case .exclamationMark: "!"
            case .colon: ":"
            case .semicolon: ";"
            case .openQuote, .closeQuote: "\""
            }
        }

        /// Ends a sentence: the next word is capitalized.
        var endsSentence: Bool { self == .period || self == .questionMark || self == .exclamationMark }
    }

    /// Commands: whole utterances or their ends. The others are spoken punctuation, anywhere.
    public var isCommand: Bool {
        switch self {
        case .newLine, .newParagraph, .scratchThat, .stopListening, .press: true
        case .literal, .mark, .capitalize, .upperCase: false
        }
    }

    /// Presses a key, deletes text or ends the session: counts only as an utterance of its own,
    /// so that a sentence that happens to end in "submit" or "delete that" stays text.
    public var needsOwnUtterance: Bool {
        switch self {
        case .press, .scratchThat, .stopListening: true
        case .newLine, .newParagraph, .literal, .mark, .capitalize, .upperCase: false
        }
    }

    /// Every action, for the config's names.
    public static let all: [SpokenAction] =
        [.newLine, .newParagraph, .scratchThat, .stopListening, .literal, .capitalize, .upperCase]
        + Key.allCases.map { .press($0) } + Mark.allCases.map { .mark($0) }

    /// The name in `[text.phrases.LANG]`.
    public var name: String {
        switch self {
        case .newLine: "new_line"
        case .newParagraph: "new_paragraph"
        case .scratchThat: "scratch_that"
        case .stopListening: "stop_listening"
        case .literal: "literal"
        case .capitalize: "cap"
        case .upperCase: "all_caps"
        case .press(let key): "press_\(key.rawValue)"
        case .mark(let mark): mark.rawValue
        }
    }

    public init?(name: String) {
        guard let action = Self.all.first(where: { $0.name == name }) else { return nil }
        self = action
    }
}

/// The phrases of one language: each a list of lowercase words, mapped to what it means.
public struct PhraseBook: Sendable, Equatable {
    /// Phrase → action; a phrase's words are lowercase and without punctuation.
    public private(set) var actions: [[String]: SpokenAction] = [:]
    /// The longest phrase, in words.
    public private(set) var longest = 0

    public init(_ phrases: [SpokenAction: [String]]) {
        for (action, spoken) in phrases {
            for phrase in spoken {
                let words = Words.keys(of: phrase)
                guard !words.isEmpty else { continue }
                actions[words] = action
                longest = max(longest, words.count)
            }
        }
    }

    /// The phrases of `action`, e.g. for the docs.
    public func phrases(of action: SpokenAction) -> [String] {
        actions.filter { $0.value == action }.map { $0.key.joined(separator: " ") }.sorted()
    }

    /// The built-in English phrases.
    public static let english = PhraseBook([
        .newLine: ["new line", "newline"],
        .newParagraph: ["new paragraph"],
        .scratchThat: ["scratch that", "delete that"],
        .stopListening: ["stop listening"],
        .literal: ["literal"],
        .press(.enter): ["press enter", "press return", "submit"],
        .press(.tab): ["press tab"],
        .press(.escape): ["press escape"],
        .press(.backspace): ["press backspace"],
        .press(.delete): ["press delete"],
        .press(.up): ["press up"],
        .press(.down): ["press down"],
        .press(.left): ["press left"],
        .press(.right): ["press right"],
        .press(.home): ["press home"],
        .press(.end): ["press end"],
        .press(.pageUp): ["press page up"],
        .press(.pageDown): ["press page down"],
        .mark(.comma): ["comma"],
        .mark(.period): ["period", "full stop"],
        .mark(.questionMark): ["question mark"],
        .mark(.exclamationMark): ["exclamation mark", "exclamation point"],
        .mark(.colon): ["colon"],
        .mark(.semicolon): ["semicolon"],
        .mark(.openQuote): ["open quote"],
        .mark(.closeQuote): ["close quote"],
        .capitalize: ["cap"],
        .upperCase: ["all caps"],
    ])

    /// `english` with some actions' phrases replaced (a config table for an English language).
    public func replacing(_ phrases: [SpokenAction: [String]]) -> PhraseBook {
        var merged: [SpokenAction: [String]] = [:]
        for (words, action) in actions { merged[action, default: []].append(words.joined(separator: " ")) }
        for (action, spoken) in phrases { merged[action] = spoken }
        return PhraseBook(merged)
    }
}
