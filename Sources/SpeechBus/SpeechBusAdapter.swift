import Capture
import DBus
import History
import Logging
import Recognition
import Speech
import SpeechAPI
import Synchronization

extension SpeechError: DBusErrorRepresentable {
    /// The contract's error name, e.g. `io.github.sttd.Speech1.Error.MicrophoneUnavailable`.
    public var name: String { SpeechAPI.errorName(code.rawValue) }
    public var dbusError: DBusError { DBusError(name: name, message: message) }
}

/// The bus adapter: the only code that maps the speech core onto `io.github.sttd.Speech1`.
///
/// Method calls arrive on the bus connection's thread and go to the core with one enqueue each, in
/// the order they arrived; replies come back from the core's loop. The core's events become
/// property changes and signals, queued for the bus thread. So a recognizer result crosses two
/// thread boundaries on its way to `dbus_connection_send`: recognizer thread -> core loop -> bus thread.
///
/// A sandboxed caller sees and controls only the session it started (see ``SessionView``); host
/// callers see and control every session.
public final class SpeechBusAdapter: Sendable {
    /// The exported object.
    public let object: DBusObject
    private let core: SpeechCore
    private let view: SessionView
    /// The settings the properties show. A settings event changes only the fields that changed:
    /// the binding already holds a value a client just set, and an event of an earlier `Set`
    /// (carrying the old value of another field) must not put the old value back for a moment.
    private let shownSettings: Mutex<SpeechSettings>
    private let consent: Consent?
    private let inputMethod: InputMethodRoute?
    private let logger: Logger

    /// Declares the object around a core; `settings` are the writable properties' first values.
    /// With `consent`, its gate guards the interface, sessions are labelled with their app, and a
    /// sandboxed app sees and controls only its own session. With `inputMethod`,
    /// `SetInputMethodState` attaches the desktop's input method to it.
    public init(
        core: SpeechCore, settings: SpeechSettings, consent: Consent? = nil, inputMethod: InputMethodRoute? = nil,
        logger: Logger = Logger(label: "sttd")
    ) throws(DBusError) {
        self.core = core
        self.consent = consent
        self.inputMethod = inputMethod
        self.logger = logger
        shownSettings = Mutex(settings)
        let view = SessionView()
        self.view = view
        let interface = SpeechAPI.declaration(
            backend: settings.backend.rawValue, language: settings.language, source: settings.source,
            serve: { method in
                Self.handler(for: method, core: core, consent: consent, view: view, inputMethod: inputMethod)
            },
            setter: { property in Self.setter(for: property, core: core) })
        object = try DBusObject(path: SpeechAPI.objectPath, interfaces: [interface])
        inputMethod?.attach(object)
        if let consent {
            object.install(gate: consent.gate)
            object.install { access, stored in
                guard access.interface == SpeechAPI.interface, access.member == SpeechProperty.transcript.name,
                    Self.isSandboxed(access.sender, consent)
                else { return .success(stored) }
                return view.transcript(shownTo: access.sender, reading: access.kind)
            }
        }
    }

    /// Follows the core's events from now on; call before the core runs.
    public func attach() async {
        await core.observe { [self] event in
            view.note(event)
            switch event {
            case .client(let client):
                object.set(.activeClient, client.name)
                if let owner = client.privateDestination { stopWhenGone(owner) }
            case .state(.idle):
                object.set(.activeClient, "")
            case .settings(let settings):
                let before = shownSettings.withLock { shown in
                    defer { shown = settings }
                    return shown
                }
                if settings.backend != before.backend { object.set(.backend, settings.backend.rawValue) }
                if settings.language != before.language { object.set(.language, settings.language) }
                if settings.source != before.source { object.set(.source, settings.source) }
                return
            default:
                break
            }
            Self.show(event, on: object, to: view.destination)
        }
        consent?.observeDepartures { [self] name in
            if view.isOwner(name) { ownerLeft(name) }
            inputMethod?.departed(name)
        }
    }

    // MARK: Sessions whose app left

    /// A sandboxed app's session has just opened: if the app has already left the bus (its
    /// departure may have come before the session), the session stops now; later, its departure does.
    private func stopWhenGone(_ owner: String) {
        guard let consent else { return }
        let queued = consent.enqueue { [self] in
            if await !consent.isConnected(owner) { ownerLeft(owner) }
        }
        if !queued {
            logger.warning(
                "cannot check that the app of a new session is still connected; it stops when it leaves the bus",
                metadata: ["sender": "\(owner)"])
        }
    }

    /// Stops the session of `owner`, who left the bus, as `StopTranscribing` would (its finals
    /// kept in history): nobody else may stop it, and the microphone must not stay on for nobody.
    private func ownerLeft(_ owner: String) {
        core.submit { [view, logger] core in
            guard view.isOwner(owner), core.state != .idle else { return }
            logger.notice(
                "the app whose session is running left the bus; stopping the session",
                metadata: ["sender": "\(owner)"])
            core.stopNow { _ in }
        }
    }

    // MARK: Core events -> properties and signals

    /// Shows one event; a sandboxed app's session sends its signals and transcript changes to
    /// `destination` only.
    static func show(_ event: SpeechEvent, on object: DBusObject, to destination: String? = nil) {
        switch event {
        case .state(let state):
            object.set(.state, state.rawValue)
        case .transcript(let text, let update):
            if let update {
                object.emit(
                    .transcriptChanged(transcript: text, segment: update.segment, isFinal: update.isFinal),
                    to: destination)
            }
            object.setProperty(
                SpeechProperty.transcript.name, .string(text), interface: SpeechAPI.interface, destination: destination)
        case .speechActivity(let speaking):
            object.emit(.speechActivity(speaking: speaking), to: destination)
        case .audioLevel(let level):
            object.emit(.audioLevel(rmsDBFS: level), to: destination)
        case .sessionFailed(let error):
            object.emit(.sessionFailed(errorName: error.name, message: error.message), to: destination)
        case .client:
            break  // shown above, as ActiveClient
        case .outputFailed:
            break  // not a session failure: `LastError` shows it, and a notification
        case .activeBackend(let backend):
            object.set(.activeBackend, backend?.rawValue ?? "")
        case .continuingOffline:
            break  // not a failure: a notification says it
        case .lastError(let error):
            object.set(.lastError, error?.name ?? "")
        case .authorization(let status):
            object.set(.authorizationStatus, status.rawValue)
        case .microphone(let status):
            object.set(.microphoneStatus, status.rawValue)
        case .settings(let settings):
            object.set(.backend, settings.backend.rawValue)
            object.set(.language, settings.language)
            object.set(.source, settings.source)
        }
    }

    // MARK: Method calls -> core

    /// Each handler runs on the bus thread and must not block: it parses, hands the call to the
    /// core, and replies when the core answers. Calls about the session are decided on the core,
    /// in one step with the call itself: a sandboxed caller that does not own the running session
    /// gets `Busy` (see ``SessionView``).
    static func handler(
        for method: SpeechMethod, core: SpeechCore, consent: Consent?, view: SessionView, inputMethod: InputMethodRoute?
    ) -> DBusMethod.Handler {
        switch method {
        case .startTranscribing:
            return { call, reply in
                do throws(DBusError) {
                    let options = try startOptions(of: call, consent)
                    submitUnlessOthers(call, reply, core: core, consent: consent, view: view) { core in
                        core.startNow(options) { error in error.map(reply.fail) ?? reply.send([]) }
                    }
                } catch {
                    reply.fail(error)
                }
            }
        case .stopTranscribing:
            return { call, reply in
                let sandboxed = isSandboxed(call.sender, consent)
                core.submit { core in
                    if sandboxed && !view.isOwner(call.sender) {
                        // Idle: nothing of its own to stop; another's text is never shown.
                        guard core.state == .idle else { return reply.fail(view.busy) }
                        return reply.send([.string("")])
                    }
                    core.stopNow { reply.send([.string($0)]) }
                }
            }
        case .cancelTranscribing:
            return { call, reply in
                submitUnlessOthers(call, reply, core: core, consent: consent, view: view) { core in
                    core.cancelNow { reply.send([]) }
                }
            }
        case .toggleTranscribing:
            return { call, reply in
                do throws(DBusError) {
                    let options = try startOptions(of: call, consent)
                    submitUnlessOthers(call, reply, core: core, consent: consent, view: view) { core in
                        core.toggleNow(options) { result in
                            switch result {
                            case .success(let listening): reply.send([.boolean(listening)])
                            case .failure(let error): reply.fail(error)
                            }
                        }
                    }
                } catch {
                    reply.fail(error)
                }
            }
        case .resetTranscript:
            return { call, reply in
                let sandboxed = isSandboxed(call.sender, consent)
                core.submit { core in
                    if sandboxed && !view.isOwner(call.sender) {
                        // Idle: its own transcript (as it sees it) is empty already.
                        guard core.state == .idle else { return reply.fail(view.busy) }
                        return reply.send([])
                    }
                    core.resetTranscript()
                    reply.send([])
                }
            }
        case .requestAuthorization:
            return { call, reply in
                guard let consent, consent.identities.identity(of: call.sender)?.isSandboxed == true else {
                    return core.requestAuthorization { reply.send([.string($0.rawValue)]) }
                }
                // A sandboxed app learns its own status; once allowed, the service's.
                let queued = consent.enqueue {
                    let status = await consent.status(of: call.sender)
                    guard let status, status != .authorized else {
                        return core.requestAuthorization { reply.send([.string($0.rawValue)]) }
                    }
                    reply.send([.string(status.rawValue)])
                }
                if !queued { reply.fail(SpeechError.busy("sttd is busy; try again.")) }
            }
        case .listAppConsent:
            return { _, reply in
                guard let consent else { return reply.send([.dictionary(key: .string, value: .string, [])]) }
                let queued = consent.enqueue {
                    do throws(DBusError) {
                        let decisions = try await consent.store.decisions()
                        reply.send([
                            .dictionary(
                                key: .string, value: .string,
                                decisions.keys.sorted().map { .init(.string($0), .string(decisions[$0]!.rawValue)) })
                        ])
                    } catch {
                        reply.fail(SpeechError.internal("cannot read the consent decisions: \(error.message)"))
                    }
                }
                if !queued { reply.fail(SpeechError.busy("sttd is busy; try again.")) }
            }
        case .setAppConsent:
            return { call, reply in
                let app = call.arguments[0].string ?? ""
                let text = call.arguments[1].string ?? ""
                guard AppIdentity.isValidDecisionID(app) else {
                    return reply.fail(
                        DBusError.invalidArgs(
                            "app_id '\(app)' is not an app id (a Flatpak id such as org.example.Notes, or snap.NAME)"))
                }
                guard text == "ask" || ConsentDecision(rawValue: text) != nil else {
                    return reply.fail(DBusError.invalidArgs("decision must be 'allow', 'deny' or 'ask', not '\(text)'"))
                }
                guard let consent else {
                    return reply.fail(SpeechError.internal("per-app consent is not running in this sttd"))
                }
                let queued = consent.enqueue {
                    do throws(DBusError) {
                        try await consent.store.set(ConsentDecision(rawValue: text), for: app)
                        reply.send([])
                    } catch {
                        reply.fail(SpeechError.internal("cannot store the decision: \(error.message)"))
                    }
                }
                if !queued { reply.fail(SpeechError.busy("sttd is busy; try again.")) }
            }
        case .setInputMethodState:
            // Host callers only (the gate refuses sandboxed ones): an app must never pose as the
            // focused field and receive the user's dictation.
            return { call, reply in
                do throws(DBusError) {
                    let state = try InputMethodState(parsing: call.arguments[0])
                    guard let inputMethod else {
                        return reply.fail(SpeechError.internal("this sttd does not route text to an input method"))
                    }
                    inputMethod.update(from: call.sender, state)
                    reply.send([])
                } catch {
                    reply.fail(error)
                }
            }
        case .listSources:
            return { _, reply in
                core.sources { result in
                    switch result {
                    case .success(let sources):
                        reply.send([
                            .array(
                                SpeechMethod.sourceType,
                                sources.map {
                                    .structure([.string($0.name), .string($0.description), .boolean($0.isDefault)])
                                })
                        ])
                    case .failure(let error):
                        reply.fail(error)
                    }
                }
            }
        case .getHistory:
            return { call, reply in
                let limit = Int(call.arguments[0].uint32 ?? 0)
                core.submit { core in
                    do throws(SpeechError) {
                        let entries = try core.history(limit: limit)
                        reply.send([
                            .array(
                                SpeechMethod.historyEntryType,
                                entries.map { .structure([.string($0.id), .int64($0.started), .string($0.text)]) })
                        ])
                    } catch {
                        reply.fail(error)
                    }
                }
            }
        }
    }

    /// Who is starting a session: the app (its session then reports to it alone) or the host.
    /// A start's options from its first argument, for the app that called.
    static func startOptions(of call: DBusMethodCall, _ consent: Consent?) throws(DBusError) -> StartOptions {
        var options = try StartOptions(parsing: call.arguments[0])
        options.client = client(of: call, consent)
        return options
    }

    /// Runs `body` on the core, unless the caller is a sandboxed app and the running session is
    /// another's: that gets `Busy`. Decided in the same step as `body`, so no call slips between.
    static func submitUnlessOthers(
        _ call: DBusMethodCall, _ reply: DBusReply, core: SpeechCore, consent: Consent?, view: SessionView,
        _ body: @escaping @Sendable (isolated SpeechCore) -> Void
    ) {
        let sandboxed = isSandboxed(call.sender, consent)
        core.submit { core in
            if sandboxed, let busy = view.refusal(for: call.sender, listening: core.state != .idle) {
                return reply.fail(busy)
            }
            body(core)
        }
    }

    static func client(of call: DBusMethodCall, _ consent: Consent?) -> SessionClient {
        guard isSandboxed(call.sender, consent) else { return SessionClient(name: SpeechAPI.hostClient) }
        let name = consent?.identities.identity(of: call.sender)?.description ?? "unknown"
        return SessionClient(name: name, privateDestination: call.sender)
    }

    /// Whether a caller gets a sandboxed app's view. The gate identified the caller before its
    /// call got here; one no longer known (the cache is bounded) is not taken for the host.
    static func isSandboxed(_ sender: String, _ consent: Consent?) -> Bool {
        guard let consent else { return false }
        return consent.identities.identity(of: sender) != .host
    }

    // MARK: Property writes -> core settings

    /// Checks a write on the bus thread; the new value reaches the core before any later call.
    static func setter(for property: SpeechProperty<String>, core: SpeechCore) -> DBusProperty.Setter {
        let name = property.name
        return { value in
            let text = value.string ?? ""
            let change: @Sendable (inout SpeechSettings) -> Void
            switch name {
            case SpeechProperty.backend.name:
                guard let backend = Backend(rawValue: text) else {
                    throw DBusError.invalidArgs("Backend must be 'local' or 'deepgram', not '\(text)'")
                }
                change = { $0.backend = backend }
            case SpeechProperty.language.name:
                let language = try StartOptions.language(text, what: "Language")
                change = { $0.language = language }
            default:
                change = { $0.source = text }
            }
            core.submit { core in
                var settings = core.settings
                change(&settings)
                core.update(settings)
            }
            return value
        }
    }
}

/// Whose session is running, as the core's events tell it, and what a sandboxed caller may see of
/// it: the session it started is its own; any other session (another app's or the host's) it may
/// neither see nor control, and the text such a session left behind it never sees.
///
/// Updated from the core's events, in their order on the core's executor; read there (by the
/// handlers, together with the core's state) and on the bus thread (property reads).
final class SessionView: Sendable {
    private struct State {
        /// Who started the current session, or the last one (its transcript is still shown); nil
        /// before the first.
        var client: SessionClient?
        /// Where the running session's signals go: a sandboxed app's unique name, or nil to broadcast.
        var destination: String?
        /// A session is running (`State` is not `idle`).
        var listening = false
        /// The transcript as the core last published it, kept with its owner so that a read
        /// never pairs one session's text with another's owner.
        var transcript = ""
    }
    private let state = Mutex(State())

    let busy = SpeechError.busy(
        "Another program's dictation session is running, and an app sees and controls only its own session. Try again once it has ended."
    )

    func note(_ event: SpeechEvent) {
        switch event {
        case .client(let client):
            state.withLock {
                $0.client = client
                $0.destination = client.privateDestination
            }
        case .state(let now):
            state.withLock {
                $0.listening = now != .idle
                if now == .idle { $0.destination = nil }
            }
        case .transcript(let text, _):
            state.withLock { $0.transcript = text }
        default:
            break
        }
    }

    /// Where the running session's signals go (nil: broadcast).
    var destination: String? { state.withLock { $0.destination } }

    /// Whether the current (or last) session is `sender`'s, a sandboxed app's.
    func isOwner(_ sender: String) -> Bool { state.withLock { $0.client?.privateDestination == sender } }

    /// `Busy` for a sandboxed caller while a session not its own runs; nil to let the call through.
    func refusal(for sender: String, listening: Bool) -> SpeechError? {
        listening && !isOwner(sender) ? busy : nil
    }

    /// The `Transcript` a sandboxed caller reads: its own session's text; while another session
    /// runs, `Busy` (an empty string in `GetAll`, which must still show the other properties);
    /// otherwise empty.
    func transcript(shownTo sender: String, reading kind: DBusAccess.Kind) -> Result<DBusValue, DBusError> {
        state.withLock { state in
            if state.client?.privateDestination == sender { return .success(.string(state.transcript)) }
            if state.listening && kind == .getProperty { return .failure(busy.dbusError) }
            return .success(.string(""))
        }
    }
}
