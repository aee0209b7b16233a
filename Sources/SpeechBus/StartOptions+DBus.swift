import DBus
import Speech

extension StartOptions {
    /// The option keys `StartTranscribing` and `ToggleTranscribing` accept.
    static let known = ["backend", "language", "source", "interim_results", "keyterms", "auto_stop_ms", "output"]

    /// Parses and validates the `a{sv}` options; a bad key or value is `InvalidArgs` naming it.
    public init(dbusValue value: DBusValue) throws(DBusError) {
        self.init()
        guard let entries = value.stringVariantDictionary else {
            throw .invalidArgs("options must be a dictionary of type a{sv}")
        }
        var seen = Set<String>()
        for (key, value) in entries {
            guard seen.insert(key).inserted else { throw .invalidArgs("option '\(key)' is given twice") }
            switch key {
            case "backend":
                let name = try Self.string(key, value)
                guard let backend = Backend(rawValue: name) else {
                    throw .invalidArgs("option 'backend' must be 'local' or 'deepgram', not '\(name)'")
                }
                self.backend = backend
            case "language":
                language = try Self.language(try Self.string(key, value), what: "option 'language'")
            case "source":
                source = try Self.string(key, value)
            case "interim_results":
                guard let flag = value.boolean else { throw Self.wrongType(key, value, "b") }
                interimResults = flag
            case "keyterms":
                guard case .array(.string, _) = value, let terms = value.strings else {
                    throw Self.wrongType(key, value, "as")
                }
                guard terms.count <= 100, terms.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 200 }) else {
                    throw .invalidArgs("option 'keyterms' takes up to 100 non-empty terms of at most 200 bytes")
                }
                keyterms = terms
            case "auto_stop_ms":
                guard let milliseconds = value.uint32 else { throw Self.wrongType(key, value, "u") }
                guard milliseconds <= Configuration.maximumMilliseconds else {
                    throw .invalidArgs(
                        "option 'auto_stop_ms' must be 0 (never) to \(Configuration.maximumMilliseconds), not \(milliseconds)"
                    )
                }
                autoStopMilliseconds = milliseconds
            case "output":
                let mode = try Self.string(key, value)
                guard let output = OutputMode(rawValue: mode) else {
                    throw .invalidArgs("option 'output' must be 'none', 'type' or 'clipboard', not '\(mode)'")
                }
                self.output = output
            default:
                throw .invalidArgs("unknown option '\(key)'; known options: \(Self.known.joined(separator: ", "))")
            }
        }
    }

    /// Validates a BCP-47 tag for a property or option.
    static func language(_ tag: String, what: String) throws(DBusError) -> String {
        guard Configuration.isLanguageTag(tag) else {
            throw .invalidArgs("\(what) must be a BCP-47 language tag like 'en-US', not '\(tag)'")
        }
        return tag
    }

    private static func string(_ key: String, _ value: DBusValue) throws(DBusError) -> String {
        guard let string = value.string else { throw wrongType(key, value, "s") }
        return string
    }

    private static func wrongType(_ key: String, _ value: DBusValue, _ expected: String) -> DBusError {
        .invalidArgs("option '\(key)' must have type '\(expected)', not '\(value.type)'")
    }
}
