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
    /// sttd as the input method of a wlroots compositor's seat, as ``WaylandInputMethodStatus``
    /// writes it: empty, `seat0`, `unavailable:seat0`, `unsupported` or `disconnected`.
    public static var waylandInputMethod: Self { Self("WaylandInputMethod") }
    /// Hands-free dictation: `off`; `armed` (the microphone is open and sttd listens, on this
    /// computer, for the wake phrase; `State` stays `idle`); `dictating` (a session runs; armed
    /// again when it ends); `paused` (armed, but the microphone or the engine is out; retrying).
    public static var handsFree: Self { Self("HandsFree") }
    /// The configured wake phrase (`[hands_free] wake_phrase`); empty when none. Sandboxed
    /// callers read it as empty.
    public static var wakePhrase: Self { Self("WakePhrase", changeSignal: .const) }
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

    /// The signal's name and arguments, as its spec in ``Speech1`` encodes them.
    public var message: (name: String, arguments: [DBusValue]) {
        switch self {
        case .transcriptChanged(let transcript, let segment, let isFinal):
            (Speech1.transcriptChanged.name, Speech1.transcriptChanged.values(transcript, segment, isFinal))
        case .transcriptRetracted(let transcript, let removed):
            (Speech1.transcriptRetracted.name, Speech1.transcriptRetracted.values(transcript, removed))
        case .sessionFailed(let errorName, let message):
            (Speech1.sessionFailed.name, Speech1.sessionFailed.values(errorName, message))
        case .audioLevel(let level): (Speech1.audioLevel.name, Speech1.audioLevel.values(level))
        case .speechActivity(let speaking): (Speech1.speechActivity.name, Speech1.speechActivity.values(speaking))
        case .inputMethodPreedit(let text): (Speech1.inputMethodPreedit.name, Speech1.inputMethodPreedit.values(text))
        case .inputMethodCommit(let text): (Speech1.inputMethodCommit.name, Speech1.inputMethodCommit.values(text))
        case .inputMethodDelete(let characters):
            (Speech1.inputMethodDelete.name, Speech1.inputMethodDelete.values(characters))
        case .inputMethodKey(let keysym): (Speech1.inputMethodKey.name, Speech1.inputMethodKey.values(keysym))
        }
    }

    public var name: String { message.name }

    /// Decodes a received signal of the interface; nil for other signals or wrong arguments.
    public init?(_ message: DBusSignalMessage) {
        guard message.interface == SpeechAPI.interface else { return nil }
        let decoded: SpeechSignal? =
            switch message.member {
            case Speech1.transcriptChanged.name:
                Speech1.transcriptChanged.decode(message).map {
                    .transcriptChanged(transcript: $0.0, segment: $0.1, isFinal: $0.2)
                }
            case Speech1.transcriptRetracted.name:
                Speech1.transcriptRetracted.decode(message).map {
                    .transcriptRetracted(transcript: $0.0, removed: $0.1)
                }
            case Speech1.sessionFailed.name:
                Speech1.sessionFailed.decode(message).map { .sessionFailed(errorName: $0.0, message: $0.1) }
            case Speech1.audioLevel.name: Speech1.audioLevel.decode(message).map(SpeechSignal.audioLevel)
            case Speech1.speechActivity.name: Speech1.speechActivity.decode(message).map(SpeechSignal.speechActivity)
            case Speech1.inputMethodPreedit.name:
                Speech1.inputMethodPreedit.decode(message).map(SpeechSignal.inputMethodPreedit)
            case Speech1.inputMethodCommit.name:
                Speech1.inputMethodCommit.decode(message).map(SpeechSignal.inputMethodCommit)
            case Speech1.inputMethodDelete.name:
                Speech1.inputMethodDelete.decode(message).map(SpeechSignal.inputMethodDelete)
            case Speech1.inputMethodKey.name: Speech1.inputMethodKey.decode(message).map(SpeechSignal.inputMethodKey)
            default: nil
            }
        guard let decoded else { return nil }
        self = decoded
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
        let (name, arguments) = signal.message
        emit(name, interface: SpeechAPI.interface, arguments, droppable: droppable, destination: destination)
    }
}
