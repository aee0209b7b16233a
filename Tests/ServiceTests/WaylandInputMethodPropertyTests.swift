import DBus
import SpeechAPI
import Testing

@testable import Service
@testable import SpeechBus

/// `WaylandInputMethod`: what sttd's own Wayland input method says of the seat, set by the service
/// that runs it through ``SpeechBusAdapter/setWaylandInputMethodStatus(_:)``.
@Suite("The WaylandInputMethod property")
struct WaylandInputMethodPropertyTests {
    @Test func emptyUntilTheServiceSaysThenWhatItSaysAndNeverWritable() async throws {
        let sttd = try await InProcessSttd()
        defer { sttd.cleanUp() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            #expect(try await sttd.speech.property(.waylandInputMethod) == "")
            sttd.application.adapter.setWaylandInputMethodStatus(.unavailable(seat: "seat0"))
            #expect(try await sttd.speech.property(.waylandInputMethod) == "unavailable:seat0")
            sttd.application.adapter.setWaylandInputMethodStatus(.held(seat: "seat0"))
            #expect(try await sttd.speech.property(.waylandInputMethod) == "seat0")
            let refused = await #expect(throws: DBusError.self) {
                try await sttd.speech.set(.waylandInputMethod, "seat1")
            }
            #expect(refused?.name == "org.freedesktop.DBus.Error.PropertyReadOnly")
            #expect(try await sttd.speech.property(.waylandInputMethod) == "seat0")
            await sttd.application.shutDown()
            try await group.waitForAll()
        }
    }
}
