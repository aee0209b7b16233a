import Testing

@testable import Recognition

@Suite("Recognizer text")
struct RecognitionTextTests {
    /// Issue 26, defect 4: what no D-Bus string or terminal may get never enters sttd's text.
    @Test func recognizerTextLosesControlCharacters() {
        let raw =
            "nul\u{0}here esc\u{1B}[31mred\u{7F} c1\u{9B}2J tab\tline\nbreak \u{202E}rtl\u{2069} \u{FFFF}end café 😀"
        var result = RecognitionResult(text: raw, isFinal: true)
        #expect(result.text == "nulhere esc[31mred c12J tab line break rtl end café 😀")
        result.text = "late\u{0}r"
        #expect(result.text == "later", "assigned text is cleaned too")
        #expect(RecognitionText.sanitized("plain words, kept.") == "plain words, kept.")
    }
}
