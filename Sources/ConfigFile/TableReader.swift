import Foundation
import TOMLKit

/// Reads typed keys from a TOML table and remembers which were read, to refuse unknown ones.
public struct TableReader {
    public let table: TOMLTable
    public let prefix: String
    var seen: Set<String> = []

    public init(table: TOMLTable, prefix: String) {
        self.table = table
        self.prefix = prefix
    }

    public func wrongType(_ key: String, _ value: any TOMLValueConvertible, _ expected: String) -> ConfigurationError {
        ConfigurationError(
            "\(prefix)\(key) = \(value.debugDescription) is a \(value.type), but it must be \(expected).")
    }

    public mutating func string(_ key: String, default value: String) throws(ConfigurationError) -> String {
        seen.insert(key)
        guard let raw = table[key] else { return value }
        guard let string = raw.string else { throw wrongType(key, raw, "a string") }
        return string
    }

    public mutating func bool(_ key: String, default value: Bool) throws(ConfigurationError) -> Bool {
        seen.insert(key)
        guard let raw = table[key] else { return value }
        guard raw.type == .bool, let bool = raw.bool else { throw wrongType(key, raw, "true or false") }
        return bool
    }

    public mutating func milliseconds(_ key: String, default value: UInt32, allowZero: Bool) throws(ConfigurationError)
        -> UInt32
    {
        seen.insert(key)
        guard let raw = table[key] else { return value }
        guard raw.type == .int, let int = raw.int else { throw wrongType(key, raw, "a whole number of milliseconds") }
        let range = Self.millisecondsRange(allowZero: allowZero)
        guard range.contains(int) else {
            throw ConfigurationError(
                "\(prefix)\(key) = \(int) is out of range; allowed: \(range.lowerBound) to \(range.upperBound) milliseconds."
            )
        }
        return UInt32(int)
    }

    /// The longest duration a millisecond key takes (10 minutes).
    public static let maximumMilliseconds: UInt32 = 600_000
    public static func millisecondsRange(allowZero: Bool) -> ClosedRange<Int> {
        (allowZero ? 0 : 1)...Int(maximumMilliseconds)
    }

    public mutating func count(_ key: String, default value: Int, range: ClosedRange<Int>) throws(ConfigurationError) -> Int {
        seen.insert(key)
        guard let raw = table[key] else { return value }
        guard raw.type == .int, let int = raw.int else { throw wrongType(key, raw, "a whole number") }
        guard range.contains(int) else {
            throw ConfigurationError(
                "\(prefix)\(key) = \(int) is out of range; allowed: \(range.lowerBound) to \(range.upperBound).")
        }
        return int
    }

    public mutating func choice<T: RawRepresentable & CaseIterable>(_ key: String, default value: T) throws(ConfigurationError)
        -> T
    where T.RawValue == String {
        let allowed = T.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", ")
        seen.insert(key)
        guard let raw = table[key] else { return value }
        guard let string = raw.string else { throw wrongType(key, raw, "one of \(allowed)") }
        guard let choice = T(rawValue: string) else {
            throw ConfigurationError("\(prefix)\(key) = \"\(string)\" is not allowed; use one of \(allowed).")
        }
        return choice
    }

    /// A choice that stays unset (nil) when the key is absent.
    public mutating func optionalChoice<T: RawRepresentable & CaseIterable>(_ key: String) throws(ConfigurationError) -> T?
    where T.RawValue == String {
        seen.insert(key)
        guard table[key] != nil, let first = T.allCases.first else { return nil }
        return try choice(key, default: first)
    }

    /// A boolean that stays unset (nil) when the key is absent.
    public mutating func optionalBool(_ key: String) throws(ConfigurationError) -> Bool? {
        seen.insert(key)
        guard table[key] != nil else { return nil }
        return try bool(key, default: false)
    }

    public mutating func table(_ key: String) throws(ConfigurationError) -> TOMLTable? {
        seen.insert(key)
        guard let raw = table[key] else { return nil }
        guard let table = raw.table else { throw wrongType(key, raw, "a table ([\(key)])") }
        return table
    }

    /// A table of query parameters; strings, numbers and booleans (lowercase) are accepted.
    public mutating func parameters(_ key: String) throws(ConfigurationError) -> [String: String] {
        guard let table = try table(key) else { return [:] }
        var result: [String: String] = [:]
        for name in table.keys {
            guard let value = table[name] else { continue }
            switch value.type {
            case .string: result[name] = value.string
            case .bool: result[name] = value.bool == true ? "true" : "false"
            case .int: result[name] = value.int.map(String.init)
            case .double: result[name] = value.double.map { String($0) }
            default:
                throw ConfigurationError("\(prefix)\(key).\(name) must be a string, number or boolean.")
            }
        }
        return result
    }

    public func refuseUnknownKeys() throws(ConfigurationError) {
        let unknown = table.keys.filter { !seen.contains($0) }.sorted()
        guard let first = unknown.first else { return }
        let allowed = seen.sorted().joined(separator: ", ")
        throw ConfigurationError(
            "\(prefix)\(first) is not a known setting (known here: \(allowed)); check its spelling.")
    }

    /// An array of strings (a single string is taken as a list of one).
    public mutating func stringList(_ key: String) throws(ConfigurationError) -> [String] {
        seen.insert(key)
        guard let raw = table[key] else { return [] }
        if let string = raw.string { return [string] }
        guard let array = raw.array else { throw wrongType(key, raw, "a list of strings, e.g. [\"one\", \"two\"]") }
        var strings: [String] = []
        for element in array {
            guard let string = element.string else {
                throw wrongType(key, raw, "a list of strings, e.g. [\"one\", \"two\"]")
            }
            strings.append(string)
        }
        return strings
    }

    /// A table of strings, e.g. `{ "gonna" = "going to" }`, in key order.
    public mutating func strings(table key: String) throws(ConfigurationError) -> [(String, String)] {
        guard let table = try table(key) else { return [] }
        var pairs: [(String, String)] = []
        for name in table.keys.sorted() {
            guard let value = table[name]?.string else {
                throw ConfigurationError("\(prefix)\(key).\"\(name)\" must be a string (empty to delete the words).")
            }
            pairs.append((name, value))
        }
        return pairs
    }
}
