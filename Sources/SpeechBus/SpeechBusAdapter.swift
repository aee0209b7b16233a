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
/// Method calls arrive on the bus connection's thread; each is decoded into a typed call of
/// ``SpeechCalls``, which reaches the core in the order calls arrived and replies when the
/// core answers. The core's events become property changes and signals, queued for the bus
/// thread. So a recognizer result crosses two thread boundaries on its way to
/// `dbus_connection_send`: recognizer thread -> core loop -> bus thread.
///
/// A sandboxed caller sees and controls only the session it started (see ``SessionView``); host
/// callers see and control every session.
public final class SpeechBusAdapter: Sendable {
    /// The exported object.
    public let object: DBusObject
    let core: SpeechCore
    let view: SessionView
    let consent: Consent?
    let inputMethod: InputMethodRoute?
    /// The method calls being served; ``finish()`` waits for them.
    let tasks: DBusCallTasks
    let logger: Logger

    /// Declares the object around a core. With `consent`, its gate guards the interface, sessions
    /// are labelled with their app, and a sandboxed app sees and controls only its own session.
    /// With `inputMethod`, `SetInputMethodState` attaches the desktop's input method to it.
    public init(
        core: SpeechCore, consent: Consent? = nil, inputMethod: InputMethodRoute? = nil,
        logger: Logger = Logger(label: "sttd")
    ) throws(DBusError) {
        self.core = core
        self.consent = consent
        self.inputMethod = inputMethod
        self.logger = logger
        let tasks = DBusCallTasks()
        self.tasks = tasks
        let view = SessionView()
        self.view = view
        let calls = SpeechCalls(core: core, consent: consent, inputMethod: inputMethod)
        object = try DBusObject(
            path: SpeechAPI.objectPath,
            interfaces: [
                Speech1.declaration(serving: calls.methods(tasks: tasks), setting: { Self.setting($0, of: core) })
            ])
        inputMethod?.attach(object)
        if let consent {
            object.install(gate: consent.gate)
            object.install { access, stored in
                guard access.interface == SpeechAPI.interface, calls.isSandboxed(access.sender) else {
                    return .success(stored)
                }
                switch access.member {
                case SpeechProperty.transcript.name:
                    return view.transcript(shownTo: access.sender, reading: access.kind)
                // Whether a password field has the focus is not an app's business.
                case SpeechProperty.inputMethod.name: return .success(.string(""))
                default: return .success(stored)
                }
            }
        }
    }

    /// Waits for the calls in flight to be answered; later calls are refused.
    public func finish() async { await tasks.finish() }

    /// Follows the core's events from now on; call before the core runs.
    public func attach() async {
        await core.observe { [self] event in
            view.note(event)
            switch event {
            case .owner(let client):
                object.set(.activeClient, client.name)
                if let owner = client.privateDestination {
                    stopWhenGone(owner, then: ownerLeft)
                } else if let engine = client.connection, inputMethod?.isInputMethod(engine) == true {
                    stopWhenGone(engine, then: inputMethodLeft)
                }
            case .state(.idle):
                object.set(.activeClient, "")
            default:
                break
            }
            Self.show(event, on: object, to: view.destination)
        }
        consent?.observeDepartures { [self] name in
            if view.isOwner(name) { ownerLeft(name) }
            if inputMethod?.departed(name) != nil { inputMethodLeft(name) }
        }
    }

    // MARK: Sessions whose app left

    /// A session whose starter must stay (a sandboxed app, or the input method holding its
    /// push-to-talk key) has just opened: if the starter has already left the bus (its departure
    /// may have come before the session), `left` stops the session now; later, its departure does.
    func stopWhenGone(_ owner: String, then left: @escaping @Sendable (String) -> Void) {
        guard let consent else { return }
        let queued = consent.enqueue {
            if await !consent.isConnected(owner) { left(owner) }
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
        stopSession(startedFrom: owner, "the app whose session is running left the bus; stopping the session")
    }

    /// The input method left the bus (it crashed, or `ibus restart`). It starts sessions only
    /// for its push-to-talk key, whose release can now never arrive: the session it started
    /// stops, as the release would have stopped it. Its last words stay in the transcript and
    /// history.
    func inputMethodLeft(_ engine: String) {
        stopSession(
            startedFrom: engine, "the input method left the bus; stopping the push-to-talk session it started")
    }

    private func stopSession(startedFrom connection: String, _ why: Logger.Message) {
        core.submit { [logger] core in
            guard core.stopSession(startedFrom: connection) else { return }
            logger.notice(why, metadata: ["sender": "\(connection)"])
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
        case .retracted(let text, let removed):
            object.emit(.transcriptRetracted(transcript: text, removed: removed), to: destination)
            object.setProperty(
                SpeechProperty.transcript.name, .string(text), interface: SpeechAPI.interface, destination: destination)
        case .speechActivity(let speaking):
            object.emit(.speechActivity(speaking: speaking), to: destination)
        case .audioLevel(let level):
            object.emit(.audioLevel(rmsDBFS: level), to: destination)
        case .sessionFailed(let error):
            object.emit(.sessionFailed(errorName: error.name, message: error.message), to: destination)
        case .owner:
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
        }
    }

    // MARK: Settings

    /// `Backend`, `Language` or `Source`: kept by the core, read and checked on the bus thread,
    /// so a start that arrives after a write uses the new value.
    static func setting(_ property: SpeechProperty<String>, of core: SpeechCore) -> DBusProperty {
        switch property.name {
        case SpeechProperty.backend.name:
            return property.declaration(get: { core.settings.backend.rawValue }) { text throws(DBusError) in
                guard let backend = Backend(rawValue: text) else {
                    throw .invalidArgs("Backend must be 'local' or 'deepgram', not '\(text)'")
                }
                core.update { $0.backend = backend }
            }
        case SpeechProperty.language.name:
            return property.declaration(get: { core.settings.language }) { text throws(DBusError) in
                let language = try StartOptions.language(text, what: "Language")
                core.update { $0.language = language }
            }
        default:
            return property.declaration(get: { core.settings.source }) { text in core.update { $0.source = text } }
        }
    }
}
