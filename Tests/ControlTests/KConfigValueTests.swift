import Testing

@testable import Control

/// kwinrc as System Settings writes it: the key carries KConfig's `[$e]` flag.
@Suite("kwinrc's input method, as doctor reads it")
struct KConfigValueTests {
    @Test func aFlaggedKeyIsReadAndOtherGroupsAreNot() {
        let kwinrc = """
            [Plugins]
            InputMethod=wrong

            [Wayland]
            InputMethodFoo=not this
            InputMethod[$e]=/usr/share/applications/io.github.sttd.IBusWayland.desktop
            """
        #expect(
            DoctorProbe.iniValue(kwinrc, group: "Wayland", key: "InputMethod")
                == "/usr/share/applications/io.github.sttd.IBusWayland.desktop")
        #expect(DoctorProbe.iniValue("[Wayland]\nInputMethod = a.desktop\n", group: "Wayland", key: "InputMethod") == "a.desktop")
        #expect(DoctorProbe.iniValue("[Wayland]\nVirtualKeyboardEnabled=true\n", group: "Wayland", key: "InputMethod") == nil)
    }
}
