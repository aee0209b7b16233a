import Foundation
import TestSupport
import Testing

/// Syllable-like bursts: seeded pink noise switched on for 80–300 ms, off for 40–400 ms, at
/// -20 dBFS, with `lead` seconds of silence first (the stand-in for speech of the pure tests).
func bursts(seconds: Double, seed: UInt64, lead: Double = 0.5) -> [Int16] {
    var generator = SplitMix64(seed: seed)
    let noise = SpokenAudio.pinkNoise(
        count: Int(seconds * Double(SpokenAudio.sampleRate)), rmsDBFS: -20, seed: seed &+ 1)
    var samples = noise
    var index = 0
    while index < samples.count {
        let on = Int.random(in: 1_280...4_800, using: &generator)
        let off = Int.random(in: 640...6_400, using: &generator)
        for silent in min(index + on, samples.count)..<min(index + on + off, samples.count) { samples[silent] = 0 }
        index += on + off
    }
    return SpokenAudio.silence(seconds: lead) + samples
}

/// The power of one DFT bin of `block`.
func binPower(_ block: ArraySlice<Int16>, _ bin: Int) -> Double {
    var (real, imaginary) = (0.0, 0.0)
    for (n, sample) in block.enumerated() {
        let angle = 2 * Double.pi * Double(bin * n) / Double(block.count)
        real += Double(sample) * cos(angle)
        imaginary -= Double(sample) * sin(angle)
    }
    return real * real + imaginary * imaginary
}

@Suite("Spoken audio: noise, SNR and envelopes of the hands-free lab")
struct SpokenAudioTests {
    @Test func voicedLevelLeavesOutTheSilence() {
        let tone = (0..<16_000).map { Int16(8_000 * sin(2 * Double.pi * 200 * Double($0) / 16_000)) }
        let padded = SpokenAudio.silence(seconds: 2) + tone + SpokenAudio.silence(seconds: 2)
        #expect(abs(SpokenAudio.dBFS(SpokenAudio.voicedRMS(padded)) - SpokenAudio.dBFS(SpokenAudio.rms(tone))) < 0.1)
        // The whole file's RMS is 7 dB lower (a fifth of it is the tone).
        #expect(SpokenAudio.dBFS(SpokenAudio.rms(padded)) < SpokenAudio.dBFS(SpokenAudio.rms(tone)) - 6)
    }

    @Test(arguments: [0.0, 15, 30])
    func pinkNoiseIsMixedAtTheRequestedSNR(snr: Double) {
        let speech = bursts(seconds: 4, seed: 7)
        let mixed = SpokenAudio.withPinkNoise(speech, snr: snr, seed: 42)
        #expect(mixed.count == speech.count)
        let noise = zip(mixed, speech).map { Int16(clamping: Int($0) - Int($1)) }
        let measured = 20 * log10(SpokenAudio.voicedRMS(speech) / SpokenAudio.rms(noise))
        #expect(abs(measured - snr) <= 0.5, "measured \(measured) dB for \(snr) dB")
        // The noise covers the silences too (the phrase does not stand out of digital silence).
        #expect(SpokenAudio.rms(mixed.prefix(8_000)) > 0)
    }

    @Test func loudSpeechIsScaledDownRatherThanClipped() {
        let square = (0..<32_000).map { $0 / 40 % 2 == 0 ? Int16(32_000) : Int16(-32_000) }
        let mixed = SpokenAudio.withPinkNoise(square, snr: 6, seed: 3)
        let peak = mixed.map { abs(Int($0)) }.max() ?? 0
        #expect(peak <= 32_767)
        // Scaled as a whole: the square's sign pattern survives, and no stretch is flat at the rail.
        let railed = mixed.filter { $0 == .max || $0 == .min }.count
        #expect(railed < 10, "\(railed) samples at full scale")
        // The square's gain in the mix (least squares; the noise is nearly orthogonal to it), and
        // what is left over is the noise: still 6 dB down.
        let gain =
            zip(mixed, square).reduce(0.0) { $0 + Double($1.0) * Double($1.1) }
            / square.reduce(0.0) { $0 + Double($1) * Double($1) }
        #expect(gain < 0.9)
        let noise = zip(mixed, square).map { Double($0) - gain * Double($1) }
        let measured =
            20
            * log10(
                gain * SpokenAudio.voicedRMS(square) / sqrt(noise.map { $0 * $0 }.reduce(0, +) / Double(noise.count)))
        #expect(abs(measured - 6) <= 0.5, "measured \(measured) dB")
    }

    @Test func pinkNoiseIsSeededAtItsLevelAndFallsThreeDecibelsPerOctave() {
        let noise = SpokenAudio.pinkNoise(count: 160_000, rmsDBFS: -60, seed: 1)
        #expect(abs(SpokenAudio.dBFS(SpokenAudio.rms(noise)) - -60) < 0.1)
        let again = SpokenAudio.pinkNoise(count: 160_000, rmsDBFS: -60, seed: 1)
        let other = SpokenAudio.pinkNoise(count: 160_000, rmsDBFS: -60, seed: 2)
        let (same, differs) = (again == noise, other != noise)
        #expect(same)
        #expect(differs)
        // Power at 125 Hz against 2 kHz, four octaves up: 12 dB for pink, 0 for white. Louder noise
        // so that rounding to 16 bits does not whiten it.
        let loud = SpokenAudio.pinkNoise(count: 160_000, rmsDBFS: -20, seed: 1)
        var (low, high) = (0.0, 0.0)
        for start in stride(from: 0, to: loud.count - 1_024, by: 1_024) {
            let block = loud[start..<start + 1_024]
            for offset in -1...1 {
                low += binPower(block, 8 + offset)
                high += binPower(block, 128 + offset)
            }
        }
        let fall = 10 * log10(low / high)
        #expect(fall > 10 && fall < 14, "\(fall) dB over four octaves")
    }

    @Test func aShiftedCopyCorrelatesFullyAtItsShift() {
        let signal = bursts(seconds: 3, seed: 11)
        let recording = SpokenAudio.silence(seconds: 0.37) + signal + SpokenAudio.silence(seconds: 0.5)
        let (correlation, lag) = SpokenAudio.envelopeCorrelation(of: signal, in: recording)
        #expect(correlation > 0.99)
        #expect(lag == 37)
        // The other way round (the recording is the shorter one): the lag is negative.
        let cut = Array(signal.dropFirst(16_000))
        let reversed = SpokenAudio.envelopeCorrelation(of: signal, in: cut)
        #expect(reversed.correlation > 0.99)
        #expect(reversed.lag == -100)
        // Under 15 dB of noise the copy still stands out.
        let noisy = SpokenAudio.withPinkNoise(recording, snr: 15, seed: 5)
        #expect(SpokenAudio.envelopeCorrelation(of: signal, in: noisy).correlation > 0.9)
    }

    @Test func unrelatedAudioCorrelatesLow() {
        let signal = bursts(seconds: 1.5, seed: 11)
        let noise = SpokenAudio.pinkNoise(count: 80_000, rmsDBFS: -30, seed: 9)
        // 0.30 here. (Other speech is not "unrelated" enough: a 1.3 s phrase finds windows of
        // LibriVox that correlate 0.53–0.74, so a test tells clips apart by where they begin.)
        let withNoise = SpokenAudio.envelopeCorrelation(of: signal, in: noise).correlation
        #expect(withNoise < 0.5, "\(withNoise)")
        #expect(SpokenAudio.envelopeCorrelation(of: signal, in: SpokenAudio.silence(seconds: 5)).correlation == 0)
    }

    @Test func concatenationPutsSilencesBetweenTheParts() {
        let parts: [[Int16]] = [[1, 2], [3], [4, 5]]
        let joined = SpokenAudio.concatenate(parts, gap: 0.001)
        #expect(joined == [1, 2] + Array(repeating: 0, count: 16) + [3] + Array(repeating: 0, count: 16) + [4, 5])
        #expect(SpokenAudio.mixed([1, 2, 3], [32_767, -5]) == [32_767, -3, 3])
    }

    @Test func theTestServerKeepsTheFirstMinuteOfAudio() {
        var audio = ReceivedAudio()
        let second = (0..<16_000).flatMap { [UInt8($0 % 256), UInt8($0 % 200)] }
        for _ in 0..<61 { audio.append(second) }
        #expect(audio.bytes.count == ReceivedAudio.limit)
        #expect(audio.isFull)
        #expect(audio.samples.count == 60 * 16_000)
        #expect(audio.samples[1] == Int16(bitPattern: 1 | 1 << 8))
    }

    /// espeak-ng and sox as scripts/setup test installs them (missing: the test fails, naming it).
    @Test func espeakSpeaksAPhraseAtSixteenKilohertz() async throws {
        let slow = try await SpokenAudio.synthesize("start dictation", voice: "en-us", wordsPerMinute: 130)
        let fast = try await SpokenAudio.synthesize("start dictation", voice: "en-us", wordsPerMinute: 190)
        #expect(slow.count > 12_000 && slow.count < 48_000, "\(slow.count) samples")
        #expect(fast.count < slow.count)
        #expect(SpokenAudio.dBFS(SpokenAudio.voicedRMS(slow)) > -30)
        #expect(try await SpokenAudio.synthesize("start dictation", voice: "en-us", wordsPerMinute: 130) == slow)
        await #expect(throws: MissingPrerequisite.self) {
            try await SpokenAudio.synthesize("start dictation", voice: "no-such-voice")
        }
    }
}
