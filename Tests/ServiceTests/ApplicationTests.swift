import Capture
import DBus
import Foundation
import History
import Logging
import SpeechAPI
import SpeechBus
import TestSupport
import Testing

@testable import Service
@testable import Speech

let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().path

/// sttd built in process, as its `main` builds it, on a private bus with a headless PulseAudio
/// and the real offline engine.
struct InProcessSttd {
    let bus: PrivateBus
    let pulse: HeadlessPulse
    let home: String
    let application: SttdApplication
    let client: DBusConnection

    /// The defaults, but for a Stop that waits up to 30 s: the first session loads the offline
    /// model, which takes several seconds on a busy machine, and these tests are not about the bound.
    static var patientConfiguration: Configuration {
        var configuration = Configuration()
        configuration.stopTimeoutMilliseconds = 30_000
        return configuration
    }

    init(configuration: Configuration = InProcessSttd.patientConfiguration) async throws {
        bus = try PrivateBus()
        pulse = try HeadlessPulse()
        home = try makeTemporaryDirectory("sttd-app")
        let environment = ["HOME": home, "XDG_DATA_HOME": "\(home)/data", "XDG_CONFIG_HOME": "\(home)/config"]
        let logger = Logger(label: "test")
        do {
            application = try await SttdApp.build(
                configuration: configuration, environment: environment, bus: .address(bus.address),
                microphone: PulseAudioMicrophone(server: pulse.server, logger: logger), logger: logger)
        } catch {
            throw MissingPrerequisite(description: "sttd could not be built in process: \(error.message)")
        }
        client = try await DBusConnection.connect(to: .address(bus.address))
    }

    var speech: SpeechProxy { SpeechProxy(connection: client) }

    /// A call whose reply is checked value by value.
    func call(_ method: DBusMethodSignature, _ arguments: [DBusValue] = []) async throws -> [DBusValue] {
        try await client.call(
            destination: SpeechAPI.busName, path: SpeechAPI.objectPath, interface: SpeechAPI.interface,
            member: method.name, arguments: arguments, timeout: .seconds(30))
    }

    var history: [HistoryEntry] {
        get throws { try HistoryStore(readingAt: "\(home)/data/sttd/history.sqlite")?.sessions() ?? [] }
    }

    func cleanUp() {
        client.close()
        bus.stop()
        pulse.stop()
        try? FileManager.default.removeItem(atPath: home)
    }
}

@Suite("sttd built in process", .serialized)
struct ApplicationTests {
    @Test func theInstalledXMLIsTheDeclaration() throws {
        let file = try String(contentsOfFile: "\(packageRoot)/dbus/io.github.sttd.Speech1.xml", encoding: .utf8)
        #expect(Speech1.document == file)
    }

    @Test func dictatesRecordedSpeechOverTheBus() async throws {
        let sttd = try await InProcessSttd()
        defer { sttd.cleanUp() }
        let recording = try LibriVox.recordings()[1]
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(recording.path)
            let text = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(wordErrorRate(reference: recording.reference, hypothesis: normalizedWords(text)) < 50, "\(text)")
            let entries = try await sttd.speech.call(Speech1.getHistory, 1)
            guard entries.count == 1 else { throw MissingPrerequisite(description: "GetHistory gave \(entries)") }
            #expect(entries[0].text == text)
            #expect(try sttd.history.first?.text == text)
            await sttd.application.shutDown()
            try await group.waitForAll()
        }
    }

    /// As SIGTERM: a listening session stops with its finals stored, then the service ends.
    @Test func shutdownMidSessionKeepsTheFinals() async throws {
        let sttd = try await InProcessSttd()
        defer { sttd.cleanUp() }
        let recording = try LibriVox.recordings()[0]
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            let updates = sttd.application.core.events()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(recording.path)
            var heard = ""
            for await event in updates {
                if case .transcript(let text, let update?) = event, update.isFinal {
                    heard = text
                    break
                }
            }
            await sttd.application.shutDown()
            try await group.waitForAll()
            let stored = try #require(try sttd.history.first)
            #expect(!heard.isEmpty)
            #expect(stored.text.hasPrefix(heard), "\(stored.text) keeps \(heard)")
            #expect(stored.ended != nil, "the session was closed in history")
        }
    }
}
