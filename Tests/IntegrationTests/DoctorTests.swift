import Foundation
import TestSupport
import Testing

extension Integration {
    /// `sttctl doctor --json` against a real sttd on each desktop of the matrix, good and broken
    /// set-ups alike: each broken one names its fix, and the exit status says whether dictation works.
    @Suite("sttctl doctor", .serialized)
    struct DoctorTests {
        /// What `sttctl doctor --json` printed, with its exit status.
        struct Report {
            var status: Int32
            var ok: Bool
            var route: String?
            var checks: [String: [String: Any]]
            var raw: String

            func status(_ id: String) -> String? { checks[id]?["status"] as? String }
            func fix(_ id: String) -> String { checks[id]?["fix"] as? String ?? "" }
        }

        static func doctor(_ sttd: SttdFixture, environment: [String: String]) throws -> Report {
            let result = try sttd.sttctl(["doctor", "--json"], environment: environment)
            let object = try JSONSerialization.jsonObject(with: Data(result.stdout.utf8)) as? [String: Any]
            let list = try #require(object?["checks"] as? [[String: Any]], "\(result)")
            let checks = Dictionary(uniqueKeysWithValues: list.map { ($0["id"] as? String ?? "", $0) })
            return Report(
                status: result.status, ok: object?["ok"] as? Bool ?? false, route: object?["route"] as? String,
                checks: checks, raw: "\(result)")
        }

        /// A folder with no IBus component in it, so that the machine's own IBus set-up is not asked.
        static func noComponents() throws -> String { try makeTemporaryDirectory("sttd-no-components") }

        /// The shell of a session on the test's X display: normal PATH, no ibus-daemon to ask.
        static func x11Session(_ sttd: SttdFixture, components: String) throws -> [String: String] {
            var environment = sttd.environment
            environment.merge(try DesktopKind.x11.environment()) { $1 }
            environment["WAYLAND_DISPLAY"] = nil
            environment["XDG_SESSION_TYPE"] = "x11"
            environment["IBUS_COMPONENT_PATH"] = components
            environment["IBUS_ADDRESS"] = "unix:path=\(components)/no-ibus-daemon"
            return environment
        }

        @Test func gnomeWaylandWithDictationWorksAndQtWithoutTheModuleNamesTheFix() async throws {
            let sttd = try await SttdFixture(environment: GnomeDesktop.sttdEnvironment)
            let desktop = try await GnomeDesktop.start(for: sttd)
            defer { desktop.close() }
            let field = try await desktop.openField()
            defer { field.close() }
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: desktop.log)
            // The shell of this GNOME session: GSettings as gnome-shell reads them, tools on PATH.
            var session = sttd.environment
            session["DISPLAY"] = nil
            session["PATH"] = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
            session["GSETTINGS_BACKEND"] = "keyfile"
            session["XDG_SESSION_TYPE"] = "wayland"
            session["QT_IM_MODULE"] = "ibus"

            let good = try Self.doctor(sttd, environment: session)
            #expect(good.status == 0, "\(good.raw)\n\(desktop.log)")
            #expect(good.ok && good.route == "input-method", "\(good.raw)")
            for id in [
                "service", "engine", "microphone", "ibus-component", "input-source", "input-method", "im-modules",
            ] {
                #expect(good.status(id) == "ok", "\(id): \(good.raw)")
            }
            // No typing tool on sttd's PATH: that route's problem is only a warning here.
            #expect(good.status("typing-tool") == "warning", "\(good.raw)")

            session["QT_IM_MODULE"] = nil
            let qt = try Self.doctor(sttd, environment: session)
            #expect(qt.status == 0 && qt.ok, "\(qt.raw)")
            #expect(qt.status("im-modules") == "warning", "\(qt.raw)")
            #expect(qt.fix("im-modules").contains("QT_IM_MODULE=ibus"), "\(qt.raw)")

            // The keyboard layout chosen instead of Dictation, as Super+Space would.
            _ = try await desktop.eval(
                """
                const manager = imports.ui.status.keyboard.getInputSourceManager();
                Object.values(manager.inputSources).find(s => s.type === 'xkb').activate(true);
                "ok"
                """)
            try await InputMethodTests.waitForInputMethod(sttd, "", context: desktop.log)
            let unselected = try Self.doctor(sttd, environment: session)
            #expect(unselected.status == 1 && !unselected.ok, "\(unselected.raw)")
            #expect(unselected.status("input-method") == "problem", "\(unselected.raw)")
            #expect(unselected.fix("input-method").contains("Super+Space"), "\(unselected.raw)")
        }

        @Test func plasmaWithIBusWaylandWorksAndAnotherVirtualKeyboardOrEngineNamesTheFix() async throws {
            let sttd = try await SttdFixture(environment: KdeDesktop.sttdEnvironment)
            let desktop = try await KdeDesktop.start(for: sttd)
            defer { desktop.close() }
            let field = try await desktop.openField()
            defer { field.close() }
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: desktop.log)
            var session = desktop.sessionEnvironment
            session["DBUS_SESSION_BUS_ADDRESS"] = sttd.environment["DBUS_SESSION_BUS_ADDRESS"]

            let good = try Self.doctor(sttd, environment: session)
            #expect(good.status == 0 && good.ok && good.route == "input-method", "\(good.raw)\n\(desktop.log)")
            for id in ["service", "session", "ibus-component", "input-source", "input-method", "im-modules"] {
                #expect(good.status(id) == "ok", "\(id): \(good.raw)")
            }

            // Another virtual keyboard chosen in System Settings (a config folder of its own: KWin keeps its own).
            let config = try makeTemporaryDirectory("sttd-kwinrc")
            defer { try? FileManager.default.removeItem(atPath: config) }
            try "[Wayland]\nInputMethod[$e]=/usr/share/applications/com.github.maliit.keyboard.desktop\n".write(
                toFile: "\(config)/kwinrc", atomically: true, encoding: .utf8)
            var maliit = session
            maliit["XDG_CONFIG_HOME"] = config
            let other = try Self.doctor(sttd, environment: maliit)
            #expect(other.status("input-source") == "problem", "\(other.raw)")
            #expect(other.fix("input-source").contains("Virtual Keyboard → IBus Wayland"), "\(other.raw)")

            // The keyboard layout chosen in IBus instead of Dictation.
            let ibus = try requireTool("ibus", package: "ibus")
            // It switches, then fails to run setxkbmap, which needs X: the wait below is the check.
            let switched = try await run(ibus, ["engine", "xkb:us::eng"], environment: session, timeout: 10)
            try await InputMethodTests.waitForInputMethod(sttd, "", context: "\(switched)\n\(desktop.log)")
            let unselected = try Self.doctor(sttd, environment: session)
            #expect(unselected.status == 1 && !unselected.ok, "\(unselected.raw)")
            #expect(unselected.status("input-method") == "problem", "\(unselected.raw)")
            #expect(unselected.fix("input-method").contains("Super+Space"), "\(unselected.raw)")
        }

        @Test func x11WithIBusWorksAndAnotherEngineNamesIBusEngineSttd() async throws {
            let sttd = try await InputMethodTests.sttd()
            let desktop = try await IBusDesktop.start(for: sttd)
            defer { desktop.close() }
            _ = try await desktop.openField()
            try await InputMethodTests.waitForInputMethod(sttd, "focused", context: desktop.log)
            var session = desktop.environment
            session["XDG_SESSION_TYPE"] = "x11"
            session["QT_IM_MODULE"] = "ibus"

            let good = try Self.doctor(sttd, environment: session)
            #expect(good.status == 0 && good.route == "input-method", "\(good.raw)\n\(desktop.log)")
            for id in ["ibus-component", "input-source", "input-method"] {
                #expect(good.status(id) == "ok", "\(id): \(good.raw)")
            }
            #expect(good.fix("typing-tool").contains("sudo apt install xdotool"), "\(good.raw)")

            let ibus = try requireTool("ibus", package: "ibus")
            let switched = try await run(ibus, ["engine", "xkb:us::eng"], environment: session, timeout: 10)
            #expect(switched.status == 0, "\(switched)")
            let other = try Self.doctor(sttd, environment: session)
            // Neither route works: no engine chosen, no typing tool.
            #expect(other.status == 1 && !other.ok && other.route == nil, "\(other.raw)")
            #expect(other.status("input-source") == "problem", "\(other.raw)")
            #expect(other.fix("input-source").contains("ibus engine sttd"), "\(other.raw)")
            #expect(other.status("typing-tool") == "problem", "\(other.raw)")
        }

        @Test func aUnitWithoutADisplayOrATypingToolOrTheComponentNamesEachFix() async throws {
            let sttd = try await SttdFixture(environment: [
                "DISPLAY": "", "WAYLAND_DISPLAY": "", "PATH": "/nonexistent",
            ])
            let components = try Self.noComponents()
            defer { try? FileManager.default.removeItem(atPath: components) }
            let report = try Self.doctor(sttd, environment: try Self.x11Session(sttd, components: components))
            #expect(report.status == 1 && !report.ok && report.route == nil, "\(report.raw)")
            #expect(report.status("service") == "ok" && report.status("engine") == "ok", "\(report.raw)")
            #expect(report.status("service-environment") == "problem", "\(report.raw)")
            #expect(report.fix("service-environment").contains("dbus-update-activation-environment"), "\(report.raw)")
            #expect(report.status("typing-tool") == "problem", "\(report.raw)")
            #expect(report.status("ibus-component") == "problem", "\(report.raw)")
            #expect(report.fix("ibus-component").contains("make install"), "\(report.raw)")
        }

        @Test func aUnitWithADisplayButNoTypingToolNamesThePackage() async throws {
            var environment = try DesktopKind.x11.environment()
            environment["PATH"] = "/nonexistent"
            let sttd = try await SttdFixture(environment: environment)
            let components = try Self.noComponents()
            defer { try? FileManager.default.removeItem(atPath: components) }
            let report = try Self.doctor(sttd, environment: try Self.x11Session(sttd, components: components))
            #expect(report.status == 1 && !report.ok, "\(report.raw)")
            #expect(report.status("service-environment") == "ok", "\(report.raw)")
            #expect(report.status("typing-tool") == "problem", "\(report.raw)")
            #expect(report.fix("typing-tool").contains("sudo apt install xdotool"), "\(report.raw)")
        }

        /// Without IBus, typing works on both test desktops: the probe reaches each display and types nothing.
        @Test(arguments: DesktopKind.allCases)
        func theTypingToolAnswersWithoutTyping(_ kind: DesktopKind) async throws {
            let sttd = try await SttdFixture(
                config: DesktopDictationTests.toolsOnSway, environment: try kind.environment())
            let components = try Self.noComponents()
            defer { try? FileManager.default.removeItem(atPath: components) }
            var session = try Self.x11Session(sttd, components: components)
            if kind == .wayland {
                session.merge(try kind.environment()) { $1 }
                session["DISPLAY"] = nil
                session["XDG_SESSION_TYPE"] = "wayland"
            }
            let report = try Self.doctor(sttd, environment: session)
            #expect(report.status == 0 && report.route == "typing", "\(report.raw)")
            let tool = kind == .x11 ? "xdotool" : "wtype"
            #expect((report.checks["typing-tool"]?["finding"] as? String)?.hasPrefix(tool) == true, "\(report.raw)")
            #expect(report.status("service-environment") == "ok", "\(report.raw)")
        }
    }
}
