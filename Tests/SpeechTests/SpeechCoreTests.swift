import Capture
import Foundation
import NIOCore
import Recognition
import Synchronization
import TestSupport
import Testing

@testable import Speech

@Suite("Speech core, in process")
struct SpeechCoreTests {
    @Test func stopReturnsEveryFinalIncludingTheFlush() async throws {
        let harness = try await CoreHarness()
        harness.recognizer.finalOnFinish = "last words"
        try await harness.run {
            let (session, capture) = try await harness.start()
            for _ in 0..<3 { capture.push(.tone) }
            #expect(session.samples == 4800, "audio goes from the capture thread to the recognizer")
            session.interim("hello")
            session.final("hello world")
            let text = await harness.core.stop()
            #expect(text == "hello world last words")
            #expect(harness.lastHistoryText == text)
            #expect(await harness.core.currentTranscript == text)
            #expect(harness.log.finals == ["hello world", "last words"])
            #expect(harness.log.states == [.starting, .listening, .stopping, .idle])
            #expect(harness.log.levels >= 2, "a level reading per 100 ms of audio")
            #expect(harness.microphone.openStreams == 0)
        }
    }

    /// Level readings leave from the capture thread, not the core's loop: one the thread read
    /// as the session ended must not follow the end.
    @Test func noLevelReadingFollowsTheEndOfTheSession() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (_, capture) = try await harness.start()
            capture.push(.tone)
            #expect(harness.log.levels == 1)
            _ = await harness.core.stop()
            for _ in 0..<3 { capture.pushLate(.tone) }
            let events = harness.log.all
            let idle = try #require(events.firstIndex { if case .state(.idle) = $0 { true } else { false } })
            #expect(!events[idle...].contains { if case .audioLevel = $0 { true } else { false } })
            #expect(harness.log.levels == 1)
        }
    }

    @Test func cancelDropsTheInterimAndKeepsTheFinals() async throws {
        let harness = try await CoreHarness()
        harness.recognizer.finalOnFinish = "never said"
        try await harness.run {
            let (session, _) = try await harness.start()
            session.final("kept")
            session.interim("dropped")
            try await harness.log.wait {
                $0.contains(.transcript("kept dropped", update: .init(segment: "dropped", isFinal: false)))
            }
            await harness.core.cancel()
            #expect(await harness.core.state == .idle)
            #expect(await harness.core.currentTranscript == "kept")
            #expect(harness.lastHistoryText == "kept")
            #expect(harness.microphone.openStreams == 0)
        }
    }

    @Test func toggleStartsThenStops() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let started = try await harness.core.toggle(StartOptions())
            #expect(started)
            #expect(await harness.core.state == .listening)
            let stillListening = try await harness.core.toggle(StartOptions())
            #expect(!stillListening)
            #expect(await harness.core.state == .idle)
            #expect(harness.microphone.openStreams == 0)
        }
    }

    @Test func resetClearsTheTranscriptAndKeepsListening() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start()
            session.final("before")
            try await harness.log.wait {
                $0.contains(.transcript("before", update: .init(segment: "before", isFinal: true)))
            }
            await harness.core.resetTranscript()
            #expect(harness.log.all.last == .transcript("", update: .init(segment: "", isFinal: true)))
            #expect(await harness.core.state == .listening)
            session.final("after")
            #expect(await harness.core.stop() == "after")
            #expect(harness.lastHistoryText == "before after", "history keeps what was said, reset or not")
        }
    }

    @Test func aStopWhileStartingStopsOnceAudioFlows() async throws {
        let harness = try await CoreHarness()
        harness.microphone.holdOpens()
        try await harness.run {
            async let started: Void = harness.core.start(StartOptions())
            try await harness.log.wait(for: .starting)
            // An immediate task queues the stop on the core before the next line runs.
            let (stopped, reply) = AsyncStream.makeStream(of: String.self)
            Task.immediate { reply.yield(await harness.core.stop()) }
            try await waitFor { harness.microphone.opensInFlight == 1 }
            harness.microphone.releaseOpens()
            try await started
            var replies = stopped.makeAsyncIterator()
            #expect(await replies.next() == "")
            #expect(harness.log.states == [.starting, .stopping, .idle])
            #expect(harness.microphone.openStreams == 0)
        }
    }

    @Test func aStartWhileStoppingStartsAgainAfterwards() async throws {
        let harness = try await CoreHarness()
        harness.recognizer.finishHangs = true
        try await harness.run {
            let (first, _) = try await harness.start()
            // Immediate tasks queue the stop and the start on the core in this order.
            let (stopped, reply) = AsyncStream.makeStream(of: String.self)
            Task.immediate { reply.yield(await harness.core.stop()) }
            let (restarted, restartReply) = AsyncStream.makeStream(of: SpeechError?.self)
            Task.immediate {
                do throws(SpeechError) {
                    try await harness.core.start(StartOptions())
                    restartReply.yield(nil)
                } catch {
                    restartReply.yield(error)
                }
            }
            try await harness.log.wait(for: .stopping)
            first.cancel()  // the flush ends
            var stops = stopped.makeAsyncIterator()
            _ = await stops.next()
            var starts = restarted.makeAsyncIterator()
            #expect(await starts.next() == .some(nil))
            #expect(await harness.core.state == .listening)
            #expect(harness.recognizer.sessions.count == 2)
        }
    }

    /// Defect 4: on a stop timeout the reply, `Transcript` and history agree: the pending interim
    /// is promoted to a final.
    @Test func aStopTimeoutKeepsThePendingInterimEverywhere() async throws {
        let harness = try await CoreHarness { $0.stopTimeoutMilliseconds = 300 }
        harness.recognizer.finishHangs = true
        try await harness.run {
            let (session, _) = try await harness.start()
            session.final("first part")
            session.interim("second half")
            try await harness.log.wait {
                $0.contains(
                    .transcript("first part second half", update: .init(segment: "second half", isFinal: false)))
            }
            let text = await harness.core.stop()
            #expect(text == "first part second half")
            #expect(await harness.core.currentTranscript == text)
            #expect(harness.lastHistoryText == text)
            #expect(harness.log.finals == ["first part", "second half"])
            session.final("too late")
            #expect(await harness.core.currentTranscript == text, "results after the timeout are ignored")
            #expect(harness.log.failures.isEmpty, "a timeout is not a failure")
        }
    }

    /// Issue 26, defect 2: a stop replies at the timeout even when the engine never lets go of
    /// the session (neither the flush nor the cancel ends it), and the next session works.
    @Test func aStopTimeoutRepliesAlthoughTheEngineNeverEnds() async throws {
        let harness = try await CoreHarness { $0.stopTimeoutMilliseconds = 300 }
        harness.recognizer.cancelHangs = true
        try await harness.run {
            let (wedged, _) = try await harness.start()
            defer { wedged.release() }
            wedged.final("said before")
            wedged.interim("and pending")
            try await harness.log.wait {
                $0.contains { if case .transcript(_, .some(let update)) = $0 { !update.isFinal } else { false } }
            }
            #expect(await harness.stop(within: .seconds(30)) == "said before and pending")
            #expect(await harness.core.state == .idle)
            #expect(harness.lastHistoryText == "said before and pending")
            #expect(harness.microphone.openStreams == 0)
            #expect(!wedged.hasEnded, "the engine still holds the first session")

            harness.recognizer.cancelHangs = false
            let (next, _) = try await harness.start()
            next.final("next session")
            try await harness.log.wait {
                $0.contains {
                    if case .transcript(_, .some(let update)) = $0 { update.segment == "next session" } else { false }
                }
            }
            wedged.final("too late")
            #expect(await harness.core.stop() == "next session")
            #expect(harness.log.failures.isEmpty, "a timeout is not a failure")
        }
    }

    /// Issue 26, defect 1: a recognizer session that ends by itself (no stop, no error) ends the
    /// core's session: idle, `SessionFailed`, the finals kept, the microphone closed.
    @Test func aRecognizerSessionThatEndsByItselfEndsTheSession() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start()
            session.final("kept")
            session.endByItself()
            try await harness.log.waitForFailure()
            #expect(harness.log.failures == [.endedByRecognizer])
            #expect(await harness.core.state == .idle)
            #expect(harness.microphone.openStreams == 0)
            #expect(await harness.core.stop() == "kept")
            _ = try await harness.start()
            #expect(await harness.core.state == .listening)
        }
    }

    @Test func aRecognizerFailureEndsTheSessionAndKeepsTheFinals() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start()
            session.final("kept")
            session.fail(RecognitionError(.backendUnavailable, "The server went away."))
            try await harness.log.waitForFailure()
            #expect(harness.log.failures.map(\.code) == [.backendUnavailable])
            #expect(await harness.core.state == .idle)
            #expect(await harness.core.lastError?.code == .backendUnavailable)
            #expect(harness.lastHistoryText == "kept")
            #expect(harness.microphone.openStreams == 0)
        }
    }

    @Test func theMicrophoneComesBackAfterTheSoundServerRestarts() async throws {
        let harness = try await CoreHarness { $0.microphoneReconnectMilliseconds = 10_000 }
        try await harness.run {
            let (session, first) = try await harness.start()
            harness.microphone.available = false
            first.lose()
            try await harness.log.wait(for: .reconnecting)
            #expect(await harness.core.microphoneStatus == .unavailable)
            let count = harness.log.all.count
            harness.microphone.available = true
            try await harness.log.wait(for: .listening, after: count)
            #expect(harness.microphone.streams.count == 2)
            try #require(harness.microphone.current).push(.tone)
            #expect(session.samples == 1600, "audio flows from the new capture")
            _ = await harness.core.stop()
            #expect(harness.microphone.openStreams == 0)
        }
    }

    @Test func aSoundServerThatStaysAwayFailsTheSession() async throws {
        let harness = try await CoreHarness { $0.microphoneReconnectMilliseconds = 500 }
        try await harness.run {
            let (session, capture) = try await harness.start()
            session.final("kept")
            harness.microphone.available = false
            capture.lose()
            try await harness.log.waitForFailure()
            #expect(harness.log.failures.map(\.code) == [.microphoneUnavailable])
            #expect(harness.lastHistoryText == "kept")
        }
    }

    /// Defect 1: a session that ends while the microphone is reconnecting must not leave a
    /// capture open that nobody stops (the indicator stays on, AudioLevel keeps firing).
    @Test func theMicrophoneIsClosedWhenASessionEndsWhileReconnecting() async throws {
        let harness = try await CoreHarness { $0.microphoneReconnectMilliseconds = 30_000 }
        try await harness.run {
            let (session, first) = try await harness.start()
            harness.microphone.available = false
            first.lose()
            try await harness.log.wait(for: .reconnecting)
            // The sound server is back, and a reopening is under way when the recognizer fails.
            harness.microphone.holdOpens()
            harness.microphone.available = true
            try await waitFor { harness.microphone.opensInFlight == 1 }
            session.fail(RecognitionError(.backendUnavailable, "The server went away."))
            harness.microphone.releaseOpens()
            try await harness.log.wait(for: .idle)
            #expect(harness.microphone.opensInFlight == 0, "idle is reported only after the reopening finished")
            #expect(harness.microphone.openStreams == 0, "the capture opened during the failure is closed")
            let levels = harness.log.levels
            harness.microphone.current?.push(.tone)
            #expect(harness.log.levels == levels, "no AudioLevel once idle")
        }
    }

    @Test func aRefusedStartSaysWhy() async throws {
        let harness = try await CoreHarness()
        harness.recognizer.startError = RecognitionError(.notAuthorized, "The key was refused.", authorization: .denied)
        try await harness.run {
            let error = await #expect(throws: SpeechError.self) { try await harness.core.start(StartOptions()) }
            #expect(error?.code == .notAuthorized)
            #expect(await harness.core.authorization == .denied)
            #expect(await harness.core.state == .idle)
            #expect(harness.microphone.streams.isEmpty, "no microphone without a recognizer")
        }
    }

    @Test func aMissingMicrophoneFailsTheStartAndEndsTheRecognizerSession() async throws {
        let harness = try await CoreHarness()
        harness.microphone.available = false
        try await harness.run {
            let error = await #expect(throws: SpeechError.self) { try await harness.core.start(StartOptions()) }
            #expect(error?.code == .microphoneUnavailable)
            #expect(await harness.core.microphoneStatus == .unavailable)
            #expect(harness.recognizer.current?.hasEnded == true)
        }
    }

    /// Bounded hand-off: a core that falls more than `reportQueueBound` reports behind its recognizer
    /// ends the session with a clear failure instead of queueing without bound; finals stay.
    @Test func aRecognizerThatFloodsTheCoreFailsTheSessionAndKeepsTheFinals() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start()
            session.final("kept")
            try await harness.log.wait {
                $0.contains(.transcript("kept", update: .init(segment: "kept", isFinal: true)))
            }
            let blocked = DispatchSemaphore(value: 0)
            harness.core.submit { _ in blocked.wait() }
            for index in 0...SpeechCore.reportQueueBound + 10 { session.interim("word \(index)") }
            blocked.signal()
            try await harness.log.waitForFailure()
            let failure = try #require(harness.log.failures.first)
            #expect(failure.code == .internal)
            #expect(failure.message.contains("behind"), "\(failure.message)")
            #expect(harness.lastHistoryText?.hasPrefix("kept") == true)
        }
    }

    @Test func shutdownMidSessionStopsItWithTheFinalsSaved() async throws {
        let harness = try await CoreHarness()
        harness.recognizer.finalOnFinish = "flushed at shutdown"
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { await harness.core.run() }
            let (session, _) = try await harness.start()
            session.final("said before")
            await harness.core.shutDown()
            try await group.waitForAll()
        }
        #expect(harness.lastHistoryText == "said before flushed at shutdown")
        #expect(harness.microphone.openStreams == 0)
    }

    @Test func settingsApplyToTheNextStart() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            harness.core.update { $0.language = "fr-FR" }
            let (session, _) = try await harness.start()
            #expect(session.options.language == "fr-FR")
            let (same, _) = try await harness.start(StartOptions(language: "de-DE"))
            #expect(same === session, "already listening: nothing changes")
            _ = await harness.core.stop()
            _ = try await harness.start(StartOptions(language: "de-DE"))
            #expect(harness.recognizer.current?.options.language == "de-DE")
        }
    }
}
