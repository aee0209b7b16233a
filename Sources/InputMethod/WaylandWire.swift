/// The Wayland wire format, as much as the input method's proxy reads: each message is the object
/// id (u32), then `size << 16 | opcode` (u32), then its arguments, each 4-byte aligned; a string
/// is its length with the NUL (u32), then its bytes padded to 4. Native byte order (a local socket).
struct WaylandMessage: Sendable, Equatable {
    let object: UInt32
    let opcode: UInt16
    /// The whole message, header included.
    let bytes: [UInt8]

    static let headerSize = 8

    init(object: UInt32, opcode: UInt16, bytes: [UInt8]) {
        self.object = object
        self.opcode = opcode
        self.bytes = bytes
    }

    /// A message built from its arguments (tests, and nothing else needs to build one).
    init(object: UInt32, opcode: UInt16, arguments: [WaylandArgument]) {
        var body: [UInt8] = []
        for argument in arguments {
            switch argument {
            case .uint(let value): body += Self.encode(value)
            case .string(let text):
                let utf8 = Array(text.utf8) + [0]
                body += Self.encode(UInt32(utf8.count)) + utf8
                body += [UInt8](repeating: 0, count: (4 - utf8.count % 4) % 4)
            }
        }
        let size = UInt32(Self.headerSize + body.count)
        self.init(
            object: object, opcode: opcode,
            bytes: Self.encode(object) + Self.encode(size << 16 | UInt32(opcode)) + body)
    }

    /// The u32 argument at byte `offset` of the arguments.
    func uint(at offset: Int) throws(WaylandWireError) -> UInt32 {
        let start = Self.headerSize + offset
        guard offset >= 0, start + 4 <= bytes.count else { throw .truncated(object: object, opcode: opcode) }
        return Self.decode(bytes, at: start)
    }

    /// The string argument at byte `offset` of the arguments, and the offset after it.
    func string(at offset: Int) throws(WaylandWireError) -> (String, next: Int) {
        let length = Int(try uint(at: offset))
        let start = Self.headerSize + offset + 4
        let padded = (length + 3) & ~3
        guard length > 0, start + padded <= bytes.count, bytes[start + length - 1] == 0 else {
            throw .truncated(object: object, opcode: opcode)
        }
        return (String(decoding: bytes[start..<(start + length - 1)], as: UTF8.self), offset + 4 + padded)
    }

    static func encode(_ value: UInt32) -> [UInt8] { withUnsafeBytes(of: value) { Array($0) } }

    static func decode(_ bytes: [UInt8], at start: Int) -> UInt32 {
        bytes.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: start, as: UInt32.self) }
    }
}

enum WaylandArgument: Sendable, Equatable {
    case uint(UInt32)
    case string(String)
}

/// A peer that does not speak Wayland: the proxy closes both sides and says which message.
enum WaylandWireError: Error, Sendable, Equatable, CustomStringConvertible {
    case badSize(object: UInt32, size: Int)
    case truncated(object: UInt32, opcode: UInt16)
    case tooManyDescriptors(Int)

    var description: String {
        switch self {
        case .badSize(let object, let size): "a message to object \(object) claims \(size) bytes"
        case .truncated(let object, let opcode): "message \(opcode) to object \(object) is shorter than its arguments"
        case .tooManyDescriptors(let count): "\(count) file descriptors wait for their messages"
        }
    }
}

/// Bytes read from one side, cut into whole messages. Holds at most one partial message: its
/// size is in its header (at most 64 KiB), so the buffer stays under that.
struct WaylandReader: Sendable {
    private var pending: [UInt8] = []

    init() {}

    /// Appends `bytes` and returns the messages now complete, in order.
    mutating func messages(after bytes: some Collection<UInt8>) throws(WaylandWireError) -> [WaylandMessage] {
        pending += bytes
        var messages: [WaylandMessage] = []
        var start = 0
        while pending.count - start >= WaylandMessage.headerSize {
            let object = WaylandMessage.decode(pending, at: start)
            let word = WaylandMessage.decode(pending, at: start + 4)
            let size = Int(word >> 16)
            guard size >= WaylandMessage.headerSize, size % 4 == 0 else { throw .badSize(object: object, size: size) }
            guard pending.count - start >= size else { break }
            messages.append(
                WaylandMessage(
                    object: object, opcode: UInt16(word & 0xffff), bytes: Array(pending[start..<(start + size)])))
            start += size
        }
        pending.removeFirst(start)
        return messages
    }
}
