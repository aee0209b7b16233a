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
    let core: SpeechCore
    let view: SessionView
    /// The settings the properties show. A settings event changes only the fields that changed:
    /// the binding already holds a value a client just set, and an event of an earlier `Set`
    /// (carrying the old value of another field) must not put the old value back for a moment.
    let shownSettings: Mutex<SpeechSettings>
    let consent: Consent?
    let inputMethod: InputMethodRoute?
    let logger: Logger

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
    func stopWhenGone(_ owner: String) {
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
    func ownerLeft(_ owner: String) {
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
