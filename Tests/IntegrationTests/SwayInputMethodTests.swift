import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// Issue 41: sttd is the input method of sway's seat (zwp_input_method_v2): text goes live
    /// into GTK 3, GTK 4 and foot with no IBus, no GTK_IM_MODULE and no typing tool on its PATH.
    /// Each test starts sttd and a sway of its own (SwayDesktop). Browsers: BrowserInputMethodTests.
    @Suite("Dictation through sttd's Wayland input method on sway", .serialized)
    struct SwayInputMethodTests {
        /// sttd (streaming `config`, no typing tool unless `tools`) and a sway for it.
        static func start(
            config: String = "", environment: [String: String] = [:], tools: Bool = false, runAs user: LoginUser? = nil,
            swayConfig: String = ""
        ) async throws -> (SttdFixture, SwayDesktop) {
            var sttdEnvironment = SwayDesktop.sttdEnvironment.merging(environment) { $1 }
            if tools { sttdEnvironment["PATH"] = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin" }
            let sttd = try await SttdFixture(config: config, environment: sttdEnvironment, runAs: user)
            let sway = try await SwayDesktop.start(for: sttd, config: swayConfig)
            try await waitFor("sttd to hold sway's seat", timeout: .seconds(20)) {
                try await sttd.property("WaylandInputMethod") == .string("seat0")
            }
            return (sttd, sway)
        }

        @Test(arguments: [DesktopApp.gtk3, .gtk4, .foot])
        func dictatedSpeechLandsInTheFieldAsTheStopReply(_ app: DesktopApp) async throws {
            let (server, config, environment) = try await InputMethodTests.streamingServer()
            let (sttd, sway) = try await Self.start(config: config, environment: environment)
            defer { sway.close() }
            let field = try await sway.openField(app)
            try await GnomeInputMethodTests.dictate(
                into: field, sttd, preedit: app.reportsPreedit, context: sway.log)
            #expect(field.text.contains("café Straße ✓ 😀"), "\(field.text)")
            _ = server
        }

        /// A GTK entry with the password purpose: words spoken while it has the focus reach it
        /// neither as preedit nor committed, and a start while it has the focus is refused.
        @Test(arguments: [DesktopApp.gtk3, .gtk4])
        func aPasswordFieldGetsNothingAndAStartIsRefused(_ app: DesktopApp) async throws {
            let (server, config, environment) = try await InputMethodTests.streamingServer()
            let (sttd, sway) = try await Self.start(config: config, environment: environment)
            defer { sway.close() }
            _ = try await sway.openField(app)
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: sway.log)
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            let password = try await sway.openField(app, password: true)
            try await InputMethodTests.waitForInputMethod(sttd, "secret", context: sway.log)
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let stop = try sttd.sttctl(["stop"])
            #expect(stop.stdout.hasPrefix("café Straße"), "\(stop)")
            #expect(password.record?.text == "", "\(String(describing: password.record))")
            #expect(password.record?.preedits == 0, "\(String(describing: password.record))")
            let refused = try sttd.sttctl(["toggle", "--output", "type"])
            #expect(refused.status == 4 && refused.stderr.contains("NotAuthorized"), "\(refused)")
            #expect(refused.stderr.contains("password"), "\(refused)")
            _ = server
        }

        /// A GTK entry with visibility off activates the input method as an ordinary field on sway;
        /// sttd finds it out before any text goes in (a space it takes back, shown as "●"), so it
        /// gets nothing, also with the typing tools opted in for another app.
        @Test(arguments: [DesktopApp.gtk3, .gtk4], [false, true])
        func anInvisibleEntryGetsNothing(_ app: DesktopApp, optIn: Bool) async throws {
            let (server, config, environment) = try await InputMethodTests.streamingServer()
            let (sttd, sway) = try await Self.start(
                config: config + (optIn ? "[wayland]\ntyping_tools_for_apps = [\"sttd-test-qt\"]\n" : ""),
                environment: environment, tools: optIn)
            defer { sway.close() }
            let hidden = try await sway.openField(app, invisible: true)
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: sway.log)
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let stop = try sttd.sttctl(["stop"])
            #expect(stop.stdout.hasPrefix("café Straße"), "\(stop)")
            try await InputMethodTests.waitForInputMethod(sttd, "secret", context: sway.log)
            try await waitFor("the probe taken back") { hidden.record?.text == "" }
            #expect(hidden.record?.preedits == 0, "\(String(describing: hidden.record))")
            #expect(sttd.log.contains("password field"), "\(sttd.log.suffix(3000))")
            _ = server
        }

        /// "press enter" through the virtual keyboard, "scratch that" through
        /// `delete_surrounding_text` (GTK) or BackSpaces (foot ignores the deletion), as the
        /// transcript says.
        @Test(arguments: [DesktopApp.gtk3, .foot])
        func voiceCommandsEditTheFieldAsTheTranscript(_ app: DesktopApp) async throws {
            let (server, config, environment) = try await VoiceCommandTests.streamingServer(VoiceCommandTests.finals)
            let (sttd, sway) = try await Self.start(config: config, environment: environment)
            defer { sway.close() }
            let field = try await sway.openField(app)
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: sway.log)
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await VoiceCommandTests.dictateUntilStopped(sttd)
            try await waitFor("\"stop listening\" to end the session", timeout: .seconds(20)) {
                (try? await sttd.property("State")) == .string("idle")
            }
            #expect(try await sttd.property("Transcript") == .string(VoiceCommandTests.transcript))
            try await field.waitForText(VoiceCommandTests.windowText, context: "\(sway.log)\n\(sttd.log.suffix(3000))")
            _ = server
        }

        /// Qt 5/6 speak text-input-v2 and sway 1.7 offers v3 only: no field activates, so the text
        /// stays in the transcript; with the app opted in to the typing tools, wtype types it.
        @Test(arguments: [DesktopApp.qt5, .qt6], [false, true])
        func qtGetsTextOnlyThroughTheOptedInTools(_ app: DesktopApp, optIn: Bool) async throws {
            let appID = "sttd-test-qt"
            let (sttd, sway) = try await Self.start(
                config: optIn ? "[wayland]\ntyping_tools_for_apps = [\"\(appID)\"]\n" : "", tools: optIn)
            defer { sway.close() }
            let field = try await sway.openField(app, appID: appID)
            let start = try sttd.sttctl(["start", "--output", "type"])
            #expect(start.status == 0, "\(start)")
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let stop = try sttd.sttctl(["stop"])
            let reply = stop.stdout.trimmingCharacters(in: .newlines)
            #expect(reply.split(separator: " ").count > 5, "\(stop)")
            #expect(try await sttd.property("InputMethod") == .string("active"), "no field activated")
            if optIn {
                try await field.waitForText(reply, timeout: .seconds(30), context: sttd.log.suffix(3000).description)
            } else {
                #expect(field.record?.text == "", "\(String(describing: field.record))")
                #expect(try await sttd.property("LastError") == .string(SpeechAPI.errorName("InvalidConfiguration")))
            }
        }
    }
}
