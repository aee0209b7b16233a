import DBus
import SpeechAPI
import TestSupport
import Testing

@testable import Service
@testable import Speech

/// The adapter sends text for an input method on the bus to that engine alone, and never text
/// for sttd's Wayland input method, which takes it in process.
@Suite("Input method text on the bus", .serialized, .timeLimit(.minutes(3)))
struct InputMethodSignalTests {
    @Test func textForTheWaylandInputMethodNeverGoesOnTheBus() async throws {
        let sttd = try await InProcessSttd()
        defer { sttd.cleanUp() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            let engine = sttd.client.uniqueName
            let commits = try await sttd.client.signals(
                sender: sttd.application.connection.uniqueName, interface: SpeechAPI.interface,
                member: Speech1.inputMethodCommit.name)
            sttd.application.core.submit { core in
                core.publish(.inputMethodText(.commit("for the compositor"), to: .wayland(seat: "seat0")))
                core.publish(.inputMethodText(.commit("for the engine"), to: .bus(engine)))
            }
            var received = commits.makeAsyncIterator()
            let first = try #require(await received.next())
            #expect(
                Speech1.inputMethodCommit.decode(first) == "for the engine", "signals from one sender keep their order")
            await sttd.application.shutDown()
            try await group.waitForAll()
        }
    }
}
