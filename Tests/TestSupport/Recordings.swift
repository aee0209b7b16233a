import Foundation

/// Writes 16 kHz mono 16-bit samples as a WAV file.
public func writeWAV(_ samples: [Int16], to path: String) throws {
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

extension SttdFixture {
    /// Dictates a recording through the virtual microphone, after half a second of silence (the
    /// null sink's monitor misses the first ~100 ms of a stream that starts while it runs), and
    /// stops once speech activity has ended; the reply's transcript and the session's signals.
    public func dictatePadded(_ recording: String, as id: String, in directory: String) async throws -> (
        transcript: String, recorder: SignalRecorder
    ) {
        let recorder = try await record()
        try await call("StartTranscribing", [.vardict([])])
        let file = "\(directory)/\(id).wav"
        try writeWAV([Int16](repeating: 0, count: 8_000) + wavSamples(recording), to: file)
        try await pulse.play(file)
        // The VAD's hangover closes the utterance, as after a spoken sentence.
        try await recorder.wait("SpeechActivity false after \(id)", timeout: .seconds(10)) { signals in
            signals.last { $0.member == "SpeechActivity" }?.arguments.first == .boolean(false)
        }
        let transcript = try await call("StopTranscribing").first?.string ?? ""
        return (transcript, recorder)
    }
}
