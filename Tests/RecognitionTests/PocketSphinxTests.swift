import Capture
import Foundation
import Logging
import Recognition
import TestSupport
import Testing

func transcribe(_ samples: [Int16], with recognizer: PocketSphinxRecognizer, interim: Bool = true) async throws
    -> (results: [RecognitionResult], transcript: Transcript)
{
    let session = try await recognizer.startSession(SessionOptions(interimResults: interim))
    for start in stride(from: 0, to: samples.count, by: 800) {
        session.send(AudioChunk(samples: Array(samples[start..<min(start + 800, samples.count)])))
    }
    session.finish()
    var results: [RecognitionResult] = []
    var transcript = Transcript()
    for try await case .result(let result) in session.events {
        results.append(result)
        transcript.apply(result)
    }
    return (results, transcript)
}

@Suite("Offline engine (pocketsphinx)", .serialized)
struct PocketSphinxTests {
    static let modelDirectory = "/usr/share/pocketsphinx/model/en-us"
    let logger = Logger(label: "test")

    @Test func matchesPocketsphinxContinuousAndReusesTheModel() async throws {
        _ = try requireFile(Self.modelDirectory, package: "pocketsphinx-en-us")
        let reference = try requireTool("pocketsphinx_continuous", package: "pocketsphinx")
        let recognizer = PocketSphinxRecognizer(modelDirectory: Self.modelDirectory, logger: logger)
        try await recognizer.load()
        // Every recording through one loaded model: each session starts its stream afresh, so it
        // segments and decodes exactly as the reference tool does on the file.
        for recording in try LibriVox.recordings() {
            let (results, transcript) = try await transcribe(try wavSamples(recording.path), with: recognizer)
            let expected = try run(reference, ["-infile", recording.path, "-logfn", "/dev/null"])
            #expect(normalizedWords(transcript.finalText) == normalizedWords(expected.stdout), "\(recording.id)")
            let firstFinal = try #require(results.firstIndex { $0.isFinal })
            #expect(results[..<firstFinal].contains { !$0.isFinal }, "interim results come before the first final")
        }
    }

    @Test func noInterimWhenNotAsked() async throws {
        let recognizer = PocketSphinxRecognizer(modelDirectory: Self.modelDirectory, logger: logger)
        let recording = try LibriVox.recordings()[1]
        let (results, _) = try await transcribe(try wavSamples(recording.path), with: recognizer, interim: false)
        #expect(!results.isEmpty)
        #expect(results.allSatisfy { $0.isFinal })
    }

    @Test func cancelEndsWithoutFinal() async throws {
        let recognizer = PocketSphinxRecognizer(modelDirectory: Self.modelDirectory, logger: logger)
        let samples = try wavSamples(try LibriVox.recordings()[0].path)
        let session = try await recognizer.startSession(SessionOptions())
        session.send(AudioChunk(samples: Array(samples.prefix(16000))))
        session.cancel()
        var finals = 0
        for try await case .result(let result) in session.events where result.isFinal { finals += 1 }
        #expect(finals == 0)
    }

    @Test func missingModelNamesTheDebianPackage() async throws {
        let recognizer = PocketSphinxRecognizer(modelDirectory: "/nonexistent/model", logger: logger)
        let (status, error) = await recognizer.authorize()
        #expect(status == .restricted)
        #expect(error?.kind == .backendUnavailable)
        #expect(error?.message.contains("pocketsphinx-en-us") == true)
        await #expect(throws: RecognitionError.self) { _ = try await recognizer.startSession(SessionOptions()) }
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
