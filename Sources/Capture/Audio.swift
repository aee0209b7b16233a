#if canImport(Glibc)
    import Glibc
#endif

/// The one audio format sttd works in: 16 kHz mono signed 16-bit little-endian PCM.
public enum AudioFormat {
    public static let sampleRate = 16_000
    public static let bytesPerSample = 2

    /// Number of samples in a duration.
    public static func samples(in duration: Duration) -> Int {
        Int(duration / .milliseconds(1)) * sampleRate / 1000
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

/// Turns a stream of chunks into a level reading every `interval` of audio, and never more than
/// `maxPerSecond` readings in any second of wall-clock time: chunks arrive with jitter and in
/// bursts after a stall, so a reading per 100 ms of audio alone would sometimes put 11 or more
/// into one second. A reading that would is dropped (the next one follows 100 ms later).
public struct LevelMeter: Sendable {
    private let samplesPerReading: Int
    private var energy = 0.0
    private var count = 0
    /// When the last `maxPerSecond` readings went out, oldest first once full (a ring).
    private var sent: [ContinuousClock.Instant] = []
    private var oldest = 0
    private let maxPerSecond: Int

    public init(interval: Duration = .milliseconds(100), maxPerSecond: Int = 10) {
        samplesPerReading = max(1, AudioFormat.samples(in: interval))
        self.maxPerSecond = max(1, maxPerSecond)
    }

    /// Adds a chunk; returns the RMS level in dBFS when a reading is due (at most one per chunk)
    /// and the last second has room for it.
    public mutating func add(_ chunk: AudioChunk, at now: ContinuousClock.Instant = .now) -> Double? {
        energy += chunk.energy
        count += chunk.samples.count
        guard count >= samplesPerReading else { return nil }
        let rms = (energy / Double(count)).squareRoot()
        energy = 0
        count = 0
        guard roomForOne(at: now) else { return nil }
        // Digital silence would be -inf; floor at the 16-bit noise floor.
        return max(20 * log10(max(rms, 1e-12)), -96)
    }

    private mutating func roomForOne(at now: ContinuousClock.Instant) -> Bool {
        if sent.count < maxPerSecond {
            sent.append(now)
            return true
        }
        guard now - sent[oldest] > .seconds(1) else { return false }
        sent[oldest] = now
        oldest = (oldest + 1) % maxPerSecond
        return true
    }
}

/// Voice activity from signal energy, cheap enough for the capture thread: speech is a level
/// well above the noise floor it tracks, held for 100 ms; silence is 300 ms below it. It serves
/// auto-stop, the same for every recognizer, so a session ends on silence even when the engine
/// or server says nothing about speech.
public struct VoiceDetector: Sendable {
    /// A change of voice activity.
    public enum Change: Sendable, Equatable {
        case speech
        /// Silence began this long (of audio) before the end of the chunk that reported it.
        case silence(ago: Duration)
    }

    static let frameSamples = AudioFormat.samples(in: .milliseconds(20))
    /// Frames above the threshold that make speech (100 ms), and below it that make silence (300 ms).
    static let speechFrames = 5
    static let silenceFrames = 15
    /// Speech is at least this far above the noise floor, and never quieter than `quietest`.
    static let margin = 12.0
    static let quietest = -50.0
    /// The floor falls at once to a quieter frame and rises by at least 1 dB per second (0.02 per
    /// 20 ms frame), faster the further below it is (0.2 % of the gap per frame), so a fan that
    /// starts is absorbed in seconds while the pauses between words keep the floor low.
    static let floorRise = 0.02
    static let floorPull = 0.002

    private(set) var isSpeech = false
    private var floor = -70.0
    private var loudRun = 0
    private var quietRun = 0
    private var frameEnergy = 0.0
    private var frameCount = 0

    public init() {}

    /// Adds a chunk; returns the change it brought, if any (at most one per chunk).
    public mutating func add(_ chunk: AudioChunk) -> Change? {
        var change: Change?
        var framesAfterChange = 0
        for sample in chunk.samples {
            let normalized = Double(sample) / 32768
            frameEnergy += normalized * normalized
            frameCount += 1
            guard frameCount == Self.frameSamples else { continue }
            let level = 10 * log10(max(frameEnergy / Double(frameCount), 1e-10))
            frameEnergy = 0
            frameCount = 0
            framesAfterChange += 1
            if let frameChange = addFrame(level: level) {
                change = frameChange
                framesAfterChange = 0
            }
        }
        guard case .silence = change else { return change }
        let frames = Self.silenceFrames + framesAfterChange
        return .silence(
            ago: .milliseconds(frames * 20) + .microseconds(frameCount * 1_000_000 / AudioFormat.sampleRate))
    }

    private mutating func addFrame(level: Double) -> Change? {
        let loud = level > max(floor + Self.margin, Self.quietest)
        floor = level < floor ? level : floor + max(Self.floorRise, (level - floor) * Self.floorPull)
        if loud {
            loudRun += 1
            quietRun = 0
            if !isSpeech, loudRun >= Self.speechFrames {
                isSpeech = true
                return .speech
            }
        } else {
            quietRun += 1
            loudRun = 0
            if isSpeech, quietRun >= Self.silenceFrames {
                isSpeech = false
                return .silence(ago: .zero)
            }
        }
        return nil
    }
}
