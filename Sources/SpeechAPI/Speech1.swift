import DBus

/// The interface `io.github.sttd.Speech1`, declared once: sttd serves these specs, and sttctl,
/// sttd-ibus, the tests and the benchmarks call them (see ``SpeechProxy``). Adding a method means
/// adding its spec here (and to ``methods``), then its implementation and the line serving it.
public enum Speech1 {
    public static let startTranscribing = DBusMethodSpec<DBusNoReply, StartRequest>(
        "StartTranscribing", inputs: "options")
    public static let stopTranscribing = DBusMethodSpec<String>("StopTranscribing", output: "transcript")
    public static let cancelTranscribing = DBusMethodSpec<DBusNoReply>("CancelTranscribing")
    public static let toggleTranscribing = DBusMethodSpec<Bool, StartRequest>(
        "ToggleTranscribing", inputs: "options", output: "listening")
    public static let resetTranscript = DBusMethodSpec<DBusNoReply>("ResetTranscript")
    public static let requestAuthorization = DBusMethodSpec<String>("RequestAuthorization", output: "status")
    public static let listSources = DBusMethodSpec<[SourceInfo]>("ListSources", output: "sources")
    public static let getHistory = DBusMethodSpec<[HistoryItem], UInt32>(
        "GetHistory", inputs: "limit", output: "entries")
    /// Host callers only: every remembered per-app decision (`allow` or `deny`), by app id.
    public static let listAppConsent = DBusMethodSpec<[String: String]>("ListAppConsent", output: "decisions")
    /// Host callers only: `allow`, `deny` or `ask` (forget) for one app id.
    public static let setAppConsent = DBusMethodSpec<DBusNoReply, AppID, ConsentChoice>(
        "SetAppConsent", inputs: "app_id", "decision")
    /// Host callers only: the caller is the desktop's input method (`sttd-ibus`) and reports
    /// whether it is active and focused (see ``InputMethodState``); text of sessions with
    /// `output = type` then goes to it as `InputMethodPreedit` and `InputMethodCommit`.
    public static let setInputMethodState = DBusMethodSpec<DBusNoReply, InputMethodState>(
        "SetInputMethodState", inputs: "state")
    /// Host callers only: arms (`true`) or disarms hands-free dictation (see ``SpeechProperty/handsFree``).
    public static let setHandsFree = DBusMethodSpec<DBusNoReply, Bool>("SetHandsFree", inputs: "enabled")

    /// Every method, in the order introspection lists them.
    public static let methods: [DBusMethodSignature] = [
        startTranscribing.signature, stopTranscribing.signature, cancelTranscribing.signature,
        toggleTranscribing.signature, resetTranscript.signature, requestAuthorization.signature,
        listSources.signature, getHistory.signature, listAppConsent.signature, setAppConsent.signature,
        setInputMethodState.signature, setHandsFree.signature,
    ]

    public static let transcriptChanged = DBusSignalSpec<String, String, Bool>(
        "TranscriptChanged", "transcript", "segment", "is_final")
    public static let transcriptRetracted = DBusSignalSpec<String, String>(
        "TranscriptRetracted", "transcript", "removed")
    public static let sessionFailed = DBusSignalSpec<String, String>("SessionFailed", "error_name", "message")
    public static let audioLevel = DBusSignalSpec<Double>("AudioLevel", "rms_dbfs")
    public static let speechActivity = DBusSignalSpec<Bool>("SpeechActivity", "speaking")
    public static let inputMethodPreedit = DBusSignalSpec<String>("InputMethodPreedit", "text")
    public static let inputMethodCommit = DBusSignalSpec<String>("InputMethodCommit", "text")
    public static let inputMethodDelete = DBusSignalSpec<UInt32>("InputMethodDelete", "characters")
    public static let inputMethodKey = DBusSignalSpec<String>("InputMethodKey", "keysym")

    /// Every signal, in the order introspection lists them.
    public static let signals: [DBusSignal] = [
        transcriptChanged.declaration, transcriptRetracted.declaration, sessionFailed.declaration,
        audioLevel.declaration, speechActivity.declaration, inputMethodPreedit.declaration,
        inputMethodCommit.declaration, inputMethodDelete.declaration, inputMethodKey.declaration,
    ]

    /// The interface: `served` are the methods with the code serving them (a method missing from
    /// it is declared but refused), `setting` declares the writable properties (`Backend`,
    /// `Language`, `Source`), which the service keeps.
    public static func declaration(
        serving served: [DBusMethod], setting: (SpeechProperty<String>) -> DBusProperty
    ) -> DBusInterface {
        DBusInterface(
            name: SpeechAPI.interface,
            methods: methods.map { method in served.first { $0.name == method.name } ?? .declared(method) },
            properties: [
                SpeechProperty.state.declaration(initial: "idle"),
                SpeechProperty.transcript.declaration(initial: ""),
                SpeechProperty.authorizationStatus.declaration(initial: "notDetermined"),
                SpeechProperty.microphoneStatus.declaration(initial: "notDetermined"),
                setting(.backend),
                setting(.language),
                setting(.source),
                SpeechProperty.lastError.declaration(initial: ""),
                SpeechProperty.version.declaration(initial: SpeechAPI.version),
                SpeechProperty.activeClient.declaration(initial: ""),
                SpeechProperty.serverAddress.declaration(initial: ""),
                SpeechProperty.inputMethod.declaration(initial: ""),
                SpeechProperty.activeBackend.declaration(initial: ""),
                SpeechProperty.waylandInputMethod.declaration(initial: WaylandInputMethodStatus.off.rawValue),
                SpeechProperty.handsFree.declaration(initial: "off"),
                SpeechProperty.wakePhrase.declaration(initial: ""),
            ],
            signals: signals, documentation: documentation)
    }

    /// Rules of members that their signatures cannot say, shown in the introspection XML.
    static let documentation = [
        setHandsFree.name:
            "Host callers only (a sandboxed app gets NotAuthorized): true arms hands-free dictation, false disarms it. While armed the microphone stays open and the offline engine listens on this computer for the configured wake phrase ([hands_free] wake_phrase); saying it starts a session. Arming replies once sttd listens, and fails with InvalidConfiguration (no phrase, or a single short word), BackendUnavailable (no offline engine) or MicrophoneUnavailable.",
        SpeechProperty.handsFree.name:
            "off, armed (listening locally for the wake phrase; State stays idle), dictating (a session runs; armed again when it ends) or paused (armed, but the microphone or engine is out; retrying).",
        SpeechProperty.wakePhrase.name: "The configured wake phrase; empty when none, and for sandboxed callers.",
    ]

    /// The XML installed as `dbus/io.github.sttd.Speech1.xml`.
    public static var document: String {
        Introspection.document([
            declaration(serving: [], setting: { $0.declaration(get: { "" }, set: { _ in }) })
        ])
    }
}
