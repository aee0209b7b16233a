import Foundation

/// Speech made with espeak-ng, seeded pink noise mixed in at a chosen SNR, and an energy envelope
/// to compare what a server heard with what was played: the hands-free tests' and benchmarks' lab.
/// All audio is 16 kHz mono Int16, as the virtual microphone plays it (``writeWAV(_:to:)``).
public enum SpokenAudio {
    public static let sampleRate = 16_000
    /// 20 ms: the frames "voiced" is decided on (as the engine's segmenter frames).
    static let voicedFrame = 320
    /// 10 ms: the frames of ``energyEnvelope(_:floorDBFS:)``.
    public static let envelopeFrame = 160

    /// `text` spoken by espeak-ng (`voice` as `espeak-ng --voices` lists it, e.g. "en-gb-x-rp" or
    /// "en-us+f3"), converted by sox to 16 kHz mono 16-bit without dither (the same samples each run).
    public static func synthesize(_ text: String, voice: String = "en-us", wordsPerMinute: Int = 160) async throws
        -> [Int16]
    {
        let espeak = try requireTool("espeak-ng", package: "espeak-ng")
        let sox = try requireTool("sox", package: "sox")
        let directory = try makeTemporaryDirectory("sttd-spoken")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let spoken = "\(directory)/espeak.wav"
        let converted = "\(directory)/16k.raw"
        try await checkVoice(voice, espeak: espeak)
        let said = try await run(espeak, ["-v", voice, "-s", String(wordsPerMinute), "-w", spoken, text])
        guard said.status == 0, FileManager.default.fileExists(atPath: spoken) else {
            throw MissingPrerequisite(description: "espeak-ng -v \(voice) failed: \(said.stderr)")
        }
        let made = try await run(
            sox,
            ["-D", spoken, "-t", "raw", "-r", "16000", "-c", "1", "-b", "16", "-e", "signed-integer", "-L", converted])
        guard made.status == 0 else { throw MissingPrerequisite(description: "sox failed: \(made.stderr)") }
        let data = try Data(contentsOf: URL(fileURLWithPath: converted))
        return data.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }.map { Int16(littleEndian: $0) }
    }

    /// espeak-ng takes any voice name, silently speaking another language for an unknown one
    /// ("no-such-voice" is Norwegian): the name, and its variant after "+", must be listed.
    static func checkVoice(_ voice: String, espeak: String) async throws {
        let parts = voice.split(separator: "+", maxSplits: 1).map(String.init)
        let voices = try await run(espeak, ["--voices"]).stdout.split(separator: "\n").dropFirst()
        // A line: priority, language, age/gender, name, file, then "(other-language priority)"s.
        let names = Set(
            voices.flatMap { line in
                let language = line.split(separator: " ").dropFirst().prefix(1).map(String.init)
                return language + line.matches(of: /\(([^ ()]+) \d+\)/).map { String($0.output.1) }
            })
        var known = names.contains(parts.first ?? "")
        if known, parts.count == 2 {
            known = try await run(espeak, ["--voices=variant"]).stdout.contains("!v/\(parts[1]) ")
        }
        guard known else {
            throw MissingPrerequisite(
                description: "espeak-ng has no voice '\(voice)' (`espeak-ng --voices`, variants: `--voices=variant`)")
        }
    }

    public static func silence(seconds: Double) -> [Int16] {
        [Int16](repeating: 0, count: Int((seconds * Double(sampleRate)).rounded()))
    }

    /// The parts one after another with `gap` seconds of silence between them.
    public static func concatenate(_ parts: [[Int16]], gap: Double = 0) -> [Int16] {
        let pause = silence(seconds: gap)
        var joined: [Int16] = []
        for (index, part) in parts.enumerated() {
            if index > 0 { joined += pause }
            joined += part
        }
        return joined
    }

    // MARK: Levels

    /// Root mean square in sample units (full scale is 32768).
    public static func rms<Samples: Collection>(_ samples: Samples) -> Double where Samples.Element == Int16 {
        guard !samples.isEmpty else { return 0 }
        return (samples.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(samples.count)).squareRoot()
    }

    public static func dBFS(_ rms: Double) -> Double { 20 * log10(max(rms, 1e-9) / 32768) }

    /// The RMS of the voiced 20 ms frames: those within 30 dB of the loudest frame and above
    /// -60 dBFS. The silence around a phrase so does not lower its level (nor the SNR it is mixed at).
    public static func voicedRMS(_ samples: [Int16]) -> Double {
        let frames = stride(from: 0, to: samples.count - voicedFrame + 1, by: voicedFrame).map {
            rms(samples[$0..<$0 + voicedFrame])
        }
        let loudest = frames.max() ?? 0
        let threshold = max(loudest * pow(10, -30.0 / 20), 32768 * pow(10, -60.0 / 20))
        let voiced = frames.filter { $0 >= threshold }
        guard !voiced.isEmpty else { return 0 }
        return (voiced.reduce(0) { $0 + $1 * $1 } / Double(voiced.count)).squareRoot()
    }

    // MARK: Noise

    /// Pink noise (-3 dB per octave, Paul Kellet's refined filter over seeded white noise) whose
    /// RMS is exactly `rmsDBFS`. The same seed gives the same samples.
    public static func pinkNoise(count: Int, rmsDBFS: Double, seed: UInt64) -> [Int16] {
        let noise = pinkNoise(count: count, seed: seed)
        return quantized(noise, gain: 32768 * pow(10, rmsDBFS / 20) / nonZeroRMS(noise))
    }

    /// `speech` with pink noise over its whole length, the noise `snr` dB below the speech's voiced
    /// RMS (``voicedRMS(_:)``). Should the sum clip, both are scaled down together: the SNR holds.
    public static func withPinkNoise(_ speech: [Int16], snr: Double, seed: UInt64) -> [Int16] {
        let noise = pinkNoise(count: speech.count, seed: seed)
        let noiseGain = voicedRMS(speech) * pow(10, -snr / 20) / nonZeroRMS(noise)
        let sum = zip(speech, noise).map { Double($0) + $1 * noiseGain }
        let peak = sum.reduce(0) { max($0, abs($1)) }
        return quantized(sum, gain: peak > 32767 ? 32767 / peak : 1)
    }

    /// The element-wise sum (the longer one's tail as it is), clipped to 16 bits.
    public static func mixed(_ a: [Int16], _ b: [Int16]) -> [Int16] {
        let (long, short) = a.count >= b.count ? (a, b) : (b, a)
        var sum = long
        for index in short.indices {
            sum[index] = Int16(clamping: Int(long[index]) + Int(short[index]))
        }
        return sum
    }

    /// Unit-RMS-ish pink noise as Doubles (scaled by the callers).
    static func pinkNoise(count: Int, seed: UInt64) -> [Double] {
        var generator = SplitMix64(seed: seed)
        var (b0, b1, b2, b3, b4, b5, b6) = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        // The filter's slowest pole settles over ~1000 samples; those are dropped.
        let settle = 2_000
        var noise: [Double] = []
        noise.reserveCapacity(count)
        for index in 0..<(count + settle) {
            let white = Double.random(in: -1...1, using: &generator)
            b0 = 0.99886 * b0 + white * 0.0555179
            b1 = 0.99332 * b1 + white * 0.0750759
            b2 = 0.96900 * b2 + white * 0.1538520
            b3 = 0.86650 * b3 + white * 0.3104856
            b4 = 0.55000 * b4 + white * 0.5329522
            b5 = -0.7616 * b5 - white * 0.0168980
            let pink = b0 + b1 + b2 + b3 + b4 + b5 + b6 + white * 0.5362
            b6 = white * 0.115926
            if index >= settle { noise.append(pink) }
        }
        return noise
    }

    /// The RMS of noise, never 0 (a level is divided by it).
    static func nonZeroRMS(_ values: [Double]) -> Double {
        guard !values.isEmpty else { return 1 }
        let power = values.reduce(0) { $0 + $1 * $1 } / Double(values.count)
        return power > 0 ? power.squareRoot() : 1
    }

    static func quantized(_ values: [Double], gain: Double) -> [Int16] {
        values.map { Int16(clamping: Int(($0 * gain).rounded())) }
    }

    // MARK: Comparing audio

    /// The level of each 10 ms frame in dBFS, no lower than `floorDBFS` (digital silence and a
    /// quiet room's noise then look alike).
    public static func energyEnvelope(_ samples: [Int16], floorDBFS: Double = -60) -> [Double] {
        stride(from: 0, to: samples.count - envelopeFrame + 1, by: envelopeFrame).map {
            max(dBFS(rms(samples[$0..<$0 + envelopeFrame])), floorDBFS)
        }
    }

    /// How well `reference`'s envelope matches part of `recording`'s: the best Pearson correlation
    /// over the shifts that put the shorter envelope wholly inside the longer one, and that shift
    /// in frames (how far into `recording` the reference begins; negative when `recording` is the
    /// shorter one and begins inside `reference`). A flat envelope correlates 0 with anything.
    public static func envelopeCorrelation(of reference: [Double], in recording: [Double]) -> (
        correlation: Double, lag: Int
    ) {
        let referenceIsShorter = reference.count <= recording.count
        let (short, long) = referenceIsShorter ? (reference, recording) : (recording, reference)
        guard !short.isEmpty else { return (0, 0) }
        var best = (correlation: -Double.infinity, lag: 0)
        for shift in 0...(long.count - short.count) {
            let correlation = pearson(short, long[shift..<shift + short.count])
            if correlation > best.correlation { best = (correlation, referenceIsShorter ? shift : -shift) }
        }
        return best
    }

    /// ``envelopeCorrelation(of:in:)`` of two recordings' ``energyEnvelope(_:floorDBFS:)``.
    public static func envelopeCorrelation(of reference: [Int16], in recording: [Int16]) -> (
        correlation: Double, lag: Int
    ) {
        envelopeCorrelation(of: energyEnvelope(reference), in: energyEnvelope(recording))
    }

    static func pearson(_ a: [Double], _ b: ArraySlice<Double>) -> Double {
        let count = Double(a.count)
        let (meanA, meanB) = (a.reduce(0, +) / count, b.reduce(0, +) / count)
        var (product, squaresA, squaresB) = (0.0, 0.0, 0.0)
        for (x, y) in zip(a, b) {
            product += (x - meanA) * (y - meanB)
            squaresA += (x - meanA) * (x - meanA)
            squaresB += (y - meanB) * (y - meanB)
        }
        guard squaresA > 1e-12, squaresB > 1e-12 else { return 0 }
        return product / (squaresA * squaresB).squareRoot()
    }
}

extension HeadlessPulse {
    /// Plays samples into the virtual microphone (through a WAV file in its folder) and waits
    /// until they have played.
    public func play(_ samples: [Int16]) async throws {
        let file = "\(directory)/spoken-\(UUID().uuidString.prefix(8)).wav"
        try writeWAV(samples, to: file)
        defer { try? FileManager.default.removeItem(atPath: file) }
        try await play(file)
    }
}

/// A small seeded generator (Steele, Lea and Flood's SplitMix64): the same noise on every run.
public struct SplitMix64: RandomNumberGenerator, Sendable {
    private var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
