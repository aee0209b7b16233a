import Capture
import Foundation
import TestSupport
import Testing

@testable import Recognition

/// Listening for a wake phrase: the engine decodes only the start of each utterance.
extension SherpaOnnxTests {
    @Test func wakeStreamDecodesOnlyUtteranceStarts() async throws {
        let recognizer = SherpaOnnxRecognizer(settings: try installedSherpa(), logger: logger)
        #expect(recognizer.decodesWakeSegments)
        // "And Mr. John Dashwood had then leisure to consider…", 7 s with no long pause.
        let clip = try wavSamples(try LibriVox.recordings()[0].path)
        let recorder = EventRecorder()
        let options = StreamOptions(interimResults: false, servedTo: "hands-free", wakeSegments: .seconds(3))
        let session = try await recognizer.startStream(options, events: recorder)
        async let failure = runToEnd(session)
        send(clip + silence(1), to: session)
        session.finish()
        if let failure = await failure { throw failure }
        let finals = recorder.results.filter(\.isFinal)
        print("wake finals: \(finals.map { ($0.audioStart ?? -1, $0.audioEnd ?? -1, $0.text) })")
        try #require(!finals.isEmpty)
        var covered = 0.0
        for final in finals {
            let start = try #require(final.audioStart)
            let end = try #require(final.audioEnd)
            #expect(end - start <= 3, "a final of \(end - start) s")
            // To the sample: the session's audio is cut at the wake final's end.
            for time in [start, end] {
                let sample = time * Double(AudioFormat.sampleRate)
                #expect(abs(sample - sample.rounded()) < 1e-6)
            }
            covered += end - start
        }
        let clipSeconds = Double(clip.count) / Double(AudioFormat.sampleRate)
        #expect(covered <= 0.6 * clipSeconds, "finals cover \(covered) s of \(clipSeconds) s")
        #expect(Array(spokenWords(finals[0].text).prefix(3)) == ["and", "mr", "john"], "\(finals[0].text)")
        #expect(recorder.events.last == .speechActivity(false))
    }
}
