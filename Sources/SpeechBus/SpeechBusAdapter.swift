import Capture
import DBus
import History
import Logging
import Recognition
import Speech
import SpeechAPI

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

    /// Declares the object around a core; `settings` are the writable properties' first values.
    public init(core: SpeechCore, settings: SpeechSettings) throws(DBusError) {
        self.core = core
        let interface = SpeechAPI.declaration(
            backend: settings.backend.rawValue, language: settings.language, source: settings.source,
            serve: { method in Self.handler(for: method, core: core) },
            setter: { property in Self.setter(for: property, core: core) })
        object = try DBusObject(path: SpeechAPI.objectPath, interfaces: [interface])
    }

    /// Follows the core's events from now on; call before the core runs.
    public func attach() async {
        let object = object
        await core.observe { event in Self.show(event, on: object) }
    }

    // MARK: Core events -> properties and signals

    static func show(_ event: SpeechEvent, on object: DBusObject) {
        switch event {
        case .state(let state):
            object.set(.state, state.rawValue)
        case .transcript(let text, let update):
            if let update {
                object.emit(.transcriptChanged(transcript: text, segment: update.segment, isFinal: update.isFinal))
            }
            object.set(.transcript, text)
        case .speechActivity(let speaking):
            object.emit(.speechActivity(speaking: speaking))
        case .audioLevel(let level):
            object.emit(.audioLevel(rmsDBFS: level))
        case .sessionFailed(let error):
            object.emit(.sessionFailed(errorName: error.name, message: error.message))
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
    static func handler(for method: SpeechMethod, core: SpeechCore) -> DBusMethod.Handler {
        switch method {
        case .startTranscribing:
            return { call, reply in
                do throws(DBusError) {
                    let options = try StartOptions(parsing: call.arguments[0])
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
                    let options = try StartOptions(parsing: call.arguments[0])
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
            return { _, reply in core.requestAuthorization { reply.send([.string($0.rawValue)]) } }
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
