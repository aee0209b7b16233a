import ConfigFile
import Foundation
import Recognition
import TOMLKit

/// The config file's error, from the module that reads the file (sttd-ibus reads it too).
public typealias ConfigurationError = ConfigFile.ConfigurationError

/// Which recognizer a session uses.
public enum Backend: String, Sendable, CaseIterable {
    /// The embedded offline engine.
    case local
    /// Any Deepgram-compatible streaming API.
    case deepgram
}

/// Where finals go besides D-Bus.
public enum OutputMode: String, Sendable, CaseIterable {
    /// Only the bus and history.
    case none
    /// Each final typed into the focused window as it arrives.
    case type
    /// The session's transcript put on the clipboard at stop.
    case clipboard
}

/// The typing tool `output_tool` names; `automatic` chooses from the desktop session.
public enum TypingToolChoice: String, Sendable, CaseIterable {
    case automatic = ""
    case wtype, ydotool, xdotool
}

/// How the API key is presented to a Deepgram-compatible server.
public enum DeepgramAuth: String, Sendable, CaseIterable {
    /// `Authorization: Token KEY`
    case header
    /// `Sec-WebSocket-Protocol: token, KEY` (SubQ's way)
    case subprotocol
}

/// What a streaming session does when the server is out of reach (`[deepgram] fallback`).
public enum StreamingFallback: String, Sendable, CaseIterable {
    /// The offline engine takes over; the audio stays on the machine.
    case local
    /// The session fails, as it did before fallbacks existed.
    case none
}

/// Whether sandboxed apps may use sttd (config `consent`); host callers are never asked.
public enum ConsentPolicy: String, Sendable, CaseIterable {
    /// Ask the user once per app, with a notification.
    case ask
    /// Let every sandboxed app listen without asking.
    case allow
    /// Refuse every sandboxed app.
    case deny
}

/// The settings of `config.toml` (contract §2), with the contract's defaults.
public struct Configuration: Sendable, Equatable {
    public var backend = Backend.local
    public var language = "en-US"
    public var source = ""
    public var interimResults = true
    public var autoStopMilliseconds: UInt32 = 0
    public var output = OutputMode.none
    /// The typing tool, or automatic (from `WAYLAND_DISPLAY`, `DISPLAY`, `XDG_CURRENT_DESKTOP`).
    public var outputTool = TypingToolChoice.automatic
    /// With clipboard output: also paste into the focused window, then restore the clipboard.
    public var paste = false
    /// With auto-stop on: a session in which nobody speaks stops after this long.
    var autoStopNoSpeechMilliseconds: UInt32 = 8000
    /// Desktop notifications when listening starts and stops, and when a session fails.
    public var notify = true
    /// How sandboxed apps are treated.
    public var consent = ConsentPolicy.ask
    /// How long a consent prompt waits for an answer: at most 20 s, below D-Bus's 25 s call timeout.
    public var consentTimeoutMilliseconds: UInt32 = 20_000
    var stopTimeoutMilliseconds: UInt32 = 5000
    public var history = true
    /// Sessions older than this many days are deleted at startup and daily; 0 keeps them all.
    public var historyDays = 0
    /// How long a session waits for a restarted sound server before it fails.
    var microphoneReconnectMilliseconds: UInt32 = 10_000
    public var local = Local()
    public var deepgram = Deepgram()
    public var server = Server()
    public var debug = Debug()
    public var ibus = IBus()
    public var text = Text()
    public var wayland = Wayland()
    public var handsFree = HandsFree()

    /// The `[local]` table.
    public struct Local: Sendable, Equatable {
        /// The offline engines.
        public enum Engine: String, Sendable, CaseIterable {
            /// sherpa-onnx with Moonshine base-en, or the model `sherpa_model_dir` names.
            case moonshine
            case pocketsphinx
        }

        /// pocketsphinx's model folder.
        public var modelDirectory = "/usr/share/pocketsphinx/model/en-us"
        /// The engine chosen; nil: sherpa-onnx when it is installed, else pocketsphinx.
        public var engine: Engine?
        /// The sherpa-onnx model folder; empty: the installed Moonshine base-en.
        public var sherpaModelDirectory = ""
        /// Which sherpa-onnx model family that folder holds.
        public var sherpaModelKind = SherpaModel.Kind.moonshine
        /// The sherpa-onnx model is unloaded after this many seconds without a session.
        public var unloadAfterSeconds = 300
    }

    /// The `[deepgram]` table.
    public struct Deepgram: Sendable, Equatable {
        public var url = "wss://api.deepgram.com/v1/listen"
        public var auth = DeepgramAuth.header
        public var apiKeyFile = ""
        public var model = "nova-3"
        public var caFile = ""
        public var params: [String: String] = [:]
        /// Reconnection attempts after a dropped stream before the session fails.
        public var reconnectAttempts = 8
        /// Total time spent reconnecting before the session fails.
        public var reconnectTimeoutMilliseconds: UInt32 = 30_000
        /// Who takes over when the server is out of reach; nil: `local` when an offline engine is installed.
        public var fallback: StreamingFallback?
        /// How long a lost stream (or, at the start, the server) gets before the offline engine takes over.
        public var fallbackAfterMilliseconds: UInt32 = 3000
    }

    /// The `[debug]` table: what helps a bug report or an accuracy check.
    public struct Debug: Sendable, Equatable {
        /// Each session's captured audio, exactly as the recognizer got it, is kept here as a
        /// WAV file (16 kHz mono); empty: none is kept.
        public var audioDirectory = ""
    }

    /// The `[ibus]` table: read by one reader, which sttd-ibus uses too.
    public typealias IBus = IBusSection

    public init() {}

    /// The config file path: `--config`, else `STTD_CONFIG`, else `$XDG_CONFIG_HOME/sttd/config.toml`.
    public static func path(explicit: String?, environment: [String: String]) -> (path: String, isExplicit: Bool) {
        ConfigPath.resolve(explicit: explicit, environment: environment)
    }

    /// Loads the file at `path`. A missing file gives the defaults unless it was named explicitly.
    public static func load(path: String, isExplicit: Bool) throws(ConfigurationError) -> Configuration {
        do {
            guard let text = try ConfigPath.text(at: path, isExplicit: isExplicit) else { return Configuration() }
            return try Configuration(toml: text)
        } catch {
            throw ConfigurationError("\(path): \(error.message)")
        }
    }

    /// Parses TOML text.
    public init(toml text: String) throws(ConfigurationError) {
        let table = try ConfigPath.table(parsing: text)
        var reader = TableReader(table: table, prefix: "")
        backend = try reader.choice("backend", default: backend)
        language = try reader.string("language", default: language)
        try Self.checkLanguage(language, key: "language")
        source = try reader.string("source", default: source)
        interimResults = try reader.bool("interim_results", default: interimResults)
        autoStopMilliseconds = try reader.milliseconds("auto_stop_ms", default: autoStopMilliseconds, allowZero: true)
        output = try reader.choice("output", default: output)
        outputTool = try reader.choice("output_tool", default: outputTool)
        paste = try reader.bool("paste", default: paste)
        autoStopNoSpeechMilliseconds = try reader.milliseconds(
            "auto_stop_no_speech_ms", default: autoStopNoSpeechMilliseconds, allowZero: false)
        notify = try reader.bool("notify", default: notify)
        consent = try reader.choice("consent", default: consent)
        consentTimeoutMilliseconds = try reader.milliseconds(
            "consent_timeout_ms", default: consentTimeoutMilliseconds, allowZero: false)
        guard consentTimeoutMilliseconds <= Self.consentTimeoutMaximum else {
            throw ConfigurationError(
                "consent_timeout_ms is \(consentTimeoutMilliseconds); it must be at most \(Self.consentTimeoutMaximum), so the answer comes before the caller's D-Bus call times out."
            )
        }
        stopTimeoutMilliseconds = try reader.milliseconds(
            "stop_timeout_ms", default: stopTimeoutMilliseconds, allowZero: false)
        history = try reader.bool("history", default: history)
        historyDays = try reader.count("history_days", default: historyDays, range: Self.historyDaysRange)
        microphoneReconnectMilliseconds = try reader.milliseconds(
            "microphone_reconnect_ms", default: microphoneReconnectMilliseconds, allowZero: true)

        if let localTable = try reader.table("local") {
            var localReader = TableReader(table: localTable, prefix: "local.")
            local.modelDirectory = try localReader.string("model_dir", default: local.modelDirectory)
            local.engine = try localReader.optionalChoice("engine")
            local.sherpaModelDirectory = try localReader.string(
                "sherpa_model_dir", default: local.sherpaModelDirectory)
            local.sherpaModelKind = try localReader.choice("sherpa_model_kind", default: local.sherpaModelKind)
            local.unloadAfterSeconds = try localReader.count(
                "unload_after_s", default: local.unloadAfterSeconds, range: Self.unloadAfterSecondsRange)
            try localReader.refuseUnknownKeys()
        }
        if let deepgramTable = try reader.table("deepgram") {
            var dg = TableReader(table: deepgramTable, prefix: "deepgram.")
            deepgram.url = try dg.string("url", default: deepgram.url)
            deepgram.auth = try dg.choice("auth", default: deepgram.auth)
            deepgram.apiKeyFile = try dg.string("api_key_file", default: deepgram.apiKeyFile)
            deepgram.model = try dg.string("model", default: deepgram.model)
            deepgram.caFile = try dg.string("ca_file", default: deepgram.caFile)
            deepgram.params = try dg.parameters("params")
            deepgram.reconnectAttempts = try dg.count(
                "reconnect_attempts", default: deepgram.reconnectAttempts, range: Self.reconnectAttemptsRange)
            deepgram.reconnectTimeoutMilliseconds = try dg.milliseconds(
                "reconnect_timeout_ms", default: deepgram.reconnectTimeoutMilliseconds, allowZero: true)
            deepgram.fallback = try dg.optionalChoice("fallback")
            deepgram.fallbackAfterMilliseconds = try dg.milliseconds(
                "fallback_after_ms", default: deepgram.fallbackAfterMilliseconds, allowZero: false)
            try dg.refuseUnknownKeys()
            for name in deepgram.params.keys.sorted() where DeepgramProtocol.reservedParameters.contains(name) {
                throw ConfigurationError(
                    "deepgram.params.\(name) is set by sttd itself (from the audio format, model, language, interim_results or keyterms); remove it from params."
                )
            }
            try Self.checkStreamingURL(deepgram.url)
        }
        try readServer(&reader)
        if let debugTable = try reader.table("debug") {
            var debugReader = TableReader(table: debugTable, prefix: "debug.")
            debug.audioDirectory = try debugReader.string("audio_dir", default: debug.audioDirectory)
            try debugReader.refuseUnknownKeys()
            guard debug.audioDirectory.isEmpty || debug.audioDirectory.hasPrefix("/") else {
                throw ConfigurationError(
                    "debug.audio_dir = \"\(debug.audioDirectory)\" is not an absolute path; name a folder like \"/home/you/sttd-audio\", or leave it empty."
                )
            }
        }
        try readText(&reader)
        ibus = try IBusSection(from: &reader)
        try readWayland(&reader)
        try readHandsFree(&reader)
        try reader.refuseUnknownKeys()
    }

    /// The longest duration a millisecond key or option takes (10 minutes).
    public static let maximumMilliseconds = TableReader.maximumMilliseconds
    public static func millisecondsRange(allowZero: Bool) -> ClosedRange<Int> {
        TableReader.millisecondsRange(allowZero: allowZero)
    }
    /// Below D-Bus's 25 s call timeout, so the caller hears the answer.
    public static let consentTimeoutMaximum: UInt32 = 20_000
    // The ranges the parser enforces; the config reference documents these same values.
    public static let historyDaysRange = 0...36_500
    public static let unloadAfterSecondsRange = 0...86_400
    public static let reconnectAttemptsRange = 0...100
    public static let maxStreamsRange = 1...64

    /// Sessions that started before this date are pruned (`history_days`).
    public static func historyCutoff(days: Int) -> Date { Date().addingTimeInterval(-Double(days) * 86_400) }

    /// A BCP-47 tag such as `en-US` (syntax only; the primary subtag is an ISO 639 code, as
    /// every registered language's is).
    public static func isLanguageTag(_ tag: String) -> Bool {
        let parts = tag.split(separator: "-", omittingEmptySubsequences: false)
        guard let first = parts.first, (2...3).contains(first.count),
            first.allSatisfy({ $0.isASCII && $0.isLetter })
        else { return false }
        return parts.dropFirst().allSatisfy { part in
            (1...8).contains(part.count) && part.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber) }
        }
    }

    static func checkLanguage(_ tag: String, key: String) throws(ConfigurationError) {
        guard isLanguageTag(tag) else {
            throw ConfigurationError("\(key) = \"\(tag)\" is not a BCP-47 language tag; use one like \"en-US\".")
        }
    }

    static func checkStreamingURL(_ text: String) throws(ConfigurationError) {
        guard let url = URL(string: text), let scheme = url.scheme?.lowercased(), let host = url.host, !host.isEmpty
        else {
            throw ConfigurationError(
                "deepgram.url = \"\(text)\" is not a URL; use one like \"wss://api.deepgram.com/v1/listen\".")
        }
        switch scheme {
        case "wss": return
        case "ws":
            guard isLoopback(host) else {
                throw ConfigurationError(
                    "deepgram.url = \"\(text)\" uses plain ws:// to a non-loopback host, which would send your key and audio unencrypted; use wss://."
                )
            }
        default:
            throw ConfigurationError(
                "deepgram.url = \"\(text)\" must start with wss:// (or ws:// for a server on this machine).")
        }
    }

    /// Whether a URL host is this machine's loopback (see ``Loopback/contains(_:)``).
    static func isLoopback(_ host: String) -> Bool { Loopback.contains(host) }
}
