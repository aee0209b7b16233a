import Foundation
import Logging
import Synchronization
import TestSupport
import Testing

@testable import Capture

@Suite("Level meter")
struct LevelMeterTests {
    @Test func readsFullScaleAndSilence() {
        var meter = LevelMeter(interval: .milliseconds(100))
        let loud = AudioChunk(samples: (0..<800).map { $0 % 2 == 0 ? Int16.max : Int16.min + 1 })
        #expect(meter.add(loud) == nil, "half an interval gives no reading yet")
        let level = meter.add(loud)
        #expect(
            level.map { abs($0) < 0.01 } == true, "full-scale square wave is 0 dBFS, got \(String(describing: level))")
        let silence = AudioChunk(samples: Array(repeating: 0, count: 1600))
        #expect(meter.add(silence) == -96)
    }

    /// The contract allows at most 10 readings a second; audio arrives with jitter and in bursts.
    @Test func neverMoreThanTenReadingsInAnySecond() {
        var meter = LevelMeter(interval: .milliseconds(100))
        let chunk = AudioChunk(samples: Array(repeating: 100, count: 1600))
        let start = ContinuousClock.now
        // 60 s of chunks 100 ms apart with up to ±15 ms of jitter, and a 2 s stall delivered at once.
        var arrivals: [Duration] = (0..<600).map { .milliseconds(100 * $0 + ($0 * 37 % 31) - 15) }
        for index in 300..<320 { arrivals[index] = .milliseconds(32_000) }
        var readings: [Duration] = []
        for arrival in arrivals where meter.add(chunk, at: start + arrival) != nil { readings.append(arrival) }
        for (index, reading) in readings.enumerated() {
            let inOneSecond = readings[index...].prefix { $0 - reading <= .seconds(1) }.count
            #expect(inOneSecond <= 10, "\(inOneSecond) readings in the second from \(reading)")
        }
        // Jitter costs few readings: a meter still gets about ten a second.
        #expect(readings.count >= 520, "\(readings.count) readings for 600 chunks")
    }
}

@Suite("PulseAudio capture against a headless server", .serialized)
struct PulseCaptureTests {
    let pulse: HeadlessPulse
    let logger = Logger(label: "test")

    init() throws { pulse = try HeadlessPulse() }

    @Test func listsTheVirtualMicrophoneAsDefault() async throws {
        let sources = try await PulseAudio.sources(server: pulse.server)
        let mic = try #require(sources.first { $0.name == "mic.monitor" })
        #expect(mic.isDefault)
        #expect(!mic.description.isEmpty)
    }

    @Test func capturesPlayedSpeechInChunksWithStreamProperties() async throws {
        let recording = try LibriVox.recordings()[1]
        let capture = try await PulseAudio.capture(source: nil, server: pulse.server, logger: logger)
        let pactl = try requireTool("pactl", package: "pulseaudio-utils")
        let outputs = try await run(pactl, ["list", "source-outputs"], environment: pulse.environmentForClients())
        for property in [
            "application.name = \"sttd\"", "application.id = \"io.github.sttd\"", "media.role = \"production\"",
        ] {
            #expect(outputs.stdout.contains(property), "\(property) in \(outputs.stdout)")
        }
        try await pulse.play(recording.path)
        capture.stop()
        var samples = 0
        var loudest = 0.0
        var sizes = Set<Int>()
        for try await chunk in capture.chunks {
            samples += chunk.samples.count
            sizes.insert(chunk.samples.count)
            loudest = max(loudest, chunk.energy / Double(max(chunk.samples.count, 1)))
        }
        #expect(Double(samples) / 16000 >= 2.9, "captured \(samples) samples for a 3 s recording")
        #expect(loudest > 1e-4, "speech is not silence")
        #expect(sizes.filter { $0 != 1600 }.count <= 1, "100 ms chunks, except possibly the last: \(sizes)")
    }

    @Test func deliversToAFunctionAndTheStreamOnlyEnds() async throws {
        let recording = try LibriVox.recordings()[1]
        let delivered = Mutex<[Int]>([])
        let capture = try await PulseAudio.capture(
            source: nil, chunk: .milliseconds(20), server: pulse.server, logger: logger,
            deliver: { chunk in delivered.withLock { $0.append(chunk.samples.count) } })
        try await pulse.play(recording.path)
        capture.stop()
        var streamed = 0
        for try await _ in capture.chunks { streamed += 1 }
        let sizes = delivered.withLock { $0 }
        #expect(streamed == 0)
        #expect(
            Double(sizes.reduce(0, +)) / 16000 >= 2.9, "delivered \(sizes.reduce(0, +)) samples for a 3 s recording")
        #expect(sizes.dropLast().allSatisfy { $0 == 320 }, "20 ms chunks, except possibly the last")
    }

    @Test func unknownSourceNamesTheSource() async throws {
        let error = await #expect(throws: CaptureError.self) {
            _ = try await PulseAudio.capture(source: "no-such-mic", server: pulse.server, logger: logger)
        }
        #expect(error?.kind == .noSuchSource)
        #expect(error?.message.contains("no-such-mic") == true)
        #expect(error?.message.contains("sttctl sources") == true)
        let probe = await #expect(throws: CaptureError.self) {
            try await PulseAudio.probe(source: "no-such-mic", server: pulse.server)
        }
        #expect(probe?.kind == .noSuchSource)
        try await PulseAudio.probe(source: nil, server: pulse.server)
    }

    @Test func noServerIsUnavailable() async throws {
        let error = await #expect(throws: CaptureError.self) {
            _ = try await PulseAudio.capture(source: nil, server: "unix:/nonexistent/native", logger: logger)
        }
        #expect(error?.kind == .serverUnavailable)
    }

    @Test func serverDeathEndsTheStreamWithLost() async throws {
        let capture = try await PulseAudio.capture(source: nil, server: pulse.server, logger: logger)
        try pulse.kill()
        let error = await #expect(throws: CaptureError.self) {
            for try await _ in capture.chunks {}
        }
        #expect(error?.kind == .lost)
    }
}

@Suite("Voice detector")
struct VoiceDetectorTests {
    static func tone(milliseconds: Int, amplitude: Double = 8000) -> AudioChunk {
        AudioChunk(samples: (0..<milliseconds * 16).map { Int16(amplitude * sin(Double($0) / 5)) })
    }
    static func quiet(milliseconds: Int) -> AudioChunk {
        AudioChunk(samples: Array(repeating: 0, count: milliseconds * 16))
    }

    @Test func speechNeedsAHundredMillisecondsAndSilenceThreeHundred() {
        var detector = VoiceDetector()
        #expect(detector.add(Self.quiet(milliseconds: 500)) == nil)
        #expect(detector.add(Self.tone(milliseconds: 80)) == nil, "a click is not speech")
        #expect(detector.add(Self.tone(milliseconds: 40)) == .speech)
        #expect(detector.add(Self.quiet(milliseconds: 280)) == nil)
        #expect(detector.add(Self.quiet(milliseconds: 100)) == .silence(ago: .milliseconds(380)))
        #expect(detector.isSpeech == false)
    }

    @Test func aSteadyNoiseBecomesTheFloor() {
        var detector = VoiceDetector()
        let hum = Self.tone(milliseconds: 1000, amplitude: 600)  // about -38 dBFS
        var changes: [VoiceDetector.Change] = []
        for _ in 0..<60 { if let change = detector.add(hum) { changes.append(change) } }
        #expect(changes.first == .speech, "a new noise sounds like speech at first")
        #expect(changes.last.map { if case .silence = $0 { true } else { false } } == true, "but not for long")
        #expect(detector.add(Self.tone(milliseconds: 200, amplitude: 12000)) == .speech, "speech over the hum is heard")
    }
}
