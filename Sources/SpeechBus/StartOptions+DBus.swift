import DBus
import Speech
import SpeechAPI

extension StartOptions {
    /// The options of a request, their values checked; a bad value is `InvalidArgs` naming it.
    public init(_ request: StartRequest) throws(DBusError) {
        self.init(
            source: request.source, interimResults: request.interimResults, keyterms: request.keyterms ?? [])
        if let name = request.backend {
            guard let backend = Backend(rawValue: name) else {
                throw .invalidArgs("option 'backend' must be 'local' or 'deepgram', not '\(name)'")
            }
            self.backend = backend
        }
        if let tag = request.language { language = try Self.language(tag, what: "option 'language'") }
        guard keyterms.count <= 100, keyterms.allSatisfy({ !$0.isEmpty && $0.utf8.count <= 200 }) else {
            throw .invalidArgs("option 'keyterms' takes up to 100 non-empty terms of at most 200 bytes")
        }
        if let milliseconds = request.autoStopMilliseconds {
            guard milliseconds <= Configuration.maximumMilliseconds else {
                throw .invalidArgs(
                    "option 'auto_stop_ms' must be 0 (never) to \(Configuration.maximumMilliseconds), not \(milliseconds)"
                )
            }
            autoStopMilliseconds = milliseconds
        }
        if let mode = request.output {
            guard let output = OutputMode(rawValue: mode) else {
                throw .invalidArgs("option 'output' must be 'none', 'type' or 'clipboard', not '\(mode)'")
            }
            self.output = output
        }
    }

    /// Parses and checks the `a{sv}` options of `StartTranscribing`.
    public init(dbusValue value: DBusValue) throws(DBusError) {
        try self.init(try StartRequest(dbusValue: value))
    }

    /// Validates a BCP-47 tag for a property or option.
    static func language(_ tag: String, what: String) throws(DBusError) -> String {
        guard Configuration.isLanguageTag(tag) else {
            throw .invalidArgs("\(what) must be a BCP-47 language tag like 'en-US', not '\(tag)'")
        }
        return tag
    }
}
