import Capture
import NIOCore
import Recognition
import TestSupport
import Testing

@testable import Speech

@Suite("Desktop output and auto-stop, in process")
struct DictationTests {
    @Test func typedTextIsExactlyTheStopReply() async throws {
        let harness = try await CoreHarness()
        harness.recognizer.finalOnFinish = "and the last words"
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.interim("hel")
            session.final("hello")
            session.interim("wor")
            session.final("  world\nagain ")
            session.final("")
            try await waitFor { harness.output.typed.count == 2 }
            #expect(harness.output.typed == ["hello", " world again"], "finals as they arrive; interims never")
            let text = await harness.core.stop()
            #expect(text == "hello world again and the last words")
            #expect(harness.output.typed.joined() == text, "the flush's final is typed before the reply")
            #expect(harness.lastHistoryText == text)
            #expect(harness.output.finished == [text])
        }
    }

    @Test func theInterimPromotedAtAStopTimeoutIsTyped() async throws {
        let harness = try await CoreHarness { $0.stopTimeoutMilliseconds = 200 }
        harness.recognizer.finishHangs = true
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("one")
            session.interim("two")
            try await harness.log.wait {
                $0.contains(.transcript("one two", update: .init(segment: "two", isFinal: false)))
            }
            let text = await harness.core.stop()
            #expect(text == "one two")
            #expect(harness.output.typed.joined() == text)
        }
    }

    @Test func clipboardGetsTheTranscriptBeforeTheStopReplies() async throws {
        let harness = try await CoreHarness()
        harness.output.holdFinish()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .clipboard))
            session.final("copy me")
            async let reply = harness.core.stop()
            try await waitFor { harness.output.isHoldingFinish }
            #expect(await harness.core.state == .stopping, "the session is not over until the text is delivered")
            harness.output.releaseFinish()
            #expect(await reply == "copy me")
            #expect(harness.output.typed.isEmpty, "clipboard output types nothing")
            #expect(harness.output.finished == ["copy me"])
        }
    }

    @Test func cancelDeliversNothingToTheClipboard() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .clipboard))
            session.final("kept in history")
            try await harness.log.wait {
                $0.contains(.transcript("kept in history", update: .init(segment: "kept in history", isFinal: true)))
            }
            await harness.core.cancel()
            #expect(harness.output.finished == [nil])
            #expect(harness.lastHistoryText == "kept in history")
        }
    }

    @Test func theConfigChoosesTheOutputAndAnOptionOverridesIt() async throws {
        let harness = try await CoreHarness { $0.output = .clipboard }
        try await harness.run {
            _ = try await harness.start()
            _ = await harness.core.stop()
            _ = try await harness.start(StartOptions(output: OutputMode.none))
            _ = await harness.core.stop()
            _ = try await harness.start(StartOptions(output: .type))
            _ = await harness.core.stop()
            #expect(harness.output.modes == [.clipboard, .type])
        }
    }

    @Test func aMissingToolFailsTheStartAtOnce() async throws {
        let harness = try await CoreHarness()
        harness.output.unavailable = .invalidConfiguration("typing needs xdotool: sudo apt install xdotool")
        try await harness.run {
            await #expect(throws: SpeechError.invalidConfiguration("typing needs xdotool: sudo apt install xdotool")) {
                try await harness.core.start(StartOptions(output: .type))
            }
            #expect(await harness.core.state == .idle)
            #expect(harness.microphone.streams.isEmpty, "the microphone is never opened")
            #expect(harness.log.failures.isEmpty)
            _ = try await harness.start(StartOptions(output: OutputMode.none))
            #expect(await harness.core.state == .listening, "output = none needs no tool")
        }
    }

    @Test func aToolThatFailsKeepsTheSessionAndTheText() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .type))
            harness.output.failTool("xdotool failed: Can't open display")
            session.final("first")
            try await harness.log.wait { $0.contains { if case .outputFailed = $0 { true } else { false } } }
            #expect(await harness.core.state == .listening)
            #expect(await harness.core.lastError?.message == "xdotool failed: Can't open display")
            session.final("second")
            let text = await harness.core.stop()
            #expect(text == "first second")
            #expect(harness.lastHistoryText == text)
            #expect(harness.log.failures.isEmpty, "a tool failure is not a session failure")
        }
    }

    @Test func autoStopEndsTheSessionAfterSilenceFollowingSpeech() async throws {
        let harness = try await CoreHarness()
        harness.recognizer.finalOnFinish = "every word kept"
        try await harness.run {
            let (session, capture) = try await harness.start(StartOptions(autoStopMilliseconds: 300, output: .type))
            for _ in 0..<5 { capture.push(.tone) }
            session.final("spoken")
            for _ in 0..<10 { capture.push(.silence) }
            try await harness.log.wait(for: .idle)  // the session stops by itself
            #expect(await harness.core.currentTranscript == "spoken every word kept")
            #expect(harness.output.typed.joined() == "spoken every word kept")
            #expect(harness.lastHistoryText == "spoken every word kept")
            #expect(harness.log.failures.isEmpty, "an auto-stop is not a failure")
            #expect(harness.log.states == [.starting, .listening, .stopping, .idle])
        }
    }

    @Test func autoStopFollowsTheRecognizersSilenceToo() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(autoStopMilliseconds: 200))
            session.emit(.speechActivity(true))
            session.final("said")
            session.emit(.speechActivity(false))
            try await harness.log.wait(for: .idle)
            #expect(await harness.core.currentTranscript == "said")
            #expect(harness.log.failures.isEmpty)
        }
    }

    @Test func autoStopEndsASessionWhereNobodySpeaks() async throws {
        let harness = try await CoreHarness { $0.autoStopNoSpeechMilliseconds = 300 }
        try await harness.run {
            let (_, capture) = try await harness.start(StartOptions(autoStopMilliseconds: 5000))
            for _ in 0..<3 { capture.push(.silence) }
            try await harness.log.wait(for: .idle)
            #expect(harness.log.failures.isEmpty)
            #expect(await harness.core.lastError == nil)
        }
    }

    @Test func withoutAutoStopSilenceChangesNothing() async throws {
        let harness = try await CoreHarness { $0.autoStopNoSpeechMilliseconds = 1 }
        try await harness.run {
            let (session, capture) = try await harness.start()
            session.emit(.speechActivity(true))
            session.emit(.speechActivity(false))
            for _ in 0..<5 { capture.push(.silence) }
            // A later event proves the core handled the ones before it.
            session.final("still here")
            try await harness.log.wait {
                $0.contains(.transcript("still here", update: .init(segment: "still here", isFinal: true)))
            }
            #expect(await harness.core.state == .listening)
        }
    }
}

@Suite("Auto-stop policy")
struct AutoStopTests {
    let opened = NIODeadline.uptimeNanoseconds(1_000_000_000)

    @Test func nobodySpeakingStopsAfterTheNoSpeechBound() {
        var policy = AutoStop(silence: .milliseconds(800), noSpeech: .seconds(8), opened: opened)
        #expect(policy.deadline == opened + .seconds(8))
        policy.silenceBegan(at: opened + .seconds(1))
        #expect(policy.deadline == opened + .seconds(8), "silence before the first word does not count")
    }

    @Test func speechCancelsAndSilenceArms() {
        var policy = AutoStop(silence: .milliseconds(800), noSpeech: .seconds(8), opened: opened)
        policy.speechStarted()
        #expect(policy.deadline == nil)
        policy.silenceBegan(at: opened + .seconds(2))
        #expect(policy.deadline == opened + .seconds(2) + .milliseconds(800))
        policy.speechStarted()
        #expect(policy.deadline == nil, "speech again before the deadline keeps the session")
    }

    @Test func theFirstSourceToReportSilenceWins() {
        var policy = AutoStop(silence: .milliseconds(800), noSpeech: .seconds(8), opened: opened)
        policy.speechStarted()
        policy.silenceBegan(at: opened + .seconds(2))
        policy.silenceBegan(at: opened + .seconds(3))
        #expect(policy.deadline == opened + .seconds(2) + .milliseconds(800))
        policy.silenceBegan(at: opened + .milliseconds(1500))
        #expect(policy.deadline == opened + .milliseconds(2300))
    }
}
