import Recognition
import TestSupport
import Testing

@testable import Speech

@Suite("Voice commands in the core")
struct VoiceCommandCoreTests {
    @Test func commandsEditTheTranscriptHistoryAndTheWindowAlike() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Dear team, new line.")
            session.interim("This goes")
            session.final("This goes away.")
            session.final("Scratch that.")
            session.final("Thanks.")
            session.final("Press enter.")
            session.final("scratch that")
            session.final("We need a new line of products.")
            try await waitFor { harness.output.typed.count == 6 }
            #expect(
                harness.output.typed == [
                    "Dear team\n", "This goes away.", "<-15>", "Thanks.", "<Return>", " We need a new line of products.",
                ])
            let text = await harness.core.stop()
            #expect(text == "Dear team\nThanks. We need a new line of products.")
            #expect(harness.lastHistoryText == text)
            #expect(harness.log.all.contains(.retracted("Dear team\n", removed: "This goes away.")))
            let retractions = harness.log.all.filter { if case .retracted = $0 { true } else { false } }
            #expect(retractions.count == 1, "the second \"scratch that\" came after a key press: nothing to take back")
        }
    }

    @Test func stopListeningEndsTheSessionAsStopWould() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions())
            session.final("That is all.")
            session.final("Stop listening.")
            try await waitFor { await harness.core.state == .idle }
            #expect(await harness.core.currentTranscript == "That is all.")
            #expect(harness.lastHistoryText == "That is all.")
        }
    }

    /// A session that ends on its own keeps its pending interim as the last final; a "stop
    /// listening" in it has nothing left to stop, and the failure is what the session ends with.
    @Test func stopListeningInTheInterimOfAFailedSessionStartsNoStop() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions())
            session.final("The end.")
            try await harness.log.wait {
                $0.contains(.transcript("The end.", update: .init(segment: "The end.", isFinal: true)))
            }
            // Shows nothing (it is a command), and is promoted when the session fails.
            session.interim("stop listening")
            session.fail(RecognitionError(.backendUnavailable, "the server went away"))
            try await harness.log.wait { $0.contains(.state(.idle)) }
            #expect(await harness.core.currentTranscript == "The end.")
            #expect(harness.log.all.contains { if case .sessionFailed = $0 { true } else { false } })
            #expect(!harness.log.all.contains(.state(.stopping)), "no stop was started")
            #expect(harness.lastHistoryText == "The end.")
        }
    }

    @Test func anInterimShowsItsWordsWithoutTheCommand() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions())
            session.final("One.")
            session.interim("two new line")
            try await harness.log.wait {
                $0.contains(.transcript("One. two", update: .init(segment: "two", isFinal: false)))
            }
            session.interim("scratch that")
            try await harness.log.wait {
                $0.contains(.transcript("One.", update: .init(segment: "", isFinal: false)))
            }
            _ = await harness.core.stop()
        }
    }

    @Test func commandsOffKeepEveryWord() async throws {
        let harness = try await CoreHarness { $0.text.commands = false }
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions())
            session.final("Hello, new line.")
            session.final("scratch that")
            #expect(await harness.core.stop() == "Hello, new line. scratch that")
        }
    }
}
