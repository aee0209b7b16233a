import Foundation
import Recognition
import Synchronization
import TestSupport

/// Rows 20 and 22: one armed sttd while people talk: LibriVox looped (gain ±6 dB, 0–1 s apart,
/// pink noise at 15 dB SNR every other loop), each clip followed by a near miss of
/// `bench/near-misses.txt` spoken by espeak-ng (4 voices) after a pause, so it begins an utterance
/// as the phrase would. Row 20 is its CPU, row 22 its false wakes.
extension HandsFreeBenchmarks {
    /// What the run saw.
    struct TalkRun: Sendable {
        var seconds: Double
        var cpuPercent: Double
        var nearMissesPlayed: Int
        /// Each false wake with what was playing just before it.
        var falseWakes: [String]
        /// The least distance to the phrase (plan §3) of the engine's own text, over the near
        /// misses and over the first 3 s of each LibriVox clip, decoded in this process.
        var smallestNearMiss: (distance: Int, text: String)
        var smallestLibriVox: (distance: Int, text: String)
        /// Near misses whose engine text the rule would take for the phrase.
        var nearMissesMatching: [String]
    }

    /// The run's length: 600 s, or `STTD_BENCH_TALK_SECONDS` for a shorter trial run.
    static var talkSeconds: Double {
        ProcessInfo.processInfo.environment["STTD_BENCH_TALK_SECONDS"].flatMap(Double.init) ?? 600
    }
    static let nearMissVoices = ["en-us", "en-gb-x-rp", "en-029", "en-us+f3"]
    /// The run, started by whichever of rows 20 and 22 comes first.
    static let talk = Mutex<Task<TalkRun, any Error>?>(nil)

    static func talkRun() async throws -> TalkRun {
        let task = talk.withLock { running in
            if let running { return running }
            let task = Task { try await runTalk(seconds: talkSeconds) }
            running = task
            return task
        }
        return try await task.value
    }

    // 20
    static func armedWhileTalking() async throws -> Row {
        let run = try await talkRun()
        return Row(
            number: 20,
            name:
                "hands-free armed while people talk (\(format(run.seconds, 0)) s of LibriVox and near misses, row 22's run)",
            result: "\(format(run.cpuPercent, 2)) % of a core (sttd and its engine process)",
            aim: "≤ 10 % of a core",
            values: ["cpu_percent": run.cpuPercent, "seconds": run.seconds])
    }

    // 22
    static func falseWakes() async throws -> Row {
        let run = try await talkRun()
        let wakes = run.falseWakes.isEmpty ? "" : ": " + run.falseWakes.prefix(5).joined(separator: "; ")
        let matching =
            run.nearMissesMatching.isEmpty
            ? "" : "; the rule takes \(run.nearMissesMatching.joined(separator: ", ")) for the phrase"
        return Row(
            number: 22,
            name:
                "false wakes (\(format(run.seconds, 0)) s of LibriVox, \(run.nearMissesPlayed) near misses by espeak-ng)",
            result:
                "\(run.falseWakes.count) false wakes\(wakes); smallest d: near misses \(run.smallestNearMiss.distance) (“\(run.smallestNearMiss.text)”), LibriVox utterance starts \(run.smallestLibriVox.distance) (“\(run.smallestLibriVox.text)”)\(matching)",
            aim: "0",
            values: [
                "false_wakes": Double(run.falseWakes.count), "near_misses": Double(run.nearMissesPlayed),
                "smallest_d_near_miss": Double(run.smallestNearMiss.distance),
                "smallest_d_librivox": Double(run.smallestLibriVox.distance), "seconds": run.seconds,
            ])
    }

    /// The phrases of `bench/near-misses.txt`: one a line, `#` starts a comment.
    static func nearMisses() throws -> [String] {
        let path = "bench/near-misses.txt"
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw BenchError("\(path) is missing (run the benchmarks from the repository's root, as make bench does)")
        }
        return text.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }

    static func runTalk(seconds: Double) async throws -> TalkRun {
        let reference = try SherpaReference(settings: try Benchmarks.sherpaSettings())
        let recordings = try LibriVox.recordings()
        let clips = try recordings.map { try wavSamples($0.path) }
        // Everything is spoken and decoded before the measured run: this process's work would
        // otherwise compete with sttd for the two cores.
        var spoken: [(label: String, samples: [Int16])] = []
        var nearest = (distance: Int.max, text: "")
        var matching: [String] = []
        let misses = try nearMisses()
        for (index, text) in (misses + misses + misses + misses).enumerated() {
            let voice = nearMissVoices[index / misses.count]
            let samples = try await SpokenAudio.synthesize(text, voice: voice, wordsPerMinute: 160)
            let label = "“\(text)” (\(voice))"
            spoken.append((label, samples))
            let heard = referenceText(samples, from: 0, to: samples.count, reference)
            let distance = WakeDistance.distance(phrase: phrase, text: heard)
            if distance < nearest.distance { nearest = (distance, heard) }
            if WakeDistance.matches(phrase: phrase, text: heard) { matching.append("\(label) heard as “\(heard)”") }
        }
        var librivox = (distance: Int.max, text: "")
        for clip in clips {
            let heard = reference.decode(clip.prefix(3 * SpokenAudio.sampleRate).map { Float($0) / 32768 })
            let distance = WakeDistance.distance(phrase: phrase, text: heard)
            if distance < librivox.distance { librivox = (distance, heard) }
        }

        let sttd = try await armedService()
        let recorder = try await sttd.record()
        // A false wake's session is cancelled at once, so the listener hears the rest.
        let watcher = Task {
            var handled = 0
            while !Task.isCancelled {
                let starts = stateArrivals(recorder, "starting").count
                if starts > handled {
                    handled = starts
                    _ = try? await sttd.call("CancelTranscribing")
                }
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        defer { watcher.cancel() }
        var generator = SplitMix64(seed: 22)
        var played: [(label: String, at: ContinuousClock.Instant)] = []
        var (audio, loop, nearMissIndex) = (0, 0, 0)
        try await Task.sleep(for: .seconds(2))
        let before = try ProcessSample(pid: sttd.sttd.pid)
        let started = ContinuousClock.now
        while audio < Int(seconds * Double(SpokenAudio.sampleRate)) {
            var samples: [Int16] = []
            var items: [(label: String, offset: Int)] = []
            for (recording, clip) in zip(recordings, clips) {
                samples += SpokenAudio.silence(seconds: Double.random(in: 0...1, using: &generator))
                items.append(("LibriVox \(recording.id)", samples.count))
                let gain = pow(10, Double.random(in: -6...6, using: &generator) / 20)
                samples += clip.map { Int16(clamping: Int((Double($0) * gain).rounded())) }
                // The listener decodes only speech that begins after a pause.
                samples += SpokenAudio.silence(seconds: 1)
                let nearMiss = spoken[nearMissIndex % spoken.count]
                nearMissIndex += 1
                items.append((nearMiss.label, samples.count))
                samples += nearMiss.samples + SpokenAudio.silence(seconds: 0.5)
            }
            if loop % 2 == 1 { samples = SpokenAudio.withPinkNoise(samples, snr: 15, seed: UInt64(2_200 + loop)) }
            let loopStarted = ContinuousClock.now
            played += items.map { ($0.label, loopStarted + duration(ofSamples: $0.offset)) }
            try await sttd.pulse.play(samples)
            audio += samples.count
            loop += 1
        }
        let after = try ProcessSample(pid: sttd.sttd.pid)
        let wall = milliseconds(ContinuousClock.now - started) / 1000
        // The last utterance's wake would come within a few seconds.
        try await Task.sleep(for: .seconds(3))
        let falseWakes = stateArrivals(recorder, "starting").map { at in
            let playing = played.last { $0.at <= at }?.label ?? "nothing"
            return "\(format(milliseconds(at - started) / 1000, 1)) s, after \(playing)"
        }
        return TalkRun(
            seconds: wall, cpuPercent: (after.cpuSeconds - before.cpuSeconds) / wall * 100,
            nearMissesPlayed: nearMissIndex, falseWakes: falseWakes, smallestNearMiss: nearest,
            smallestLibriVox: librivox, nearMissesMatching: matching)
    }
}
