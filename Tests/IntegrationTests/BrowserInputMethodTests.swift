import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// sttd's input method in the browsers people write in, Firefox ESR and Chromium, on each
    /// test desktop: KDE Plasma (KWin Wayland, ibus-wayland), GNOME Shell (Wayland) and X11 (GTK's
    /// IBus module). A page on 127.0.0.1 has a focused `<textarea>` that reports its value and
    /// its composition (the preedit) to the page's server (`Tests/Clients/browser_page.py`).
    @Suite("Dictation through the input method into Firefox and Chromium", .serialized)
    struct BrowserInputMethodTests {
        /// The desktops a browser cell runs on.
        enum Desktop: String, CaseIterable, CustomStringConvertible {
            case kde, gnome, x11, sway
            var description: String { rawValue }
        }

        /// A desktop with sttd on it and a browser showing the page, its field focused.
        struct Session {
            let sttd: SttdFixture
            let field: BrowserField
            let log: @Sendable () -> String
            let close: @Sendable () -> Void
        }

        /// Starts sttd (no typing tool on its PATH: text in the field came through the engine,
        /// `config` its configuration), `desktop` and `browser` on the page.
        static func open(
            _ browser: BrowserField.Browser, on desktop: Desktop, password: Bool = false, config: String,
            environment: [String: String]
        ) async throws -> Session {
            let sttd: SttdFixture
            let host: any BrowserDesktop
            switch desktop {
            case .kde:
                sttd = try await SttdFixture(
                    config: config, environment: KdeDesktop.sttdEnvironment.merging(environment) { $1 })
                host = try await KdeDesktop.start(for: sttd)
            case .gnome:
                sttd = try await SttdFixture(
                    config: config, environment: GnomeDesktop.sttdEnvironment.merging(environment) { $1 })
                host = try await GnomeDesktop.start(for: sttd)
            case .x11:
                sttd = try await InputMethodTests.sttd(config: config, environment: environment)
                host = try await IBusDesktop.start(for: sttd)
            case .sway:
                // sttd's own input method (zwp_input_method_v2), no IBus.
                sttd = try await SttdFixture(
                    config: config, environment: SwayDesktop.sttdEnvironment.merging(environment) { $1 })
                host = try await SwayDesktop.start(for: sttd)
            }
            do {
                let field = try await host.openBrowser(browser, password: password)
                return Session(sttd: sttd, field: field, log: { "\(field.log)\n\(host.log)" }) {
                    field.close()
                    host.close()
                }
            } catch {
                host.close()
                throw error
            }
        }

        /// Each cell dictates a LibriVox clip through a streaming server whose words are
        /// non-ASCII ("café Straße ✓ 😀", an emoji outside the BMP among them): the textarea holds
        /// exactly the Stop reply, preedit (composition) was shown while speaking, none is left.
        @Test(arguments: Desktop.allCases, BrowserField.Browser.allCases)
        func dictatedSpeechLandsInABrowserTextareaAsTheStopReply(
            _ desktop: Desktop, _ browser: BrowserField.Browser
        ) async throws {
            let (server, config, environment) = try await InputMethodTests.streamingServer()
            let session = try await Self.open(browser, on: desktop, config: config, environment: environment)
            defer { session.close() }
            try await GnomeInputMethodTests.dictate(into: session.field.page, session.sttd, context: session.log())
            let text = session.field.page.text
            #expect(text.contains("café Straße ✓ 😀"), "\(text)")
            _ = server
        }

        /// As the X11 GTK password test, in Firefox on X11: with the focus moved (as a click would)
        /// to an `<input type=password>`, dictation is refused; started in the textarea, the words
        /// spoken after the focus moved to the password field go nowhere. Firefox sets the IBus
        /// purpose "password" only for a field focused while its window is active (a field focused
        /// before, as by `autofocus` in a new window, keeps "free form": Firefox 153's
        /// IMContextWrapper::SetInputContext returns early, "not active", without asking for it).
        @Test func aFirefoxPasswordFieldOnX11NeverReceivesDictation() async throws {
            let (server, config, environment) = try await InputMethodTests.streamingServer()
            let session = try await Self.open(
                .firefox, on: .x11, password: true, config: config, environment: environment)
            defer { session.close() }
            let (sttd, field) = (session.sttd, session.field)
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: session.log())

            try await field.focusElement("password")
            try await InputMethodTests.waitForInputMethod(sttd, "secret", context: session.log())
            let refused = try sttd.sttctl(["toggle", "--output", "type"])
            #expect(refused.status == 4 && refused.stderr.contains("NotAuthorized"), "\(refused)")
            #expect(refused.stderr.contains("password"), "\(refused)")
            #expect(try await sttd.property("State") == .string("idle"))

            try await field.focusElement("text")
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: session.log())
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await field.focusElement("password")
            try await InputMethodTests.waitForInputMethod(sttd, "secret", context: session.log())
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let stop = try sttd.sttctl(["stop"])
            #expect(stop.stdout.hasPrefix("café Straße"), "\(stop)")
            // Any stray commit lands before the focus is back in the textarea and it has settled.
            try await field.focusElement("text")
            try await Task.sleep(for: .milliseconds(500))
            #expect(field.passwordRecord?.text == "", "password field: \(String(describing: field.passwordRecord))")
            #expect(field.passwordRecord?.preedits == 0, "\(String(describing: field.passwordRecord))")
            #expect(field.page.text == "", "textarea: \(field.page.text)")
            #expect(try await sttd.property("LastError") == .string(SpeechAPI.errorName("InvalidConfiguration")))
            _ = server
        }
    }
}
