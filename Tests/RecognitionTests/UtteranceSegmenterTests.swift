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
}
