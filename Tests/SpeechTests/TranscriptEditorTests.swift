import Dictation
import Recognition
import Testing

@testable import Speech

/// The transcript editor on its own: results in, the transcript and the effects the core carries
/// out, in order. No actor, no engine, no desktop.
@Suite("Transcript editor")
struct TranscriptEditorTests {
    typealias Effect = TranscriptEditor.Effect
    static let dictation = Dictation(rules: DictationRules())

    static func final(_ text: String, endsUtterance: Bool = true) -> RecognitionResult {
        RecognitionResult(text: text, isFinal: true, endsUtterance: endsUtterance)
    }

    static func interim(_ text: String) -> RecognitionResult { RecognitionResult(text: text, isFinal: false) }

    static func published(_ text: String, segment: String, isFinal: Bool) -> Effect {
        .publish(.transcript(text, update: TranscriptUpdate(segment: segment, isFinal: isFinal)))
    }

    @Test func aFinalIsStoredThenTypedThenPublished() {
        var editor = TranscriptEditor()
        let one = Self.final("One.")
        #expect(
            editor.apply(one, dictation: Self.dictation) == [
                .store("One.", of: one), .type("One."), Self.published("One.", segment: "One.", isFinal: true),
            ])
        let two = Self.final("Two.")
        #expect(
            editor.apply(two, dictation: Self.dictation) == [
                .store("Two.", of: two), .type(" Two."), Self.published("One. Two.", segment: "Two.", isFinal: true),
            ])
        #expect(editor.transcript.finalText == "One. Two.")
    }

    @Test func anInterimIsShownWithItsSeparatorOnlyWhenItChanges() {
        var editor = TranscriptEditor()
        _ = editor.apply(Self.final("One."), dictation: Self.dictation)
        #expect(
            editor.apply(Self.interim("two new line"), dictation: Self.dictation) == [
                .showInterim(" two"), Self.published("One. two", segment: "two", isFinal: false),
            ])
        #expect(editor.apply(Self.interim("two new line"), dictation: Self.dictation) == [])
        #expect(editor.rawInterim == "two new line")
        #expect(editor.transcript.text == "One. two")
    }

    @Test func commandsPressKeysRetractAndStop() {
        var editor = TranscriptEditor()
        _ = editor.apply(Self.final("Hello."), dictation: Self.dictation)
        #expect(
            editor.apply(Self.final("Scratch that."), dictation: Self.dictation) == [
                .retract(typed: "Hello."), .publish(.retracted("", removed: "Hello.")),
            ])
        #expect(editor.apply(Self.final("Press enter."), dictation: Self.dictation) == [.press(.enter)])
        #expect(editor.apply(Self.final("Scratch that."), dictation: Self.dictation) == [.nothingToRetract])
        #expect(editor.apply(Self.final("Stop listening."), dictation: Self.dictation) == [.stopListening])
        #expect(editor.transcript.text == "")
    }

    @Test func anInterimShownForACommandGoesWithAnEmptyFinal() {
        var editor = TranscriptEditor()
        _ = editor.apply(Self.final("One."), dictation: Self.dictation)
        _ = editor.apply(Self.interim("press"), dictation: Self.dictation)
        #expect(editor.transcript.interim == "press")
        #expect(
            editor.apply(Self.final("Press enter."), dictation: Self.dictation) == [
                .showInterim(""), Self.published("One.", segment: "", isFinal: true), .press(.enter),
            ])
    }

    /// A command final whose utterance may go on waits: text if more words follow, the command
    /// once the utterance ends.
    @Test func aCommandIsHeldUntilItsUtteranceEnds() {
        var editor = TranscriptEditor()
        let held = Self.final("Press enter.", endsUtterance: false)
        #expect(editor.apply(held, dictation: Self.dictation) == [])
        #expect(editor.heldCommand == held)
        #expect(editor.utteranceEnded(dictation: Self.dictation) == [.press(.enter)])
        #expect(editor.heldCommand == nil)

        _ = editor.apply(held, dictation: Self.dictation)
        let more = Self.final("Please.")
        #expect(
            editor.apply(more, dictation: Self.dictation) == [
                .store("Press enter.", of: held), .type("Press enter."),
                Self.published("Press enter.", segment: "Press enter.", isFinal: true),
                .store("Please.", of: more), .type(" Please."),
                Self.published("Press enter. Please.", segment: "Please.", isFinal: true),
            ])
        #expect(!editor.utteranceOpen, "the second final ended the utterance")
    }

    @Test func aFinalWithoutItsEndKeepsTheUtteranceOpen() {
        var editor = TranscriptEditor()
        _ = editor.apply(Self.final("Please read it before you", endsUtterance: false), dictation: Self.dictation)
        #expect(editor.utteranceOpen)
        let rest = Self.final("submit, press enter.")
        #expect(
            editor.apply(rest, dictation: Self.dictation) == [
                .store("submit, press enter.", of: rest), .type(" submit, press enter."),
                Self.published(
                    "Please read it before you submit, press enter.", segment: "submit, press enter.", isFinal: true),
            ],
            "inside an utterance a command word is text")
        #expect(!editor.utteranceOpen)
    }

    @Test func theSessionsEndPromotesTheInterimAndStopsNothing() {
        var editor = TranscriptEditor()
        #expect(editor.promoteInterim(dictation: Self.dictation) == [])
        _ = editor.apply(Self.interim("last words"), dictation: Self.dictation)
        let promoted = RecognitionResult(text: "last words", isFinal: true)
        #expect(
            editor.promoteInterim(dictation: Self.dictation) == [
                .store("last words", of: promoted), .type("last words"),
                Self.published("last words", segment: "last words", isFinal: true),
            ])
        #expect(editor.rawInterim == "")

        #expect(
            editor.apply(Self.interim("stop listening"), dictation: Self.dictation) == [],
            "a command shows no words")
        #expect(editor.promoteInterim(dictation: Self.dictation) == [], "\"stop listening\" has nothing left to stop")
        #expect(editor.rawInterim == "")
    }

    @Test func droppingTheInterimClearsItsWords() {
        var editor = TranscriptEditor()
        #expect(editor.dropInterim() == [])
        _ = editor.apply(Self.final("One."), dictation: Self.dictation)
        _ = editor.apply(Self.interim("two"), dictation: Self.dictation)
        #expect(editor.dropInterim() == [.showInterim(""), .publish(.transcript("One.", update: nil))])
        #expect(editor.rawInterim == "")
        #expect(editor.promoteInterim(dictation: Self.dictation) == [], "nothing is left to promote")
    }

    @Test func clearingKeepsTheUtteranceAndResetStartsAfresh() {
        var editor = TranscriptEditor()
        _ = editor.apply(Self.final("One.", endsUtterance: false), dictation: Self.dictation)
        #expect(
            editor.clearTranscript() == [.showInterim(""), Self.published("", segment: "", isFinal: true)])
        #expect(editor.transcript.text == "")
        #expect(editor.utteranceOpen)
        editor.reset()
        #expect(!editor.utteranceOpen)
        #expect(editor.heldCommand == nil)
    }
}
