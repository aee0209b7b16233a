import Capture
import Logging
import Recognition
import Synchronization
import Testing

@testable import Speech

/// The microphone shared by the wake listener and the session the phrase starts. Audio is
/// numbered (sample i holds i), so a lost, repeated or misplaced sample shows.
@Suite("Capture relay")
struct CaptureRelayTests {
    /// What a session's `deliver` got, in order.
    final class Heard: Sendable {
        private let samples = Mutex<[Int16]>([])
        var all: [Int16] { samples.withLock { $0 } }
        @Sendable func deliver(_ chunk: AudioChunk) { samples.withLock { $0 += chunk.samples } }
    }

    struct NoEvents: RecognitionEventSink {
        func deliver(_ event: RecognitionEvent) {}
    }

    func wakeStream() -> FakeRecognitionStream {
        FakeRecognitionStream(sink: NoEvents(), options: StreamOptions(), finalOnFinish: nil, finishHangs: false)
    }

    func numbered(_ range: Range<Int>) -> [Int16] { range.map { Int16(truncatingIfNeeded: $0) } }

    /// Numbered audio as its runs ("2345+5655": 5655 samples from 2345 on): short to compare and read.
    func runs(_ samples: [Int16]) -> [String] {
        var runs: [String] = []
        var first = 0
        for index in samples.indices where index == samples.count - 1 || samples[index + 1] != samples[index] &+ 1 {
            runs.append("\(samples[first])+\(index - first + 1)")
            first = index + 1
        }
        return runs
    }

    /// Delivers the samples numbered `range` as the capture thread does, in 100 ms chunks.
    func play(_ relay: CaptureRelay, _ range: Range<Int>) {
        for start in stride(from: range.lowerBound, to: range.upperBound, by: 1600) {
            relay.deliver(AudioChunk(samples: numbered(start..<min(start + 1600, range.upperBound))))
        }
    }

    func attach(_ handOver: CaptureHandOver, _ heard: Heard) async throws -> HandOverCapture {
        let stream = try await handOver.open(source: nil, deliver: heard.deliver)
        return try #require(stream as? HandOverCapture)
    }

    @Test func handOverStartsAtTheExactSample() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone())
        let wake = wakeStream()
        relay.listen(to: wake)
        play(relay, 0..<8000)
        // The phrase's final ended at 0.1465625 s: inside the fourth chunk.
        let handOver = relay.handOver(fromSample: 2345)
        let heard = Heard()
        _ = try await attach(handOver, heard)
        #expect(runs(heard.all) == runs(numbered(2345..<8000)))
        play(relay, 8000..<11200)
        #expect(runs(heard.all) == runs(numbered(2345..<11200)))
        #expect(runs(wake.audio) == runs(numbered(0..<8000)))
    }

    @Test func bufferedAudioPrecedesLiveAudio() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone())
        relay.listen(to: wakeStream())
        play(relay, 0..<4800)
        let handOver = relay.handOver(fromSample: 4000)
        // Captured while the session's recognizer connects.
        play(relay, 4800..<9600)
        let heard = Heard()
        _ = try await attach(handOver, heard)
        #expect(runs(heard.all) == runs(numbered(4000..<9600)))
        play(relay, 9600..<12800)
        #expect(runs(heard.all) == runs(numbered(4000..<12800)))
    }

    /// The phrase may end after the last chunk the ring has (a cut at the clock's edge): the
    /// live audio is cut to the sample instead.
    @Test func aCutPastTheRingIsMadeInTheLiveAudio() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone())
        relay.listen(to: wakeStream())
        play(relay, 0..<3200)
        let handOver = relay.handOver(fromSample: 3500)
        play(relay, 3200..<6400)
        let heard = Heard()
        _ = try await attach(handOver, heard)
        #expect(runs(heard.all) == runs(numbered(3500..<6400)))
    }

    @Test func stopDeliversOneMoreChunkThenEnds() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone())
        relay.listen(to: wakeStream())
        play(relay, 0..<1600)
        let heard = Heard()
        let capture = try await attach(relay.handOver(fromSample: 0), heard)
        capture.stop()
        #expect(!capture.hasEnded, "what the server already recorded still comes")
        play(relay, 1600..<3200)
        #expect(capture.hasEnded)
        #expect(await capture.ended() == nil)
        play(relay, 3200..<4800)
        #expect(runs(heard.all) == runs(numbered(0..<3200)), "the one chunk after the stop, then nothing")
    }

    @Test func bufferOverTheLimitFailsTheStart() async throws {
        // A limit of 1 s: exactly 1 s after the cut still attaches, 100 ms more does not.
        for (end, fits) in [(16_800, true), (18_400, false)] {
            let relay = CaptureRelay(fallback: FakeMicrophone(), handOverLimit: .seconds(1))
            relay.listen(to: wakeStream())
            play(relay, 0..<1600)
            let handOver = relay.handOver(fromSample: 800)
            play(relay, 1600..<end)
            let heard = Heard()
            if fits {
                _ = try await attach(handOver, heard)
                #expect(runs(heard.all) == runs(numbered(800..<end)))
                continue
            }
            await #expect {
                _ = try await handOver.open(source: nil, deliver: heard.deliver)
            } throws: { error in
                (error as? CaptureError)?.message.contains("did not start within 1 s") == true
            }
            play(relay, end..<end + 1600)
            #expect(heard.all.isEmpty)
        }
    }

    @Test func parkedDropsEverything() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone())
        let wake = wakeStream()
        relay.listen(to: wake)
        play(relay, 0..<1600)
        relay.park()
        play(relay, 1600..<3200)
        #expect(runs(wake.audio) == runs(numbered(0..<1600)))
        // A hand-over made while parked (another start won the race) cannot attach.
        let late = relay.handOver(fromSample: 0)
        await #expect(throws: CaptureError.self) { _ = try await late.open(source: nil) { _ in } }
        // A session attached ends when the relay is parked, and gets nothing after.
        relay.listen(to: wakeStream())
        play(relay, 0..<1600)
        let heard = Heard()
        let capture = try await attach(relay.handOver(fromSample: 0), heard)
        relay.park()
        #expect(await capture.ended() == nil)
        play(relay, 1600..<3200)
        #expect(runs(heard.all) == runs(numbered(0..<1600)))
    }

    @Test func ringForgetsOnListen() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone())
        relay.listen(to: wakeStream())
        play(relay, 0..<8000)
        relay.listen(to: wakeStream())
        // The clock starts again: the new stream's sample 0 is this chunk.
        relay.deliver(AudioChunk(samples: numbered(50_000..<51_600)))
        let heard = Heard()
        _ = try await attach(relay.handOver(fromSample: 0), heard)
        #expect(runs(heard.all) == runs(numbered(50_000..<51_600)))
    }

    @Test func ringKeepsOnlyItsLength() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone(), ring: .seconds(1))
        relay.listen(to: wakeStream())
        play(relay, 0..<48_000)
        let heard = Heard()
        _ = try await attach(relay.handOver(fromSample: 0), heard)
        // Whole chunks: the last second, the chunk that holds its first sample included.
        #expect(runs(heard.all) == runs(numbered(32_000..<48_000)))
    }

    @Test func wakeStreamGetsNothingAfterHandOver() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone())
        let wake = wakeStream()
        relay.listen(to: wake)
        play(relay, 0..<3200)
        let handOver = relay.handOver(fromSample: 1000)
        play(relay, 3200..<4800)
        _ = try await attach(handOver, Heard())
        play(relay, 4800..<6400)
        #expect(runs(wake.audio) == runs(numbered(0..<3200)))
    }

    @Test func secondOpenUsesTheFallbackMicrophone() async throws {
        let microphone = FakeMicrophone()
        let relay = CaptureRelay(fallback: microphone)
        relay.listen(to: wakeStream())
        play(relay, 0..<1600)
        let handOver = relay.handOver(fromSample: 0)
        let heard = Heard()
        _ = try await attach(handOver, heard)
        #expect(microphone.streams.isEmpty, "the first open takes the relay's audio")
        relay.captureLost(CaptureError(.lost, "Lost the sound server while listening (test)."))
        // The pipeline's reopen after `.lost`.
        _ = try await handOver.open(source: nil, mediaName: "Dictation", deliver: heard.deliver)
        let reopened = try #require(microphone.current)
        reopened.push(AudioChunk(samples: numbered(90_000..<91_600)))
        #expect(runs(heard.all) == runs(numbered(0..<1600) + numbered(90_000..<91_600)))
    }

    @Test func aLostCaptureEndsTheSessionWithItsError() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone())
        relay.listen(to: wakeStream())
        let capture = try await attach(relay.handOver(fromSample: 0), Heard())
        let lost = CaptureError(.lost, "Lost the sound server while listening (test).")
        relay.captureLost(lost)
        #expect(await capture.ended() == lost)
        // Lost before the session attached: its start fails with the same error.
        relay.listen(to: wakeStream())
        let handOver = relay.handOver(fromSample: 0)
        relay.captureLost(lost)
        await #expect(throws: lost) { _ = try await handOver.open(source: nil) { _ in } }
    }

    /// The pipeline cancels its capture once more on the way out; by then the relay may listen
    /// for the next phrase, which must go on.
    @Test func anEndedSessionsLateCancelLeavesTheNextWakeStream() async throws {
        let relay = CaptureRelay(fallback: FakeMicrophone())
        relay.listen(to: wakeStream())
        let capture = try await attach(relay.handOver(fromSample: 0), Heard())
        capture.stop()
        play(relay, 0..<1600)
        #expect(await capture.ended() == nil)
        let next = wakeStream()
        relay.listen(to: next)
        capture.cancel()
        capture.stop()
        play(relay, 0..<1600)
        #expect(runs(next.audio) == runs(numbered(0..<1600)))
    }

    /// A real session (core, pipeline, audio tap) with a hand-over as its microphone: its engine
    /// gets exactly the samples from the cut on, the stop's last chunk included, and the real
    /// microphone is never opened.
    @Test func aSessionTakesTheHandOverAsItsMicrophone() async throws {
        let microphone = FakeMicrophone()
        let relay = CaptureRelay(fallback: microphone)
        relay.listen(to: wakeStream())
        play(relay, 0..<8000)
        let handOver = relay.handOver(fromSample: 4321)
        play(relay, 8000..<11_200)
        let recognizer = FakeRecognizer()
        recognizer.finalOnFinish = "dear anna"
        var configuration = Configuration()
        configuration.stopTimeoutMilliseconds = 10_000
        let core = SpeechCore(
            configuration: configuration, microphone: handOver,
            recognizers: Recognizers(local: recognizer, deepgram: recognizer), output: FakeOutput(),
            logger: Logger(label: "test"))
        let log = EventLog()
        await core.observe { event, _ in log.append(event) }
        func drive() async throws {
            try await core.start(StartOptions())
            let session = try #require(recognizer.current)
            #expect(runs(session.audio) == runs(numbered(4321..<11_200)))
            play(relay, 11_200..<14_400)
            #expect(runs(session.audio) == runs(numbered(4321..<14_400)))
            #expect(log.levels >= 1, "the session's tap meters the audio")
            let stopped = Task { await core.stop() }
            try await log.wait(for: .stopping)
            _ = await core.state  // the turn that published `stopping` has stopped the capture
            play(relay, 14_400..<16_000)
            #expect(await stopped.value == "dear anna")
            play(relay, 16_000..<17_600)
            #expect(runs(session.audio) == runs(numbered(4321..<16_000)))
            #expect(microphone.streams.isEmpty)
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await core.run() }
            do {
                try await drive()
            } catch {
                await core.shutDown()
                throw error
            }
            await core.shutDown()
        }
    }
}
