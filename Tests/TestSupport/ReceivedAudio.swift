/// The first minute of the audio a ``DeepgramTestServer`` connection received (16 kHz linear16,
/// as sttd sends it). Audio past the minute is dropped (``DeepgramTestServer/Connection/audioBytes``
/// still counts it): the start of a stream is what a test compares, and a long stream must not
/// grow a test's memory.
public struct ReceivedAudio: Sendable, CustomStringConvertible {
    /// 60 s of 16 kHz 16-bit samples.
    public static let limit = 60 * 32_000
    public private(set) var bytes: [UInt8] = []

    public init() {}

    /// The bytes as little-endian 16-bit samples (an odd last byte is left out).
    public var samples: [Int16] {
        stride(from: 0, to: bytes.count - 1, by: 2).map {
            Int16(bitPattern: UInt16(bytes[$0]) | UInt16(bytes[$0 + 1]) << 8)
        }
    }

    /// Whether audio past the limit was dropped.
    public var isFull: Bool { bytes.count >= Self.limit }

    /// Short, so that a timed-out wait's message does not print a minute of bytes.
    public var description: String { "\(bytes.count) audio bytes" }

    public mutating func append(_ more: [UInt8]) {
        bytes += more.prefix(max(0, Self.limit - bytes.count))
    }
}
