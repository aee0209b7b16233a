import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// sttd's input method on KDE Plasma's Wayland path: a headless KWin in sttd's session
    /// starts ibus-wayland from sttd's desktop entry (kwinrc names it, as System Settings'
    /// Virtual Keyboard page does), ibus-daemon has Dictation selected, and an app's field talks
    /// the Wayland text-input protocol to KWin (no GTK_IM_MODULE or QT_IM_MODULE).
    @Suite("Dictation through the input method on KDE Plasma (KWin Wayland)", .serialized)
    struct KdeInputMethodTests {
        // foot is the wlroots desktops' terminal: its cells run on sway.
        @Test(arguments: KdeDesktop.App.allCases.filter { $0 != .foot })
        func dictatedSpeechLandsInAPlasmaWaylandFieldAsTheStopReply(_ app: KdeDesktop.App) async throws {
            // No typing tool on sttd's PATH: text in the field came through the engine.
            let sttd = try await SttdFixture(environment: KdeDesktop.sttdEnvironment)
            let desktop = try await KdeDesktop.start(for: sttd)
            defer { desktop.close() }
            let field = try await desktop.openField(app)
            defer { field.close() }
            // VTE's preedit cannot be seen from outside: the terminal cell checks the text only.
            try await GnomeInputMethodTests.dictate(
                into: field, sttd, preedit: app.reportsPreedit, context: desktop.log)
        }

        /// Two apps' windows: the engine follows KWin's focus, so the words land only in the
        /// field that has it, after the focus moved back to the first window.
        @Test func dictationGoesToTheWindowKWinFocused() async throws {
            let sttd = try await SttdFixture(environment: KdeDesktop.sttdEnvironment)
            let desktop = try await KdeDesktop.start(for: sttd)
            defer { desktop.close() }
            let gtk = try await desktop.openField(.gtk3)
            defer { gtk.close() }
            let qt = try await desktop.openField(.qt6)
            defer { qt.close() }
            #expect(gtk.record?.focus == false, "the new Qt window took the focus")
            try await desktop.focus(gtk)
            try await GnomeInputMethodTests.dictate(into: gtk, sttd, context: desktop.log)
            #expect(qt.text == "" && qt.record?.preedits == 0, "\(String(describing: qt.record))")
        }

        /// ibus-wayland 1.5.27 (Debian 12) leaves zwp_input_method_context_v1.content_type
        /// unhandled, so the engine would never hear that the field is a password field:
        /// `sttd-ibus --wayland` (the desktop entry's command) reads it on the way and tells the
        /// engine, which reports `secret`; sttd then refuses to type, and nothing reaches the field.
        @Test func aPlasmaWaylandPasswordFieldGetsNoDictation() async throws {
            let sttd = try await SttdFixture(environment: KdeDesktop.sttdEnvironment)
            let desktop = try await KdeDesktop.start(for: sttd)
            defer { desktop.close() }
            let field = try await desktop.openField(password: true)
            defer { field.close() }
            try await waitFor("sttd hears a password field has the focus\n\(desktop.log)") {
                try await sttd.property("InputMethod") == .string("secret")
            }
            let start = try sttd.sttctl(["start", "--output", "type"])
            if start.status == 0 {
                try await sttd.pulse.play(try LibriVox.recordings()[0].path)
                _ = try sttd.sttctl(["stop"])
            }
            #expect(start.status == 4 && start.stderr.contains("NotAuthorized"), "\(start)")
            #expect(field.text == "" && field.record?.preedits == 0, "\(String(describing: field.record))")
        }

        /// KWin starts its input method once, at login, perhaps before ibus-daemon: the input
        /// method starts ibus-daemon itself, and dictation works.
        @Test func theInputMethodStartsIBusDaemonWhenKWinComesFirst() async throws {
            let sttd = try await SttdFixture(environment: KdeDesktop.sttdEnvironment)
            let desktop = try await KdeDesktop.start(for: sttd, ibusRunning: false)
            defer { desktop.close() }
            #expect(desktop.ibusDaemonPID != nil, "no ibus-daemon runs\n\(desktop.log)")
            let field = try await desktop.openField(.gtk3)
            defer { field.close() }
            try await GnomeInputMethodTests.dictate(into: field, sttd, context: desktop.log)
        }
    }
}
