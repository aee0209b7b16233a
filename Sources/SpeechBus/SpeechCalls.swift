import Capture
import DBus
import History
import Recognition
import Speech
import SpeechAPI

/// The interface's methods, served by the core. Each call starts on the bus thread, in arrival
/// order, and reaches the core with its first `await`; the core decides who may act on the
/// session (see ``Caller``). `sender` is the calling connection's unique bus name.
struct SpeechCalls: Sendable {
    let core: SpeechCore
    let consent: Consent?

    /// Every method of ``Speech1``, served by the functions below.
    func methods(tasks: DBusCallTasks) -> [DBusMethod] {
        [
            .serving(Speech1.startTranscribing, tasks: tasks) {
                try await startTranscribing(StartOptions($1), sender: $0)
            },
            .serving(Speech1.stopTranscribing, tasks: tasks) { try await stopTranscribing(sender: $0) },
            .serving(Speech1.cancelTranscribing, tasks: tasks) { try await cancelTranscribing(sender: $0) },
            .serving(Speech1.toggleTranscribing, tasks: tasks) {
                try await toggleTranscribing(StartOptions($1), sender: $0)
            },
            .serving(Speech1.resetTranscript, tasks: tasks) { try await resetTranscript(sender: $0) },
            .serving(Speech1.requestAuthorization, tasks: tasks) {
                try await requestAuthorization(sender: $0).rawValue
            },
            .serving(Speech1.listSources, tasks: tasks) { _ in
                try await listSources().map {
                    SourceInfo(name: $0.name, description: $0.description, isDefault: $0.isDefault)
                }
            },
            .serving(Speech1.getHistory, tasks: tasks) {
                try await getHistory(limit: $1).map { HistoryItem(id: $0.id, started: $0.started, text: $0.text) }
            },
            .serving(Speech1.listAppConsent, tasks: tasks) { _ in try await listAppConsent().mapValues(\.rawValue) },
            .serving(Speech1.setAppConsent, tasks: tasks) { try await setAppConsent($1, $2) },
            .serving(Speech1.setInputMethodState, tasks: tasks) { try await setInputMethodState($1, sender: $0) },
            .serving(Speech1.setHandsFree, tasks: tasks) { try await core.setHandsFree($1, by: identify($0)) },
        ]
    }

    func startTranscribing(_ options: StartOptions, sender: String) async throws(SpeechError) {
        try await core.start(try startOptions(options, sender))
    }

    func stopTranscribing(sender: String) async throws(SpeechError) -> String {
        try await core.stop(by: identify(sender))
    }

    func cancelTranscribing(sender: String) async throws(SpeechError) {
        try await core.cancel(by: identify(sender))
    }

    func toggleTranscribing(_ options: StartOptions, sender: String) async throws(SpeechError) -> Bool {
        try await core.toggle(try startOptions(options, sender))
    }

    func resetTranscript(sender: String) async throws(SpeechError) {
        try await core.resetTranscript(by: identify(sender))
    }

    /// A sandboxed app learns its own status; once allowed, the service's.
    func requestAuthorization(sender: String) async throws(SpeechError) -> RecognizerAuthorization {
        if let consent, isSandboxed(sender), let status = await consent.status(of: sender), status != .authorized {
            return status
        }
        return await core.requestAuthorization()
    }

    func listSources() async throws(SpeechError) -> [AudioSource] {
        try await core.sources()
    }

    func getHistory(limit: UInt32) async throws(SpeechError) -> [HistoryEntry] {
        try await core.history(limit: Int(limit))
    }

    func listAppConsent() async throws(SpeechError) -> [String: ConsentDecision] {
        guard let consent else { return [:] }
        do {
            return try await consent.store.decisions()
        } catch {
            throw .internal("cannot read the consent decisions: \(error.message)")
        }
    }

    func setAppConsent(_ app: AppID, _ choice: ConsentChoice) async throws(SpeechError) {
        guard let consent else { throw .internal("per-app consent is not running in this sttd") }
        do {
            try await consent.store.set(ConsentDecision(rawValue: choice.rawValue), for: app.id)
        } catch {
            throw .internal("cannot store the decision: \(error.message)")
        }
    }

    func setInputMethodState(_ state: InputMethodState, sender: String) async throws(SpeechError) {
        await core.reportInputMethod(InputMethodReport(state), from: .bus(sender))
    }

    // MARK: Who is calling

    /// The options of a start by `sender`, the settings it falls back to taken now, as the call
    /// arrives: a property written after it does not change it. A sandboxed app's session is
    /// confined (see ``SandboxedSession``).
    func startOptions(_ options: StartOptions, _ sender: String) throws(SpeechError) -> StartOptions {
        let settings = core.settings
        let caller = identify(sender)
        var options = options
        if caller.isSandboxed { options = try SandboxedSession.confine(options, app: caller.name, settings: settings) }
        options.backend = options.backend ?? settings.backend
        options.language = options.language ?? settings.language
        options.source = options.source ?? settings.source
        options.caller = caller
        return options
    }

    /// Who is calling: a sandboxed app (its session then reports to it alone) or the host.
    func identify(_ sender: String) -> Caller {
        guard isSandboxed(sender) else { return Caller(name: SpeechAPI.hostClient, connection: sender) }
        let name = consent?.identities.identity(of: sender)?.description ?? "unknown"
        return Caller(name: name, privateDestination: sender)
    }

    /// Whether a caller gets a sandboxed app's view. The gate identified the caller before its
    /// call got here; one no longer known (the cache is bounded) is not taken for the host.
    func isSandboxed(_ sender: String) -> Bool {
        guard let consent else { return false }
        return consent.identities.identity(of: sender) != .host
    }
}
