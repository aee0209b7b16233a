import Foundation
import Testing

@testable import Recognition

/// Where an utterance begins: a soft onset is kept, the silence before it is not decoded.
@Suite("Utterance segmenter")
struct UtteranceSegmenterTests {
    /// `frames` of 20 ms of a 440 Hz tone at `dbfs` (RMS).
    func tone(_ frames: Int, dbfs: Double) -> [Int16] {
        let amplitude = pow(10, dbfs / 20) * 2.squareRoot() * 32767
        return (0..<frames * UtteranceSegmenter.frame).map { index in
            Int16(amplitude * sin(2 * Double.pi * 440 * Double(index) / 16_000))
        }
    }

    /// The session sample where the utterance that `audio` starts begins.
    func utteranceStart(_ audio: [Int16]) throws -> Int {
        var segmenter = UtteranceSegmenter()
        let events = segmenter.append(audio)
        try #require(events.contains(.started))
        return segmenter.current.start
    }

    @Test func aSoftOnsetIsKeptWithItsLeadAndTheNoiseBeforeIsNot() throws {
        // Room noise at -60 dBFS, 200 ms rising at -52 (under the -48 threshold, 8 dB over the
        // floor), then speech: it starts at frame 60, detected at 62.
        let start = try utteranceStart(tone(50, dbfs: -60) + tone(10, dbfs: -52) + tone(20, dbfs: -20))
        // Back to the rise (frame 50) and 8 frames more; a fixed 500 ms pre-roll would be frame 38.
        #expect(start == 42 * UtteranceSegmenter.frame)
    }

    @Test func digitalSilenceBeforeSpeechIsNotDecoded() throws {
        let zeros = [Int16](repeating: 0, count: 50 * UtteranceSegmenter.frame)
        let start = try utteranceStart(zeros + tone(20, dbfs: -20))
        #expect(start == 50 * UtteranceSegmenter.frame)
        // The lead stops where the digital silence is: 3 frames of room noise before the speech.
        let noisy = try utteranceStart(
            [Int16](repeating: 0, count: 47 * UtteranceSegmenter.frame) + tone(3, dbfs: -70) + tone(20, dbfs: -20))
        #expect(noisy == 47 * UtteranceSegmenter.frame)
    }

    @Test func speechRightAtTheStartKeepsEverything() throws {
        #expect(try utteranceStart(tone(20, dbfs: -20)) == 0)
    }

    /// Issue 37: a long utterance split at a short pause goes on: its head does not end the
    /// utterance (voice commands that need one of their own wait); the end after the hangover does.
    @Test func theHeadOfASplitDoesNotEndTheUtterance() {
        var segmenter = UtteranceSegmenter()
        let silence = [Int16](repeating: 0, count: 15 * UtteranceSegmenter.frame)
        let events = segmenter.append(tone(150, dbfs: -20) + silence + tone(40, dbfs: -20) + silence + silence)
        let finals = events.compactMap { event -> UtteranceSegmenter.Utterance? in
            switch event {
            case .split(let head): head
            case .ended(let utterance): utterance
            default: nil
            }
        }
        #expect(finals.map(\.endsUtterance) == [false, true], "\(events)")
    }

    // MARK: - Wake mode

    func silence(_ frames: Int) -> [Int16] { [Int16](repeating: 0, count: frames * UtteranceSegmenter.frame) }

    /// The events without the utterances' audio: the kind, and where each piece lies (in frames).
    func outline(_ events: [UtteranceSegmenter.Event]) -> [String] {
        func frames(_ piece: UtteranceSegmenter.Utterance) -> String {
            "\(piece.start / UtteranceSegmenter.frame)-\(piece.end / UtteranceSegmenter.frame)"
        }
        return events.map { event in
            switch event {
            case .started: "started"
            case .paused: "paused"
            case .resumed: "resumed"
            case .split(let piece): "split \(frames(piece))"
            case .ended(let piece?): "ended \(frames(piece))"
            case .ended(nil): "ended"
            }
        }
    }

    @Test func wakeModeDecodesOnlyTheFirstThreeSeconds() throws {
        var segmenter = UtteranceSegmenter(wakeSegments: .seconds(3))
        let events = segmenter.append(tone(350, dbfs: -20) + silence(50))
        #expect(events.count == 3, "\(outline(events))")
        #expect(events.first == .started)
        #expect(events.last == .ended(nil), "the rest of the utterance is not decoded")
        guard case .split(let piece) = events.dropFirst().first else {
            Issue.record("no first piece: \(outline(events))")
            return
        }
        #expect(piece.start == 0)
        #expect(piece.samples.count <= 3 * 16_000)
        #expect(piece.samples.count >= 3 * 16_000 / 2, "cut in the second half, at its quietest")
        #expect(segmenter.flush() == nil, "nothing is pending")
        // Without wake mode the same burst is decoded whole.
        var whole = UtteranceSegmenter()
        #expect(outline(whole.append(tone(350, dbfs: -20) + silence(50))) == ["started", "split 0-362", "ended"])
    }

    /// A phrase said with a short pause before what follows: its piece ends 240 ms into the
    /// pause, so the session's audio starts right there. A pause before 1.5 s does not cut (in
    /// noise, the gaps between a phrase's words look like pauses).
    @Test func wakeModeCutsAtAPauseAfterOneAndAHalfSeconds() {
        var segmenter = UtteranceSegmenter(wakeSegments: .seconds(3))
        // 1.6 s of speech, 300 ms of pause (under the 600 ms hangover), 2 s more speech.
        let events = segmenter.append(tone(80, dbfs: -20) + silence(15) + tone(100, dbfs: -20) + silence(50))
        #expect(outline(events) == ["started", "split 0-92", "ended"])
        // 1.2 s, a pause, 1 s: the first pause is too early; the second one cuts.
        var early = UtteranceSegmenter(wakeSegments: .seconds(3))
        let later = early.append(tone(60, dbfs: -20) + silence(15) + tone(50, dbfs: -20) + silence(50))
        #expect(outline(later) == ["started", "paused", "resumed", "split 0-137", "ended"])
        // Without wake mode, 1.6 s is no reason to cut at a pause.
        var normal = UtteranceSegmenter()
        let whole = normal.append(tone(80, dbfs: -20) + silence(15) + tone(100, dbfs: -20) + silence(50))
        #expect(outline(whole) == ["started", "paused", "resumed", "split 0-207", "ended"])
    }

    /// Speech that resumes within the hangover belongs to the skipped utterance; after the
    /// hangover's quiet the next utterance's start is decoded.
    @Test func wakeModeDecodesTheNextUtteranceAfterTheHangover() {
        var segmenter = UtteranceSegmenter(wakeSegments: .seconds(3))
        let events = segmenter.append(
            tone(80, dbfs: -20) + silence(20) + tone(50, dbfs: -20) + silence(50) + tone(80, dbfs: -20)
                + silence(50))
        // Resumed 400 ms after the cut: skipped. Then 1 s of quiet, and a new utterance at frame 200.
        #expect(outline(events) == ["started", "split 0-92", "ended", "started", "split 200-292", "ended"])
    }
}
