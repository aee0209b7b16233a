import DBus
import Dictation
import Foundation
import Recognition
import SpeechAPI
import TestSupport

/// Rows 19–23: hands-free dictation (issue 42). sttd with Moonshine listens for the wake phrase
/// while armed (`SetHandsFree(true)`); phrases and near misses are spoken by espeak-ng, with pink
/// noise (``SpokenAudio``) for a quiet room and for 15 dB SNR. Rows 20 and 22 share one run
/// (HandsFreeTalkBenchmark.swift).
enum HandsFreeBenchmarks {
    static let phrase = "wake up computer"
    static let voices = ["en-us", "en", "en-gb-x-rp", "en-gb-scotland", "en-029", "en-us+f3"]
    static let speeds = [130, 190]
    /// A quiet room's noise, under the clean trials (digital silence would flatter the detector).
    static let quietRoomDBFS = -60.0

    /// sttd with Moonshine and `[hands_free]`, armed. Sessions the phrase starts write nothing
    /// (`output = "none"`) and run until the benchmark cancels them (auto-stop after `autoStop` ms).
    static func armedService(autoStop: Int = 10_000, logLevel: String = "info") async throws -> SttdFixture {
        let config = """
            [local]
            engine = "moonshine"
            [hands_free]
            wake_phrase = "\(phrase)"
            output = "none"
            auto_stop_ms = \(autoStop)
            """
        let sttd = try await SttdFixture(
            config: config, environment: ["STTD_LOG_LEVEL": logLevel], sharedMemoryAudio: true)
        try await sttd.speech.call(Speech1.setHandsFree, true)
        try await waitForHandsFree(sttd, "armed")
        return sttd
    }

    static func waitForHandsFree(_ sttd: SttdFixture, _ state: String, timeout: Duration = .seconds(30))
        async throws
    {
        try await waitFor("HandsFree = \(state)", timeout: timeout) {
            try await sttd.property("HandsFree") == .string(state)
        }
    }

    /// When each `PropertiesChanged` setting `State` to `value` arrived.
    static func stateArrivals(_ recorder: SignalRecorder, _ value: String) -> [ContinuousClock.Instant] {
        recorder.arrivals.compactMap { arrival in
            let signal = arrival.signal
            guard signal.member == "PropertiesChanged", signal.arguments.count == 3,
                signal.arguments[1].stringVariantDictionary?.first(where: { $0.key == "State" })?.value
                    == .string(value)
            else { return nil }
            return arrival.at
        }
    }

    /// Ends the session a wake started and waits until sttd listens for the phrase again.
    static func cancelAndRearm(_ sttd: SttdFixture) async throws {
        // The session may have ended by itself; Cancel then has nothing to do.
        _ = try? await sttd.call("CancelTranscribing")
        try await waitFor("State = idle", timeout: .seconds(30)) {
            try await sttd.property("State") == .string("idle")
        }
        try await waitForHandsFree(sttd, "armed")
    }

    /// One trial: a bed (1 s, or 4 s of noise), the phrase, a 3 s bed; the bed a quiet room's
    /// noise, or the phrase under pink noise at 15 dB SNR. Also where the phrase's speech ends (samples from the start).
    static func trial(_ spoken: [Int16], noisy: Bool, seed: UInt64) -> (samples: [Int16], phraseEnd: Int) {
        // A room's noise is there before one speaks: the detector's noise floor (the quietest
        // frame of the last 3 s) needs 3 s of it; noise that starts 1 s before the phrase is
        // itself the start of an utterance.
        let lead = SpokenAudio.silence(seconds: noisy ? 4 : 1)
        let speech = lead + spoken + SpokenAudio.silence(seconds: 3)
        let samples =
            noisy
            ? SpokenAudio.withPinkNoise(speech, snr: 15, seed: seed)
            : SpokenAudio.mixed(
                speech, SpokenAudio.pinkNoise(count: speech.count, rmsDBFS: quietRoomDBFS, seed: seed))
        return (samples, lead.count + speechEnd(spoken))
    }

    /// The end of the last 20 ms frame above -45 dBFS (espeak-ng ends with some silence).
    static func speechEnd(_ samples: [Int16]) -> Int {
        for end in stride(from: samples.count, to: 320, by: -320)
        where SpokenAudio.dBFS(SpokenAudio.rms(samples[(end - 320)..<end])) > -45 {
            return end
        }
        return samples.count
    }

    /// The engine's own text of a trial's phrase (0.3 s of its bed either side, about what a wake
    /// segment holds), decoded in this process.
    static func referenceText(_ trial: [Int16], from start: Int, to end: Int, _ reference: SherpaReference) -> String {
        let pad = 4_800
        let segment = trial[max(0, start - pad)..<min(trial.count, end + pad)]
        return reference.decode(segment.map { Float($0) / 32768 })
    }

    static func duration(ofSamples samples: Int) -> Duration { .milliseconds(samples * 1000 / SpokenAudio.sampleRate) }

    // 19
    static func armedInQuietRoom() async throws -> Row {
        let sttd = try await armedService()
        let recorder = try await sttd.record()
        let noise = SpokenAudio.pinkNoise(count: 60 * SpokenAudio.sampleRate, rmsDBFS: quietRoomDBFS, seed: 19)
        let file = "\(sttd.home)/quiet-room.wav"
        try writeWAV(noise, to: file)
        try await Task.sleep(for: .seconds(2))
        let before = try ProcessSample(pid: sttd.sttd.pid)
        let started = ContinuousClock.now
        try await sttd.pulse.play(file)
        let after = try ProcessSample(pid: sttd.sttd.pid)
        let wall = milliseconds(ContinuousClock.now - started) / 1000
        let cpu = (after.cpuSeconds - before.cpuSeconds) / wall * 100
        let wakes = stateArrivals(recorder, "starting").count
        let state = try await sttd.property("HandsFree")?.string ?? "?"
        return Row(
            number: 19, name: "hands-free armed in a quiet room (60 s of pink noise at -60 dBFS, Moonshine)",
            result:
                "\(format(cpu, 2)) % of a core (sttd and its engine process), \(wakes) wakes, HandsFree \(state) after; RSS \(format(Double(after.rssKB) / 1024, 0)) MB",
            aim: "≤ 1 % of a core, 0 wakes",
            values: ["cpu_percent": cpu, "wakes": Double(wakes), "rss_mb": Double(after.rssKB) / 1024])
    }

    /// What one wake trial came to.
    struct WakeTrial {
        var outcome: String
        var latency: Duration?
        var text: String
        var distance: Int
    }

    /// Plays one trial to an armed sttd: a wake is State=starting within 3 s of the phrase's end
    /// (a later one is "late"); the session it started is cancelled. Also the engine's own text.
    static func wakeTrial(
        _ spoken: [Int16], noisy: Bool, seed: UInt64, _ sttd: SttdFixture, _ recorder: SignalRecorder,
        _ reference: SherpaReference
    ) async throws -> WakeTrial {
        let (samples, phraseEnd) = trial(spoken, noisy: noisy, seed: seed)
        let played = ContinuousClock.now
        try await sttd.pulse.play(samples)
        let end = ContinuousClock.now - duration(ofSamples: samples.count - phraseEnd)
        _ = await recorder.happens(within: .seconds(2)) { _ in
            stateArrivals(recorder, "starting").contains { $0 > played }
        }
        let start = stateArrivals(recorder, "starting").first { $0 > played }
        if start != nil { try await cancelAndRearm(sttd) }
        let outcome = start.map { $0 - end <= .seconds(3) ? "woke" : "late" } ?? "missed"
        let text = referenceText(samples, from: 16_000, to: phraseEnd, reference)
        return WakeTrial(
            outcome: outcome, latency: start.map { $0 - end }, text: text,
            distance: WakeDistance.distance(phrase: phrase, text: text))
    }

    // 21
    static func wakeRate() async throws -> Row {
        let reference = try SherpaReference(settings: try Benchmarks.sherpaSettings())
        let sttd = try await armedService(logLevel: "debug")
        let recorder = try await sttd.record()
        let conditions = voices.flatMap { voice in
            speeds.flatMap { wpm in [false, true].flatMap { noisy in [1, 2].map { (voice, wpm, noisy, $0) } } }
        }
        var tsv = "voice\twpm\tnoise\ttrial\toutcome\tlatency_ms\treference_text\td\tsttd_log\n"
        var spoken: [String: [Int16]] = [:]
        var outcomes: [String: Int] = [:]
        var misses: [String] = []
        for (index, (voice, wpm, noisy, round)) in conditions.enumerated() {
            let key = "\(voice) \(wpm)"
            if spoken[key] == nil {
                spoken[key] = try await SpokenAudio.synthesize(phrase, voice: voice, wordsPerMinute: wpm)
            }
            let logBefore = sttd.log.utf8.count
            let trial = try await wakeTrial(
                spoken[key] ?? [], noisy: noisy, seed: UInt64(index + 1), sttd, recorder, reference)
            outcomes[trial.outcome, default: 0] += 1
            let noise = noisy ? "pink 15 dB" : "clean"
            // At debug the listener logs each segment's length and d, never its words.
            let wakeLines = String(decoding: sttd.log.utf8.dropFirst(logBefore), as: UTF8.self)
                .split(separator: "\n").filter { $0.contains("wake segment") }.joined(separator: " | ")
            let latency = trial.latency.map { format(milliseconds($0), 0) } ?? ""
            tsv +=
                [
                    voice, "\(wpm)", noise, "\(round)", trial.outcome, latency, trial.text, "\(trial.distance)",
                    wakeLines,
                ]
                .joined(separator: "\t") + "\n"
            if trial.outcome != "woke" {
                misses.append("\(key) wpm \(noise) “\(trial.text)” (d \(trial.distance), \(trial.outcome))")
            }
        }
        try FileManager.default.createDirectory(atPath: "bench", withIntermediateDirectories: true)
        try tsv.write(toFile: "bench/wake-texts.tsv", atomically: true, encoding: .utf8)
        let (woke, late) = (outcomes["woke"] ?? 0, outcomes["late"] ?? 0)
        let rate = Double(woke) / Double(conditions.count) * 100
        return Row(
            number: 21,
            name:
                "wake rate (\(conditions.count) espeak-ng trials: \(voices.count) voices × 130/190 wpm × clean/pink 15 dB × 2; a bed (1 s; 4 s of noise), phrase, 3 s bed)",
            result:
                "\(woke) of \(conditions.count) woke within 3 s (\(format(rate, 1)) %), \(late) later; misses (the engine's text in this process): \(misses.isEmpty ? "none" : misses.joined(separator: "; ")) (bench/wake-texts.tsv)",
            aim: "≥ 95 %",
            values: [
                "trials": Double(conditions.count), "wakes": Double(woke), "late_wakes": Double(late),
                "wake_rate": rate,
            ])
    }

    // 23
    static func phraseEndToListening() async throws -> Row {
        let sttd = try await armedService()
        let recorder = try await sttd.record()
        let spoken = try await SpokenAudio.synthesize(phrase, voice: "en-us", wordsPerMinute: 160)
        var latencies: [Double] = []
        var missed = 0
        for index in 0..<20 {
            let (samples, phraseEnd) = trial(spoken, noisy: false, seed: UInt64(2_300 + index))
            let played = ContinuousClock.now
            try await sttd.pulse.play(samples)
            let end = ContinuousClock.now - duration(ofSamples: samples.count - phraseEnd)
            let listening = await recorder.happens(within: .seconds(2)) { _ in
                stateArrivals(recorder, "listening").contains { $0 > played }
            }
            if listening, let at = stateArrivals(recorder, "listening").first(where: { $0 > played }) {
                latencies.append(milliseconds(at - end))
            } else {
                missed += 1
            }
            if stateArrivals(recorder, "starting").contains(where: { $0 > played }) { try await cancelAndRearm(sttd) }
        }
        guard !latencies.isEmpty else { throw BenchError("no trial of 20 reached State=listening") }
        let (p50, p90) = (percentile(latencies, 50), percentile(latencies, 90))
        return Row(
            number: 23,
            name: "phrase end → State=listening at a subscriber (20 trials, espeak-ng en-us 160 wpm, quiet room)",
            result:
                "p50 \(format(p50, 0)) ms, p90 \(format(p90, 0)) ms\(missed > 0 ? " (\(missed) of 20 did not wake)" : "")",
            aim: "p50 ≤ 800 ms",
            values: ["p50_ms": p50, "p90_ms": p90, "missed": Double(missed)])
    }
}

/// The service's matching rule (`WakePhrase`), for reporting how near a text came to the phrase.
enum WakeDistance {
    static func distance(phrase: String, text: String) -> Int {
        guard let wake = try? WakePhrase(phrase) else { return Int.max }
        return wake.nearest(text)?.distance ?? phrase.count
    }

    static func matches(phrase: String, text: String) -> Bool { (try? WakePhrase(phrase))?.match(text) != nil }
}
