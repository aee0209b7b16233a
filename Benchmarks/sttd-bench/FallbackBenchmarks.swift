import Capture
import Dictation
import Foundation
import Logging
import Recognition
import Synchronization
import TestSupport

/// Row 16: the streaming client with pocketsphinx behind it, as `fallback = "local"` builds it,
/// against the loopback server killed mid-stream while audio arrives in real time.
enum FallbackBenchmarks {
    static let trials = 20

    /// Events with the moment each arrived.
    final class TimedEvents: RecognitionEventSink {
        let events = Mutex<[(RecognitionEvent, ContinuousClock.Instant)]>([])
        func deliver(_ event: RecognitionEvent) { events.withLock { $0.append((event, .now)) } }

        var finals: [String] {
            events.withLock { events in
                events.compactMap { event, _ in
                    guard case .result(let result) = event, result.isFinal else { return nil }
                    let text = Transcript.normalized(result.text)
                    return text.isEmpty ? nil : text
                }
            }
        }

        /// When the first final with words came after the fallback.
        var firstOfflineFinal: ContinuousClock.Instant? {
            events.withLock { events in
                guard let fellBack = events.firstIndex(where: { if case .fellBack = $0.0 { true } else { false } })
                else { return nil }
                return events[fellBack...].first { event, _ in
                    guard case .result(let result) = event else { return false }
                    return result.isFinal && !result.text.isEmpty
                }?.1
            }
        }
    }

    static func fallbackSeam() async throws -> Row {
        let model = try requireFile("/usr/share/pocketsphinx/model/en-us", package: "pocketsphinx-en-us")
        let logger = Logger(label: "bench")
        let offline = PocketSphinxRecognizer(modelDirectory: model, logger: logger)
        try await offline.load()
        // Speech, then 3 s of silence: the microphone goes on after the server is gone.
        let audio = try wavSamples(try LibriVox.recordings()[0].path) + [Int16](repeating: 0, count: 48_000)
        let after = Duration.milliseconds(3000)
        var takeovers: [Double] = []
        var lost = 0
        var doubled = 0
        var words = 0
        for trial in 0..<trials {
            var script = DeepgramTestServer.Script()
            // Killed 2.05 ... 5.45 s into the stream, mid-word: seams at 2 ... 5 s.
            let killAt = 2 * 32_000 + trial * 5_440 + 1_600
            script.dieAfterBytes = killAt
            let server = try await DeepgramTestServer(script: script)
            let streaming = DeepgramRecognizer(
                settings: DeepgramSettings(url: server.url(), connectTimeout: after),
                environment: ["STTD_API_KEY": script.key], logger: logger)
            let recognizer = FallbackRecognizer(primary: streaming, fallback: offline, after: after, logger: logger)
            let events = TimedEvents()
            let session = try await recognizer.startStream(StreamOptions(), events: events)
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask { try await session.run() }
                // Real time, 100 ms chunks, as capture delivers them.
                let started = ContinuousClock.now
                for (index, start) in stride(from: 0, to: audio.count, by: 1600).enumerated() {
                    try await Task.sleep(until: started + .milliseconds(100 * index), clock: .continuous)
                    session.send(AudioChunk(samples: Array(audio[start..<min(start + 1600, audio.count)])))
                }
                session.finish()
                try await group.waitForAll()
            }
            guard let died = server.diedAt, let first = events.firstOfflineFinal else {
                throw BenchError("trial \(trial): the server did not die or no offline final came")
            }
            takeovers.append(milliseconds(first - died))
            let seam = server.finalsSent.count * AudioFormat.sampleRate
            let expected =
                (server.finalsSent + (try await offlineFinals(audio[seam...], offline))).joined(separator: " ")
                .split(separator: " ")
            let got = events.finals.joined(separator: " ").split(separator: " ")
            let common = commonWords(Array(expected), Array(got))
            words += expected.count
            lost += expected.count - common
            doubled += got.count - common
        }
        return Row(
            number: 16,
            name:
                "offline fallback: loopback server killed mid-utterance (no close frame, later connections refused), \(trials) trials, audio in real time, fallback_after_ms = 3000, pocketsphinx",
            result:
                "connection lost → first offline final p50 \(format(percentile(takeovers, 50), 0)) ms, max \(format(takeovers.max() ?? 0, 0)) ms (of which 3000 ms is fallback_after_ms); at the seam \(lost) of \(words) words lost, \(doubled) doubled",
            aim: "0 lost, 0 doubled",
            values: [
                "trials": Double(trials), "takeover_p50_ms": percentile(takeovers, 50),
                "takeover_max_ms": takeovers.max() ?? 0, "words": Double(words), "lost": Double(lost),
                "doubled": Double(doubled),
            ])
    }

    /// The offline engine's own finals for exactly these samples.
    static func offlineFinals(_ samples: ArraySlice<Int16>, _ recognizer: any Recognizer) async throws -> [String] {
        let finals = FinalsSink()
        try await recognize(samples, with: recognizer, events: finals)
        return finals.texts
    }

    /// The longest common subsequence of two word lists, in words.
    static func commonWords(_ a: [Substring], _ b: [Substring]) -> Int {
        var previous = [Int](repeating: 0, count: b.count + 1)
        for word in a {
            var current = [0]
            for (j, other) in b.enumerated() {
                current.append(word == other ? previous[j] + 1 : max(previous[j + 1], current[j]))
            }
            previous = current
        }
        return previous[b.count]
    }
}
