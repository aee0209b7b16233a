/// A D-Bus value of any type the binding marshals.
public indirect enum DBusValue: Hashable, Sendable {
    case byte(UInt8)
    case boolean(Bool)
    case int16(Int16)
    case uint16(UInt16)
    case int32(Int32)
    case uint32(UInt32)
    case int64(Int64)
    case uint64(UInt64)
    case double(Double)
    case string(String)
    case objectPath(String)
    case signature(String)
    case variant(DBusValue)
    /// An array with its element type, so that empty arrays keep their signature.
    case array(DBusType, [DBusValue])
    /// A dictionary (`a{kv}`), entries in order.
    case dictionary(key: DBusType, value: DBusType, [DictionaryEntry])
    case structure([DBusValue])

    /// One `{key, value}` entry of a dictionary.
    public struct DictionaryEntry: Hashable, Sendable {
        public var key: DBusValue
        public var value: DBusValue
        public init(_ key: DBusValue, _ value: DBusValue) {
            self.key = key
            self.value = value
        }
    }

    /// The type of this value.
    public var type: DBusType {
        switch self {
        case .byte: .byte
        case .boolean: .boolean
        case .int16: .int16
        case .uint16: .uint16
        case .int32: .int32
        case .uint32: .uint32
        case .int64: .int64
        case .uint64: .uint64
        case .double: .double
        case .string: .string
        case .objectPath: .objectPath
        case .signature: .signature
        case .variant: .variant
        case .array(let element, _): .array(element)
        case .dictionary(let key, let value, _): .dictionary(key: key, value: value)
        case .structure(let fields): .structure(fields.map(\.type))
        }
    }

    // MARK: Typed accessors

    public var string: String? {
        if case .string(let value) = self { return value }
        return nil
    }
    public var boolean: Bool? {
        if case .boolean(let value) = self { return value }
        return nil
    }
    public var int32: Int32? {
        if case .int32(let value) = self { return value }
        return nil
    }
    public var uint32: UInt32? {
        if case .uint32(let value) = self { return value }
        return nil
    }
    public var int64: Int64? {
        if case .int64(let value) = self { return value }
        return nil
    }
    public var double: Double? {
        if case .double(let value) = self { return value }
        return nil
    }
    /// The value inside a variant, or nil if this is not a variant.
    public var variantValue: DBusValue? {
        if case .variant(let value) = self { return value }
        return nil
    }
    /// The elements of an array of strings.
    public var strings: [String]? {
        guard case .array(.string, let items) = self else { return nil }
        return items.compactMap(\.string)
    }
    /// The entries of an `a{sv}` dictionary keyed by string, variants unwrapped.
    public var stringVariantDictionary: [(key: String, value: DBusValue)]? {
        guard case .dictionary(.string, .variant, let entries) = self else { return nil }
        return entries.compactMap { entry in
            guard let key = entry.key.string, let value = entry.value.variantValue else { return nil }
            return (key, value)
        }
    }

    // MARK: Builders

    /// An `as` array.
    public static func strings(_ values: [String]) -> DBusValue {
        .array(.string, values.map(DBusValue.string))
    }
    /// An `a{sv}` dictionary, entries in the given order.
    public static func vardict(_ entries: [(String, DBusValue)]) -> DBusValue {
        .dictionary(
            key: .string, value: .variant,
            entries.map { DictionaryEntry(.string($0.0), .variant($0.1)) })
    }
}

extension DBusValue: CustomStringConvertible {
    public var description: String {
        switch self {
        case .byte(let v): "\(v)"
        case .boolean(let v): "\(v)"
        case .int16(let v): "\(v)"
        case .uint16(let v): "\(v)"
        case .int32(let v): "\(v)"
        case .uint32(let v): "\(v)"
        case .int64(let v): "\(v)"
        case .uint64(let v): "\(v)"
        case .double(let v): "\(v)"
        case .string(let v): "\"\(v)\""
        case .objectPath(let v): v
        case .signature(let v): v
        case .variant(let v): "<\(v)>"
        case .array(_, let items): "[" + items.map(\.description).joined(separator: ", ") + "]"
        case .dictionary(_, _, let entries):
            "{" + entries.map { "\($0.key): \($0.value)" }.joined(separator: ", ") + "}"
        case .structure(let fields): "(" + fields.map(\.description).joined(separator: ", ") + ")"
        }
    }
}
