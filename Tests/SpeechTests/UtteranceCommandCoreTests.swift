import Recognition
import TestSupport
import Testing

@testable import Speech

/// Issue 37: a command that presses a key, deletes text or stops counts only as an utterance of
/// its own. A streaming server's utterance ends at `speech_final` (or `UtteranceEnd`), not at
/// each `is_final`.
@Suite("Commands need an utterance of their own")
struct UtteranceCommandCoreTests {
    @Test func aSentenceThatEndsInACommandWordIsTextEverywhere() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Dear team.")
            session.final("Please read it before you submit.")
            session.final("Can you delete that?")
            session.final("Okay, stop listening.")
            try await waitFor { harness.output.typed.count == 4 }
            #expect(
                harness.output.typed == [
                    "Dear team.", " Please read it before you submit.", " Can you delete that?", " Okay, stop listening.",
                ])
            #expect(await harness.core.state == .listening, "\"…, stop listening.\" is text: the session goes on")
            let text = await harness.core.stop()
            #expect(
                text == "Dear team. Please read it before you submit. Can you delete that? Okay, stop listening.")
            #expect(harness.lastHistoryText == text)
            #expect(!harness.log.all.contains { if case .retracted = $0 { true } else { false } })
        }
    }

    /// "…before you" (`is_final`), then "submit." (`speech_final`): one utterance, so no Enter.
    @Test func aCommandWordThatEndsAStreamingUtteranceIsText() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Please read it before you", endsUtterance: false)
            session.final("submit.")
            session.final("Press enter.")
            try await waitFor { harness.output.typed.count == 3 }
            #expect(harness.output.typed == ["Please read it before you", " submit.", "<Return>"])
            #expect(await harness.core.stop() == "Please read it before you submit.")
        }
    }

    /// "press enter" as an `is_final` without `speech_final` waits: carried out when the
    /// utterance ends there (`UtteranceEnd`), text when more words follow.
    @Test func aCommandAloneInAnUnfinishedResultWaitsForItsUtterancesEnd() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Hello.")
            session.final("Press enter.", endsUtterance: false)
            session.emit(.speechActivity(false))
            session.final("Submit", endsUtterance: false)
            session.interim("the form")
            session.final("the form.")
            try await waitFor { harness.output.typed.count == 4 }
            #expect(harness.output.typed == ["Hello.", "<Return>", " Submit", " the form."])
            #expect(await harness.core.stop() == "Hello. Submit the form.")
        }
    }

    @Test func wordsAfterAHeldCommandMakeItText() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("scratch that", endsUtterance: false)
            session.interim("please")
            try await harness.log.wait {
                $0.contains(.transcript("please", update: .init(segment: "please", isFinal: false)))
            }
            #expect(await harness.core.stop() == "scratch that please")
            #expect(harness.output.typed == ["scratch that", " please"])
        }
    }

    /// Stop ends the utterance: a command held for its end is carried out then.
    @Test func aHeldCommandIsCarriedOutWhenStopEndsItsUtterance() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Hello.")
            session.final("Press enter.", endsUtterance: false)
            #expect(await harness.core.stop() == "Hello.")
            #expect(harness.output.typed == ["Hello.", "<Return>"])
        }
    }

    /// A held "stop listening" carried out as the session concludes has nothing left to stop.
    @Test func aHeldStopListeningAtTheSessionsEndStartsNoStop() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let (session, _) = try await harness.start(StartOptions())
            session.final("The end.")
            session.final("Stop listening.", endsUtterance: false)
            session.fail(RecognitionError(.backendUnavailable, "the server went away"))
            try await harness.log.wait { $0.contains(.state(.idle)) }
            #expect(!harness.log.all.contains(.state(.stopping)), "no stop was started")
            #expect(await harness.core.currentTranscript == "The end.")
        }
    }
}

extension FakeRecognitionStream {
    /// A final that may not end its utterance (a streaming server's `is_final` without `speech_final`).
    func final(_ text: String, endsUtterance: Bool) {
        emit(.result(RecognitionResult(text: text, isFinal: true, endsUtterance: endsUtterance)))
    }
}
