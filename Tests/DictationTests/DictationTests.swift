import Testing

@testable import Dictation

@Suite struct GrammarTests {
    static let commands = Dictation(rules: DictationRules())
    static let punctuating = Dictation(rules: DictationRules(spokenPunctuation: true))

    /// Phrase → edits with commands on, spoken punctuation off (an engine that punctuates).
    @Test(arguments: [
        ("new line", [Edit.text("\n")]),
        ("New line.", [.text("\n")]),
        ("Young man, new line.", [.text("Young man\n")]),
        ("He asked why? New line.", [.text("He asked why?\n")]),
        ("It is done. New paragraph.", [.text("It is done.\n\n")]),
        ("We need a new line of products.", [.text("We need a new line of products.")]),
        ("A new line", [.text("A\n")]),
        ("Scratch that.", [.scratchThat]),
        ("delete that", [.scratchThat]),
        // Keys, deletions and stops count only as an utterance of their own (issue 37).
        ("I went to the store, scratch that.", [.text("I went to the store, scratch that.")]),
        ("Hello there, new line, scratch that.", [.text("Hello there, new line, scratch that.")]),
        ("Can you delete that?", [.text("Can you delete that?")]),
        ("Please read it before you submit.", [.text("Please read it before you submit.")]),
        ("Please scratch that record.", [.text("Please scratch that record.")]),
        ("press enter", [.press(.enter)]),
        ("Send it, submit.", [.text("Send it, submit.")]),
        ("Name, press tab.", [.text("Name, press tab.")]),
        ("Press page down.", [.press(.pageDown)]),
        ("Thanks, new line, press enter.", [.text("Thanks, new line, press enter.")]),
        ("New line, press enter.", [.text("\n"), .press(.enter)]),
        ("Press enter, new line.", [.press(.enter), .text("\n")]),
        ("Stop listening.", [.stopListening]),
        ("That is all, stop listening.", [.text("That is all, stop listening.")]),
        ("Scratch that, stop listening.", [.scratchThat, .stopListening]),
        ("Literal new line.", [.text("new line.")]),
        ("Type literal scratch that", [.text("Type scratch that")]),
        ("literal new line submit", [.text("new line submit")]),
        ("a literal translation", [.text("a literal translation")]),
        ("comma", [.text("comma")]),
        ("", []),
    ])
    func commandsEndAnUtterance(final: String, edits: [Edit]) {
        #expect(Self.commands.edits(for: final) == edits)
    }

    /// A final that is not an utterance of its own (a streaming server's `is_final` before its
    /// `speech_final`): layout words still count, keys, deletions and stops are text.
    @Test(arguments: [
        ("press enter", [Edit.text("press enter")]),
        ("Submit.", [.text("Submit.")]),
        ("scratch that", [.text("scratch that")]),
        ("Stop listening.", [.text("Stop listening.")]),
        ("new line", [.text("\n")]),
        ("Thanks, new line.", [.text("Thanks\n")]),
    ])
    func partOfALongerUtteranceOnlyLayoutWordsCount(final: String, edits: [Edit]) {
        #expect(Self.commands.edits(for: final, wholeUtterance: false) == edits)
    }

    @Test func onlyKeyDeleteOrStopCommandsWaitForTheUtterancesEnd() {
        #expect(Self.commands.isOnlyOwnUtteranceCommands("Press enter."))
        #expect(Self.commands.isOnlyOwnUtteranceCommands("new line submit"))
        #expect(!Self.commands.isOnlyOwnUtteranceCommands("new line"))
        #expect(!Self.commands.isOnlyOwnUtteranceCommands("Please submit."))
    }

    /// Spoken punctuation (pocketsphinx writes lowercase words without marks).
    @Test(arguments: [
        ("hello comma world period", "hello, world."),
        ("is it done question mark yes exclamation mark", "is it done? Yes!"),
        ("dear sir colon", "dear sir:"),
        ("one semicolon two full stop", "one; two."),
        ("he said open quote hi close quote", "he said \"hi\""),
        ("cap john went to all caps nasa", "John went to NASA"),
        ("Hello, comma world.", "Hello, world."),
        ("comma", ","),
        ("literal comma is a mark", "comma is a mark"),
        ("wear a cap", "wear a cap"),
        ("exclamation point", "!"),
    ])
    func spokenPunctuation(final: String, text: String) {
        #expect(Self.punctuating.edits(for: final) == (text.isEmpty ? [] : [.text(text)]))
    }

    @Test func spokenPunctuationIsOffForEnginesThatPunctuate() {
        #expect(Self.commands.edits(for: "hello comma world") == [.text("hello comma world")])
    }

    @Test func commandsOffLeaveEveryWord() {
        let off = Dictation(rules: DictationRules(commands: false))
        #expect(off.edits(for: "Hello, new line.") == [.text("Hello, new line.")])
        #expect(off.edits(for: "scratch that") == [.text("scratch that")])
    }

    @Test func interimsShowTheirWordsWithoutCommands() {
        #expect(Self.commands.preview("hello there new line") == "hello there")
        #expect(Self.commands.preview("hello scratch that") == "hello scratch that")
        #expect(Self.commands.preview("scratch that") == "")
        #expect(Self.commands.preview("press enter", wholeUtterance: false) == "press enter")
        #expect(Self.punctuating.preview("hello comma world") == "hello, world")
    }

    @Test func configuredPhrasesReplaceTheBuiltInOnes() {
        let book = PhraseBook.english.replacing([.press(.enter): ["send it now"]])
        let dictation = Dictation(rules: DictationRules(phrases: book))
        #expect(dictation.edits(for: "Send it now.") == [.press(.enter)])
        #expect(dictation.edits(for: "Done, send it now.") == [.text("Done, send it now.")])
        #expect(dictation.edits(for: "Submit.") == [.text("Submit.")])
        #expect(dictation.edits(for: "new line") == [.text("\n")])
        let german = Dictation(rules: DictationRules(phrases: PhraseBook([.newLine: ["neue Zeile"]])))
        #expect(german.edits(for: "Hallo, neue Zeile.") == [.text("Hallo\n")])
        #expect(german.edits(for: "new line") == [.text("new line")])
    }
}

@Suite struct ReplacementTests {
    static func dictation(_ table: [(String, String)]) -> Dictation {
        Dictation(rules: DictationRules(replacements: table.compactMap { Replacement(spoken: $0.0, written: $0.1) }))
    }

    @Test(arguments: [
        ("we are gonna win", "we are going to win"),
        ("Gonna win.", "Going to win."),
        ("GONNA", "GOING TO"),
        ("I use sttd daily", "I use STTD daily"),
        ("Sttd, yes.", "STTD, yes."),
        ("the sttds", "the sttds"),
        ("Um, hello there.", "hello there."),
        ("I said, um, hello.", "I said, hello."),
        ("Well um.", "Well."),
        ("open a i is here", "OpenAI is here"),
    ])
    func replacementsApplyOnWordBoundariesKeepingCase(final: String, text: String) {
        let dictation = Self.dictation([
            ("gonna", "going to"), ("sttd", "STTD"), ("um", ""), ("open a i", "OpenAI"),
        ])
        #expect(dictation.edits(for: final) == (text.isEmpty ? [] : [.text(text)]))
    }

    @Test func replacementsDoNotHideCommands() {
        let dictation = Self.dictation([("line", "LINE")])
        #expect(dictation.edits(for: "first line, new line") == [.text("first LINE\n")])
    }
}

@Suite struct VocabularyTests {
    static let dictation = Dictation(
        rules: DictationRules(vocabulary: ["PipeWire", "Kubernetes", "sttd", "Debian", "Wayland"]))

    @Test(arguments: [
        ("we use pipe wire here", "we use PipeWire here"),
        ("deploy to kuber nettes", "deploy to Kubernetes"),
        ("on kubernetes", "on Kubernetes"),
        ("pipe wired", "PipeWire"),
        ("way land compositors", "Wayland compositors"),
        // One word on a near spelling is an ordinary word: left alone.
        ("the median value", "the median value"),
        ("a pipe, wire and more", "a pipe, wire and more"),
        ("way lands", "way lands"),
    ])
    func nearMissesOfTermsAreCorrectedOrdinaryWordsAreNot(final: String, text: String) {
        #expect(Self.dictation.edits(for: final) == [.text(text)])
    }

    @Test func oneEditDistance() {
        func within(_ a: String, _ b: String) -> Bool { Vocabulary.withinOneEdit(Array(a), Array(b)) }
        #expect(within("pipewire", "pipewire"))
        #expect(within("pipewired", "pipewire"))
        #expect(within("pipwire", "pipewire"))
        #expect(within("pipewier", "pipewire"))
        #expect(within("pipewore", "pipewire"))
        #expect(!within("pipewxyz", "pipewire"))
        #expect(!within("pipe", "pipewire"))
    }
}

@Suite struct SpacingTests {
    @Test(arguments: [
        (["hello", "world"], "hello world"),
        (["hello\n", "world"], "hello\nworld"),
        (["hello", "\n"], "hello\n"),
        (["hello", ",", "world"], "hello, world"),
        (["(", "aside", ")"], "(aside)"),
        (["", "a", "", "b"], "a b"),
    ])
    func piecesJoinWithOneRule(pieces: [String], text: String) {
        #expect(Spacing.join(pieces) == text)
    }
}

@Suite struct TranscriptTests {
    @Test func finalsAreStableAndInterimIsReplaced() {
        var transcript = Transcript()
        let shown = transcript.setInterim("hello")
        #expect(shown)
        #expect(transcript.text == "hello")
        let shownAgain = transcript.setInterim("hello")
        #expect(!shownAgain, "no visible change")
        let typed = transcript.append("hello world")
        #expect(typed == "hello world")
        #expect(transcript.interim.isEmpty)
        transcript.setInterim("again")
        #expect(transcript.text == "hello world again")
        #expect(transcript.finalText == "hello world")
        let typedAgain = transcript.append("again and")
        #expect(typedAgain == " again and")
        #expect(transcript.finals == ["hello world", "again and"])
    }

    @Test func lineBreaksAndMarksJoinWithoutSpaces() {
        var transcript = Transcript()
        let typed = ["Dear John\n", "How are you", ",", "\n\n"].map { transcript.append($0) }
        #expect(typed == ["Dear John\n", "How are you", ",", "\n\n"])
        transcript.setInterim("Bye")
        #expect(transcript.text == "Dear John\nHow are you,\n\nBye")
        #expect(transcript.finalText == "Dear John\nHow are you,\n\n")
    }

    @Test func scratchThatRemovesTheLastFinalButNotPastAKeyPress() {
        var transcript = Transcript()
        transcript.append("first")
        transcript.seal()
        transcript.append("second")
        transcript.append("third\n")
        let third = transcript.retractLast()
        #expect(third?.final == "third\n" && third?.typed == " third\n")
        let second = transcript.retractLast()
        #expect(second?.final == "second" && second?.typed == " second")
        let first = transcript.retractLast()
        #expect(first == nil, "first was sent with a key press")
        #expect(transcript.finalText == "first")
    }

    @Test func dropAndReset() {
        var transcript = Transcript()
        transcript.append("kept")
        transcript.setInterim("dropped")
        transcript.dropInterim()
        #expect(transcript.text == "kept")
        transcript.reset()
        #expect(transcript == Transcript())
    }
}

@Suite struct WordTests {
    @Test(arguments: [
        "café Straße ✓ naïve 😀 café", "a - b", "Hello, world.", "(aside) and \"quoted\"", "x , y", "...",
        "3.5 kg, 20% off",
    ])
    func textWithoutCommandsIsWrittenAsItCame(text: String) {
        #expect(Dictation(rules: DictationRules(spokenPunctuation: true)).edits(for: text) == [.text(text)])
    }
}
