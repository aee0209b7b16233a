import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// Issue 39's desktop × app matrix, the toolkit and terminal cells the desktops' own suites
    /// leave out: sttd dictates through `sttd-ibus` (no typing tool on its PATH) into GTK 4, Qt 5,
    /// Qt 6 and a VTE terminal on GNOME (Wayland) and X11, password fields refuse it there, and
    /// push-to-talk works on the Wayland desktops. KDE's app cells are KdeInputMethodTests'.
    @Suite("Dictation into every app on every desktop", .serialized)
    struct AppMatrixTests {
        /// A desktop of the matrix, started for one sttd, with its log and a way to open an app's field.
        struct Desk: Sendable {
            let sttd: SttdFixture
            let desktop: any MatrixDesktop
            /// Presses keypad + (keysym 0xffab, evdev KEY_KPPLUS 78) as the desktop lets a test press a key.
            var pressKeypadPlus: @Sendable () async throws -> HeldKey = {
                throw MissingPrerequisite(description: "X11's push-to-talk is InputMethodTests'")
            }

            var log: String { desktop.log }
            func openField(_ app: DesktopApp, _ password: Bool) async throws -> IBusField {
                try await desktop.openField(app, password: password)
            }
            func close() { desktop.close() }

            enum Kind: String, CaseIterable, Sendable, CustomStringConvertible {
                case gnome, kde, x11
                var description: String { rawValue }
            }

            static func start(_ kind: Kind, config: String = "") async throws -> Desk {
                switch kind {
                case .gnome:
                    let sttd = try await SttdFixture(config: config, environment: GnomeDesktop.sttdEnvironment)
                    let desktop = try await GnomeDesktop.start(for: sttd)
                    return Desk(sttd: sttd, desktop: desktop) { try await desktop.pressKey(keysym: 0xffab) }
                case .kde:
                    let sttd = try await SttdFixture(config: config, environment: KdeDesktop.sttdEnvironment)
                    let desktop = try await KdeDesktop.start(for: sttd)
                    return Desk(sttd: sttd, desktop: desktop) { try await desktop.pressKey(evdevCode: 78) }
                case .x11:
                    let sttd = try await InputMethodTests.sttd(config: config)
                    return Desk(sttd: sttd, desktop: try await IBusDesktop.start(for: sttd))
                }
            }
        }

        /// GTK 3 is GnomeInputMethodTests' and InputMethodTests' cell; Qt on GNOME through
        /// QT_IM_MODULE=ibus (GnomeDesktop.openField).
        @Test(arguments: [Desk.Kind.gnome, .x11], [DesktopApp.gtk4, .qt5, .qt6, .vte])
        func dictatedSpeechLandsInTheAppsFieldAsTheStopReply(_ kind: Desk.Kind, _ app: DesktopApp) async throws {
            let desk = try await Desk.start(kind)
            defer { desk.close() }
            let field = try await desk.openField(app, false)
            defer { field.close() }
            // VTE's preedit cannot be seen from outside: the terminal cells check the text only.
            try await GnomeInputMethodTests.dictate(
                into: field, desk.sttd, preedit: app.reportsPreedit, context: desk.log)
        }

        /// As InputMethodTests.aPasswordFieldNeverReceivesDictation starts: GTK 4 tells the engine
        /// the field is for a password, and sttd refuses to type there.
        ///
        /// GNOME Shell 43 turns IBus off while a password field has the focus (ui/status/keyboard.js
        /// `_ibusSetContentType`: purpose PASSWORD → `_disableIBus`, the xkb source). The engine,
        /// switched off in a password field, still tells sttd "a password field": otherwise sttd
        /// would fall back to the typing tools (ydotool would type into it).
        @Test(arguments: [Desk.Kind.gnome, .x11])
        func aGtk4PasswordFieldRefusesDictation(_ kind: Desk.Kind) async throws {
            let desk = try await Desk.start(kind)
            defer { desk.close() }
            let sttd = desk.sttd
            // The engine is on before the field opens: on GNOME the field turns it off.
            try await InputMethodTests.waitForInputMethod(sttd, "active", context: desk.log)
            let password = try await desk.openField(.gtk4, true)
            defer { password.close() }
            if let gnome = desk.desktop as? GnomeDesktop {
                try await waitFor("gnome-shell to turn IBus off: \(desk.log)") {
                    try await gnome.eval("imports.ui.status.keyboard.getInputSourceManager()._disableIBus") == "true"
                }
            }
            try await InputMethodTests.waitForInputMethod(sttd, "secret", context: desk.log)
            let refused = try sttd.sttctl(["toggle", "--output", "type"])
            #expect(refused.status == 4, "\(refused)")
            #expect(refused.stderr.contains("NotAuthorized") && refused.stderr.contains("password"), "\(refused)")
            #expect(try await sttd.property("State") == .string("idle"))
            #expect(password.text == "", "password field: \(password.text)")
            #expect((password.record?.preedits ?? -1) == 0, "\(String(describing: password.record))")
        }

        /// Qt keeps input methods out of a password field (its IBus plugin leaves the field
        /// unfocused to IBus), so the engine sees no field there: words dictated with it focused
        /// are the engine's to drop, and none lands in the field.
        @Test(arguments: [Desk.Kind.gnome, .x11], DesktopApp.qt)
        func aQtPasswordFieldGetsNoDictation(_ kind: Desk.Kind, _ app: DesktopApp) async throws {
            let desk = try await Desk.start(kind)
            defer { desk.close() }
            let password = try await desk.openField(app, true)
            defer { password.close() }
            let sttd = desk.sttd
            try await InputMethodTests.waitForInputMethod(sttd, "active", context: desk.log)
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let stop = try sttd.sttctl(["stop"])
            #expect(!stop.stdout.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty, "\(stop)")
            try await waitFor("sttd to report the words not typed: \(sttd.log.suffix(3000))") {
                sttd.log.contains("no text field had the keyboard focus")
            }
            #expect(try await sttd.property("InputMethod") == .string("active"))
            #expect(password.record?.focus == true, "\(String(describing: password.record))")
            #expect(password.text == "", "password field: \(password.text)")
            #expect((password.record?.preedits ?? -1) == 0, "\(String(describing: password.record))")
        }

        /// As InputMethodTests' push-to-talk test on X11, the key pressed the way KWin lets a test
        /// press one: its fake input. Not on GNOME yet: pressed through gnome-shell's virtual
        /// keyboard on a busy machine, the key's press sometimes reached the GTK field (which then
        /// repeated "+") as well as the engine; the cause is not known yet.
        @Test(arguments: [Desk.Kind.kde])
        func pushToTalkStartsOnPressStopsOnReleaseAndTheKeyNeverReachesTheField(_ kind: Desk.Kind) async throws {
            // A key that types "+" if it got through.
            let desk = try await Desk.start(kind, config: "[ibus]\npush_to_talk = \"KP_Add\"\n")
            defer { desk.close() }
            let field = try await desk.openField(.gtk3, false)
            defer { field.close() }
            let sttd = desk.sttd
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: desk.log)

            let key = try await desk.pressKeypadPlus()
            try await waitFor("pressing the key to start a session: \(desk.log)", timeout: .seconds(30)) {
                try await sttd.property("State") == .string("listening")
            }
            try await sttd.pulse.play(try LibriVox.recordings()[2].path)
            try await key.release()
            try await waitFor("releasing it to stop the session: \(desk.log)", timeout: .seconds(30)) {
                try await sttd.property("State") == .string("idle")
            }
            let transcript = try #require(try await sttd.property("Transcript")?.string)
            #expect(!transcript.isEmpty)
            try await field.waitForText(transcript, timeout: .seconds(30), context: desk.log)
            #expect(!field.text.contains("+"))
            let history = try sttd.sttctl(["history", "--json"]).stdout
            #expect(history.split(separator: "\n").count == 1, "one session: \(history)")
        }
    }
}

/// What the matrix asks of each desktop fixture.
protocol MatrixDesktop: Sendable {
    var log: String { get }
    func openField(_ app: DesktopApp, password: Bool) async throws -> IBusField
    func close()
}

extension GnomeDesktop: MatrixDesktop {}
extension KdeDesktop: MatrixDesktop {}
extension IBusDesktop: MatrixDesktop {}
extension SwayDesktop: MatrixDesktop {}
