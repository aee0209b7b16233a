import Recognition
import Testing

@Suite("Transcript assembly")
struct TranscriptTests {
    /// Issue 26, defect 4: what no D-Bus string or terminal may get never enters sttd's text.
    @Test func recognizerTextLosesControlCharacters() {
        let raw =
            "nul\u{0}here esc\u{1B}[31mred\u{7F} c1\u{9B}2J tab\tline\nbreak \u{202E}rtl\u{2069} \u{FFFF}end café 😀"
        var result = RecognitionResult(text: raw, isFinal: true)
        #expect(result.text == "nulhere esc[31mred c12J tab line break rtl end café 😀")
        result.text = "late\u{0}r"
        #expect(result.text == "later", "assigned text is cleaned too")
        #expect(RecognitionText.sanitized("plain words, kept.") == "plain words, kept.")
        var transcript = Transcript()
        transcript.apply(RecognitionResult(text: "a\u{0}\u{1B}b", isFinal: true))
        #expect(transcript.text == "ab")
    }

    @Test func finalsAreStableAndInterimIsReplaced() {
        var transcript = Transcript()
        let changed = transcript.apply(RecognitionResult(text: "hello", isFinal: false))
        #expect(changed)
        #expect(transcript.text == "hello")
        transcript.apply(RecognitionResult(text: "hello wor", isFinal: false))
        #expect(transcript.text == "hello wor")
        transcript.apply(RecognitionResult(text: "hello world", isFinal: true))
        #expect(transcript.text == "hello world")
        #expect(transcript.interim.isEmpty)
        transcript.apply(RecognitionResult(text: "again", isFinal: false))
        #expect(transcript.text == "hello world again")
        #expect(transcript.finalText == "hello world")
        transcript.apply(RecognitionResult(text: "  again  and ", isFinal: true))
        #expect(transcript.finals == ["hello world", "again and"])
        #expect(transcript.text == "hello world again and")
    }

    @Test func emptyFinalClearsInterimWithoutAddingASegment() {
        var transcript = Transcript()
        transcript.apply(RecognitionResult(text: "uh", isFinal: false))
        let cleared = transcript.apply(RecognitionResult(text: "", isFinal: true))
        #expect(cleared)
        #expect(transcript.finals.isEmpty)
        #expect(transcript.text.isEmpty)
        let again = transcript.apply(RecognitionResult(text: "", isFinal: true))
        #expect(!again, "no visible change")
    }

    @Test func dropAndReset() {
        var transcript = Transcript()
        transcript.apply(RecognitionResult(text: "kept", isFinal: true))
        transcript.apply(RecognitionResult(text: "dropped", isFinal: false))
        transcript.dropInterim()
        #expect(transcript.text == "kept")
        transcript.reset()
        #expect(transcript == Transcript())
    }
}
