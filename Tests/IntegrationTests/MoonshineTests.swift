import DBus
import Foundation
import Recognition
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    @Suite("Dictating with sherpa-onnx + Moonshine (the default offline engine)", .serialized)
    struct MoonshineDictationTests {
        /// Words of punctuated text: "ill-disposed" is the references' "ill disposed".
        static func words(_ text: String) -> [String] {
            normalizedWords(text.replacingOccurrences(of: "-", with: " "))
        }

        /// Every LibriVox file through the virtual microphone into sttd with its default engine;
        /// the WER is compared with the same engine decoding each whole file directly.
        @Test func transcribesEveryLibriVoxFileAsWellAsTheEngineOnTheFile() async throws {
            let settings = SherpaSettings.installed()
            guard settings.libraryPath != nil, settings.modelDirectory != nil else {
                throw MissingPrerequisite(description: "sherpa-onnx and Moonshine are not in .build: run scripts/setup")
            }
            let sttd = try await SttdFixture()
            let padded = try makeTemporaryDirectory("padded-clips")
            defer { try? FileManager.default.removeItem(atPath: padded) }
            var ourErrors = 0.0
            var directErrors = 0.0
            var words = 0
            for recording in try LibriVox.recordings() {
                let recorder = try await sttd.record()
                try await sttd.call("StartTranscribing", [.vardict([])])
                // The null sink's monitor misses the first ~100 ms of a stream that starts while
                // it runs (the sink rewinds over audio the monitor already passed on); half a
                // second of silence first, as before a person speaks, keeps every word in.
                let file = "\(padded)/\(recording.id).wav"
                try writeWAV([Int16](repeating: 0, count: 8_000) + wavSamples(recording.path), to: file)
                try sttd.pulse.play(file)
                // The VAD's hangover closes the utterance, as after a spoken sentence.
                await recorder.wait(timeout: .seconds(10)) { signals in
                    signals.last { $0.member == "SpeechActivity" }?.arguments.first == .boolean(false)
                }
                let transcript = try await sttd.call("StopTranscribing").first?.string ?? ""
                let samples = try wavSamples(recording.path).map { Float($0) / 32768 }
                let direct = try SherpaOnnxRecognizer.transcribe(samples, settings: settings)
                let ours = wordErrorRate(reference: recording.reference, hypothesis: Self.words(transcript))
                let theirs = wordErrorRate(reference: recording.reference, hypothesis: Self.words(direct))
                ourErrors += ours * Double(recording.reference.count) / 100
                directErrors += theirs * Double(recording.reference.count) / 100
                words += recording.reference.count
                print("\(recording.id): sttd \"\(transcript)\" | direct \"\(direct)\"")
                #expect(transcript.first?.isUppercase == true, "capitals: \(transcript)")
                #expect(transcript.contains { $0 == "," || $0 == "." }, "punctuation: \(transcript)")
                let updates = recorder.signals(named: "TranscriptChanged")
                let firstFinal = try #require(
                    updates.firstIndex { $0.arguments.last == .boolean(true) }, "a final for \(recording.id)")
                #expect(
                    updates[..<firstFinal].contains { $0.arguments.last == .boolean(false) },
                    "interim before final: \(recording.id)")
                #expect(
                    recorder.signals(named: "SpeechActivity").first?.arguments.first == .boolean(true),
                    "speech activity follows the VAD")
            }
            let ourWER = ourErrors / Double(words) * 100
            let directWER = directErrors / Double(words) * 100
            print("WER over \(words) words: sttd \(ourWER)%, sherpa-onnx on the whole files \(directWER)%")
            #expect(ourWER <= 5)
            #expect(ourWER <= directWER + 0.001, "sttd \(ourWER)% vs the engine on the files \(directWER)%")
        }

        @Test func missingSherpaModelIsRestrictedAndNamesTheInstallCommand() async throws {
            let sttd = try await SttdFixture(
                config: "[local]\nengine = \"moonshine\"\nsherpa_model_dir = \"/nonexistent/model\"\n")
            let error = await #expect(throws: DBusError.self) {
                try await sttd.call("StartTranscribing", [.vardict([])])
            }
            #expect(error?.name == SpeechAPI.errorName("BackendUnavailable"))
            #expect(error?.message.contains("scripts/setup") == true, "\(error?.message ?? "")")
            #expect(try await sttd.property("AuthorizationStatus") == .string("restricted"))
            #expect(sttd.sttd.isRunning)
        }
    }
}

/// Writes 16 kHz mono 16-bit samples as a WAV file.
func writeWAV(_ samples: [Int16], to path: String) throws {
    var data = Data()
    func append<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.littleEndian) { data.append(contentsOf: $0) }
    }
    let bytes = UInt32(samples.count * 2)
    data.append(contentsOf: Array("RIFF".utf8))
    append(36 + bytes)
    data.append(contentsOf: Array("WAVEfmt ".utf8))
    append(UInt32(16))
    append(UInt16(1))
    append(UInt16(1))
    append(UInt32(16_000))
    append(UInt32(32_000))
    append(UInt16(2))
    append(UInt16(16))
    data.append(contentsOf: Array("data".utf8))
    append(bytes)
    samples.withUnsafeBytes { data.append(contentsOf: $0) }
    try data.write(to: URL(fileURLWithPath: path))
}
