import Capture
import Testing

@testable import Recognition

/// Streams are names and the engine a string: the scheduler only tells them apart.
private typealias Scheduler = SherpaScheduler<String, String>

private func speech(_ seconds: Double, at start: Int = 0) -> UtteranceSegmenter.Utterance {
    UtteranceSegmenter.Utterance(
        samples: [Float](repeating: 0.1, count: Int(seconds * Double(AudioFormat.sampleRate))), start: start)
}

@Suite("Scheduling the shared decoder threads (SherpaScheduler)")
struct SherpaSchedulerTests {
    let t0 = ContinuousClock.now
    private let first = Scheduler.Engine(decoder: "first", generation: 1)
    let one = speech(1)
    let two = speech(2, at: 16_000)
    let three = speech(3)

    /// A scheduler whose model `first` is loaded, with `streams` open.
    private func loaded(threads: Int = 2, streams: [String], capacity: Double = 10) -> Scheduler {
        var scheduler = Scheduler(
            threads: threads, capacity: Int(capacity * Double(AudioFormat.sampleRate)), unloadAfter: .seconds(5),
            now: t0)
        for stream in streams { _ = scheduler.began(stream) }
        _ = scheduler.threadFree(now: t0)
        _ = scheduler.loaded(.success("first"), now: t0)
        return scheduler
    }

    @Test func theFirstStreamLoadsTheModelOnceWhileItsWorkQueues() {
        var scheduler = Scheduler(threads: 2, capacity: 160_000, unloadAfter: .seconds(5), now: t0)
        #expect(scheduler.threadFree(now: t0) == .wait(timeout: nil))
        #expect(scheduler.began("a") == .threads)
        #expect(scheduler.threadFree(now: t0) == .load("a"))
        // The other thread waits, even with work queued.
        #expect(scheduler.threadFree(now: t0) == .wait(timeout: nil))
        #expect(scheduler.queued([.final(one, fromFinalize: false)], for: "a", now: t0) == .accepted(.threads))
        #expect(scheduler.threadFree(now: t0) == .wait(timeout: nil))
        #expect(scheduler.loaded(.success("first"), now: t0) == .threads)
        #expect(scheduler.isModelLoaded)
        #expect(
            scheduler.threadFree(now: t0 + .seconds(1))
                == .run("a", .final(one, fromFinalize: false), first, waited: .seconds(1), interim: nil))
    }

    @Test func aStreamsWorkRunsInOrderOneItemAtATimeBesideOtherStreams() {
        var scheduler = loaded(streams: ["a", "b"])
        _ = scheduler.queued([.final(one, fromFinalize: false), .event(.speechActivity(false))], for: "a", now: t0)
        _ = scheduler.queued([.final(three, fromFinalize: false)], for: "b", now: t0)
        #expect(
            scheduler.threadFree(now: t0)
                == .run("a", .final(one, fromFinalize: false), first, waited: .zero, interim: nil))
        // a's next item is older than b's, but a is busy.
        #expect(
            scheduler.threadFree(now: t0)
                == .run("b", .final(three, fromFinalize: false), first, waited: .zero, interim: nil))
        #expect(scheduler.threadFree(now: t0) == .wait(timeout: nil))
        #expect(scheduler.done("a", .final(one, fromFinalize: false), now: t0) == .threads)
        #expect(
            scheduler.threadFree(now: t0)
                == .run("a", .event(.speechActivity(false)), first, waited: .zero, interim: nil))
    }

    @Test func interimsRunOnlyWhenNoOtherWorkWaitsAndNeverOnEveryThread() {
        var scheduler = loaded(streams: ["a", "b"])
        _ = scheduler.queued([.interim(one)], for: "a", now: t0)
        _ = scheduler.queued([.interim(two)], for: "b", now: t0)
        #expect(scheduler.threadFree(now: t0) == .run("a", .interim(one), first, waited: .zero, interim: .admit))
        // One of the two threads is kept from interims.
        #expect(scheduler.threadFree(now: t0) == .wait(timeout: nil))
        // b's final makes its queued interim stale, and runs.
        _ = scheduler.queued([.final(two, fromFinalize: false)], for: "b", now: t0)
        #expect(
            scheduler.threadFree(now: t0)
                == .run("b", .final(two, fromFinalize: false), first, waited: .zero, interim: nil))
        // A final of a while its interim decodes runs at once and voids that interim.
        _ = scheduler.done("b", .final(two, fromFinalize: false), now: t0)
        _ = scheduler.queued([.final(three, fromFinalize: false)], for: "a", now: t0)
        #expect(
            scheduler.threadFree(now: t0)
                == .run("a", .final(three, fromFinalize: false), first, waited: .zero, interim: .void))
    }

    @Test func anInterimWaitsForADecodeQueuedBehindABusyStream() {
        var scheduler = loaded(threads: 3, streams: ["a", "b"])
        _ = scheduler.queued([.final(one, fromFinalize: false), .speculative(two)], for: "a", now: t0)
        _ = scheduler.threadFree(now: t0)
        _ = scheduler.queued([.interim(three)], for: "b", now: t0)
        #expect(scheduler.threadFree(now: t0) == .wait(timeout: nil))
        _ = scheduler.done("a", .final(one, fromFinalize: false), now: t0)
        #expect(scheduler.threadFree(now: t0) == .run("a", .speculative(two), first, waited: .zero, interim: nil))
        #expect(scheduler.threadFree(now: t0) == .run("b", .interim(three), first, waited: .zero, interim: .admit))
    }

    @Test func aBacklogPastTheCapacityIsRefused() {
        var scheduler = loaded(streams: ["a"], capacity: 2.5)
        #expect(scheduler.queued([.final(two, fromFinalize: false)], for: "a", now: t0) == .accepted(.threads))
        let refused = scheduler.queued([.final(one, fromFinalize: false)], for: "a", now: t0)
        guard case .refused(let error) = refused else {
            Issue.record("not refused: \(refused)")
            return
        }
        #expect(error.message.contains("fell 2 s behind"))
        #expect(scheduler.queues["a"]?.weight == two.samples.count)
    }

    @Test func aStopWaitsForTheWorkRunningThenEndsTheStreamNext() {
        var scheduler = loaded(streams: ["a"])
        _ = scheduler.queued([.final(one, fromFinalize: false), .final(two, fromFinalize: false)], for: "a", now: t0)
        _ = scheduler.threadFree(now: t0)
        #expect(scheduler.stop("a", error: nil, abandon: false, now: t0) == Scheduler.Stopped(wake: .threads))
        #expect(scheduler.threadFree(now: t0) == .wait(timeout: nil))
        _ = scheduler.done("a", .final(one, fromFinalize: false), now: t0)
        // The queued final was dropped.
        #expect(scheduler.threadFree(now: t0) == .run("a", .end(nil), first, waited: .zero, interim: nil))
        _ = scheduler.done("a", .end(nil), now: t0)
        #expect(scheduler.queues.isEmpty)
        #expect(scheduler.isModelLoaded)
    }

    @Test func aStopThatTimedOutGivesUpAnEngineStuckOnTheStream() {
        var stuck = loaded(streams: ["a"])
        _ = stuck.queued([.final(one, fromFinalize: false)], for: "a", now: t0)
        _ = stuck.threadFree(now: t0)
        #expect(
            stuck.stop("a", error: nil, abandon: true, now: t0) == Scheduler.Stopped(wake: .threads, abandon: "first"))
        #expect(!stuck.isModelLoaded)
        // The next work starts another engine, while the abandoned decode still runs.
        #expect(stuck.threadFree(now: t0) == .load("a"))

        var idle = loaded(streams: ["a"])
        #expect(idle.stop("a", error: nil, abandon: true, now: t0) == Scheduler.Stopped(wake: .threads))
        #expect(idle.isModelLoaded)
    }

    @Test func aStopThatTimedOutGivesUpAnEngineEveryThreadIsStuckOn() {
        var scheduler = loaded(threads: 1, streams: ["a", "b"])
        _ = scheduler.queued([.final(one, fromFinalize: false)], for: "b", now: t0)
        _ = scheduler.threadFree(now: t0)
        #expect(
            scheduler.stop("a", error: nil, abandon: true, now: t0 + .milliseconds(500))
                == Scheduler.Stopped(wake: .threads))
        #expect(
            scheduler.stop("a", error: nil, abandon: true, now: t0 + .seconds(2))
                == Scheduler.Stopped(wake: .threads, abandon: "first"))
    }

    @Test func aFinalTheEngineFailsOnIsDecodedOnceMoreThenEndsTheStream() throws {
        var scheduler = loaded(streams: ["a"])
        let final = SherpaWork.final(one, fromFinalize: false)
        _ = scheduler.queued([final], for: "a", now: t0)
        _ = scheduler.threadFree(now: t0)
        scheduler.engineFailed(first)
        #expect(scheduler.finalFailed("a", final, now: t0) == .nobody)
        _ = scheduler.done("a", final, now: t0)
        #expect(scheduler.threadFree(now: t0) == .load("a"))
        _ = scheduler.loaded(.success("second"), now: t0)
        let second = Scheduler.Engine(decoder: "second", generation: 2)
        #expect(scheduler.threadFree(now: t0) == .run("a", final, second, waited: .zero, interim: nil))
        // A late failure report about the first engine leaves the second alone.
        scheduler.engineFailed(first)
        #expect(scheduler.isModelLoaded)
        #expect(scheduler.finalFailed("a", final, now: t0) == .threads)
        _ = scheduler.done("a", final, now: t0)
        let step = scheduler.threadFree(now: t0)
        guard case .run("a", .end(let error?), second, _, nil) = step else {
            Issue.record("the stream does not end with an error: \(step)")
            return
        }
        #expect(error.message.contains("failed twice"))
    }

    @Test func aStoppedStreamsFailedFinalIsNotDecodedAgain() {
        var scheduler = loaded(streams: ["a"])
        let final = SherpaWork.final(one, fromFinalize: false)
        _ = scheduler.queued([final], for: "a", now: t0)
        _ = scheduler.threadFree(now: t0)
        _ = scheduler.stop("a", error: nil, abandon: false, now: t0)
        #expect(scheduler.finalFailed("a", final, now: t0) == .nobody)
        _ = scheduler.done("a", final, now: t0)
        #expect(scheduler.threadFree(now: t0) == .run("a", .end(nil), first, waited: .zero, interim: nil))
    }

    @Test func aFailedLoadEndsTheStreamsWithItsErrorAndIsNotRetriedMeanwhile() {
        var scheduler = Scheduler(threads: 2, capacity: 160_000, unloadAfter: .seconds(5), now: t0)
        _ = scheduler.began("a")
        _ = scheduler.queued([.final(one, fromFinalize: false)], for: "a", now: t0)
        _ = scheduler.threadFree(now: t0)
        let failure = RecognitionError(.backendUnavailable, "no model")
        #expect(scheduler.loaded(.failure(failure), now: t0) == .threads)
        #expect(scheduler.threadFree(now: t0) == .run("a", .end(failure), nil, waited: .zero, interim: nil))
        #expect(scheduler.threadFree(now: t0) == .wait(timeout: nil))
    }

    @Test func theModelIsUnloadedOnlyOnceNoStreamIsOpenForTheIdleTime() {
        var scheduler = loaded(streams: ["a"])
        #expect(scheduler.threadFree(now: t0 + .seconds(60)) == .wait(timeout: nil))
        _ = scheduler.queued([.end(nil)], for: "a", now: t0)
        _ = scheduler.threadFree(now: t0)
        _ = scheduler.done("a", .end(nil), now: t0 + .seconds(10))
        #expect(scheduler.threadFree(now: t0 + .seconds(12)) == .wait(timeout: .seconds(3)))
        #expect(scheduler.threadFree(now: t0 + .seconds(15)) == .unload(reason: "idle for \(Duration.seconds(5))"))
        #expect(!scheduler.isModelLoaded)
        #expect(scheduler.threadFree(now: t0 + .seconds(16)) == .wait(timeout: nil))
        #expect(scheduler.close() == .threads)
        #expect(scheduler.threadFree(now: t0) == .exit(unloading: nil))
    }

    @Test func closingLetsTheOpenStreamsEndBeforeTheThreadsUnloadAndExit() {
        var scheduler = loaded(streams: ["a"])
        _ = scheduler.close()
        #expect(scheduler.threadFree(now: t0) == .wait(timeout: nil))
        _ = scheduler.queued([.end(nil)], for: "a", now: t0)
        #expect(scheduler.threadFree(now: t0) == .run("a", .end(nil), first, waited: .zero, interim: nil))
        _ = scheduler.done("a", .end(nil), now: t0)
        #expect(scheduler.threadFree(now: t0) == .exit(unloading: "recognizer released"))
        #expect(scheduler.threadFree(now: t0) == .exit(unloading: nil))
    }
}
