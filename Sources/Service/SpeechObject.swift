import Capture
import DBus

/// The program's version, as the `Version` property reports it.
public enum SttdVersion {
    public static let string = "0.1.0"
}

/// The contract's D-Bus names (contract §1).
public enum SpeechBus {
    public static let name = "io.github.sttd.Speech1"
    public static let path = "/io/github/sttd/Speech1"
    public static let interface = "io.github.sttd.Speech1"
}

/// The `io.github.sttd.Speech1` interface: the one declaration that dispatch, introspection and
/// the installed XML all come from.
public enum SpeechInterface {
    /// Builds the interface around a service; `configuration` gives the properties' first values.
    public static func make(service: SpeechService?, configuration: Configuration) -> DBusInterface {
        let options = DBusArgument("options", .dictionary(key: .string, value: .variant))
        return DBusInterface(
            name: SpeechBus.interface,
            methods: [
                DBusMethod("StartTranscribing", inputs: [options]) { call in
                    let parsed = try StartOptions(parsing: call.arguments[0])
                    try await required(service).start(parsed)
                    return []
                },
                DBusMethod("StopTranscribing", outputs: [DBusArgument("transcript", .string)]) { _ in
                    [.string(try await required(service).stop())]
                },
                DBusMethod("CancelTranscribing") { _ in
                    try await required(service).cancel()
                    return []
                },
                DBusMethod("ToggleTranscribing", inputs: [options], outputs: [DBusArgument("listening", .boolean)]) {
                    call in
                    let parsed = try StartOptions(parsing: call.arguments[0])
                    return [.boolean(try await required(service).toggle(parsed))]
                },
                DBusMethod("ResetTranscript") { _ in
                    try await required(service).resetTranscript()
                    return []
                },
                DBusMethod("RequestAuthorization", outputs: [DBusArgument("status", .string)]) { _ in
                    [.string(try await required(service).requestAuthorization())]
                },
                DBusMethod(
                    "ListSources", outputs: [DBusArgument("sources", .array(.structure([.string, .string, .boolean])))]
                ) { _ in
                    let sources = try await required(service).listSources()
                    return [
                        .array(
                            .structure([.string, .string, .boolean]),
                            sources.map {
                                .structure([.string($0.name), .string($0.description), .boolean($0.isDefault)])
                            })
                    ]
                },
                DBusMethod(
                    "GetHistory", inputs: [DBusArgument("limit", .uint32)],
                    outputs: [DBusArgument("entries", .array(.structure([.string, .int64, .string])))]
                ) { call in
                    let limit = Int(call.arguments[0].uint32 ?? 0)
                    let entries = try await required(service).recentHistory(limit: limit)
                    return [
                        .array(
                            .structure([.string, .int64, .string]),
                            entries.map { .structure([.string($0.id), .int64($0.started), .string($0.text)]) })
                    ]
                },
            ],
            properties: [
                DBusProperty("State", .string("idle")),
                DBusProperty("Transcript", .string("")),
                DBusProperty("AuthorizationStatus", .string("notDetermined")),
                DBusProperty("MicrophoneStatus", .string("notDetermined")),
                DBusProperty("Backend", .string(configuration.backend.rawValue)) { value in
                    let name = value.string ?? ""
                    guard Backend(rawValue: name) != nil else {
                        throw DBusError.invalidArgs("Backend must be 'local' or 'deepgram', not '\(name)'")
                    }
                    return value
                },
                DBusProperty("Language", .string(configuration.language)) { value in
                    .string(try StartOptions.language(value.string ?? "", what: "Language"))
                },
                DBusProperty("Source", .string(configuration.source)) { value in value },
                DBusProperty("LastError", .string("")),
                DBusProperty("Version", .string(SttdVersion.string), changeSignal: .const),
            ],
            signals: [
                DBusSignal(
                    "TranscriptChanged",
                    arguments: [
                        DBusArgument("transcript", .string), DBusArgument("segment", .string),
                        DBusArgument("is_final", .boolean),
                    ]),
                DBusSignal(
                    "SessionFailed", arguments: [DBusArgument("error_name", .string), DBusArgument("message", .string)]),
                DBusSignal("AudioLevel", arguments: [DBusArgument("rms_dbfs", .double)]),
                DBusSignal("SpeechActivity", arguments: [DBusArgument("speaking", .boolean)]),
            ])
    }

    /// The XML installed as `dbus/io.github.sttd.Speech1.xml`.
    public static var document: String {
        Introspection.document([make(service: nil, configuration: Configuration())])
    }

    private static func required(_ service: SpeechService?) throws(SpeechError) -> SpeechService {
        guard let service else { throw .internal("the service is not running") }
        return service
    }
}
