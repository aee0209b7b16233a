import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// sttd's input method on GNOME's Wayland path: a headless gnome-shell in sttd's session
    /// starts ibus-daemon (with the `sttd` engine among its components), Dictation is the input
    /// source, and a GTK 3 window with GTK's default input method module (GTK_IM_MODULE unset:
    /// the Wayland text-input protocol, gnome-shell hands the field to IBus) has the focus.
    @Suite("Dictation through the input method on GNOME (Wayland)", .serialized)
    struct GnomeInputMethodTests {
        @Test func dictatedSpeechLandsInAGnomeWaylandFieldAsTheStopReply() async throws {
            // No typing tool on sttd's PATH: text in the field came through the engine.
            let sttd = try await SttdFixture(environment: GnomeDesktop.sttdEnvironment)
            let desktop = try await GnomeDesktop.start(for: sttd)
            defer { desktop.close() }
            try await Self.dictateIntoAField(sttd, desktop)
        }

        /// Dictates a LibriVox clip into a focused GTK field: the Stop reply arrives in the field,
        /// after preedit showed the words being spoken.
        static func dictateIntoAField(_ sttd: SttdFixture, _ desktop: GnomeDesktop) async throws {
            let field = try await desktop.openField()
            defer { field.close() }
            try await dictate(into: field, sttd, context: desktop.log)
        }

        /// Dictates a LibriVox clip into `field`, which has the focus on a desktop whose input
        /// method is IBus with Dictation selected; `context` (the desktop's log) explains a failure.
        /// `preedit`: whether the app reports the preedit it shows (a terminal does not).
        static func dictate(
            into field: IBusField, _ sttd: SttdFixture, preedit: Bool = true, context: @autoclosure () -> String
        ) async throws {
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: context())

            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let stop = try sttd.sttctl(["stop"])
            #expect(stop.status == 0, "\(stop)")
            let reply = stop.stdout.trimmingCharacters(in: .newlines)
            #expect(reply.split(separator: " ").count > 5, "\(reply)")
            try await field.waitForText(
                reply, timeout: .seconds(30), context: "\(context())\n\(sttd.log.suffix(4000))")
            guard preedit else { return }
            // The words being spoken were shown at the cursor (text-input-v3 preedit) before they were final.
            #expect((field.record?.preedits ?? 0) > 0, "preedit shown: \(String(describing: field.record))")
            // The commit and the preedit's end reach the window in separate updates.
            let cleared = try await happens(within: .seconds(10)) { field.record?.preedit == "" }
            #expect(cleared, "no preedit left after Stop: \(String(describing: field.record))")
        }
    }
}
