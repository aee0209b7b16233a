import Capture
import Dictation
import Foundation
import Logging
import Synchronization
import TestSupport
import Testing

@testable import Recognition

/// The sherpa-onnx engine as scripts/setup installs it next to the build; a missing install fails.
func installedSherpa(unloadAfter: Duration = .seconds(300)) throws -> SherpaSettings {
    let settings = SherpaSettings.installed(unloadAfter: unloadAfter)
    guard settings.libraryPath != nil, settings.modelDirectory != nil else {
        throw MissingPrerequisite(
            description: "the sherpa-onnx engine and Moonshine model are not in .build: run scripts/setup")
    }
    return settings
}

/// The same, with the model in a child process of the built `sttd` (as the service runs it).
func sherpaInWorker(_ settings: SherpaSettings) throws -> SherpaSettings {
    var settings = settings
    settings.workerExecutable = try builtExecutable("sttd")
    return settings
}

/// This process's engine workers (`sttd --offline-engine-worker`).
func engineWorkers() -> [pid_t] {
    childProcesses(of: getpid()).filter { pid in
        let command = FileManager.default.contents(atPath: "/proc/\(pid)/cmdline") ?? Data()
        return String(decoding: command, as: UTF8.self).contains("--offline-engine-worker")
    }
}

func floats(_ samples: [Int16]) -> [Float] { samples.map { Float($0) / 32768 } }

/// Words of an engine's punctuated text: "ill-disposed" is the references' "ill disposed".
func spokenWords(_ text: String) -> [String] { normalizedWords(text.replacingOccurrences(of: "-", with: " ")) }

func silence(_ seconds: Double) -> [Int16] {
    [Int16](repeating: 0, count: Int(seconds * Double(AudioFormat.sampleRate)))
}

/// Feeds `samples` to a new session and finishes it; its events.
func dictate(
    _ samples: [Int16], with recognizer: SherpaOnnxRecognizer, interim: Bool = true
) async throws -> EventRecorder {
    let recorder = EventRecorder()
    let session = try await recognizer.startStream(StreamOptions(interimResults: interim), events: recorder)
    async let failure = runToEnd(session)
    send(samples, to: session)
    session.finish()
    if let failure = await failure { throw failure }
    return recorder
}

/// Feeds `samples` at the pace of speech, in 100 ms chunks as a microphone delivers them.
func sendAtPace(_ samples: [Int16], to session: any RecognitionStream) async throws {
    for start in stride(from: 0, to: samples.count, by: 1_600) {
        session.send(AudioChunk(samples: Array(samples[start..<min(start + 1_600, samples.count)])))
        try await Task.sleep(for: .milliseconds(100))
    }
}

@Suite("Offline engine (sherpa-onnx + Moonshine)", .serialized, .timeLimit(.minutes(5)))
struct SherpaOnnxTests {
    let logger = Logger(label: "test")

    @Test func sessionsMatchTheEngineOnWholeFilesWithPunctuationAndCapitals() async throws {
        let settings = try installedSherpa()
        // A cold recognizer: the first session's audio queues while the model loads.
        let recognizer = SherpaOnnxRecognizer(settings: settings, logger: logger)
        #expect(!recognizer.isModelLoaded)
        var ours = 0.0
        var direct = 0.0
        var words = 0
        for recording in try LibriVox.recordings() {
            let samples = try wavSamples(recording.path)
            let recorder = try await dictate(samples + silence(1), with: recognizer)
            let finals = recorder.results.filter(\.isFinal).map(\.text)
            let text = finals.joined(separator: " ")
            let reference = try SherpaOnnxRecognizer.transcribe(floats(samples), settings: settings)
            ours +=
                wordErrorRate(reference: recording.reference, hypothesis: spokenWords(text))
                * Double(recording.reference.count) / 100
            direct +=
                wordErrorRate(reference: recording.reference, hypothesis: spokenWords(reference))
                * Double(recording.reference.count) / 100
            words += recording.reference.count
            #expect(text.first?.isUppercase == true, "capitals: \(text)")
            #expect(text.contains { $0 == "," || $0 == "." }, "punctuation: \(text)")
            #expect(recorder.events.first == .speechActivity(true))
            #expect(recorder.events.last == .speechActivity(false))
            print("\(recording.id): sttd \"\(text)\" | direct \"\(reference)\"")
        }
        let ourWER = ours / Double(words) * 100
        let directWER = direct / Double(words) * 100
        print("WER over \(words) words: sessions \(ourWER)%, direct decode \(directWER)%")
        #expect(ourWER <= 5)
        #expect(ourWER <= directWER + 0.001, "segmented sessions are no worse than decoding whole files")
        #expect(recognizer.loadCount == 1, "one load serves every session")
    }

    /// The five recordings as one: speech goes on, and each sentence's final comes before Stop.
    @Test func finalsArriveWhileSpeakingGoesOnAndAreNeverRevised() async throws {
        let recognizer = SherpaOnnxRecognizer(settings: try installedSherpa(), logger: logger)
        var samples: [Int16] = []
        for recording in try LibriVox.recordings() { samples += try wavSamples(recording.path) + silence(1) }
        let recorder = EventRecorder()
        let session = try await recognizer.startStream(StreamOptions(interimResults: true), events: recorder)
        async let failure = runToEnd(session)
        // At the pace of speech (a decoder that is behind skips interims).
        try await sendAtPace(samples, to: session)
        let sawFinals = await happens(within: .seconds(120)) { recorder.results.filter(\.isFinal).count >= 5 }
        let finalsBeforeStop = recorder.results.filter(\.isFinal)
        session.finish()
        if let failure = await failure { throw failure }
        #expect(sawFinals, "five finals before Stop, got \(finalsBeforeStop.map(\.text))")
        let finals = recorder.results.filter(\.isFinal)
        #expect(finals == finalsBeforeStop, "finish() adds or changes no final after the speech ended")
        // Finals cover disjoint stretches of audio, in order: none is revised or repeated.
        for (earlier, later) in zip(finals, finals.dropFirst()) {
            #expect((earlier.audioEnd ?? 0) <= (later.audioStart ?? 0))
        }
        // Interims: within an utterance, at least 1.5 s of new audio apart (the stated policy).
        let results = recorder.results
        var previousInterim: RecognitionResult?
        var interims = 0
        for result in results {
            if result.isFinal {
                previousInterim = nil
                continue
            }
            interims += 1
            if let previous = previousInterim, previous.audioStart == result.audioStart {
                #expect((result.audioEnd ?? 0) - (previous.audioEnd ?? 0) >= 1.49)
            }
            previousInterim = result
        }
        // Five sentences of 3 to 7 s: the first interim of each comes 2 s in (one still decoding
        // when its final starts is dropped), so some, never one per chunk.
        #expect(interims >= 2, "interims: \(interims)")
        var transcript = Transcript()
        for result in results { _ = transcript.apply(result) }
        #expect(transcript.finalText == finals.map(\.text).joined(separator: " "))
    }

    @Test func stopInTheMiddleOfAWordKeepsTheWordsBefore() async throws {
        let settings = try installedSherpa()
        let recognizer = SherpaOnnxRecognizer(settings: settings, logger: logger)
        // 2.3 s into "And Mr. John Dashwood had then leisure to consider…": inside a word.
        let samples = Array(try wavSamples(try LibriVox.recordings()[0].path).prefix(Int(2.3 * 16_000)))
        let recorder = try await dictate(samples, with: recognizer, interim: false)
        let finals = recorder.results.filter(\.isFinal)
        #expect(finals.count == 1)
        let words = spokenWords(finals.map(\.text).joined(separator: " "))
        #expect(Array(words.prefix(4)) == ["and", "mr", "john", "dashwood"], "\(words)")
        #expect(recorder.events.last == .speechActivity(false))
    }

    @Test func cancelDropsOnlyTheInterim() async throws {
        let recognizer = SherpaOnnxRecognizer(settings: try installedSherpa(), logger: logger)
        let recordings = try LibriVox.recordings()
        let first = try wavSamples(recordings[1].path) + silence(1)
        let second = try wavSamples(recordings[0].path)
        let recorder = EventRecorder()
        let session = try await recognizer.startStream(StreamOptions(interimResults: true), events: recorder)
        async let failure = runToEnd(session)
        send(first + second, to: session)
        // The first sentence's final, then an interim of the second, still being spoken.
        let interimAfterFinal = await happens(within: .seconds(120)) {
            let results = recorder.results
            guard let final = results.firstIndex(where: \.isFinal) else { return false }
            return results[(final + 1)...].contains { !$0.isFinal }
        }
        #expect(interimAfterFinal)
        session.cancel()
        #expect(await failure == nil)
        let finals = recorder.results.filter(\.isFinal)
        #expect(finals.count == 1, "the second sentence, cancelled while spoken, gets no final")
        #expect(spokenWords(finals.first?.text ?? "") == ["he", "was", "not", "an", "ill", "disposed", "young", "man"])
        var transcript = Transcript()
        for result in recorder.results { _ = transcript.apply(result) }
        transcript.dropInterim()
        #expect(transcript.finalText == finals.first?.text)
    }

    @Test func missingLibraryOrModelNamesTheInstallCommand() async throws {
        let settings = try installedSherpa()
        var noLibrary = settings
        noLibrary.libraryPath = nil
        var wrongLibrary = settings
        wrongLibrary.libraryPath = "/nonexistent/libsherpa-onnx-c-api.so"
        var noModel = settings
        noModel.modelDirectory = "/nonexistent/model"
        for broken in [noLibrary, wrongLibrary, noModel] {
            let recognizer = SherpaOnnxRecognizer(settings: broken, logger: logger)
            await #expect {
                _ = try await recognizer.startStream(StreamOptions(), events: EventRecorder())
            } throws: { error in
                let error = error as? RecognitionError
                return error?.kind == .backendUnavailable && error?.message.contains("scripts/setup") == true
            }
            let (status, error) = await recognizer.authorize()
            #expect(status == .restricted)
            #expect(error?.message.contains("scripts/setup") == true)
        }
    }

    @Test(arguments: [false, true])
    func corruptModelIsAClearErrorNotACrash(inWorker: Bool) async throws {
        let settings = inWorker ? try sherpaInWorker(try installedSherpa()) : try installedSherpa()
        let installed = try #require(settings.modelDirectory)
        let directory = try makeTemporaryDirectory("sherpa-corrupt")
        let files = FileManager.default
        try files.createSymbolicLink(
            atPath: "\(directory)/decoder_model_merged.onnx",
            withDestinationPath: "\(installed)/decoder_model_merged.onnx")
        try files.createSymbolicLink(atPath: "\(directory)/tokens.txt", withDestinationPath: "\(installed)/tokens.txt")
        // The first megabyte of the real encoder: a truncated download.
        let encoder = try Data(contentsOf: URL(fileURLWithPath: "\(installed)/encoder_model.onnx"))
        try encoder.prefix(1_000_000).write(to: URL(fileURLWithPath: "\(directory)/encoder_model.onnx"))
        var corrupt = settings
        corrupt.modelDirectory = directory
        let recognizer = SherpaOnnxRecognizer(settings: corrupt, logger: logger)
        // Preflight passes (the files are there); the load fails and ends the session with it.
        let session = try await recognizer.startStream(StreamOptions(), events: EventRecorder())
        send(try wavSamples(try LibriVox.recordings()[1].path), to: session)
        session.finish()
        let failure = await runToEnd(session)
        #expect(failure?.kind == .backendUnavailable)
        #expect(failure?.message.contains("cannot be loaded") == true, "\(failure?.message ?? "")")
        // The next start fails at once with the same error, until the files change.
        let expected = try #require(failure)
        await #expect(throws: expected) {
            _ = try await recognizer.startStream(StreamOptions(), events: EventRecorder())
        }
        #expect(!recognizer.isModelLoaded)
        // Repaired (its size and time change), the model is tried again.
        try encoder.write(to: URL(fileURLWithPath: "\(directory)/encoder_model.onnx"))
        let repaired = try await recognizer.startStream(StreamOptions(), events: EventRecorder())
        repaired.cancel()
        _ = await runToEnd(repaired)
        // One failed load: no other decoder thread tried again while the failure's end ran.
        #expect(recognizer.failedLoadCount == 1)
    }

    @Test(arguments: [false, true])
    func unloadsAfterIdleAndReloadsOnTheNextSession(inWorker: Bool) async throws {
        let settings = try installedSherpa(unloadAfter: .seconds(1))
        let recognizer = SherpaOnnxRecognizer(
            settings: inWorker ? try sherpaInWorker(settings) : settings, logger: logger)
        let samples = try wavSamples(try LibriVox.recordings()[4].path) + silence(1)
        // An earlier test's worker may still be exiting: only workers started here count.
        let earlier = Set(engineWorkers())
        let first = try await dictate(samples, with: recognizer)
        #expect(first.results.contains { $0.isFinal })
        let ours = Set(engineWorkers()).subtracting(earlier)
        #expect(ours.count == (inWorker ? 1 : 0))
        try await waitFor("the model unloaded after idle", timeout: .seconds(30)) { !recognizer.isModelLoaded }
        try await waitFor("the worker to end with the unload", timeout: .seconds(10)) {
            ours.isDisjoint(with: engineWorkers())
        }
        let second = try await dictate(samples, with: recognizer)
        #expect(recognizer.loadCount == 2)
        #expect(second.results.filter(\.isFinal).map(\.text) == first.results.filter(\.isFinal).map(\.text))
    }

    @Test func silenceAndClicksAreNotSpeech() async throws {
        let recognizer = SherpaOnnxRecognizer(settings: try installedSherpa(), logger: logger)
        var click = silence(1)
        for index in 8_000..<8_100 { click[index] = index % 2 == 0 ? 12_000 : -12_000 }
        let recorder = try await dictate(silence(2) + click + silence(1), with: recognizer)
        #expect(recorder.results.isEmpty)
    }

    /// Four sessions at once share one model (as D-Bus dictation and server streams do), on one
    /// decoder thread or two: each gets the finals it gets alone, nothing mixes between them, and
    /// the model loads once.
    @Test(arguments: [(1, false), (2, false), (2, true)])
    func concurrentSessionsShareOneModelAndKeepTheirOwnFinals(threads: Int, inWorker: Bool) async throws {
        var settings = inWorker ? try sherpaInWorker(try installedSherpa()) : try installedSherpa()
        settings.decoderThreads = threads
        let recognizer = SherpaOnnxRecognizer(settings: settings, logger: logger)
        let recordings = Array(try LibriVox.recordings().prefix(4))
        var alone: [[String]] = []
        for recording in recordings {
            let samples = try wavSamples(recording.path) + silence(1)
            let recorder = try await dictate(samples, with: recognizer, interim: false)
            alone.append(recorder.results.filter(\.isFinal).map(\.text))
        }
        let together = try await withThrowingTaskGroup(of: (Int, [String]).self) { group in
            for (index, recording) in recordings.enumerated() {
                let samples = try wavSamples(recording.path) + silence(1)
                group.addTask {
                    let recorder = EventRecorder()
                    let session = try await recognizer.startStream(
                        StreamOptions(interimResults: true), events: recorder)
                    async let failure = runToEnd(session)
                    // Faster than real time, in turns: the decoders have work from all four at once.
                    for start in stride(from: 0, to: samples.count, by: 3_200) {
                        session.send(AudioChunk(samples: Array(samples[start..<min(start + 3_200, samples.count)])))
                        try await Task.sleep(for: .milliseconds(20))
                    }
                    session.finish()
                    if let failure = await failure { throw failure }
                    return (index, recorder.results.filter(\.isFinal).map(\.text))
                }
            }
            var finals = [[String]](repeating: [], count: recordings.count)
            for try await (index, texts) in group { finals[index] = texts }
            return finals
        }
        #expect(together == alone)
        #expect(recognizer.loadCount == 1)
    }

    /// Under load interims give way: with two decoder threads, one is kept for finals, and while
    /// two sessions speak at once neither queues interims. Alone, the same speech gets them.
    @Test func interimsGiveWayWhileMoreSessionsSpeakThanThreadsAreKeptForFinals() async throws {
        var settings = try installedSherpa()
        settings.decoderThreads = 2
        let recognizer = SherpaOnnxRecognizer(settings: settings, logger: logger)
        let samples = try wavSamples(try LibriVox.recordings()[4].path) + silence(1)
        func speak(_ recorder: EventRecorder) async throws -> RecognitionError? {
            let session = try await recognizer.startStream(StreamOptions(interimResults: true), events: recorder)
            async let failure = runToEnd(session)
            // At the pace of speech: interims are due every 1.5 s or so.
            try await sendAtPace(samples, to: session)
            session.finish()
            return await failure
        }
        let alone = EventRecorder()
        if let failure = try await speak(alone) { throw failure }
        #expect(alone.results.contains { !$0.isFinal }, "one session alone gets interims")

        let (first, second) = (EventRecorder(), EventRecorder())
        async let firstFailure = speak(first)
        async let secondFailure = speak(second)
        for failure in [try await firstFailure, try await secondFailure] { if let failure { throw failure } }
        for recorder in [first, second] {
            #expect(!recorder.results.contains { !$0.isFinal }, "no interims while two sessions speak")
            #expect(recorder.results.filter(\.isFinal).map(\.text) == alone.results.filter(\.isFinal).map(\.text))
        }
    }

    /// A session of one 7 s sentence: its first interim comes 1.5 s in; a later one would
    /// re-decode nearly the whole sentence, more than the interims' quarter of the session's
    /// decoding, so it is not run (charging only the interims already done ran one ~6.4 s in,
    /// 0.8 s before the final, costing as much as the final itself).
    @Test func aLaterInterimMustFitTheBudgetWithItsOwnCost() async throws {
        let recognizer = SherpaOnnxRecognizer(settings: try installedSherpa(), logger: logger)
        let sentence = try wavSamples(try LibriVox.recordings()[0].path) + silence(1)
        _ = try await dictate(sentence, with: recognizer, interim: false)  // measures the engine's speed
        let recorder = EventRecorder()
        let session = try await recognizer.startStream(StreamOptions(interimResults: true), events: recorder)
        async let failure = runToEnd(session)
        try await sendAtPace(sentence, to: session)
        session.finish()
        if let failure = await failure { throw failure }
        let interims = recorder.results.filter { !$0.isFinal }
        #expect(interims.count == 1, "interims: \(interims.map { ($0.audioEnd ?? 0, $0.text) })")
        #expect((interims.first?.audioEnd ?? 0) < 2.5, "the first interim comes about 1.5 s in")
        #expect(recorder.results.filter(\.isFinal).count == 1)
    }

    /// The model runs in a worker process in sttd: if it dies, a new one takes over and
    /// decodes what the dead one had not, so no words are lost.
    @Test func aWorkerThatDiesIsReplacedAndNoWordIsLost() async throws {
        let recognizer = SherpaOnnxRecognizer(settings: try sherpaInWorker(try installedSherpa()), logger: logger)
        let recordings = try LibriVox.recordings()
        let recorder = EventRecorder()
        // An earlier test's worker may still be exiting: only workers started here count.
        let earlier = Set(engineWorkers())
        let session = try await recognizer.startStream(StreamOptions(interimResults: false), events: recorder)
        async let failure = runToEnd(session)
        send(try wavSamples(recordings[1].path) + silence(1), to: session)
        #expect(await happens(within: .seconds(60)) { recorder.results.contains(where: \.isFinal) })
        let workers = engineWorkers().filter { !earlier.contains($0) }
        try #require(workers.count == 1)
        kill(workers[0], SIGKILL)
        // No silence after it: Stop's flush makes this sentence a final for the dead worker.
        send(try wavSamples(recordings[1].path), to: session)
        session.finish()
        if let error = await failure { throw error }
        let finals = recorder.results.filter(\.isFinal).map { spokenWords($0.text) }
        let sentence = ["he", "was", "not", "an", "ill", "disposed", "young", "man"]
        #expect(finals == [sentence, sentence])
        #expect(recognizer.loadCount == 2)
        let replacements = engineWorkers().filter { !earlier.contains($0) && !workers.contains($0) }
        #expect(replacements.count == 1, "one new worker took over")
    }

    /// Finalize (Deepgram's flush): the speech so far becomes one final marked `fromFinalize`, the
    /// session goes on; with nothing pending the answer is one empty final.
    @Test func finalizeFlushesThePendingSpeechAndTheSessionGoesOn() async throws {
        let recognizer = SherpaOnnxRecognizer(settings: try installedSherpa(), logger: logger)
        let recording = try LibriVox.recordings()[0]
        let words = Array(try wavSamples(recording.path).prefix(Int(2.3 * 16_000)))
        let recorder = EventRecorder()
        let session = try await recognizer.startStream(StreamOptions(interimResults: false), events: recorder)
        async let failure = runToEnd(session)
        send(words, to: session)
        session.finalize()
        #expect(await happens(within: .seconds(60)) { recorder.results.contains(where: \.fromFinalize) })
        session.finalize()
        #expect(await happens(within: .seconds(60)) { recorder.results.filter(\.fromFinalize).count == 2 })
        send(try wavSamples(try LibriVox.recordings()[1].path) + silence(1), to: session)
        session.finish()
        if let failure = await failure { throw failure }
        let finals = recorder.results.filter(\.isFinal)
        #expect(finals.count == 3, "\(finals.map(\.text))")
        #expect(finals.map(\.fromFinalize) == [true, true, false])
        #expect(Array(spokenWords(finals[0].text).prefix(4)) == ["and", "mr", "john", "dashwood"])
        #expect(finals[1].text.isEmpty, "nothing was pending")
        #expect(spokenWords(finals[2].text) == ["he", "was", "not", "an", "ill", "disposed", "young", "man"])
    }
}
