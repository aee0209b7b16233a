import Testing

@testable import Dictation

/// The hands-free wake phrase (issue 42): which engine texts start a session, and which
/// phrases are refused before sttd listens for them.
@Suite struct WakePhraseTests {
    static let startDictation = try! WakePhrase("start dictation")

    /// What engines write for "start dictation" said after a pause; the distance is the
    /// letter edits from "startdictation".
    @Test(arguments: [
        ("Start dictation.", 0),
        ("start dictation", 0),
        ("Star dictation", 1),
        ("Start dick tation", 1),
        ("Start-dictation", 0),
        ("Startdictation.", 0),
        ("Start dictating", 2),
        ("uh, start dictation", 0),
    ])
    func acceptsTheEnginesSlips(_ text: String, _ distance: Int) throws {
        let match = try #require(Self.startDictation.match(text))
        #expect(match.distance == distance)
        #expect(match.remainder == "")
    }

    @Test(arguments: [
        "Start the dictation",
        "stop dictation",
        "start addition",
        "start the dictionary",
        "dictation start",
        "I said start dictation",
        "Restart dictation",
        "start",
        "dictation",
        "",
        "...",
    ])
    func refusesNearMisses(_ text: String) {
        #expect(Self.startDictation.match(text) == nil)
    }

    @Test func normalisesCaseAndPunctuation() throws {
        for text in ["START DICTATION!", "Start, dictation?", "\"Start dictation.\"", "Start dictation's"] {
            #expect(Self.startDictation.match(text)?.distance == (text.hasSuffix("'s") ? 1 : 0), "\(text)")
        }
        let apostrophe = try WakePhrase("don't stop me now")
        #expect(apostrophe.match("Dont stop me now.")?.distance == 0)
        #expect(apostrophe.match("Don’t-stop me now")?.distance == 0)
    }

    @Test func phraseMustBeginTheSegment() {
        #expect(Self.startDictation.match("Please start dictation") == nil)
        #expect(Self.startDictation.match("Now, start dictation.") == nil)
        #expect(Self.startDictation.match("Start dictation, please.")?.remainder == "please.")
    }

    @Test(arguments: ["uh", "Um,", "Okay,", "OK.", "Hey"])
    func oneFillerWordIsSkipped(_ filler: String) throws {
        let match = try #require(Self.startDictation.match("\(filler) start dictation. Hello"))
        #expect(match == WakeMatch(remainder: "Hello", distance: 0))
        #expect(Self.startDictation.match("\(filler) uh start dictation") == nil, "only one filler")
    }

    @Test(arguments: [
        ("Start dictation. Dear Anna,", "Dear Anna,"),
        ("Start dictation, dear Anna, how are you?", "dear Anna, how are you?"),
        ("Start dictation \"Hello,\" she said.", "\"Hello,\" she said."),
        ("Start dick tation. Dear Anna", "Dear Anna"),
        ("Star dictation . Dear Anna", "Dear Anna"),
        ("Start-dictation-now please", "now please"),
        ("Start dictation… and then", "and then"),
        ("uh, start dictation: 3 things", "3 things"),
    ])
    func remainderIsTheEnginesTextAfterThePhrase(_ text: String, _ remainder: String) throws {
        #expect(try #require(Self.startDictation.match(text)).remainder == remainder)
    }

    /// With a word more than the phrase's, the closest count wins, so the remainder keeps the
    /// words the phrase did not take.
    @Test func theClosestWordCountTakesTheWords() throws {
        #expect(try #require(Self.startDictation.match("Start dictation today")).remainder == "today")
        #expect(try #require(Self.startDictation.match("Start dick tation today")).remainder == "today")
    }

    @Test func refusesAnEmptyPhraseNamingTheKeyAndTheRestart() {
        for phrase in ["", "   "] {
            let refusal = #expect(throws: WakePhraseRefusal.self) { try WakePhrase(phrase) }
            #expect(
                refusal?.description
                    == "No wake phrase is set: add `[hands_free] wake_phrase = \"wake up computer\"` to config.toml, then `systemctl --user restart sttd`."
            )
        }
        let marks = #expect(throws: WakePhraseRefusal.self) { try WakePhrase("?!") }
        #expect(marks?.description.hasPrefix("The wake phrase “?!” has no letters or digits") == true)
    }

    @Test(arguments: ["computer", "go", "Dictate!", "abcdefghi"])
    func refusesASingleShortWord(_ phrase: String) {
        let refusal = #expect(throws: WakePhraseRefusal.self) { try WakePhrase(phrase) }
        #expect(
            refusal?.description
                == "“\(phrase)” is a single short word; sttd would wake on every word that sounds like it. Use two words or more, like “wake up computer”: set `[hands_free] wake_phrase` in config.toml, then `systemctl --user restart sttd`."
        )
    }

    @Test func acceptsASingleLongWord() throws {
        let phrase = try WakePhrase("Abracadabra")
        #expect(phrase.phrase == "Abracadabra")
        #expect(phrase.match("Abracadabra.")?.distance == 0)
        #expect(phrase.match("Abra cadabra. Hi")?.remainder == "Hi")
        #expect(phrase.match("Abracadabro")?.distance == 1)
        #expect(phrase.match("Cabracadabra") == nil, "first letters must agree")
        #expect(try WakePhrase("abcdefghij").phrase == "abcdefghij", "10 letters is enough")
        #expect(try WakePhrase("go on").phrase == "go on", "two words of any length")
    }

    @Test(arguments: [
        ("stop listening", "is the voice command “stop listening”"),
        ("Stop listening now", "begins with the voice command “stop listening”"),
        ("scratch that please", "begins with the voice command “scratch that”"),
        ("press page up now", "begins with the voice command “press page up”"),
        ("New-line please", "begins with the voice command “new line”"),
        ("submit this", "begins with the voice command “submit”"),
        ("comma chameleon", "begins with the dictation word “comma”"),
        ("literal start", "begins with the dictation word “literal”"),
    ])
    func refusesVoiceCommands(_ phrase: String, _ expected: String) {
        let refusal = #expect(throws: WakePhraseRefusal.self) { try WakePhrase(phrase) }
        #expect(refusal?.description.contains("“\(phrase)” \(expected)") == true, "\(refusal?.description ?? "")")
        #expect(refusal?.description.hasSuffix("then `systemctl --user restart sttd`.") == true)
    }

    /// The default suggestion itself collides with no voice command, nor does a command
    /// word later in the phrase.
    @Test func acceptsPhrasesThatOnlyContainACommand() throws {
        #expect(try WakePhrase("start dictation").phrase == "start dictation")
        #expect(try WakePhrase("computer new line").phrase == "computer new line")
        #expect(try WakePhrase("capital idea").phrase == "capital idea", "a word, not the command “cap”")
    }

    @Test(arguments: [
        ("one two three four five six", "has 6 words and 22 letters"),
        ("supercalifragilistic expialidocious wonderful", "has 3 words and 43 letters"),
    ])
    func refusesTooLongPhrases(_ phrase: String, _ expected: String) {
        let refusal = #expect(throws: WakePhraseRefusal.self) { try WakePhrase(phrase) }
        #expect(
            refusal?.description.contains(
                "“\(phrase)” \(expected); it may have at most 5 words and 40 letters") == true,
            "\(refusal?.description ?? "")")
    }

    @Test func acceptsTheLongestPhrases() throws {
        #expect(try WakePhrase("one two three four five").phrase == "one two three four five")
        let forty = String(repeating: "abcdefghij", count: 2) + " " + String(repeating: "klmnopqrst", count: 2)
        #expect(try WakePhrase(forty).match(forty.uppercased())?.distance == 0)
    }

    @Test(arguments: [
        ("kitten", "sitting", 3), ("", "abc", 3), ("abc", "", 3), ("flaw", "lawn", 2), ("same", "same", 0),
    ])
    func editDistanceCountsLetterEdits(_ a: String, _ b: String, _ distance: Int) {
        #expect(WakePhrase.editDistance(Array(a), Array(b)) == distance)
    }
}
