import DBus
import SpeechAPI
import TestSupport
import Testing

@testable import Service
@testable import Speech

@Suite("Desktop notifications", .serialized)
struct NotificationTests {
    @Test func listeningIsShownAndReplacedWhenItStops() async throws {
        let sttd = try await InProcessSttd()
        defer { sttd.cleanUp() }
        let server = try await NotificationServer(busAddress: sttd.bus.address)
        defer { server.stop() }
        let recording = try LibriVox.recordings()[1]
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await waitFor { server.notifications.count == 1 }
            try await sttd.pulse.play(recording.path)
            let text = try await sttd.speech.call(Speech1.stopTranscribing)
            try await waitFor { server.notifications.count == 2 }
            let (shown, stopped) = (server.notifications[0], server.notifications[1])
            #expect(shown.summary == "Dictation on")
            #expect(shown.appName == "sttd")
            let words = text.split(separator: " ").count
            #expect(stopped.summary == "Dictation stopped — \(words) words")
            #expect(stopped.replacesID == shown.id, "replaced, not stacked")
            #expect(!stopped.body.contains(text), "dictated text stays out of the notification server's history")
            await sttd.application.shutDown()
            try await group.waitForAll()
        }
    }

    @Test func aSessionThatFailsSaysWhy() async throws {
        var configuration = InProcessSttd.patientConfiguration
        configuration.microphoneReconnectMilliseconds = 0
        let sttd = try await InProcessSttd(configuration: configuration)
        defer { sttd.cleanUp() }
        let server = try await NotificationServer(busAddress: sttd.bus.address)
        defer { server.stop() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            // A source that does not exist: the start fails and the hotkey user is told.
            await #expect(throws: DBusError.self) {
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest(source: "no.such.source"))
            }
            try await waitFor { server.notifications.count == 1 }
            #expect(server.notifications.first?.summary == "Dictation could not start")
            #expect(server.notifications.first?.body.contains("no.such.source") == true)
            #expect(server.notifications.first?.urgency == 2)

            // The sound server goes away while listening: the session fails.
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            sttd.pulse.stop()
            try await waitFor { server.notifications.contains { $0.summary == "Dictation failed" } }
            let failed = try #require(server.notifications.last)
            #expect(failed.summary == "Dictation failed")
            #expect(!failed.body.isEmpty)
            await sttd.application.shutDown()
            try await group.waitForAll()
        }
    }

    @Test func withoutANotificationServerNothingFails() async throws {
        let sttd = try await InProcessSttd()
        defer { sttd.cleanUp() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(try await sttd.call(Speech1.startTranscribing.signature, [StartRequest().dbusValue]).isEmpty)
            try await sttd.speech.call(Speech1.stopTranscribing)
            await sttd.application.shutDown()
            try await group.waitForAll()
        }
    }

    /// Arming and disarming are shown (the one notification replaced); listening again after a
    /// session is not.
    @Test func armAndDisarmAreNotifiedButNotEachRearm() async throws {
        var configuration = InProcessSttd.patientConfiguration
        configuration.handsFree.wakePhrase = "wake up computer"
        let sttd = try await InProcessSttd(configuration: configuration)
        defer { sttd.cleanUp() }
        let server = try await NotificationServer(busAddress: sttd.bus.address)
        defer { server.stop() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            try await sttd.speech.call(Speech1.setHandsFree, true)
            try await waitFor { server.notifications.count == 1 }
            let armed = server.notifications[0]
            #expect(armed.summary == "Hands-free on — say “wake up computer”")
            #expect(armed.body.contains("stays on this computer"))
            // A call's session while armed, then armed again: "Dictation on" and "stopped" only.
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            _ = try await sttd.speech.call(Speech1.stopTranscribing)
            try await waitFor { try await sttd.speech.property(.handsFree) == "armed" }
            try await sttd.speech.call(Speech1.setHandsFree, false)
            try await waitFor { server.notifications.contains { $0.summary == "Hands-free off" } }
            let summaries = server.notifications.map(\.summary)
            #expect(summaries.filter { $0.hasPrefix("Hands-free") } == [armed.summary, "Hands-free off"], "\(summaries)")
            #expect(server.notifications.last?.replacesID == armed.id, "replaced, not stacked")
            await sttd.application.shutDown()
            try await group.waitForAll()
        }
    }
}
