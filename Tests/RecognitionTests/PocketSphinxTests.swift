import Capture
import Dictation
import Dispatch
import Foundation
import Logging
import Recognition
import Synchronization
import TestSupport
import Testing

/// Records a session's events as the decoder thread delivers them. It can hold that thread at
/// one event, as a computer too busy to decode would, until the test releases it.
final class EventRecorder: RecognitionEventSink {
    private let recorded = Mutex<[RecognitionEvent]>([])
    private let holdAt: (@Sendable (RecognitionEvent) -> Bool)?
    private let held = Atomic(false)
    private let released = DispatchSemaphore(value: 0)
    private let (reachedHold, reachedHoldContinuation) = AsyncStream<Void>.makeStream()

    init(holdAt: (@Sendable (RecognitionEvent) -> Bool)? = nil) { self.holdAt = holdAt }

    func deliver(_ event: RecognitionEvent) {
        recorded.withLock { $0.append(event) }
        if let holdAt, holdAt(event), !held.exchange(true, ordering: .relaxed) {
            reachedHoldContinuation.yield()
            released.wait()
        }
    }

    var events: [RecognitionEvent] { recorded.withLock { $0 } }

    var results: [RecognitionResult] {
        events.compactMap {
            guard case .result(let result) = $0 else { return nil }
            return result
        }
    }

    /// Returns once the decoder thread is held.
    func waitUntilHeld() async {
        for await _ in reachedHold { return }
    }

    /// Lets the decoder thread go on; more calls than holds are harmless.
    func release() { released.signal() }
}

/// Runs a session until it ends; its error, if it failed.
func runToEnd(_ session: any RecognitionStream) async -> RecognitionError? {
    do {
        try await session.run()
        return nil
    } catch {
        return error
    }
}

func send(_ samples: [Int16], to session: any RecognitionStream, chunk: Int = 800) {
    for start in stride(from: 0, to: samples.count, by: chunk) {
        session.send(AudioChunk(samples: Array(samples[start..<min(start + chunk, samples.count)])))
    }
}

func transcribe(_ samples: [Int16], with recognizer: PocketSphinxRecognizer, interim: Bool = true) async throws
    -> (results: [RecognitionResult], transcript: Transcript)
{
    let recorder = EventRecorder()
    let session = try await recognizer.startStream(StreamOptions(interimResults: interim), events: recorder)
    async let failure = runToEnd(session)
    send(samples, to: session)
    session.finish()
    if let failure = await failure { throw failure }
    var transcript = Transcript()
    for result in recorder.results { transcript.apply(result) }
    return (recorder.results, transcript)
}

func isFinal(_ event: RecognitionEvent) -> Bool {
    guard case .result(let result) = event else { return false }
    return result.isFinal
}

// A time limit, so an engine that never ends a session fails its test instead of hanging the run.
@Suite("Offline engine (pocketsphinx)", .serialized, .timeLimit(.minutes(2)))
struct PocketSphinxTests {
    static let modelDirectory = "/usr/share/pocketsphinx/model/en-us"
    let logger = Logger(label: "test")

    func recognizer(maxQueuedAudio: Duration = .seconds(30)) throws -> PocketSphinxRecognizer {
        _ = try requireFile(Self.modelDirectory, package: "pocketsphinx-en-us")
        return PocketSphinxRecognizer(
            modelDirectory: Self.modelDirectory, maxQueuedAudio: maxQueuedAudio, logger: logger)
    }

    @Test func matchesPocketsphinxContinuousAndReusesTheModel() async throws {
        let reference = try requireTool("pocketsphinx_continuous", package: "pocketsphinx")
        let recognizer = try recognizer()
        try await recognizer.load()
        // Every recording through one loaded model: each session starts its stream afresh, so it
        // segments and decodes exactly as the reference tool does on the file.
        for recording in try LibriVox.recordings() {
            let (results, transcript) = try await transcribe(try wavSamples(recording.path), with: recognizer)
            let expected = try await run(reference, ["-infile", recording.path, "-logfn", "/dev/null"])
            #expect(normalizedWords(transcript.finalText) == normalizedWords(expected.stdout), "\(recording.id)")
            let firstFinal = try #require(results.firstIndex { $0.isFinal })
            #expect(results[..<firstFinal].contains { !$0.isFinal }, "interim results come before the first final")
        }
    }

    /// Issue 29: the `[text]` rules pocketsphinx sessions get by default (commands and spoken
    /// punctuation on), and a vocabulary of names, on pocketsphinx's own finals for every
    /// LibriVox file: the word error rate is not higher than the engine's words as they came.
    @Test func spokenPunctuationAndVocabularyKeepTheWordErrorRate() async throws {
        let recognizer = try recognizer()
        let plain = Dictation(rules: DictationRules(commands: true, spokenPunctuation: true))
        let named = Dictation(
            rules: DictationRules(
                commands: true, spokenPunctuation: true,
                vocabulary: [
                    "PipeWire", "Kubernetes", "Wayland", "GNOME", "Debian", "sttd", "PulseAudio", "Deepgram",
                    "LibriVox", "Ubuntu", "Hyprland", "Firefox", "Thunderbird", "JavaScript", "PostgreSQL",
                    "Mozilla", "Linux", "GitHub", "OpenAI", "Anthropic",
                ]))
        var errors = (raw: 0, plain: 0, named: 0)
        // Issue 37: ordinary speech never presses a key, deletes or stops.
        var commands: [Edit] = []
        for recording in try LibriVox.recordings() {
            let (results, _) = try await transcribe(try wavSamples(recording.path), with: recognizer)
            let finals = results.filter(\.isFinal).map(\.text)
            func written(_ dictation: Dictation) -> [String] {
                finals.flatMap { final in
                    dictation.edits(for: final).flatMap { edit -> [String] in
                        if case .text(let text) = edit { normalizedWords(text) } else { [] }
                    }
                }
            }
            commands += finals.flatMap { plain.edits(for: $0) }.filter { if case .text = $0 { false } else { true } }
            let raw = finals.flatMap(normalizedWords)
            errors.raw += wordErrors(reference: recording.reference, hypothesis: raw)
            errors.plain += wordErrors(reference: recording.reference, hypothesis: written(plain))
            errors.named += wordErrors(reference: recording.reference, hypothesis: written(named))
        }
        #expect(errors.plain <= errors.raw, "\(errors)")
        #expect(errors.named <= errors.raw, "\(errors)")
        #expect(commands.isEmpty, "ordinary speech pressed keys or deleted: \(commands)")
        print(
            "word errors on LibriVox: engine \(errors.raw), with [text] rules \(errors.plain), with vocabulary \(errors.named)"
        )
    }

    @Test func concurrentLoadsShareOneLoad() async throws {
        _ = try requireFile(Self.modelDirectory, package: "pocketsphinx-en-us")
        let checks = Atomic(0)
        let recognizer = PocketSphinxRecognizer(
            modelDirectory: Self.modelDirectory, logger: logger,
            validator: { _ in
                checks.add(1, ordering: .relaxed)
                return true
            })
        async let first: Void = recognizer.load()
        async let second: Void = recognizer.load()
        async let third = recognizer.authorize()
        _ = try await (first, second)
        let status = await third
        #expect(status.0 == .authorized)
        #expect(checks.load(ordering: .relaxed) == 1, "one model check for every caller")
    }

    /// The engine decodes one session at a time: a second one asked for meanwhile (a
    /// `/v1/listen` client during dictation) is refused at once with `busy`, naming the one that
    /// holds it, and the first session goes on to its last final; once it has ended, the next starts.
    @Test func aSecondSessionIsRefusedAndNeverEndsTheFirst() async throws {
        let recognizer = try recognizer()
        let recording = try LibriVox.recordings()[0]
        let samples = try wavSamples(recording.path)
        let recorder = EventRecorder()
        let first = try await recognizer.startStream(StreamOptions(), events: recorder)
        async let failure = runToEnd(first)
        send(Array(samples.prefix(samples.count / 2)), to: first)
        let refusal = await #expect(throws: RecognitionError.self) {
            _ = try await recognizer.startStream(
                StreamOptions(servedTo: "a client of sttd's /v1/listen server"), events: EventRecorder())
        }
        #expect(refusal?.kind == .busy)
        #expect(refusal?.message.contains("dictation is using it") == true, "\(refusal?.message ?? "")")
        send(Array(samples.dropFirst(samples.count / 2)), to: first)
        first.finish()
        #expect(await failure == nil)
        var transcript = Transcript()
        for result in recorder.results { transcript.apply(result) }
        let (_, alone) = try await transcribe(samples, with: recognizer)
        #expect(!transcript.finalText.isEmpty)
        #expect(transcript.finalText == alone.finalText, "the first session decoded all of its audio")
    }

    @Test func noInterimWhenNotAsked() async throws {
        let recording = try LibriVox.recordings()[1]
        let (results, _) = try await transcribe(try wavSamples(recording.path), with: try recognizer(), interim: false)
        #expect(!results.isEmpty)
        #expect(results.allSatisfy { $0.isFinal })
    }

    @Test func finishDeliversTheLastFinalBeforeRunReturns() async throws {
        // Three seconds of a longer sentence: the speech goes on, so only finish() closes it.
        let samples = Array(try wavSamples(try LibriVox.recordings()[0].path).prefix(3 * AudioFormat.sampleRate))
        let recorder = EventRecorder()
        let session = try await recognizer().startStream(StreamOptions(), events: recorder)
        async let failure = runToEnd(session)
        send(samples, to: session)
        session.finish()
        #expect(await failure == nil)
        // Read at once: whatever run() left undelivered would be missing here.
        let events = recorder.events
        let last = try #require(recorder.results.last)
        #expect(last.isFinal)
        #expect(!last.text.isEmpty)
        #expect(last.audioEnd == 3.0)
        #expect(events.last == .speechActivity(false))
        #expect(events.filter(isFinal).count == 1)
    }

    @Test func cancelEndsWithoutFinal() async throws {
        let samples = try wavSamples(try LibriVox.recordings()[0].path)
        let recorder = EventRecorder()
        let session = try await recognizer().startStream(StreamOptions(), events: recorder)
        send(Array(samples.prefix(AudioFormat.sampleRate)), to: session)
        session.cancel()
        #expect(await runToEnd(session) == nil)
        #expect(!recorder.events.contains(where: isFinal))
    }

    @Test func cancellingTheTaskRunningTheSessionEndsItWithoutDecodingTheBacklog() async throws {
        // All recordings (about 24 s, under the 30 s bound): five finals if they were decoded.
        let speech = try LibriVox.recordings().flatMap { try wavSamples($0.path) }
        let recorder = EventRecorder(holdAt: { $0 == .speechActivity(true) })
        defer { recorder.release() }
        let session = try await recognizer().startStream(StreamOptions(), events: recorder)
        send(speech, to: session)
        await recorder.waitUntilHeld()
        await withTaskGroup(of: RecognitionError?.self) { group in
            let (started, didStart) = AsyncStream<Void>.makeStream()
            group.addTask {
                didStart.yield()
                return await runToEnd(session)
            }
            for await _ in started { break }
            group.cancelAll()
            // The decoder goes on only now, with the session's backlog already dropped.
            recorder.release()
            #expect(await group.next() == .some(nil))
        }
        let events = recorder.events
        #expect(!events.contains(where: isFinal), "no queued audio was decoded after the cancel")
        #expect(events.first == .speechActivity(true))
        #expect(events.last == .speechActivity(false))
    }

    @Test func fallingBehindFailsTheSessionAndKeepsTheEarlierFinal() async throws {
        let recordings = try LibriVox.recordings()
        // One short sentence and a second of silence, so the endpointer closes it: about 4 s.
        let sentence = try wavSamples(recordings[1].path) + [Int16](repeating: 0, count: AudioFormat.sampleRate)
        let backlog = try recordings[2...].flatMap { try wavSamples($0.path) }
        let recognizer = try recognizer(maxQueuedAudio: .seconds(5))
        let recorder = EventRecorder(holdAt: isFinal)
        defer { recorder.release() }
        let session = try await recognizer.startStream(StreamOptions(), events: recorder)
        async let failure = runToEnd(session)
        send(sentence, to: session)
        // The decoder is stuck delivering the final while more than 5 s of audio arrives.
        await recorder.waitUntilHeld()
        send(backlog, to: session)
        recorder.release()

        let error = try #require(await failure)
        #expect(error.kind == .backendUnavailable)
        #expect(error.message.contains("fell 5 s behind real time"), "\(error.message)")
        let events = recorder.events
        let final = try #require(events.firstIndex(where: isFinal))
        #expect(events.first == .speechActivity(true))
        #expect(events[final...].dropFirst() == [.speechActivity(false)], "nothing decoded after the overflow")
        #expect(events.filter(isFinal).count == 1)

        // An ended session ignores more audio and keeps its outcome.
        send(backlog, to: session)
        session.finish()
        #expect(await runToEnd(session) == error)

        // The recognizer recovers, and the kept final is what a normal session makes of the sentence.
        let (results, _) = try await transcribe(sentence, with: recognizer)
        #expect(results.first(where: \.isFinal) == recorder.results.first(where: \.isFinal))
    }

    @Test func audioBeyondTheBoundInOneSendFailsTheSession() async throws {
        let recorder = EventRecorder()
        let session = try await recognizer(maxQueuedAudio: .milliseconds(500)).startStream(
            StreamOptions(), events: recorder)
        session.send(AudioChunk(samples: [Int16](repeating: 0, count: AudioFormat.sampleRate)))
        let error = await runToEnd(session)
        #expect(error?.message.contains("fell 0.5 s behind") == true, "\(String(describing: error))")
        #expect(recorder.events.isEmpty)
    }

    @Test func missingModelNamesTheDebianPackage() async throws {
        let recognizer = PocketSphinxRecognizer(modelDirectory: "/nonexistent/model", logger: logger)
        let (status, error) = await recognizer.authorize()
        #expect(status == .restricted)
        #expect(error?.kind == .backendUnavailable)
        #expect(error?.message.contains("pocketsphinx-en-us") == true)
        await #expect(throws: RecognitionError.self) {
            _ = try await recognizer.startStream(StreamOptions(), events: EventRecorder())
        }
    }

    @Test func brokenModelIsRefusedByTheValidator() async throws {
        let directory = try makeTemporaryDirectory("broken-model")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: "\(directory)/en-us", withIntermediateDirectories: true)
        for file in ["en-us/mdef", "en-us.lm.bin", "cmudict-en-us.dict"] {
            try Data("garbage".utf8).write(to: URL(fileURLWithPath: "\(directory)/\(file)"))
        }
        let recognizer = PocketSphinxRecognizer(
            modelDirectory: directory, logger: logger, validator: { _ in false })
        let (status, error) = await recognizer.authorize()
        #expect(status == .restricted)
        #expect(error?.message.contains("broken") == true)
    }
}
