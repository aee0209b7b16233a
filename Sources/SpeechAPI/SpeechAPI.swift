import DBus

/// The names of sttd's D-Bus API (contract §1), in the one place that sttd, sttctl, the
/// benchmarks and the tests take them from.
public enum SpeechAPI {
    public static let busName = "io.github.sttd.Speech1"
    public static let objectPath = "/io/github/sttd/Speech1"
    public static let interface = "io.github.sttd.Speech1"
    /// Error names are this prefix plus the kind, e.g. `…Error.MicrophoneUnavailable`.
    public static let errorPrefix = "io.github.sttd.Speech1.Error."
    /// The program's version, as the `Version` property reports it.
    public static let version = "0.1.0"

    /// The value of `ActiveClient` for sessions started outside any sandbox.
    public static let hostClient = "host"

    /// The full error name of a contract error kind (`NotAuthorized`, `Busy`, …).
    public static func errorName(_ kind: String) -> String { errorPrefix + kind }
}

/// The methods of `io.github.sttd.Speech1` and their signatures.
public enum SpeechMethod: String, CaseIterable, Sendable {
    case startTranscribing = "StartTranscribing"
    case stopTranscribing = "StopTranscribing"
    case cancelTranscribing = "CancelTranscribing"
    case toggleTranscribing = "ToggleTranscribing"
    case resetTranscript = "ResetTranscript"
    case requestAuthorization = "RequestAuthorization"
    case listSources = "ListSources"
    case getHistory = "GetHistory"
    /// Host callers only: every remembered per-app decision.
    case listAppConsent = "ListAppConsent"
    /// Host callers only: `allow`, `deny` or `ask` (forget) for one app id.
    case setAppConsent = "SetAppConsent"
    /// Host callers only: the caller is the desktop's input method (`sttd-ibus`) and reports
    /// whether it is active and focused (see ``InputMethodState``); text of sessions with
    /// `output = type` then goes to it as `InputMethodPreedit` and `InputMethodCommit`.
    case setInputMethodState = "SetInputMethodState"

    public var name: String { rawValue }

    /// `a(ssb)`: name, description, is-default.
    public static let sourceType = DBusType.structure([.string, .string, .boolean])
    /// `a(sxs)`: session id, start (Unix µs), transcript.
    public static let historyEntryType = DBusType.structure([.string, .int64, .string])

    public var inputs: [DBusArgument] {
        let options = DBusArgument("options", .dictionary(key: .string, value: .variant))
        switch self {
        case .startTranscribing, .toggleTranscribing: return [options]
        case .getHistory: return [DBusArgument("limit", .uint32)]
        case .setAppConsent: return [DBusArgument("app_id", .string), DBusArgument("decision", .string)]
        case .setInputMethodState: return [DBusArgument("state", .dictionary(key: .string, value: .variant))]
        case .stopTranscribing, .cancelTranscribing, .resetTranscript, .requestAuthorization, .listSources,
            .listAppConsent:
            return []
        }
    }

    public var outputs: [DBusArgument] {
        switch self {
        case .stopTranscribing: [DBusArgument("transcript", .string)]
        case .toggleTranscribing: [DBusArgument("listening", .boolean)]
        case .requestAuthorization: [DBusArgument("status", .string)]
        case .listSources: [DBusArgument("sources", .array(Self.sourceType))]
        case .getHistory: [DBusArgument("entries", .array(Self.historyEntryType))]
        case .listAppConsent: [DBusArgument("decisions", .dictionary(key: .string, value: .string))]
        case .startTranscribing, .cancelTranscribing, .resetTranscript, .setAppConsent, .setInputMethodState: []
        }
    }
}

/// A property of `io.github.sttd.Speech1`, typed by its value: `object.set(.state, "idle")`
/// compiles, a misspelt name or a wrong type does not.
public struct SpeechProperty<Value: DBusRepresentable & Equatable>: Sendable {
    public let name: String
    public let isWritable: Bool
    public let changeSignal: DBusProperty.ChangeSignal

    init(_ name: String, writable: Bool = false, changeSignal: DBusProperty.ChangeSignal = .emits) {
        self.name = name
        self.isWritable = writable
        self.changeSignal = changeSignal
    }

    /// The declaration of a property the object stores, with its first value.
    public func declaration(initial: Value) -> DBusProperty {
        DBusProperty(name, initial.dbusValue, changeSignal: changeSignal)
    }

    /// The declaration of a writable property the service keeps: `get` reads it, `set` checks a
    /// client's value (an error is the reply) and stores it where `get` finds it.
    public func declaration(
        get: @escaping @Sendable () -> Value, set: @escaping @Sendable (Value) throws(DBusError) -> Void
    ) -> DBusProperty {
        DBusProperty(
            name, Value.dbusType, changeSignal: changeSignal, getter: { get().dbusValue },
            setter: { value in
                try set(try Value(dbusValue: value))
                return value
            })
    }
}

extension SpeechProperty where Value == String {
    /// `idle`, `starting`, `listening`, `stopping`, `reconnecting`.
    public static var state: Self { Self("State") }
    /// Finals of the current session joined, plus the current interim.
    public static var transcript: Self { Self("Transcript") }
    public static var authorizationStatus: Self { Self("AuthorizationStatus") }
    public static var microphoneStatus: Self { Self("MicrophoneStatus") }
    public static var backend: Self { Self("Backend", writable: true) }
    public static var language: Self { Self("Language", writable: true) }
    public static var source: Self { Self("Source", writable: true) }
    /// The D-Bus error name of the last session failure, empty if none.
    public static var lastError: Self { Self("LastError") }
    public static var version: Self { Self("Version", changeSignal: .const) }
    /// The app whose session is listening (a Flatpak/Snap id, or `host`); empty when idle.
    public static var activeClient: Self { Self("ActiveClient") }
    /// The desktop's input method as sttd knows it: empty (none, or not chosen), `active` (chosen,
    /// no text field focused), `focused` (typed text goes into the focused field through it) or
    /// `secret` (the focused field is for a password or PIN: nothing is typed, also when the
    /// desktop switched the input method off there, as GNOME does). Not announced
    /// (`PropertiesChanged` is a broadcast, and when a password field has the focus is nobody
    /// else's business); sandboxed callers read it as empty.
    public static var inputMethod: Self { Self("InputMethod", changeSignal: .none) }
    /// Where the local Deepgram-compatible server listens (`ws://127.0.0.1:8765`); empty when off.
    public static var serverAddress: Self { Self("ServerAddress") }
    /// The engine of the running session: `deepgram`, or `local` (also after a fallback); empty when idle.
    public static var activeBackend: Self { Self("ActiveBackend") }
}

/// The signals of `io.github.sttd.Speech1` with typed arguments.
public enum SpeechSignal: Sendable, Equatable {
    case transcriptChanged(transcript: String, segment: String, isFinal: Bool)
    /// "scratch that" removed `removed`, the last final; `transcript` is the whole text now.
    case transcriptRetracted(transcript: String, removed: String)
    case sessionFailed(errorName: String, message: String)
    case audioLevel(rmsDBFS: Double)
    case speechActivity(speaking: Bool)
    /// To the input method only: show `text` at the cursor as preedit, replacing the one shown
    /// (empty: none).
    case inputMethodPreedit(text: String)
    /// To the input method only: insert `text` into the focused field, clearing the preedit.
    case inputMethodCommit(text: String)
    /// To the input method only: delete `characters` Unicode characters before the cursor.
    case inputMethodDelete(characters: UInt32)
    /// To the input method only: press and release the key with this X keysym name.
    case inputMethodKey(keysym: String)

    public var name: String {
        switch self {
        case .transcriptChanged: "TranscriptChanged"
        case .transcriptRetracted: "TranscriptRetracted"
        case .inputMethodDelete: "InputMethodDelete"
        case .inputMethodKey: "InputMethodKey"
        case .sessionFailed: "SessionFailed"
        case .audioLevel: "AudioLevel"
        case .speechActivity: "SpeechActivity"
        case .inputMethodPreedit: "InputMethodPreedit"
        case .inputMethodCommit: "InputMethodCommit"
        }
    }

    /// The arguments' names and values, in the declared order.
    public var arguments: [(name: String, value: DBusValue)] {
        switch self {
        case .transcriptChanged(let transcript, let segment, let isFinal):
            [("transcript", .string(transcript)), ("segment", .string(segment)), ("is_final", .boolean(isFinal))]
        case .transcriptRetracted(let transcript, let removed):
            [("transcript", .string(transcript)), ("removed", .string(removed))]
        case .inputMethodDelete(let characters): [("characters", .uint32(characters))]
        case .inputMethodKey(let keysym): [("keysym", .string(keysym))]
        case .sessionFailed(let errorName, let message):
            [("error_name", .string(errorName)), ("message", .string(message))]
        case .audioLevel(let level): [("rms_dbfs", .double(level))]
        case .speechActivity(let speaking): [("speaking", .boolean(speaking))]
        case .inputMethodPreedit(let text), .inputMethodCommit(let text): [("text", .string(text))]
        }
    }

    /// One example of each signal: the declarations are derived from these.
    static let prototypes: [SpeechSignal] = [
        .transcriptChanged(transcript: "", segment: "", isFinal: false),
        .transcriptRetracted(transcript: "", removed: ""),
        .sessionFailed(errorName: "", message: ""),
        .audioLevel(rmsDBFS: 0),
        .speechActivity(speaking: false),
        .inputMethodPreedit(text: ""),
        .inputMethodCommit(text: ""),
        .inputMethodDelete(characters: 0),
        .inputMethodKey(keysym: ""),
    ]

    public static var declarations: [DBusSignal] {
        prototypes.map { signal in
            DBusSignal(signal.name, arguments: signal.arguments.map { DBusArgument($0.name, $0.value.type) })
        }
    }

    /// Decodes a received signal of the interface; nil for other signals or wrong arguments.
    public init?(_ message: DBusSignalMessage) {
        guard message.interface == SpeechAPI.interface else { return nil }
        let arguments = message.arguments
        switch (message.member, arguments.count) {
        case ("TranscriptChanged", 3):
            guard let transcript = arguments[0].string, let segment = arguments[1].string,
                let isFinal = arguments[2].boolean
            else { return nil }
            self = .transcriptChanged(transcript: transcript, segment: segment, isFinal: isFinal)
        case ("TranscriptRetracted", 2):
            guard let transcript = arguments[0].string, let removed = arguments[1].string else { return nil }
            self = .transcriptRetracted(transcript: transcript, removed: removed)
        case ("InputMethodDelete", 1):
            guard let characters = arguments[0].uint32 else { return nil }
            self = .inputMethodDelete(characters: characters)
        case ("InputMethodKey", 1):
            guard let keysym = arguments[0].string else { return nil }
            self = .inputMethodKey(keysym: keysym)
        case ("SessionFailed", 2):
            guard let name = arguments[0].string, let text = arguments[1].string else { return nil }
            self = .sessionFailed(errorName: name, message: text)
        case ("AudioLevel", 1):
            guard case .double(let level) = arguments[0] else { return nil }
            self = .audioLevel(rmsDBFS: level)
        case ("SpeechActivity", 1):
            guard let speaking = arguments[0].boolean else { return nil }
            self = .speechActivity(speaking: speaking)
        case ("InputMethodPreedit", 1):
            guard let text = arguments[0].string else { return nil }
            self = .inputMethodPreedit(text: text)
        case ("InputMethodCommit", 1):
            guard let text = arguments[0].string else { return nil }
            self = .inputMethodCommit(text: text)
        default:
            return nil
        }
    }
}

extension DBusObject {
    /// Sets a property of the interface, emitting `PropertiesChanged` when its value changed.
    public func set<Value>(_ property: SpeechProperty<Value>, _ value: Value) {
        setProperty(property.name, value.dbusValue, interface: SpeechAPI.interface)
    }

    /// The current value of a property of the interface.
    public func value<Value>(of property: SpeechProperty<Value>) -> Value? {
        self.property(property.name, interface: SpeechAPI.interface).flatMap { try? Value(dbusValue: $0) }
    }

    /// Emits a signal of the interface, to `destination` only if given. Level readings may be
    /// dropped when the bus is backed up.
    public func emit(_ signal: SpeechSignal, to destination: String? = nil) {
        let droppable = if case .audioLevel = signal { true } else { false }
        emit(
            signal.name, interface: SpeechAPI.interface, signal.arguments.map(\.value), droppable: droppable,
            destination: destination)
    }
}

extension SpeechAPI {
    /// The interface, declared once: methods from ``SpeechMethod``, properties from
    /// ``SpeechProperty``, signals from ``SpeechSignal``. `method` gives each method with the code
    /// serving it; `setting` declares the writable properties (`Backend`, `Language`, `Source`),
    /// which the service keeps.
    public static func declaration(
        method: (SpeechMethod) -> DBusMethod, setting: (SpeechProperty<String>) -> DBusProperty
    ) -> DBusInterface {
        DBusInterface(
            name: interface,
            methods: SpeechMethod.allCases.map(method),
            properties: [
                SpeechProperty.state.declaration(initial: "idle"),
                SpeechProperty.transcript.declaration(initial: ""),
                SpeechProperty.authorizationStatus.declaration(initial: "notDetermined"),
                SpeechProperty.microphoneStatus.declaration(initial: "notDetermined"),
                setting(.backend),
                setting(.language),
                setting(.source),
                SpeechProperty.lastError.declaration(initial: ""),
                SpeechProperty.version.declaration(initial: version),
                SpeechProperty.activeClient.declaration(initial: ""),
                SpeechProperty.serverAddress.declaration(initial: ""),
                SpeechProperty.inputMethod.declaration(initial: ""),
                SpeechProperty.activeBackend.declaration(initial: ""),
            ],
            signals: SpeechSignal.declarations)
    }

    /// The XML installed as `dbus/io.github.sttd.Speech1.xml`.
    public static var document: String {
        let unserved = { (method: SpeechMethod) in
            DBusMethod(method.name, inputs: method.inputs, outputs: method.outputs) { _, reply in
                reply.fail(DBusError.failed("not served"))
            }
        }
        return Introspection.document([
            declaration(method: unserved, setting: { $0.declaration(get: { "" }, set: { _ in }) })
        ])
    }
}

/// What the desktop's input method (`sttd-ibus`) tells sttd with `SetInputMethodState`.
public struct InputMethodState: DBusRepresentable, Equatable {
    /// The `sttd` engine is the input method of some text field (the user chose "Dictation").
    public var active = false
    /// A text field using the engine has the keyboard focus (not the desktop background).
    public var focused = false
    /// That field is for a password or PIN: it never receives dictated text.
    public var secret = false
    /// The push-to-talk key is held: if the input method leaves the bus now, its release can
    /// never arrive, so sttd stops the session it started.
    public var pushToTalk = false

    public init(active: Bool = false, focused: Bool = false, secret: Bool = false, pushToTalk: Bool = false) {
        self.active = active
        self.focused = focused
        self.secret = secret
        self.pushToTalk = pushToTalk
    }

    /// The keys of the `a{sv}` argument, each a boolean; a missing key is false.
    public static let keys = ["active", "focused", "secret", "push_to_talk"]

    /// The value of the `InputMethod` property for this state. A password field is `secret` also
    /// when the desktop switched the input method off for it (GNOME does).
    public var summary: String {
        if focused && secret { return "secret" }
        guard active else { return "" }
        guard focused else { return "active" }
        return secret ? "secret" : "focused"
    }

    public static var dbusType: DBusType { .dictionary(key: .string, value: .variant) }

    /// The `a{sv}` argument of `SetInputMethodState`.
    public var dbusValue: DBusValue {
        .vardict([
            ("active", .boolean(active)), ("focused", .boolean(focused)), ("secret", .boolean(secret)),
            ("push_to_talk", .boolean(pushToTalk)),
        ])
    }

    /// Parses the argument; an unknown key or a value that is not a boolean is `InvalidArgs`.
    public init(dbusValue value: DBusValue) throws(DBusError) {
        guard let entries = value.stringVariantDictionary else {
            throw .invalidArgs("state must be a dictionary of type a{sv}")
        }
        for (key, value) in entries {
            guard let flag = value.boolean else {
                throw .invalidArgs("state key '\(key)' must have type 'b', not '\(value.type)'")
            }
            switch key {
            case "active": active = flag
            case "focused": focused = flag
            case "secret": secret = flag
            case "push_to_talk": pushToTalk = flag
            default:
                throw .invalidArgs("unknown state key '\(key)'; known keys: \(Self.keys.joined(separator: ", "))")
            }
        }
    }
}
