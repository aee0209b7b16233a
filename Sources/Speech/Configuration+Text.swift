import ConfigFile
import Dictation
import TOMLKit

extension Configuration {
    /// The `[text]` table: voice commands, spoken punctuation, replacements, vocabulary.
    public struct Text: Sendable, Equatable {
        /// Voice commands ("new line", "scratch that", "press enter", "stop listening").
        public var commands = true
        /// Spoken punctuation; nil: on for engines that write no punctuation (pocketsphinx).
        public var spokenPunctuation: Bool?
        /// Spoken words or phrases → written (empty: deleted).
        public var replacements: [Replacement] = []
        /// Names and terms: keyterms for streaming backends, near-miss corrections offline.
        public var vocabulary: [String] = []
        /// `[text.phrases.LANG]`: phrases by action, per language tag as written.
        public var phrases: [String: [SpokenAction: [String]]] = [:]

        /// At most this many vocabulary terms, each at most ``termBytes`` (as for `keyterms`).
        public static let termLimit = 100
        public static let termBytes = 200

        /// The rules for a session in `language` on an engine that punctuates or not.
        public func rules(language: String, enginePunctuates: Bool, offline: Bool) -> DictationRules {
            let primary = String(language.lowercased().split(separator: "-").first ?? "")
            let table =
                phrases.first { $0.key.lowercased() == language.lowercased() }?.value
                ?? phrases.first { $0.key.lowercased() == primary }?.value
            let book = primary == "en" ? PhraseBook.english.replacing(table ?? [:]) : PhraseBook(table ?? [:])
            return DictationRules(
                commands: commands, spokenPunctuation: spokenPunctuation ?? !enginePunctuates, phrases: book,
                replacements: replacements, vocabulary: offline ? vocabulary : [])
        }
    }

    mutating func readText(_ reader: inout TableReader) throws(ConfigurationError) {
        guard let table = try reader.table("text") else { return }
        var textReader = TableReader(table: table, prefix: "text.")
        text.commands = try textReader.bool("commands", default: text.commands)
        text.spokenPunctuation = try textReader.optionalBool("spoken_punctuation")
        text.replacements = []
        for (spoken, written) in try textReader.strings(table: "replacements") {
            guard let replacement = Replacement(spoken: spoken, written: written) else {
                throw ConfigurationError(
                    "text.replacements has an entry \"\(spoken)\" without words to match; remove it.")
            }
            text.replacements.append(replacement)
        }
        text.vocabulary = try textReader.stringList("vocabulary")
        guard text.vocabulary.count <= Text.termLimit,
            text.vocabulary.allSatisfy({ !$0.isEmpty && $0.utf8.count <= Text.termBytes })
        else {
            throw ConfigurationError(
                "text.vocabulary takes up to \(Text.termLimit) non-empty terms of at most \(Text.termBytes) bytes each."
            )
        }
        if let phrasesTable = try textReader.table("phrases") {
            for language in phrasesTable.keys.sorted() {
                guard let languageTable = phrasesTable[language]?.table else {
                    throw ConfigurationError(
                        "text.phrases.\(language) must be a table of phrases, e.g. [text.phrases.\(language)] new_line = [\"new line\"]."
                    )
                }
                var languageReader = TableReader(table: languageTable, prefix: "text.phrases.\(language).")
                var actions: [SpokenAction: [String]] = [:]
                for name in languageTable.keys.sorted() {
                    guard let action = SpokenAction(name: name) else {
                        let known = SpokenAction.all.map(\.name).joined(separator: ", ")
                        throw ConfigurationError(
                            "text.phrases.\(language).\(name) is not an action; use one of \(known).")
                    }
                    actions[action] = try languageReader.stringList(name)
                }
                text.phrases[language] = actions
            }
        }
        try textReader.refuseUnknownKeys()
    }
}
