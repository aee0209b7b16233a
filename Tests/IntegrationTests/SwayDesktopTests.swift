import Foundation
import TestSupport
import Testing

extension Integration {
    /// The sway test desktop without sttd: a private headless sway per test, its test keyboard,
    /// and a stand-in input method (``TestInputMethod``) holding the seat, against real apps'
    /// fields. What the input method sees here is what sttd's will see.
    @Suite("A private sway with a test input method on its seat", .serialized)
    struct SwayDesktopTests {
        /// Text with a two-byte letter, a three-byte symbol and an emoji outside the BMP.
        static let text = "café ✓ 😀"

        /// A focused field of a text-input-v3 app activates the input method: `activate`, the
        /// field's content type, `done`; its preedit shows in the field, its commit lands exactly.
        @Test(arguments: [DesktopApp.gtk3, .gtk4, .foot])
        func aFocusedFieldActivatesTheInputMethodAndTakesItsText(_ app: DesktopApp) async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let im = try sway.bindInputMethod()
            defer { im.close() }
            #expect(!im.isUnavailable)
            let field = try await sway.openField(app)
            try await im.waitForState("\(app)'s field to activate the input method") { $0.active }
            let events = im.events
            let activation = try #require(events.lastIndex(of: .activate))
            let batch = events[activation...].prefix { $0 != .done }
            // foot and GTK tell their purpose: terminal (13) and normal (0).
            let purpose: UInt32 = app == .foot ? 13 : 0
            #expect(batch.contains { if case .contentType(_, purpose) = $0 { true } else { false } }, "\(events)")
            #expect(im.state.contentType.purpose == purpose)
            #expect(events[activation...].contains(.done))

            if app.reportsPreedit {
                try im.setPreedit("dictating")
                try await waitFor("the preedit in \(app)'s field: \(String(describing: field.record))") {
                    field.record?.preedit == "dictating"
                }
            }
            try im.commit(Self.text)
            try await field.waitForText(Self.text, context: sway.log)
            if app.reportsPreedit {
                try await waitFor("no preedit left: \(String(describing: field.record))") {
                    field.record?.preedit == ""
                }
            }
        }

        /// A GTK entry whose purpose is PASSWORD tells the input method so (purpose 8, the
        /// sensitive and hidden hints): the rule sttd refuses text by.
        @Test(arguments: [DesktopApp.gtk3, .gtk4])
        func aPasswordEntryTellsTheInputMethodItIsOne(_ app: DesktopApp) async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let im = try sway.bindInputMethod()
            defer { im.close() }
            _ = try await sway.openField(app, password: true)
            try await im.waitForState("the password entry to activate the input method") { $0.active }
            let type = im.state.contentType
            #expect(type.purpose == 8, "\(im.events)")
            #expect(type.hint & 0xC0 == 0xC0, "hidden text and sensitive data: \(im.events)")
        }

        /// An invisible GTK entry (`set_visibility(False)`, most apps' password field) does NOT
        /// keep the input method away on sway (GTK 3.24, GTK 4.8): it activates it as an ordinary
        /// field — purpose normal, no hidden-text or sensitive-data hint — and takes its commits.
        /// Only its surrounding text (the invisible character, "●" per character) gives it away,
        /// and not before something is typed. So the content type alone cannot keep dictation out
        /// of such a field. The key typed first shows the entry has the focus.
        @Test(arguments: [DesktopApp.gtk3, .gtk4])
        func anInvisibleEntryActivatesTheInputMethodAsAnOrdinaryField(_ app: DesktopApp) async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let im = try sway.bindInputMethod()
            defer { im.close() }
            let hidden = try await sway.openField(app, invisible: true)
            try await im.waitForState("the invisible entry to activate the input method") { $0.active }
            #expect(im.state.contentType == TestInputMethod.ContentType(hint: 0, purpose: 0), "\(im.events)")
            try await sway.typeKeys("x")
            try await hidden.waitForText("x", context: sway.log)
            try await im.waitForState("the entry's surrounding text after the key") {
                $0.surroundingText?.text == "●"
            }
            try im.commit("leaked")
            try await hidden.waitForText("xleaked", context: sway.log)
            #expect(im.events.filter { $0 == .activate }.count == 1, "\(im.events)")
        }

        /// One input method per seat: a second one gets `unavailable` as its only event, and the
        /// first keeps working.
        @Test func aSecondInputMethodOnTheSeatIsUnavailable() async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let first = try sway.bindInputMethod()
            defer { first.close() }
            let second = try sway.bindInputMethod()
            defer { second.close() }
            #expect(second.events == [.unavailable])
            #expect(!first.isUnavailable)
            let field = try await sway.openField(.gtk3)
            try await first.waitForState("the field to activate the first input method") { $0.active }
            try first.commit(Self.text)
            try await field.waitForText(Self.text, context: sway.log)
            #expect(second.events == [.unavailable])
        }

        /// Qt 5 and 6 on sway 1.7 never activate the input method: sway offers text-input-v3
        /// only, and Qt's Wayland plugin speaks text-input-v2 (Qt 5; Qt 6.4 without
        /// QT_WAYLAND_TEXT_INPUT_PROTOCOL set). Bounded as the invisible entry's case: a key typed
        /// into the Qt field shows it has the focus, then a GTK field's activation is the only one.
        @Test(arguments: DesktopApp.qt)
        func aQtFieldDoesNotActivateTheInputMethod(_ app: DesktopApp) async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let im = try sway.bindInputMethod()
            defer { im.close() }
            let qt = try await sway.openField(app)
            try await sway.typeKeys("q")
            try await qt.waitForText("q", context: sway.log)
            let gtk = try await sway.openField(.gtk3)
            try await im.waitForState("the GTK field to activate the input method") { $0.active }
            #expect(im.events.filter { $0 == .activate }.count == 1, "\(im.events)")
            try im.commit("gtk")
            try await gtk.waitForText("gtk", context: sway.log)
            #expect(qt.text == "q")
        }

        /// The test keyboard types into the focused field (Shift where a symbol needs it), and a
        /// sway restarted behind the same socket name serves a new input method and keyboard.
        @Test func theKeyboardTypesAndSwayRestartsOnTheSameSocket() async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let field = try await sway.openField(.gtk3)
            try await sway.typeKeys("Hello, World!\nok")
            try await field.waitForText("Hello, World!\nok", context: sway.log)
            let held = try await sway.pressKey(keysym: 0x61)
            try await held.release()
            try await field.waitForText("Hello, World!\noka", context: sway.log)
            field.close()

            sway.stop()
            #expect(!FileManager.default.fileExists(atPath: sway.socketPath))
            try await sway.restart()
            let im = try sway.bindInputMethod()
            defer { im.close() }
            #expect(!im.isUnavailable)
            let again = try await sway.openField(.gtk3)
            try await im.waitForState("the field on the new sway to activate the input method") { $0.active }
            try im.commit(Self.text)
            try await again.waitForText(Self.text, context: sway.log)
        }

        /// For an sttd, the socket is linked into sttd's runtime folder under the name
        /// ``SwayDesktop/sttdEnvironment`` gives it, and clients reach sway through it.
        @Test func sttdsRuntimeFolderHoldsTheSocket() async throws {
            let sttd = try await SttdFixture(environment: SwayDesktop.sttdEnvironment)
            let sway = try await SwayDesktop.start(for: sttd)
            defer { sway.close() }
            let runtime = try #require(sttd.environment["XDG_RUNTIME_DIR"])
            let keyboard = try TestKeyboard(socket: "\(runtime)/\(SwayDesktop.display)")
            defer { keyboard.close() }
            let field = try await sway.openField(.gtk3)
            try keyboard.typeKeys("via sttd's link")
            try await field.waitForText("via sttd's link", context: sway.log)
        }

        /// A browser's textarea on sway (text-input-v3) activates the input method and shows its
        /// preedit as the composition; the commit lands exactly.
        @Test(arguments: BrowserField.Browser.allCases)
        func aBrowserTextareaTakesTheInputMethodsText(_ browser: BrowserField.Browser) async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let im = try sway.bindInputMethod()
            defer { im.close() }
            let field = try await sway.openBrowser(browser)
            try await im.waitForState("the textarea to activate the input method") { $0.active }
            // Firefox once showed no preedit sent right after the activation (1 run in ~15, on a
            // loaded machine; its editor not yet taking compositions is the likely cause, not
            // established). Here the fixture is under test, so the preedit goes again until shown.
            try await waitFor("the composition in \(browser): \(String(describing: field.page.record)), \(im.events)") {
                try im.setPreedit("dictating")
                return await happens(within: .seconds(2)) { field.page.record?.preedit == "dictating" }
            }
            try im.commit(Self.text)
            try await field.page.waitForText(Self.text, context: "\(field.log)\n\(sway.log)")
        }

        /// foot's test app records what a line editor would show (CR a line break, BackSpace
        /// takes back one character, be it a commit's "é"), with the cursor still or moving (`echo`).
        @Test(arguments: [false, true])
        func theTerminalFieldRecordsWhatALineEditorShows(_ echo: Bool) async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let im = try sway.bindInputMethod()
            defer { im.close() }
            let field = try await sway.openField(.foot, echo: echo)
            try await im.waitForState("foot to activate the input method") { $0.active }
            try im.commit("café")
            try await field.waitForText("café", context: sway.log)
            try await sway.typeKeys("\u{8}e\nok")
            try await field.waitForText("cafe\nok", context: sway.log)
        }

        /// Dead keys still compose in a GTK field while an input method holds the seat (no
        /// keyboard grab): dead_acute, e gives "é" through GTK's own composing.
        @Test func deadKeysComposeWithAnInputMethodOnTheSeat() async throws {
            let sway = try await SwayDesktop.start()
            defer { sway.close() }
            let im = try sway.bindInputMethod()
            defer { im.close() }
            let international = try TestKeyboard(socket: sway.socketPath, layout: "us", variant: "intl")
            defer { international.close() }
            let field = try await sway.openField(.gtk3)
            try await im.waitForState("the field to activate the input method") { $0.active }
            try await international.pressKey(keysym: 0xfe51).release()
            try international.typeKeys("e")
            try await field.waitForText("é", context: sway.log)
        }

        /// Lines added to sway's config take effect: a `bindsym` on keypad + runs its command when
        /// the test keyboard presses the key (the compositor's push-to-talk path).
        @Test func extraConfigBindsAKey() async throws {
            let folder = try makeTemporaryDirectory("sttd-sway-binding")
            defer { try? FileManager.default.removeItem(atPath: folder) }
            // sway's `exec` runs as sway's user.
            chmod(folder, 0o777)
            let sway = try await SwayDesktop.start(config: "bindsym KP_Add exec touch \(folder)/pressed")
            defer { sway.close() }
            try await sway.pressKey(keysym: 0xffab).release()
            try await waitFor("the binding to run its command: \(sway.log)") {
                FileManager.default.fileExists(atPath: "\(folder)/pressed")
            }
        }
    }
}
