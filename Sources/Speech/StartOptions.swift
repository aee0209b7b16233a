/// The options of a start (`StartTranscribing` / `ToggleTranscribing`); unset ones fall back to
/// the current settings (`Backend`, `Language`, `Source`) and the config.
public struct StartOptions: Sendable, Equatable {
    public var backend: Backend?
    public var language: String?
    /// A source name; "" means the server's default.
    public var source: String?
    public var interimResults: Bool?
    public var keyterms: [String] = []
    /// Trailing silence after which the session stops by itself; 0 = never.
    public var autoStopMilliseconds: UInt32?
    /// Where finals go besides the bus.
    public var output: OutputMode?
    /// Who asked for the session (set by the bus adapter, never by a client's options).
    public var caller: Caller?

    public init(
        backend: Backend? = nil, language: String? = nil, source: String? = nil, interimResults: Bool? = nil,
        keyterms: [String] = [], autoStopMilliseconds: UInt32? = nil, output: OutputMode? = nil
    ) {
        self.backend = backend
        self.language = language
        self.source = source
        self.interimResults = interimResults
        self.keyterms = keyterms
        self.autoStopMilliseconds = autoStopMilliseconds
        self.output = output
    }
}

/// The settings a start falls back to; the bus exposes them as the read/write properties
/// `Backend`, `Language` and `Source`. A change takes effect at the next start.
public struct SpeechSettings: Sendable, Equatable {
    public var backend: Backend
    public var language: String
    /// "" means the server's default source.
    public var source: String
}

/// Who started a session: shown as `ActiveClient`, and a sandboxed app's session is reported to
/// that app alone.
public struct Caller: Sendable, Equatable {
    /// The app id (a Flatpak or Snap id) or `host`.
    public var name: String
    /// Where a sandboxed app's session reports to (its unique bus name); nil for host callers,
    /// whose sessions are broadcast.
    public var privateDestination: String?
    /// The connection the session was started from (a unique bus name), if it came over the bus.
    public var connection: String?

    /// A sandboxed app: its session is its own and reaches nothing outside its sandbox.
    public var isSandboxed: Bool { privateDestination != nil }

    public init(name: String, privateDestination: String? = nil, connection: String? = nil) {
        self.name = name
        self.privateDestination = privateDestination
        self.connection = connection ?? privateDestination
    }
}
