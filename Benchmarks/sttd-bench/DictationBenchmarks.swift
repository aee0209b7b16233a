import Dictation
import Foundation
import TestSupport

/// Row 17: what the `[text]` rules cost per final, in process: every LibriVox reference line as a
/// final (with a command at its end), through commands, spoken punctuation, ten replacements and
/// a 20-term vocabulary, the rules a pocketsphinx session with a full `[text]` table runs.
enum DictationBenchmarks {
    static func costPerFinal() async throws -> Row {
        let rules = DictationRules(
            commands: true, spokenPunctuation: true,
            replacements: [
                ("gonna", "going to"), ("wanna", "want to"), ("um", ""), ("uh", ""), ("sttd", "STTD"),
                ("open a i", "OpenAI"), ("kinda", "kind of"), ("lemme", "let me"), ("gotta", "got to"), ("ya", "you"),
            ].compactMap { Replacement(spoken: $0.0, written: $0.1) },
            vocabulary: [
                "PipeWire", "Kubernetes", "Wayland", "GNOME", "Debian", "sttd", "PulseAudio", "Deepgram", "LibriVox",
                "Ubuntu", "Hyprland", "Firefox", "Thunderbird", "JavaScript", "PostgreSQL", "Mozilla", "Linux",
                "GitHub", "OpenAI", "Anthropic",
            ])
        let dictation = Dictation(rules: rules)
        let finals = try LibriVox.recordings().map { $0.reference.joined(separator: " ") + " new line" }
        let rounds = 2_000
        var samples: [Double] = []
        var words = 0
        for _ in 0..<rounds {
            for final in finals {
                let start = ContinuousClock.now
                let edits = dictation.edits(for: final)
                samples.append((ContinuousClock.now - start) / .microseconds(1))
                words += edits.count
            }
        }
        samples.sort()
        let p50 = samples[samples.count / 2]
        let p99 = samples[samples.count * 99 / 100]
        let meanWords = Double(finals.map { $0.split(separator: " ").count }.reduce(0, +)) / Double(finals.count)
        return Row(
            number: 17, name: "voice commands: cost per final",
            result: String(
                format: "%.0f-word finals: p50 %.1f µs, p99 %.1f µs (%d finals)", meanWords, p50, p99, samples.count),
            aim: "well under 1 ms per final (a final arrives at most every few hundred ms)",
            values: ["p50_us": p50, "p99_us": p99, "words": meanWords])
    }
}
