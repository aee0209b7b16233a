import Capture
import Testing

@testable import Recognition

/// Sessions are names and the engine a string: the scheduler only tells them apart.
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

    /// A scheduler whose model `first` is loaded, with `sessions` open.
    private func loaded(threads: Int = 2, sessions: [String], capacity: Double = 10) -> Scheduler {
        var scheduler = Scheduler(
            threads: threads, capacity: Int(capacity * Double(AudioFormat.sampleRate)), unloadAfter: .seconds(5),
            now: t0)
        for session in sessions { _ = scheduler.handle(.began(session), now: t0) }
        _ = scheduler.handle(.threadFree, now: t0)
        _ = scheduler.handle(.loaded(.success("first")), now: t0)
        return scheduler
    }

    @Test func theFirstSessionLoadsTheModelOnceWhileItsWorkQueues() {
        var scheduler = Scheduler(threads: 2, capacity: 160_000, unloadAfter: .seconds(5), now: t0)
        #expect(scheduler.handle(.threadFree, now: t0) == [.wait(timeout: nil)])
        #expect(scheduler.handle(.began("a"), now: t0) == [.wakeThreads])
        #expect(scheduler.handle(.threadFree, now: t0) == [.load("a")])
        // The other thread waits, even with work queued.
        #expect(scheduler.handle(.threadFree, now: t0) == [.wait(timeout: nil)])
        #expect(scheduler.handle(.queued([.final(one, fromFinalize: false)], for: "a"), now: t0) == [.wakeThreads])
        #expect(scheduler.handle(.threadFree, now: t0) == [.wait(timeout: nil)])
        #expect(scheduler.handle(.loaded(.success("first")), now: t0) == [.wakeThreads])
        #expect(scheduler.isModelLoaded)
        #expect(
            scheduler.handle(.threadFree, now: t0 + .seconds(1)) == [
                .run("a", .final(one, fromFinalize: false), first, waited: .seconds(1))
            ])
    }

    @Test func aSessionsWorkRunsInOrderOneItemAtATimeBesideOtherSessions() {
        var scheduler = loaded(sessions: ["a", "b"])
        _ = scheduler.handle(
            .queued([.final(one, fromFinalize: false), .event(.speechActivity(false))], for: "a"), now: t0)
        _ = scheduler.handle(.queued([.final(three, fromFinalize: false)], for: "b"), now: t0)
        #expect(
            scheduler.handle(.threadFree, now: t0) == [
                .run("a", .final(one, fromFinalize: false), first, waited: .zero)
            ])
        // a's next item is older than b's, but a is busy.
        #expect(
            scheduler.handle(.threadFree, now: t0) == [
                .run("b", .final(three, fromFinalize: false), first, waited: .zero)
            ])
        #expect(scheduler.handle(.threadFree, now: t0) == [.wait(timeout: nil)])
        #expect(scheduler.handle(.done("a", .final(one, fromFinalize: false)), now: t0) == [.wakeThreads])
        #expect(
            scheduler.handle(.threadFree, now: t0) == [.run("a", .event(.speechActivity(false)), first, waited: .zero)])
    }

    @Test func interimsRunOnlyWhenNoOtherWorkWaitsAndNeverOnEveryThread() {
        var scheduler = loaded(sessions: ["a", "b"])
        _ = scheduler.handle(.queued([.interim(one)], for: "a"), now: t0)
        _ = scheduler.handle(.queued([.interim(two)], for: "b"), now: t0)
        #expect(
            scheduler.handle(.threadFree, now: t0) == [
                .admitInterim("a"), .run("a", .interim(one), first, waited: .zero),
            ])
        // One of the two threads is kept from interims.
        #expect(scheduler.handle(.threadFree, now: t0) == [.wait(timeout: nil)])
        // b's final makes its queued interim stale, and runs.
        _ = scheduler.handle(.queued([.final(two, fromFinalize: false)], for: "b"), now: t0)
        #expect(
            scheduler.handle(.threadFree, now: t0) == [
                .run("b", .final(two, fromFinalize: false), first, waited: .zero)
            ])
        // A final of a while its interim decodes runs at once and voids that interim.
        _ = scheduler.handle(.done("b", .final(two, fromFinalize: false)), now: t0)
        _ = scheduler.handle(.queued([.final(three, fromFinalize: false)], for: "a"), now: t0)
        #expect(
            scheduler.handle(.threadFree, now: t0) == [
                .voidInterim("a"), .run("a", .final(three, fromFinalize: false), first, waited: .zero),
            ])
    }

    @Test func anInterimWaitsForADecodeQueuedBehindABusySession() {
        var scheduler = loaded(threads: 3, sessions: ["a", "b"])
        _ = scheduler.handle(.queued([.final(one, fromFinalize: false), .speculative(two)], for: "a"), now: t0)
        _ = scheduler.handle(.threadFree, now: t0)
        _ = scheduler.handle(.queued([.interim(three)], for: "b"), now: t0)
        #expect(scheduler.handle(.threadFree, now: t0) == [.wait(timeout: nil)])
        _ = scheduler.handle(.done("a", .final(one, fromFinalize: false)), now: t0)
        #expect(scheduler.handle(.threadFree, now: t0) == [.run("a", .speculative(two), first, waited: .zero)])
        #expect(
            scheduler.handle(.threadFree, now: t0) == [
                .admitInterim("b"), .run("b", .interim(three), first, waited: .zero),
            ])
    }

    @Test func aBacklogPastTheCapacityIsRefused() {
        var scheduler = loaded(sessions: ["a"], capacity: 2.5)
        #expect(scheduler.handle(.queued([.final(two, fromFinalize: false)], for: "a"), now: t0) == [.wakeThreads])
        let refused = scheduler.handle(.queued([.final(one, fromFinalize: false)], for: "a"), now: t0)
        guard case .refuse(let error) = refused.first, refused.count == 1 else {
            Issue.record("not refused: \(refused)")
            return
        }
        #expect(error.message.contains("fell 2 s behind"))
        #expect(scheduler.queues["a"]?.weight == two.samples.count)
    }

    @Test func aStopWaitsForTheWorkRunningThenEndsTheSessionNext() {
        var scheduler = loaded(sessions: ["a"])
        _ = scheduler.handle(
            .queued([.final(one, fromFinalize: false), .final(two, fromFinalize: false)], for: "a"), now: t0)
        _ = scheduler.handle(.threadFree, now: t0)
        #expect(scheduler.handle(.stop("a", error: nil, abandon: false), now: t0) == [.wakeThreads])
        #expect(scheduler.handle(.threadFree, now: t0) == [.wait(timeout: nil)])
        _ = scheduler.handle(.done("a", .final(one, fromFinalize: false)), now: t0)
        // The queued final was dropped.
        #expect(scheduler.handle(.threadFree, now: t0) == [.run("a", .end(nil), first, waited: .zero)])
        _ = scheduler.handle(.done("a", .end(nil)), now: t0)
        #expect(scheduler.queues.isEmpty)
        #expect(scheduler.isModelLoaded)
    }

    @Test func aStopThatTimedOutGivesUpAnEngineStuckOnTheSession() {
        var stuck = loaded(sessions: ["a"])
        _ = stuck.handle(.queued([.final(one, fromFinalize: false)], for: "a"), now: t0)
        _ = stuck.handle(.threadFree, now: t0)
        #expect(stuck.handle(.stop("a", error: nil, abandon: true), now: t0) == [.wakeThreads, .abandon("first")])
        #expect(!stuck.isModelLoaded)
        // The next work starts another engine, while the abandoned decode still runs.
        #expect(stuck.handle(.threadFree, now: t0) == [.load("a")])

        var idle = loaded(sessions: ["a"])
        #expect(idle.handle(.stop("a", error: nil, abandon: true), now: t0) == [.wakeThreads])
        #expect(idle.isModelLoaded)
    }

    @Test func aStopThatTimedOutGivesUpAnEngineEveryThreadIsStuckOn() {
        var scheduler = loaded(threads: 1, sessions: ["a", "b"])
        _ = scheduler.handle(.queued([.final(one, fromFinalize: false)], for: "b"), now: t0)
        _ = scheduler.handle(.threadFree, now: t0)
        #expect(scheduler.handle(.stop("a", error: nil, abandon: true), now: t0 + .milliseconds(500)) == [.wakeThreads])
        #expect(
            scheduler.handle(.stop("a", error: nil, abandon: true), now: t0 + .seconds(2)) == [
                .wakeThreads, .abandon("first"),
            ])
    }

    @Test func aFinalTheEngineFailsOnIsDecodedOnceMoreThenEndsTheSession() throws {
        var scheduler = loaded(sessions: ["a"])
        let final = SherpaWork.final(one, fromFinalize: false)
        _ = scheduler.handle(.queued([final], for: "a"), now: t0)
        _ = scheduler.handle(.threadFree, now: t0)
        #expect(scheduler.handle(.engineFailed(first), now: t0) == [])
        #expect(scheduler.handle(.finalFailed("a", final), now: t0) == [])
        _ = scheduler.handle(.done("a", final), now: t0)
        #expect(scheduler.handle(.threadFree, now: t0) == [.load("a")])
        _ = scheduler.handle(.loaded(.success("second")), now: t0)
        let second = Scheduler.Engine(decoder: "second", generation: 2)
        #expect(scheduler.handle(.threadFree, now: t0) == [.run("a", final, second, waited: .zero)])
        // A late failure report about the first engine leaves the second alone.
        _ = scheduler.handle(.engineFailed(first), now: t0)
        #expect(scheduler.isModelLoaded)
        #expect(scheduler.handle(.finalFailed("a", final), now: t0) == [.wakeThreads])
        _ = scheduler.handle(.done("a", final), now: t0)
        let actions = scheduler.handle(.threadFree, now: t0)
        guard case .run("a", .end(let error?), second, _) = actions.first else {
            Issue.record("the session does not end with an error: \(actions)")
            return
        }
        #expect(error.message.contains("failed twice"))
    }

    @Test func aStoppedSessionsFailedFinalIsNotDecodedAgain() {
        var scheduler = loaded(sessions: ["a"])
        let final = SherpaWork.final(one, fromFinalize: false)
        _ = scheduler.handle(.queued([final], for: "a"), now: t0)
        _ = scheduler.handle(.threadFree, now: t0)
        _ = scheduler.handle(.stop("a", error: nil, abandon: false), now: t0)
        #expect(scheduler.handle(.finalFailed("a", final), now: t0) == [])
        _ = scheduler.handle(.done("a", final), now: t0)
        #expect(scheduler.handle(.threadFree, now: t0) == [.run("a", .end(nil), first, waited: .zero)])
    }

    @Test func aFailedLoadEndsTheSessionsWithItsErrorAndIsNotRetriedMeanwhile() {
        var scheduler = Scheduler(threads: 2, capacity: 160_000, unloadAfter: .seconds(5), now: t0)
        _ = scheduler.handle(.began("a"), now: t0)
        _ = scheduler.handle(.queued([.final(one, fromFinalize: false)], for: "a"), now: t0)
        _ = scheduler.handle(.threadFree, now: t0)
        let failure = RecognitionError(.backendUnavailable, "no model")
        #expect(scheduler.handle(.loaded(.failure(failure)), now: t0) == [.wakeThreads])
        #expect(scheduler.handle(.threadFree, now: t0) == [.run("a", .end(failure), nil, waited: .zero)])
        #expect(scheduler.handle(.threadFree, now: t0) == [.wait(timeout: nil)])
    }

    @Test func theModelIsUnloadedOnlyOnceNoSessionIsOpenForTheIdleTime() {
        var scheduler = loaded(sessions: ["a"])
        #expect(scheduler.handle(.threadFree, now: t0 + .seconds(60)) == [.wait(timeout: nil)])
        _ = scheduler.handle(.queued([.end(nil)], for: "a"), now: t0)
        _ = scheduler.handle(.threadFree, now: t0)
        _ = scheduler.handle(.done("a", .end(nil)), now: t0 + .seconds(10))
        #expect(scheduler.handle(.threadFree, now: t0 + .seconds(12)) == [.wait(timeout: .seconds(3))])
        #expect(
            scheduler.handle(.threadFree, now: t0 + .seconds(15)) == [
                .unload(reason: "idle for \(Duration.seconds(5))")
            ])
        #expect(!scheduler.isModelLoaded)
        #expect(scheduler.handle(.threadFree, now: t0 + .seconds(16)) == [.wait(timeout: nil)])
        #expect(scheduler.handle(.close, now: t0) == [.wakeThreads])
        #expect(scheduler.handle(.threadFree, now: t0) == [.exit])
    }

    @Test func closingLetsTheOpenSessionsEndBeforeTheThreadsUnloadAndExit() {
        var scheduler = loaded(sessions: ["a"])
        _ = scheduler.handle(.close, now: t0)
        #expect(scheduler.handle(.threadFree, now: t0) == [.wait(timeout: nil)])
        _ = scheduler.handle(.queued([.end(nil)], for: "a"), now: t0)
        #expect(scheduler.handle(.threadFree, now: t0) == [.run("a", .end(nil), first, waited: .zero)])
        _ = scheduler.handle(.done("a", .end(nil)), now: t0)
        #expect(scheduler.handle(.threadFree, now: t0) == [.unload(reason: "recognizer released"), .exit])
        #expect(scheduler.handle(.threadFree, now: t0) == [.exit])
    }
}
