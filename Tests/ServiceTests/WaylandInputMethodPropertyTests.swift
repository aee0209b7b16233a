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

/// Where sttd tries to be the Wayland input method: a Wayland display, and not GNOME or KDE
/// (their compositors offer no input-method-v2; their input method is IBus).
@Suite("Where sttd's Wayland input method connects")
struct WaylandInputMethodPlaceTests {
    @Test(arguments: ["GNOME", "KDE", "ubuntu:GNOME", "kde"])
    func gnomeAndKdeHaveTheirOwn(_ desktop: String) {
        #expect(WaylandInputMethodService.hasOwnInputMethod(["XDG_CURRENT_DESKTOP": desktop]))
    }

    @Test(arguments: ["sway", "Hyprland", "river", "wlroots", ""])
    func wlrootsCompositorsDoNot(_ desktop: String) {
        #expect(!WaylandInputMethodService.hasOwnInputMethod(["XDG_CURRENT_DESKTOP": desktop]))
    }

    @Test func theSocketIsFoundInTheRuntimeFolderOrGivenWhole() {
        #expect(
            WaylandInputMethodService.socketPath(["WAYLAND_DISPLAY": "wayland-1", "XDG_RUNTIME_DIR": "/run/user/1000"])
                == "/run/user/1000/wayland-1")
        #expect(WaylandInputMethodService.socketPath(["WAYLAND_DISPLAY": "/tmp/w"]) == "/tmp/w")
        #expect(WaylandInputMethodService.socketPath(["WAYLAND_DISPLAY": ""]) == nil)
    }
}
