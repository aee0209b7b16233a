import Recognition
import Testing

@Suite("Transcript assembly")
struct TranscriptTests {
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
