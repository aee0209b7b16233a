import Capture
import Dictation
import Foundation
import Recognition
import Synchronization
import TestSupport
import Testing

@testable import Speech

@Suite("Hands-free dictation in the core")
struct HandsFreeCoreTests {
    static func harness(
        phrase: String = "start dictation", deepgram: FakeRecognizer? = nil,
        _ configure: @escaping (inout Configuration) -> Void = { _ in }
    ) async throws -> CoreHarness {
        let harness = try await CoreHarness(deepgram: deepgram) { configuration in
            configuration.handsFree.wakePhrase = phrase
            configure(&configuration)
        }
        harness.recognizer.decodesWakeSegments = true
        return harness
    }

    /// Chunks of 100 ms whose samples count on from `start`, so a cut shows where it fell.
    static func numbered(from start: Int, chunks: Int) -> [AudioChunk] {
        (0..<chunks).map { chunk in
            AudioChunk(samples: (0..<1600).map { Int16(truncatingIfNeeded: start + chunk * 1600 + $0) })
        }
    }

    /// Stops while the microphone goes on delivering, as a real one does: the hand-over's stop
    /// ends after one more chunk.
    static func stop(_ harness: CoreHarness, feeding capture: FakeStream) async -> String {
        let reply = Mutex<String?>(nil)
        let stopping = Task { [core = harness.core] in
            let text = await core.stop()
            reply.withLock { $0 = text }
        }
        while reply.withLock({ $0 }) == nil {
            capture.push(.tone)
            try? await Task.sleep(for: .milliseconds(20))
        }
        await stopping.value
        return reply.withLock { $0 } ?? ""
    }

    static func handsFreeStates(_ log: EventLog) -> [HandsFreeState] { handsFreeStates(log.all) }

    static func handsFreeStates(_ events: [SpeechEvent]) -> [HandsFreeState] {
        events.compactMap { if case .handsFree(let state) = $0 { state } else { nil } }
    }

    @Test func armingOpensOneCaptureAndAWakeStreamOnTheLocalEngine() async throws {
        let cloud = FakeRecognizer()
        let harness = try await Self.harness(deepgram: cloud) { $0.backend = .deepgram }
        try await harness.run {
            try await harness.core.setHandsFree(true)
            #expect(await harness.core.handsFreeState == .armed)
            #expect(harness.microphone.openStreams == 1)
            let wake = try #require(harness.recognizer.current)
            #expect(wake.options.wakeSegments == .seconds(3))
            #expect(!wake.options.interimResults)
            #expect(cloud.sessions.isEmpty, "the wake check is local, whatever the backend")
            #expect(harness.log.states.isEmpty, "State stays idle while armed")
            try await harness.core.setHandsFree(true)
            #expect(harness.microphone.streams.count == 1, "arming again changes nothing")
        }
        #expect(harness.microphone.openStreams == 0, "shutdown closes the listener")
    }

    @Test func aNonMatchingFinalPublishesAndStoresNothing() async throws {
        let harness = try await Self.harness()
        try await harness.run {
            try await harness.core.setHandsFree(true)
            let capture = try #require(harness.microphone.current)
            let wake = try #require(harness.recognizer.current)
            let before = harness.log.all.count
            for chunk in Self.numbered(from: 0, chunks: 5) { capture.push(chunk) }
            #expect(wake.samples == 8000, "the wake stream hears the microphone")
            wake.emit(.speechActivity(true))
            wake.emit(.result(RecognitionResult(text: "Dear Anna, how are you?", isFinal: true, audioEnd: 0.4)))
            #expect(await harness.core.handsFreeState == .armed)
            #expect(harness.log.all.count == before, "no transcript, level, activity or state: \(harness.log.all)")
            #expect(harness.lastHistoryText == nil)
        }
    }

    @Test func thePhraseStartsAHostSessionWithTheAudioAfterItAndTheWordsAfterItFirst() async throws {
        let harness = try await Self.harness()
        try await harness.run {
            try await harness.core.setHandsFree(true)
            let capture = try #require(harness.microphone.current)
            let wake = try #require(harness.recognizer.current)
            for chunk in Self.numbered(from: 0, chunks: 3) { capture.push(chunk) }
            // The phrase's segment ends at sample 4000, inside the third chunk.
            wake.final("Start dictation. Dear Anna,", end: 0.25)
            try await harness.log.wait(for: .listening)
            let session = try #require(harness.recognizer.current)
            #expect(session !== wake && session.options.wakeSegments == nil)
            #expect(session.samples == 800, "the session gets the audio from the phrase's end on, to the sample")
            capture.push(.tone)
            #expect(session.samples == 2400)
            #expect(wake.samples == 4800, "and the wake stream no more")
            #expect(harness.microphone.streams.count == 1, "the listener's capture feeds the session")
            #expect(harness.log.finals == ["Dear Anna,"])
            #expect(await harness.core.handsFreeState == .dictating)
            #expect(harness.output.modes.last == .type, "hands-free sessions type by default")
            session.final("how are you?")
            let text = await Self.stop(harness, feeding: capture)
            #expect(text == "Dear Anna, how are you?")
            #expect(harness.lastHistoryText == text)
            try await harness.log.wait("armed again") { Self.handsFreeStates($0).last == .armed }
            #expect(Self.handsFreeStates(harness.log) == [.armed, .dictating, .armed])
            #expect(harness.microphone.streams.count == 1, "re-arming does not reopen the microphone")
            let rearmed = try #require(harness.recognizer.current)
            #expect(rearmed !== session && rearmed.options.wakeSegments != nil)
            let heard = session.samples
            capture.push(.tone)
            #expect(rearmed.samples == 1600 && session.samples == heard, "the next phrase's audio is the listener's")
        }
    }

    @Test func aCallsStartParksTheListenerAndItListensAgainAtIdle() async throws {
        let harness = try await Self.harness()
        try await harness.run {
            try await harness.core.setHandsFree(true)
            let listening = try #require(harness.microphone.current)
            let wake = try #require(harness.recognizer.current)
            let (session, capture) = try await harness.start()
            #expect(capture !== listening, "a call's session opens its own capture")
            listening.push(.tone)
            #expect(wake.samples == 0 && session.samples == 0, "the parked listener's audio goes nowhere")
            #expect(await harness.core.handsFreeState == .dictating)
            _ = await harness.core.stop()
            try await harness.log.wait("armed again") { Self.handsFreeStates($0).last == .armed }
            #expect(harness.microphone.openStreams == 1)
        }
    }

    @Test func disarmingDuringASessionClosesTheListenerWhenItEnds() async throws {
        let harness = try await Self.harness()
        try await harness.run {
            try await harness.core.setHandsFree(true)
            let wake = try #require(harness.recognizer.current)
            wake.final("start dictation", end: 0)
            try await harness.log.wait(for: .listening)
            try await harness.core.setHandsFree(false)
            #expect(await harness.core.handsFreeState == .off)
            #expect(harness.microphone.openStreams == 1, "the session still takes its audio from it")
            _ = await Self.stop(harness, feeding: try #require(harness.microphone.current))
            #expect(harness.microphone.openStreams == 0)
            #expect(Self.handsFreeStates(harness.log) == [.armed, .dictating, .off])
        }
    }

    @Test func aLostMicrophonePausesAndArmingComesBack() async throws {
        let harness = try await Self.harness()
        try await harness.run {
            try await harness.core.setHandsFree(true)
            try #require(harness.microphone.current).lose()
            try await harness.log.wait("paused") { Self.handsFreeStates($0).last == .paused }
            #expect(await harness.core.microphoneStatus == .unavailable)
            try await harness.log.wait("armed again after the retry") {
                Self.handsFreeStates($0).last == .armed
            }
            #expect(harness.microphone.openStreams == 1)
        }
    }

    @Test(arguments: [
        ("", "wake_phrase"), ("go", "single short word"), ("stop listening", "voice command"),
    ])
    func aBadPhraseIsRefusedClearly(phrase: String, named: String) async throws {
        let harness = try await Self.harness(phrase: phrase)
        try await harness.run {
            let error = await #expect(throws: SpeechError.self) { try await harness.core.setHandsFree(true) }
            #expect(error?.code == .invalidConfiguration)
            #expect(error?.message.contains(named) == true, "\(error?.message ?? "")")
            #expect(await harness.core.handsFreeState == .off && harness.microphone.streams.isEmpty)
        }
    }

    @Test func anEngineWithoutWakeSegmentsIsRefused() async throws {
        let harness = try await Self.harness()
        harness.recognizer.decodesWakeSegments = false
        try await harness.run {
            let error = await #expect(throws: SpeechError.self) { try await harness.core.setHandsFree(true) }
            #expect(error?.code == .backendUnavailable && error?.message.contains("sherpa-onnx") == true)
        }
    }

    @Test func aMicrophoneThatWillNotOpenIsRefused() async throws {
        let harness = try await Self.harness()
        harness.microphone.available = false
        try await harness.run {
            let error = await #expect(throws: SpeechError.self) { try await harness.core.setHandsFree(true) }
            #expect(error?.code == .microphoneUnavailable)
            #expect(await harness.core.handsFreeState == .off)
        }
    }

    @Test func aSandboxedCallerIsRefused() async throws {
        let harness = try await Self.harness()
        try await harness.run {
            let app = Caller(name: "org.example.Notes", privateDestination: ":1.42")
            let error = await #expect(throws: SpeechError.self) { try await harness.core.setHandsFree(true, by: app) }
            #expect(error?.code == .notAuthorized && error?.message.contains("sttctl hands-free") == true)
            #expect(harness.microphone.streams.isEmpty)
        }
    }
}

extension HandsFreeCoreTests {
    /// Moonshine repeats a phrase heard in noise; the repeats are not typed.
    @Test(arguments: [
        ("Wake up computer wake up computer wake up computer wake", ""),
        ("Wake up computer. Dear Anna,", "Dear Anna,"),
        ("Wake up computer wake up computer. Dear Anna,", "Dear Anna,"),
    ])
    func repeatsOfThePhraseAreNotDictated(heard: String, words: String) throws {
        let phrase = try WakePhrase("wake up computer")
        let match = try #require(phrase.match(heard))
        #expect(SpeechCore.wordsAfter(match, of: phrase) == words)
    }
}

extension HandsFreeCoreTests {
    /// on, off, on while the microphone opens: the last call wins, and it said on.
    @Test func theLastOfOnOffOnDuringArmingWins() async throws {
        let harness = try await Self.harness()
        try await harness.run {
            harness.microphone.holdOpens()
            let first = Task { [core = harness.core] in try await core.setHandsFree(true) }
            try await waitFor("the microphone opening") { harness.microphone.opensInFlight == 1 }
            try await harness.core.setHandsFree(false)
            let last = Task { [core = harness.core] in try await core.setHandsFree(true) }
            try await waitFor("the second on joining the arming") { await harness.core.handsFree.arming != nil }
            harness.microphone.releaseOpens()
            try await first.value
            try await last.value
            #expect(await harness.core.handsFreeState == .armed)
            #expect(harness.microphone.openStreams == 1)
        }
    }

    /// A re-arm that fails while a call's session runs leaves sttd paused; it tries again when
    /// that session ends.
    @Test func pausedDuringASessionTriesAgainWhenItEnds() async throws {
        let harness = try await Self.harness()
        try await harness.run {
            try await harness.core.setHandsFree(true)
            try #require(harness.microphone.current).lose()
            try await harness.log.wait("paused") { Self.handsFreeStates($0).last == .paused }
            _ = try await harness.start()
            #expect(await harness.core.handsFreeState == .dictating)
            _ = await harness.core.stop()
            try await harness.log.wait("armed again") { Self.handsFreeStates($0).last == .armed }
            #expect(harness.microphone.openStreams == 1)
        }
    }
}

extension HandsFreeCoreTests {
    /// Stray audio after a false wake ("… start dictation, press enter" from a TV): the words
    /// after the phrase share its utterance, so a key command in them stays text.
    /// Arms, plays 300 ms, and has the wake stream hear `text` ending at sample 4000: the
    /// session the phrase started, and the listener's capture that feeds it.
    static func wake(_ harness: CoreHarness, hearing text: String) async throws -> (FakeStream, FakeRecognitionStream) {
        try await harness.core.setHandsFree(true)
        let capture = try #require(harness.microphone.current)
        let wake = try #require(harness.recognizer.current)
        for chunk in numbered(from: 0, chunks: 3) { capture.push(chunk) }
        wake.final(text, end: 0.25)
        try await harness.log.wait(for: .listening)
        return (capture, try #require(harness.recognizer.current))
    }

    @Test func aCommandSaidWithThePhraseIsText() async throws {
        let harness = try await Self.harness()
        try await harness.run {
            let (capture, session) = try await Self.wake(harness, hearing: "Start dictation, press enter.")
            session.emit(.speechActivity(true))
            session.emit(.speechActivity(false))
            session.final("Thanks.")
            let text = await Self.stop(harness, feeding: capture)
            #expect(!harness.output.typed.contains("<Return>"), "\(harness.output.typed)")
            #expect(text == "press enter. Thanks.")
        }
    }
}

extension FakeRecognitionStream {
    /// A final whose audio ends `end` seconds into the stream.
    func final(_ text: String, end: Double) {
        emit(.result(RecognitionResult(text: text, isFinal: true, audioStart: 0, audioEnd: end)))
    }
}
