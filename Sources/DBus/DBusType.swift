/// A D-Bus type, parsed from or rendered to a signature string.
public indirect enum DBusType: Hashable, Sendable, CustomStringConvertible {
    case byte, boolean, int16, uint16, int32, uint32, int64, uint64, double
    case string, objectPath, signature, unixFD
    case variant
    case array(DBusType)
    case dictionary(key: DBusType, value: DBusType)
    case structure([DBusType])

    /// The signature of this single complete type.
    public var signature: String {
        switch self {
        case .byte: "y"
        case .boolean: "b"
        case .int16: "n"
        case .uint16: "q"
        case .int32: "i"
        case .uint32: "u"
        case .int64: "x"
        case .uint64: "t"
        case .double: "d"
        case .string: "s"
        case .objectPath: "o"
        case .signature: "g"
        case .unixFD: "h"
        case .variant: "v"
        case .array(let element): "a" + element.signature
        case .dictionary(let key, let value): "a{" + key.signature + value.signature + "}"
        case .structure(let fields): "(" + fields.map(\.signature).joined() + ")"
        }
    }

    public var description: String { signature }

    /// Whether values of this type are stored as a basic (non-container) value.
    public var isBasic: Bool {
        switch self {
        case .variant, .array, .dictionary, .structure: false
        default: true
        }
    }

    /// Parses a signature holding exactly one complete type.
    public init(signature: String) throws(DBusError) {
        let types = try DBusType.parse(signature: signature)
        guard types.count == 1 else {
            throw .invalidArgs("signature '\(signature)' must hold exactly one complete type")
        }
        self = types[0]
    }

    /// Parses a signature holding any number of complete types.
    public static func parse(signature: String) throws(DBusError) -> [DBusType] {
        var parser = SignatureParser(Array(signature.utf8))
        var types: [DBusType] = []
        while !parser.atEnd {
            types.append(try parser.completeType(depth: 0))
        }
        return types
    }
}

/// Renders a list of types as one signature string.
public func signatureString(_ types: [DBusType]) -> String {
    types.map(\.signature).joined()
}

private struct SignatureParser {
    // The D-Bus specification limits nesting to 32 arrays and 32 structs.
    static let maxDepth = 64
    let bytes: [UInt8]
    var index = 0

    init(_ bytes: [UInt8]) { self.bytes = bytes }

    var atEnd: Bool { index >= bytes.count }

    mutating func completeType(depth: Int) throws(DBusError) -> DBusType {
        guard depth < Self.maxDepth else { throw .invalidArgs("signature nests too deeply") }
        guard index < bytes.count else { throw .invalidArgs("signature ends in the middle of a type") }
        let code = bytes[index]
        index += 1
        switch code {
        case UInt8(ascii: "y"): return .byte
        case UInt8(ascii: "b"): return .boolean
        case UInt8(ascii: "n"): return .int16
        case UInt8(ascii: "q"): return .uint16
        case UInt8(ascii: "i"): return .int32
        case UInt8(ascii: "u"): return .uint32
        case UInt8(ascii: "x"): return .int64
        case UInt8(ascii: "t"): return .uint64
        case UInt8(ascii: "d"): return .double
        case UInt8(ascii: "s"): return .string
        case UInt8(ascii: "o"): return .objectPath
        case UInt8(ascii: "g"): return .signature
        case UInt8(ascii: "h"): return .unixFD
        case UInt8(ascii: "v"): return .variant
        case UInt8(ascii: "a"):
            if index < bytes.count, bytes[index] == UInt8(ascii: "{") {
                index += 1
                let key = try completeType(depth: depth + 1)
                guard key.isBasic, key != .variant else {
                    throw .invalidArgs("dictionary keys must be a basic type")
                }
                let value = try completeType(depth: depth + 1)
                guard index < bytes.count, bytes[index] == UInt8(ascii: "}") else {
                    throw .invalidArgs("dictionary entry in signature is not closed")
                }
                index += 1
                return .dictionary(key: key, value: value)
            }
            return .array(try completeType(depth: depth + 1))
        case UInt8(ascii: "("):
            var fields: [DBusType] = []
            while index < bytes.count, bytes[index] != UInt8(ascii: ")") {
                fields.append(try completeType(depth: depth + 1))
            }
            guard index < bytes.count, !fields.isEmpty else {
                throw .invalidArgs("struct in signature is empty or not closed")
            }
            index += 1
            return .structure(fields)
        default:
            throw .invalidArgs("signature has an unknown type code '\(Character(UnicodeScalar(code)))'")
        }
    }
}
