#if canImport(Glibc)
    import Glibc
#endif

/// The one audio format sttd works in: 16 kHz mono signed 16-bit little-endian PCM.
public enum AudioFormat {
    public static let sampleRate = 16_000
    public static let bytesPerSample = 2

    /// Number of samples in a duration.
    public static func samples(in duration: Duration) -> Int {
        let milliseconds = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        return Int(milliseconds) * sampleRate / 1000
    }
}

/// A run of captured PCM samples.
public struct AudioChunk: Sendable, Equatable {
    public var samples: [Int16]

    public init(samples: [Int16]) { self.samples = samples }

    public var duration: Duration { .microseconds(samples.count * 1_000_000 / AudioFormat.sampleRate) }

    /// Sum of squared samples, normalized to full scale (for RMS level meters).
    public var energy: Double {
        var sum = 0.0
        for sample in samples {
            let normalized = Double(sample) / 32768
            sum += normalized * normalized
        }
        return sum
    }
}

/// Turns a stream of chunks into a level reading every `interval` of audio.
public struct LevelMeter: Sendable {
    private let samplesPerReading: Int
    private var energy = 0.0
    private var count = 0

    public init(interval: Duration = .milliseconds(100)) {
        samplesPerReading = max(1, AudioFormat.samples(in: interval))
    }

    /// Adds a chunk; returns the RMS level in dBFS when a reading is due (at most one per chunk).
    public mutating func add(_ chunk: AudioChunk) -> Double? {
        energy += chunk.energy
        count += chunk.samples.count
        guard count >= samplesPerReading else { return nil }
        let rms = (energy / Double(count)).squareRoot()
        energy = 0
        count = 0
        // Digital silence would be -inf; floor at the 16-bit noise floor.
        return max(20 * log10(max(rms, 1e-12)), -96)
    }
}
