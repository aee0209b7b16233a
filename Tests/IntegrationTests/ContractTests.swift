import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

/// The `<interface name="...">…</interface>` block of an introspection document.
func interfaceBlock(_ xml: String, _ name: String) -> String? {
    guard let start = xml.range(of: "<interface name=\"\(name)\">"),
        let end = xml.range(of: "</interface>", range: start.upperBound..<xml.endIndex)
    else { return nil }
    return String(xml[start.lowerBound..<end.upperBound])
}

/// Integration tests run one at a time: each starts real-time audio, a bus and a service, and
/// on two cores parallel pipelines starve each other's audio.
@Suite(.serialized) struct Integration {}

extension Integration {
    @Suite("The D-Bus contract against a running sttd")
    struct ContractTests {
        let sttd: SttdFixture

        init() async throws { sttd = try await SttdFixture() }

        @Test func introspectionEqualsTheInstalledXML() async throws {
            let xml =
                try await sttd.call("Introspect", interface: "org.freedesktop.DBus.Introspectable").first?.string ?? ""
            let file = try String(contentsOfFile: "\(packageRoot)/dbus/io.github.sttd.Speech1.xml", encoding: .utf8)
            let served = try #require(interfaceBlock(xml, SttdFixture.interface))
            #expect(served == interfaceBlock(file, SttdFixture.interface))
            // Issue 29: how a client learns that "scratch that" took a final back.
            let compact = served.filter { !$0.isWhitespace }
            #expect(
                compact.contains(
                    #"<signalname="TranscriptRetracted"><argname="transcript"type="s"/><argname="removed"type="s"/></signal>"#
                ), "\(served)")
            for standard in [
                "org.freedesktop.DBus.Properties", "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer",
            ] {
                #expect(xml.contains("<interface name=\"\(standard)\">"))
            }
            // Tools walk the tree from the root.
            let root = try await sttd.client.call(
                destination: SttdFixture.name, path: "/", interface: "org.freedesktop.DBus.Introspectable",
                member: "Introspect")
            #expect(root.first?.string?.contains("<node name=\"io\"/>") == true)
        }

        @Test func getAllHasEveryPropertyWithItsFirstValue() async throws {
            let all = try await sttd.call(
                "GetAll", [.string(SttdFixture.interface)], interface: "org.freedesktop.DBus.Properties")
            let properties = Dictionary(
                uniqueKeysWithValues: (all.first?.stringVariantDictionary ?? []).map { ($0.key, $0.value) })
            #expect(properties["State"] == .string("idle"))
            #expect(properties["Transcript"] == .string(""))
            // The offline model loads at startup; a model that loads does not count as a check by a client.
            #expect(properties["AuthorizationStatus"] == .string("notDetermined"))
            #expect(properties["MicrophoneStatus"] == .string("notDetermined"))
            #expect(properties["Backend"] == .string("local"))
            #expect(properties["Language"] == .string("en-US"))
            #expect(properties["Source"] == .string(""))
            #expect(properties["LastError"] == .string(""))
            #expect(properties["Version"]?.string?.isEmpty == false)
            #expect(properties["ActiveClient"] == .string(""))
            // No [server] listen: no server, and an empty address.
            #expect(properties["ServerAddress"] == .string(""))
            // No input method has attached.
            #expect(properties["InputMethod"] == .string(""))
            #expect(properties["ActiveBackend"] == .string(""))
            // No compositor in the fixture's runtime folder: sttd holds no seat.
            #expect(properties["WaylandInputMethod"] == .string(""))
            // No [hands_free] wake_phrase: off, and no phrase.
            #expect(properties["HandsFree"] == .string("off"))
            #expect(properties["WakePhrase"] == .string(""))
            #expect(properties.count == 16)
        }

        @Test func readOnlyPropertiesRefuseSet() async throws {
            for name in [
                "State", "Transcript", "AuthorizationStatus", "MicrophoneStatus", "LastError", "Version",
                "ActiveClient", "ServerAddress", "InputMethod", "ActiveBackend", "WaylandInputMethod", "HandsFree",
                "WakePhrase",
            ] {
                let error = await #expect(throws: DBusError.self) { try await sttd.set(name, .string("x")) }
                #expect(error?.name == "org.freedesktop.DBus.Error.PropertyReadOnly", "\(name)")
            }
        }

        @Test func writablePropertiesValidateAndSignal() async throws {
            let recorder = try await sttd.record()
            try await sttd.set("Language", .string("de-DE"))
            try await sttd.set("Source", .string("mic.monitor"))
            try await sttd.set("Backend", .string("deepgram"))
            #expect(try await sttd.property("Language") == .string("de-DE"))
            let badBackend = await #expect(throws: DBusError.self) { try await sttd.set("Backend", .string("cloud")) }
            #expect(badBackend?.name == "org.freedesktop.DBus.Error.InvalidArgs")
            #expect(badBackend?.message.contains("'local' or 'deepgram'") == true)
            let badLanguage = await #expect(throws: DBusError.self) {
                try await sttd.set("Language", .string("english please"))
            }
            #expect(badLanguage?.name == "org.freedesktop.DBus.Error.InvalidArgs")
            let wrongType = await #expect(throws: DBusError.self) { try await sttd.set("Backend", .uint32(1)) }
            #expect(wrongType?.name == "org.freedesktop.DBus.Error.InvalidArgs")
            let unknown = await #expect(throws: DBusError.self) { try await sttd.set("Nope", .string("x")) }
            #expect(unknown?.name == "org.freedesktop.DBus.Error.UnknownProperty")
            try await recorder.wait("the Backend change") { _ in recorder.changes(of: "Backend").count == 1 }
            #expect(recorder.changes(of: "Language") == [.string("de-DE")])
            #expect(recorder.changes(of: "Source") == [.string("mic.monitor")])
            #expect(recorder.changes(of: "Backend") == [.string("deepgram")])
        }

        @Test func badOptionsAreInvalidArgsNamingTheOption() async throws {
            let cases: [(DBusValue, String)] = [
                (.vardict([("colour", .string("blue"))]), "colour"),
                (.vardict([("backend", .uint32(1))]), "backend"),
                (.vardict([("backend", .string("cloud"))]), "backend"),
                (.vardict([("interim_results", .string("yes"))]), "interim_results"),
                (.vardict([("keyterms", .string("sttd"))]), "keyterms"),
                (.vardict([("language", .string("x y"))]), "language"),
                (.vardict([("output", .string("keyboard"))]), "output"),
                (.vardict([("auto_stop_ms", .uint32(3_600_000))]), "auto_stop_ms"),
                (.vardict([("auto_stop_ms", .string("soon"))]), "auto_stop_ms"),
            ]
            for (options, mentioned) in cases {
                for method in ["StartTranscribing", "ToggleTranscribing"] {
                    let error = await #expect(throws: DBusError.self) { try await sttd.call(method, [options]) }
                    #expect(error?.name == "org.freedesktop.DBus.Error.InvalidArgs", "\(method) \(options)")
                    #expect(error?.message.contains(mentioned) == true, "\(error?.message ?? "") names \(mentioned)")
                }
            }
            #expect(try await sttd.property("State") == .string("idle"))
        }

        @Test func wrongSignaturesAndUnknownNames() async throws {
            let signature = await #expect(throws: DBusError.self) {
                try await sttd.call("StartTranscribing", [.string("now")])
            }
            #expect(signature?.name == "org.freedesktop.DBus.Error.InvalidArgs")
            let missing = await #expect(throws: DBusError.self) { try await sttd.call("StartTranscribing") }
            #expect(missing?.name == "org.freedesktop.DBus.Error.InvalidArgs")
            let extra = await #expect(throws: DBusError.self) { try await sttd.call("StopTranscribing", [.uint32(1)]) }
            #expect(extra?.name == "org.freedesktop.DBus.Error.InvalidArgs")
            let method = await #expect(throws: DBusError.self) { try await sttd.call("StartDictation") }
            #expect(method?.name == "org.freedesktop.DBus.Error.UnknownMethod")
            let interface = await #expect(throws: DBusError.self) {
                try await sttd.call("StopTranscribing", interface: "io.github.sttd.Speech2")
            }
            #expect(interface?.name == "org.freedesktop.DBus.Error.UnknownInterface")
            let object = await #expect(throws: DBusError.self) {
                try await sttd.client.call(
                    destination: SttdFixture.name, path: "/io/github/sttd/Speech2", interface: SttdFixture.interface,
                    member: "StopTranscribing")
            }
            #expect(object?.name == "org.freedesktop.DBus.Error.UnknownObject")
            // Still serving afterwards.
            try await sttd.call("Ping", interface: "org.freedesktop.DBus.Peer")
        }

        @Test func idleCallsAnswerWithoutSideEffects() async throws {
            #expect(try await sttd.call("StopTranscribing") == [.string("")])
            try await sttd.call("CancelTranscribing")
            let recorder = try await sttd.record()
            try await sttd.call("ResetTranscript")
            try await recorder.wait("the reset's TranscriptChanged") {
                !$0.filter { $0.member == "TranscriptChanged" }.isEmpty
            }
            #expect(
                recorder.signals(named: "TranscriptChanged").first?.arguments == [
                    .string(""), .string(""), .boolean(true),
                ])
            #expect(try await sttd.property("State") == .string("idle"))
        }

        @Test func listSourcesAndAuthorization() async throws {
            let reply = try await sttd.call("ListSources")
            guard case .array(let element, let items)? = reply.first else {
                Issue.record("not an array: \(reply)"); return
            }
            #expect(element == .structure([.string, .string, .boolean]))
            #expect(
                items == [
                    .structure([.string("mic.monitor"), .string("Monitor of Virtual-microphone"), .boolean(true)])
                ])
            #expect(try await sttd.call("RequestAuthorization") == [.string("authorized")])
            #expect(try await sttd.property("AuthorizationStatus") == .string("authorized"))
            #expect(try await sttd.property("MicrophoneStatus") == .string("authorized"))
        }

        @Test func startStopToggleCancelLifecycle() async throws {
            let recorder = try await sttd.record()
            try await sttd.call("StartTranscribing", [.vardict([])])
            #expect(try await sttd.property("State") == .string("listening"))
            // Already listening: succeeds and changes nothing.
            try await sttd.call("StartTranscribing", [.vardict([("language", .string("en-US"))])])
            #expect(try await sttd.property("State") == .string("listening"))
            #expect(try await sttd.call("StopTranscribing") == [.string("")])
            #expect(try await sttd.property("State") == .string("idle"))
            #expect(try await sttd.call("ToggleTranscribing", [.vardict([])]) == [.boolean(true)])
            #expect(try await sttd.call("ToggleTranscribing", [.vardict([])]) == [.boolean(false)])
            try await sttd.call(
                "StartTranscribing",
                [.vardict([("interim_results", .boolean(false)), ("keyterms", .strings(["sttd"]))])])
            try await sttd.call("CancelTranscribing")
            #expect(try await sttd.property("State") == .string("idle"))
            try await recorder.wait("12 State changes") { _ in recorder.changes(of: "State").count >= 12 }
            let states = recorder.changes(of: "State").compactMap(\.string)
            #expect(states == Array(repeating: ["starting", "listening", "stopping", "idle"], count: 3).flatMap { $0 })
        }

        @Test func concurrentCallsFromManyClientsAreSerialized() async throws {
            let clients = try await withThrowingTaskGroup(of: DBusConnection.self) { group in
                for _ in 0..<5 { group.addTask { try await DBusConnection.connect(to: .address(sttd.bus.address)) } }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            let members = [
                "StartTranscribing", "StopTranscribing", "ToggleTranscribing", "CancelTranscribing", "ResetTranscript",
            ]
            let answered = try await withThrowingTaskGroup(of: Int.self) { group in
                for n in 0..<60 {
                    let client = clients[n % clients.count]
                    let member = members[n % members.count]
                    group.addTask {
                        let arguments: [DBusValue] =
                            member.hasSuffix("Transcribing") && !member.hasPrefix("Stop") && !member.hasPrefix("Cancel")
                            ? [.vardict([])] : []
                        _ = try await client.call(
                            destination: SttdFixture.name, path: SttdFixture.path, interface: SttdFixture.interface,
                            member: member, arguments: arguments, timeout: .seconds(20))
                        return 1
                    }
                }
                return try await group.reduce(0, +)
            }
            #expect(answered == 60)
            try await sttd.call("CancelTranscribing")
            #expect(try await sttd.property("State") == .string("idle"))
            for client in clients { client.close() }
        }

        @Test func unknownSourceFailsClearly() async throws {
            let error = await #expect(throws: DBusError.self) {
                try await sttd.call("StartTranscribing", [.vardict([("source", .string("no-such-mic"))])])
            }
            #expect(error?.name == SpeechAPI.errorName("MicrophoneUnavailable"))
            #expect(error?.message.contains("no-such-mic") == true)
            #expect(error?.message.contains("sttctl sources") == true)
            #expect(try await sttd.property("MicrophoneStatus") == .string("unavailable"))
            #expect(
                try await sttd.property("LastError") == .string(SpeechAPI.errorName("MicrophoneUnavailable")))
            #expect(try await sttd.property("State") == .string("idle"))
        }
    }

}

extension Integration {
    @Suite("Service configuration and lifecycle")
    struct LifecycleTests {
        @Test func missingModelIsRestrictedAndNamesThePackage() async throws {
            let sttd = try await SttdFixture(
                config: "[local]\nengine = \"pocketsphinx\"\nmodel_dir = \"/nonexistent/model\"\n")
            let error = await #expect(throws: DBusError.self) {
                try await sttd.call("StartTranscribing", [.vardict([])])
            }
            #expect(error?.name == SpeechAPI.errorName("BackendUnavailable"))
            #expect(error?.message.contains("pocketsphinx-en-us") == true)
            #expect(try await sttd.property("AuthorizationStatus") == .string("restricted"))
            #expect(try await sttd.call("RequestAuthorization") == [.string("restricted")])
        }

        @Test func brokenModelDoesNotKillTheService() async throws {
            let model = try makeTemporaryDirectory("broken-model")
            defer { try? FileManager.default.removeItem(atPath: model) }
            try FileManager.default.createDirectory(atPath: "\(model)/en-us", withIntermediateDirectories: true)
            let real = "/usr/share/pocketsphinx/model/en-us"
            for file in try FileManager.default.contentsOfDirectory(atPath: "\(real)/en-us") {
                try FileManager.default.copyItem(atPath: "\(real)/en-us/\(file)", toPath: "\(model)/en-us/\(file)")
            }
            try FileManager.default.removeItem(atPath: "\(model)/en-us/mdef")
            try Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 &* 7919) }).write(
                to: URL(fileURLWithPath: "\(model)/en-us/mdef"))
            try FileManager.default.copyItem(atPath: "\(real)/en-us.lm.bin", toPath: "\(model)/en-us.lm.bin")
            try FileManager.default.copyItem(
                atPath: "\(real)/cmudict-en-us.dict", toPath: "\(model)/cmudict-en-us.dict")
            let sttd = try await SttdFixture(config: "[local]\nengine = \"pocketsphinx\"\nmodel_dir = \"\(model)\"\n")
            let error = await #expect(throws: DBusError.self) {
                try await sttd.call("StartTranscribing", [.vardict([])])
            }
            #expect(error?.name == SpeechAPI.errorName("BackendUnavailable"))
            #expect(error?.message.contains("broken") == true)
            #expect(sttd.sttd.isRunning)
            #expect(try await sttd.property("AuthorizationStatus") == .string("restricted"))
        }

        @Test func deepgramWithoutAKeyIsRestricted() async throws {
            let sttd = try await SttdFixture(config: "[deepgram]\nurl = \"ws://127.0.0.1:9/v1/listen\"\n")
            let error = await #expect(throws: DBusError.self) {
                try await sttd.call("StartTranscribing", [.vardict([("backend", .string("deepgram"))])])
            }
            #expect(error?.name == SpeechAPI.errorName("NotAuthorized"))
            #expect(error?.message.contains("STTD_API_KEY") == true)
            #expect(try await sttd.property("AuthorizationStatus") == .string("restricted"))
            #expect(try await sttd.property("LastError") == .string(SpeechAPI.errorName("NotAuthorized")))
        }

        @Test(arguments: [
            ("backend = \"cloud\"\n", "backend"),
            ("interim_results = \"yes\"\n", "interim_results"),
            ("stop_timeout_ms = -5\n", "stop_timeout_ms"),
            ("colour = \"blue\"\n", "colour"),
            ("[deepgram]\nurl = \"ws://api.example.com/v1/listen\"\n", "deepgram.url"),
            ("language = en-US\n", "line 1"),
        ])
        func invalidConfigExitsWith78NamingTheKey(_ config: String, _ key: String) throws {
            let home = try makeTemporaryDirectory("sttd-config")
            defer { try? FileManager.default.removeItem(atPath: home) }
            try config.write(toFile: "\(home)/config.toml", atomically: true, encoding: .utf8)
            let result = try run(try builtExecutable("sttd"), ["--config", "\(home)/config.toml"], timeout: 20)
            #expect(result.status == 78)
            #expect(result.stderr.contains(key), "\(result.stderr)")
        }

        @Test func secondInstanceExitsWithAClearMessage() async throws {
            let sttd = try await SttdFixture()
            let second = try await run(try builtExecutable("sttd"), [], environment: sttd.environment, timeout: 20)
            #expect(second.status != 0)
            #expect(second.stderr.contains("already owned"), "\(second.stderr)")
            try await sttd.call("Ping", interface: "org.freedesktop.DBus.Peer")
        }

        @Test func sigtermEndsCleanly() async throws {
            let sttd = try await SttdFixture()
            try await sttd.call("StartTranscribing", [.vardict([])])
            sttd.sttd.signal(SIGTERM)
            #expect(await sttd.sttd.exit(timeout: .seconds(10)) == 0, "\(sttd.log)")
        }

        @Test func busLossEndsWithFailureStatus() async throws {
            let sttd = try await SttdFixture()
            sttd.bus.stop()
            let status = await sttd.sttd.exit(timeout: .seconds(10))
            #expect(
                status != nil && status != 0,
                "exits non-zero so systemd restarts it: \(String(describing: status)); its log:\n\(sttd.log)")
        }
    }
}
