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
/// A sandboxed caller sees and controls only the session it started (see ``SessionSnapshot``);
/// host callers see and control every session.
///
/// The object's stored values (`Transcript`, `ActiveClient`, ...) are the wire cache of what the
/// core published, not a second owner: ``DBusObject`` compares against them to send
/// `PropertiesChanged` only for a real change, and answers `Get` from them.
public final class SpeechBusAdapter: Sendable {
    /// The exported object.
    public let object: DBusObject
    let core: SpeechCore
    let consent: Consent?
    /// The method calls being served; ``finish()`` waits for them.
    let tasks: DBusCallTasks
    let logger: Logger

    /// Declares the object around a core. With `consent`, its gate guards the interface, sessions
    /// are labelled with their app, and a sandboxed app sees and controls only its own session.
    public init(core: SpeechCore, consent: Consent? = nil, logger: Logger = Logger(label: "sttd")) throws(DBusError) {
        self.core = core
        self.consent = consent
        self.logger = logger
        let tasks = DBusCallTasks()
        self.tasks = tasks
        let calls = SpeechCalls(core: core, consent: consent)
        object = try DBusObject(
            path: SpeechAPI.objectPath,
            interfaces: [
                Speech1.declaration(serving: calls.methods(tasks: tasks), setting: { Self.setting($0, of: core) })
            ])
        object.set(.wakePhrase, core.wakePhrase)
        if let consent {
            object.install(gate: consent.gate)
            object.install { access, stored in
                guard access.interface == SpeechAPI.interface, calls.isSandboxed(access.sender) else {
                    return .success(stored)
                }
                switch access.member {
                case SpeechProperty.transcript.name:
                    return core.snapshot.transcript(shownTo: access.sender, whole: access.kind != .getProperty)
                        .map(DBusValue.string).mapError(\.dbusError)
                // Whether a password field has the focus is not an app's business.
                case SpeechProperty.inputMethod.name: return .success(.string(""))
                // Nor is the phrase that turns the user's microphone into dictation.
                case SpeechProperty.wakePhrase.name: return .success(.string(""))
                default: return .success(stored)
                }
            }
        }
    }

    /// Shows the state of sttd's own Wayland input method as `WaylandInputMethod` (it is not the
    /// core's, so the service that runs it says it). From any thread.
    public func setWaylandInputMethodStatus(_ status: WaylandInputMethodStatus) {
        object.set(.waylandInputMethod, status.rawValue)
    }

    /// Waits for the calls in flight to be answered; later calls are refused.
    public func finish() async { await tasks.finish() }

    /// Follows the core's events from now on; call before the core runs.
    public func attach() async {
        await core.observe { [self] event, session in
            switch event {
            case .owner(let client, let stopsWhenGone):
                object.set(.activeClient, client.name)
                if let stopsWhenGone { stopWhenGone(stopsWhenGone) }
            case .state(.idle):
                object.set(.activeClient, "")
            default:
                break
            }
            Self.show(event, on: object, to: session.destination)
        }
        consent?.observeDepartures { [core] name in core.submit { core in core.connectionLeft(name) } }
    }

    // MARK: Sessions whose app left

    /// A session whose starter must stay (a sandboxed app, or the input method holding its
    /// push-to-talk key) has just opened: if the starter has already left the bus (its departure
    /// may have come before the session), the session stops now; later, its departure stops it.
    func stopWhenGone(_ owner: String) {
        guard let consent else { return }
        let queued = consent.enqueue { [core] in
            if await !consent.isConnected(owner) { core.submit { core in core.stopSession(startedFrom: owner) } }
        }
        if !queued {
            logger.warning(
                "cannot check that the app of a new session is still connected; it stops when it leaves the bus",
                metadata: ["sender": "\(owner)"])
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
        case .inputMethod(let report):
            object.set(.inputMethod, report?.summary ?? "")
        case .inputMethodText(let text, to: .bus(let engine)):
            // Unicast, but not private: a bus monitor run by the same user sees it too, as it sees
            // every message of that user's bus.
            object.emit(text.signal, to: engine)
        case .inputMethodText(_, to: .wayland):
            break  // sttd's Wayland input method takes these in process
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
        case .handsFree(let state):
            object.set(.handsFree, state.rawValue)
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
