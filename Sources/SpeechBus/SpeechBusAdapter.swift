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
public final class SpeechBusAdapter: Sendable {
    /// The exported object.
    public let object: DBusObject
    private let core: SpeechCore
    /// Where the current session's signals go: a sandboxed app's unique name, or nil to broadcast.
    /// Written and read only from the core's events, in order.
    private let privateDestination = Mutex<String?>(nil)
    /// The settings the properties show. A settings event changes only the fields that changed:
    /// the binding already holds a value a client just set, and an event of an earlier `Set`
    /// (carrying the old value of another field) must not put the old value back for a moment.
    private let shownSettings: Mutex<SpeechSettings>

    /// Declares the object around a core; `settings` are the writable properties' first values.
    /// With `consent`, its gate guards the interface and sessions are labelled with their app.
    public init(core: SpeechCore, settings: SpeechSettings, consent: Consent? = nil) throws(DBusError) {
        self.core = core
        shownSettings = Mutex(settings)
        let interface = SpeechAPI.declaration(
            backend: settings.backend.rawValue, language: settings.language, source: settings.source,
            serve: { method in Self.handler(for: method, core: core, consent: consent) },
            setter: { property in Self.setter(for: property, core: core) })
        object = try DBusObject(path: SpeechAPI.objectPath, interfaces: [interface])
        if let consent { object.install(gate: consent.gate) }
    }

    /// Follows the core's events from now on; call before the core runs.
    public func attach() async {
        await core.observe { [self] event in
            switch event {
            case .client(let client):
                privateDestination.withLock { $0 = client.privateDestination }
                object.set(.activeClient, client.name)
            case .state(.idle):
                privateDestination.withLock { $0 = nil }
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
            Self.show(event, on: object, to: privateDestination.withLock { $0 })
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
    /// core, and replies when the core answers.
    static func handler(for method: SpeechMethod, core: SpeechCore, consent: Consent?) -> DBusMethod.Handler {
        switch method {
        case .startTranscribing:
            return { call, reply in
                do throws(DBusError) {
                    var options = try StartOptions(parsing: call.arguments[0])
                    options.client = client(of: call, consent)
                    core.start(options) { error in error.map(reply.fail) ?? reply.send([]) }
                } catch {
                    reply.fail(error)
                }
            }
        case .stopTranscribing:
            return { _, reply in core.stop { reply.send([.string($0)]) } }
        case .cancelTranscribing:
            return { _, reply in core.cancel { reply.send([]) } }
        case .toggleTranscribing:
            return { call, reply in
                do throws(DBusError) {
                    var options = try StartOptions(parsing: call.arguments[0])
                    options.client = client(of: call, consent)
                    core.toggle(options) { result in
                        switch result {
                        case .success(let listening): reply.send([.boolean(listening)])
                        case .failure(let error): reply.fail(error)
                        }
                    }
                } catch {
                    reply.fail(error)
                }
            }
        case .resetTranscript:
            return { _, reply in
                core.submit { core in
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
    static func client(of call: DBusMethodCall, _ consent: Consent?) -> SessionClient {
        // The gate identified the caller before its call got here.
        guard let identity = consent?.identities.identity(of: call.sender), identity.isSandboxed else {
            return SessionClient(name: SpeechAPI.hostClient)
        }
        return SessionClient(name: identity.description, privateDestination: call.sender)
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
