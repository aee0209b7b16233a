import Capture
import DBus
import History
import Recognition
import Speech
import SpeechAPI

/// The methods of `io.github.sttd.Speech1` as Swift: what each takes and answers. ``bridge(_:tasks:)``
/// decodes each call's arguments into these types, calls, and encodes the answer or the error.
/// `sender` is the calling connection's unique bus name.
public protocol SpeechMethods: Sendable {
    func startTranscribing(_ options: StartOptions, sender: String) async throws(SpeechError)
    func stopTranscribing(sender: String) async throws(SpeechError) -> String
    func cancelTranscribing(sender: String) async throws(SpeechError)
    func toggleTranscribing(_ options: StartOptions, sender: String) async throws(SpeechError) -> Bool
    func resetTranscript(sender: String) async throws(SpeechError)
    func requestAuthorization(sender: String) async throws(SpeechError) -> RecognizerAuthorization
    func listSources() async throws(SpeechError) -> [AudioSource]
    func getHistory(limit: UInt32) async throws(SpeechError) -> [HistoryEntry]
    /// Host callers only (the consent gate refuses apps).
    func listAppConsent() async throws(SpeechError) -> [String: ConsentDecision]
    /// Host callers only.
    func setAppConsent(_ app: AppID, _ decision: ConsentChoice) async throws(SpeechError)
    /// Host callers only: an app must never pose as the focused field and receive dictation.
    func setInputMethodState(_ state: InputMethodState, sender: String) async throws(SpeechError)
}

extension SpeechMethods {
    /// The declaration of `method`, served by this implementation.
    public func bridge(_ method: SpeechMethod, tasks: DBusCallTasks) -> DBusMethod {
        let (name, inputs) = (method.name, method.inputs)
        switch method {
        case .startTranscribing:
            return .typed(name, inputs: inputs, tasks: tasks) { try await startTranscribing($1, sender: $0) }
        case .stopTranscribing:
            return .typed(name, inputs: inputs, output: method.outputs[0], tasks: tasks) {
                try await stopTranscribing(sender: $0)
            }
        case .cancelTranscribing:
            return .typed(name, inputs: inputs, tasks: tasks) { try await cancelTranscribing(sender: $0) }
        case .toggleTranscribing:
            return .typed(name, inputs: inputs, output: method.outputs[0], tasks: tasks) {
                try await toggleTranscribing($1, sender: $0)
            }
        case .resetTranscript:
            return .typed(name, inputs: inputs, tasks: tasks) { try await resetTranscript(sender: $0) }
        case .requestAuthorization:
            return .typed(name, inputs: inputs, output: method.outputs[0], tasks: tasks) {
                try await requestAuthorization(sender: $0)
            }
        case .listSources:
            return .typed(name, inputs: inputs, output: method.outputs[0], tasks: tasks) { _ in
                try await listSources()
            }
        case .getHistory:
            return .typed(name, inputs: inputs, output: method.outputs[0], tasks: tasks) {
                try await getHistory(limit: $1)
            }
        case .listAppConsent:
            return .typed(name, inputs: inputs, output: method.outputs[0], tasks: tasks) { _ in
                try await listAppConsent()
            }
        case .setAppConsent:
            return .typed(name, inputs: inputs, tasks: tasks) { try await setAppConsent($1, $2) }
        case .setInputMethodState:
            return .typed(name, inputs: inputs, tasks: tasks) { try await setInputMethodState($1, sender: $0) }
        }
    }
}

// MARK: The D-Bus form of each value the methods take and answer

extension StartOptions: DBusDecodable {
    public static var dbusType: DBusType { .dictionary(key: .string, value: .variant) }
}

extension AudioSource: DBusEncodable {
    /// `(ssb)`: name, description, is-default.
    public static var dbusType: DBusType { SpeechMethod.sourceType }
    public var dbusValue: DBusValue { .structure([.string(name), .string(description), .boolean(isDefault)]) }
}

extension HistoryEntry: DBusEncodable {
    /// `(sxs)`: session id, start (Unix µs), transcript.
    public static var dbusType: DBusType { SpeechMethod.historyEntryType }
    public var dbusValue: DBusValue { .structure([.string(id), .int64(started), .string(text)]) }
}

extension RecognizerAuthorization: DBusEncodable {
    public static var dbusType: DBusType { .string }
    public var dbusValue: DBusValue { .string(rawValue) }
}

extension ConsentDecision: DBusEncodable {
    public static var dbusType: DBusType { .string }
    public var dbusValue: DBusValue { .string(rawValue) }
}

/// An app id a consent decision is kept for: a Flatpak id such as `org.example.Notes`, or `snap.NAME`.
public struct AppID: DBusDecodable, Hashable {
    public let id: String
    public static var dbusType: DBusType { .string }

    public init(dbusValue: DBusValue) throws(DBusError) {
        let id = try String(dbusValue: dbusValue)
        guard AppIdentity.isValidDecisionID(id) else {
            throw .invalidArgs("app_id '\(id)' is not an app id (a Flatpak id such as org.example.Notes, or snap.NAME)")
        }
        self.id = id
    }
}

/// What `SetAppConsent` sets: a decision, or `ask` (forget it: the app is asked again).
public struct ConsentChoice: DBusDecodable, Equatable {
    /// nil: `ask`.
    public let decision: ConsentDecision?
    public static var dbusType: DBusType { .string }

    public init(dbusValue: DBusValue) throws(DBusError) {
        let text = try String(dbusValue: dbusValue)
        guard text == "ask" || ConsentDecision(rawValue: text) != nil else {
            throw .invalidArgs("decision must be 'allow', 'deny' or 'ask', not '\(text)'")
        }
        decision = ConsentDecision(rawValue: text)
    }
}
