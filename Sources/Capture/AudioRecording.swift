import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// A WAV file (16 kHz mono s16le) that captured chunks are appended to as they arrive, on the
/// capture thread: one `write(2)` per chunk, nothing buffered, so a crash loses nothing written.
/// The header's sizes are filled in by ``close()``; until then they read "unknown" (0xFFFFFFFF),
/// which sox, ffmpeg and pocketsphinx read to the end of the file.
public final class AudioRecording: Sendable {
    /// The file's path.
    public let path: String
    private let state: Mutex<(descriptor: Int32, bytes: Int)>

    /// Creates `directory` (mode 0700) if needed and a new file in it (mode 0600) named after
    /// the time and `name`; nil, with the reason logged by the caller, when that fails.
    public init(directory: String, name: String) throws(CaptureError) {
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw CaptureError(
                .failed, "cannot create \(directory) for the session's audio: \(error.localizedDescription)")
        }
        let stamp = Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: false))
        path = "\(directory)/\(stamp.replacingOccurrences(of: ":", with: "-"))-\(name).wav"
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard descriptor >= 0 else {
            throw CaptureError(.failed, "cannot write \(path): \(String(cString: strerror(errno)))")
        }
        state = Mutex((descriptor, 0))
        Self.write(Self.header(dataBytes: nil), to: descriptor)
    }

    deinit { close() }

    /// Appends a chunk's samples.
    public func append(_ chunk: AudioChunk) {
        state.withLock { state in
            guard state.descriptor >= 0 else { return }
            chunk.samples.withUnsafeBytes { Self.write($0, to: state.descriptor) }
            state.bytes += chunk.samples.count * AudioFormat.bytesPerSample
        }
    }

    /// Writes the header's sizes and closes the file; later chunks are not kept.
    public func close() {
        state.withLock { state in
            guard state.descriptor >= 0 else { return }
            Self.header(dataBytes: state.bytes).withUnsafeBytes { _ = pwrite(state.descriptor, $0.baseAddress, 44, 0) }
            _ = Glibc.close(state.descriptor)
            state.descriptor = -1
        }
    }

    private static func write(_ bytes: UnsafeRawBufferPointer, to descriptor: Int32) {
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(descriptor, bytes.baseAddress! + offset, bytes.count - offset)
            if written < 0 && errno == EINTR { continue }
            guard written > 0 else { return }
            offset += written
        }
    }

    private static func write(_ bytes: [UInt8], to descriptor: Int32) {
        bytes.withUnsafeBytes { write($0, to: descriptor) }
    }

    /// The 44-byte header of a PCM WAV file; nil data size: not known yet.
    private static func header(dataBytes: Int?) -> [UInt8] {
        func little(_ value: UInt32) -> [UInt8] { (0..<4).map { UInt8(truncatingIfNeeded: value >> ($0 * 8)) } }
        func little(_ value: UInt16) -> [UInt8] { [UInt8(truncatingIfNeeded: value), UInt8(value >> 8)] }
        let data = dataBytes.map { UInt32(clamping: $0) } ?? .max
        let rate = UInt32(AudioFormat.sampleRate)
        let bytesPerSample = UInt16(AudioFormat.bytesPerSample)
        return Array("RIFF".utf8) + little(dataBytes == nil ? .max : 36 &+ data) + Array("WAVEfmt ".utf8)
            + little(UInt32(16)) + little(UInt16(1)) + little(UInt16(1)) + little(rate)
            + little(rate * UInt32(bytesPerSample)) + little(bytesPerSample) + little(UInt16(16))
            + Array("data".utf8) + little(data)
    }
}
