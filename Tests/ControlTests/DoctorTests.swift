import Foundation
import Testing

@testable import Control

/// `sttctl doctor`'s checks, from facts a test chooses: each broken set-up names its fix.
@Suite("sttctl doctor's checks")
struct DoctorTests {
    static let gnomeWayland = [
        "WAYLAND_DISPLAY": "wayland-0", "XDG_SESSION_TYPE": "wayland", "XDG_CURRENT_DESKTOP": "GNOME",
        "QT_IM_MODULE": "ibus",
    ]
    static let x11 = ["DISPLAY": ":0", "XDG_SESSION_TYPE": "x11", "GTK_IM_MODULE": "ibus", "QT_IM_MODULE": "ibus"]

    /// GNOME on Wayland with Dictation chosen; ydotool cannot write /dev/uinput.
    static func gnome() -> DoctorFacts {
        DoctorFacts(
            service: .reachable(.init(version: "0.1.0", inputMethod: "focused")), session: gnomeWayland,
            serviceEnvironment: ["WAYLAND_DISPLAY": "wayland-0", "XDG_CURRENT_DESKTOP": "GNOME"], component: .listed,
            currentEngine: "sttd", gnomeInputSources: "[('xkb', 'us'), ('ibus', 'sttd')]",
            typing: .fails("ydotool needs write access to /dev/uinput (Permission denied): give your user access"))
    }

    /// X11 with xdotool working and no IBus at all.
    static func x11WithoutIBus() -> DoctorFacts {
        DoctorFacts(
            service: .reachable(.init(version: "0.1.0")), session: x11, serviceEnvironment: ["DISPLAY": ":0"],
            component: .missing(searched: ["/usr/share/ibus/component"]), currentEngine: nil, typing: .works("xdotool"))
    }

    @Test func aGoodGnomeSetUpTypesThroughTheInputMethod() throws {
        let report = Self.gnome().report
        #expect(report.ok)
        #expect(report.route == .inputMethod)
        for id in ["service", "engine", "microphone", "session", "ibus-component", "input-source", "input-method"] {
            #expect(report.check(id)?.status == .ok, "\(id): \(String(describing: report.check(id)))")
        }
        #expect(report.check("session")?.finding == "GNOME on Wayland")
        // The other route's problem cannot stop dictation: a warning that still names its fix.
        let typing = try #require(report.check("typing-tool"))
        #expect(typing.status == .warning)
        #expect(typing.fix == "give your user access")
    }

    @Test func noIBusComponentNamesMakeInstall() throws {
        var facts = Self.gnome()
        facts.component = .missing(searched: ["/usr/share/ibus/component"])
        let report = facts.report
        #expect(!report.ok)
        let check = try #require(report.check("ibus-component"))
        #expect(check.status == .problem)
        #expect(check.finding.contains("/usr/share/ibus/component"))
        #expect(check.fix?.contains("make install") == true)
        #expect(check.fix?.contains("log out and in") == true)
    }

    @Test func aComponentIBusHasNotLoadedNamesANewLogin() throws {
        var facts = Self.gnome()
        facts.component = .notLoaded(file: "/home/u/.local/share/ibus/component/sttd.xml")
        let check = try #require(facts.report.check("ibus-component"))
        #expect(check.status == .problem)
        #expect(check.fix?.contains("log out and in") == true)
    }

    @Test func dictationNotAmongGnomeSourcesNamesSettings() throws {
        var facts = Self.gnome()
        facts.gnomeInputSources = "[('xkb', 'us')]"
        facts.service = .reachable(.init(inputMethod: ""))
        let report = facts.report
        #expect(!report.ok)
        #expect(report.check("input-source")?.status == .problem)
        #expect(report.check("input-source")?.fix?.contains("Input Sources → + → English → Dictation") == true)
        #expect(report.check("input-method")?.fix?.contains("Super+Space") == true)
    }

    @Test func anotherEngineSelectedOnX11NamesIBusEngineSttd() throws {
        var facts = Self.x11WithoutIBus()
        facts.component = .listed
        facts.currentEngine = "xkb:us::eng"
        facts.typing = .fails("typing with xdotool needs xdotool, which is not installed: install xdotool")
        let report = facts.report
        #expect(!report.ok)
        let check = try #require(report.check("input-source"))
        #expect(check.status == .problem)
        #expect(check.finding.contains("xkb:us::eng"))
        #expect(check.fix?.contains("ibus engine sttd") == true)
        #expect(report.check("input-method")?.fix == "`ibus engine sttd`")
    }

    @Test func kdeWithoutIBusWaylandNamesTheVirtualKeyboardSetting() throws {
        var facts = Self.gnome()
        facts.session = ["WAYLAND_DISPLAY": "wayland-0", "XDG_CURRENT_DESKTOP": "KDE"]
        facts.kwinInputMethod = nil
        let check = try #require(facts.report.check("input-source"))
        #expect(check.status == .problem)
        #expect(check.fix?.contains("Virtual Keyboard → IBus Wayland") == true)
        facts.kwinInputMethod = "/usr/share/applications/io.github.sttd.IBusWayland.desktop"
        #expect(facts.report.check("input-source")?.status == .ok)
        // IBus's own entry: dictation works, but its ibus-wayland drops the password purpose.
        facts.kwinInputMethod = "/usr/share/applications/org.freedesktop.IBus.Panel.Wayland.Gtk3.desktop"
        let own = try #require(facts.report.check("input-source"))
        #expect(own.status == .warning && own.fix?.contains("io.github.sttd.IBusWayland.desktop") == true)
    }

    @Test func qtOnGnomeWaylandWithoutTheModuleNamesQtIMModule() throws {
        var facts = Self.gnome()
        facts.session["QT_IM_MODULE"] = nil
        let report = facts.report
        // GTK apps still get text: a warning that names the fix, and dictation still works.
        #expect(report.ok)
        let check = try #require(report.check("im-modules"))
        #expect(check.status == .warning)
        #expect(check.finding.contains("QT_IM_MODULE=(unset)"))
        #expect(check.fix?.contains("QT_IM_MODULE=ibus") == true)
        #expect(Self.gnome().report.check("im-modules")?.status == .ok)
    }

    @Test func gtk4OnX11WithoutItsModuleNamesIBusGtk4() throws {
        var facts = Self.x11WithoutIBus()
        facts.gtk4IBusModule = false
        #expect(facts.report.check("im-modules")?.fix?.contains("sudo apt install ibus-gtk4") == true)
    }

    @Test func noTypingToolAndNoInputMethodFailsNamingThePackage() throws {
        var facts = Self.x11WithoutIBus()
        facts.typing = .fails(
            "typing with xdotool needs xdotool, which is not installed: install the Debian package xdotool (sudo apt install xdotool)"
        )
        let report = facts.report
        #expect(!report.ok)
        #expect(report.route == nil)
        let check = try #require(report.check("typing-tool"))
        #expect(check.status == .problem)
        #expect(check.finding == "typing with xdotool needs xdotool, which is not installed")
        #expect(check.fix == "install the Debian package xdotool (sudo apt install xdotool)")
        #expect(report.check("ibus-component")?.status == .problem)
        #expect(report.text.contains("✗ typing-tool: typing with xdotool needs xdotool"))
        #expect(report.text.contains("    fix: install the Debian package xdotool"))
    }

    @Test func aUnitWithoutADisplayNamesTheImport() throws {
        var facts = Self.x11WithoutIBus()
        facts.serviceEnvironment = ["PATH": "/usr/bin"]
        facts.typing = .fails("no graphical session: neither WAYLAND_DISPLAY nor DISPLAY is set for sttd (run …)")
        let report = facts.report
        #expect(!report.ok)
        for id in ["service-environment", "typing-tool"] {
            let check = try #require(report.check(id))
            #expect(check.status == .problem, "\(id)")
            #expect(check.fix?.contains("dbus-update-activation-environment --systemd WAYLAND_DISPLAY DISPLAY") == true)
            #expect(check.fix?.contains("systemctl --user restart sttd") == true)
        }
    }

    @Test func aUnitWithAnotherDisplayIsAWarning() throws {
        var facts = Self.x11WithoutIBus()
        facts.serviceEnvironment = ["DISPLAY": ":1"]
        let check = try #require(facts.report.check("service-environment"))
        #expect(check.status == .warning)
        #expect(check.finding.contains("DISPLAY=:1") && check.finding.contains("DISPLAY=:0"))
    }

    @Test func theEngineNotReadyFailsWhateverTheRoute() throws {
        var facts = Self.gnome()
        facts.service = .reachable(.init(authorization: "restricted", inputMethod: "focused"))
        let report = facts.report
        #expect(!report.ok)
        #expect(report.check("engine")?.fix?.contains("pocketsphinx-en-us") == true)
        facts.service = .reachable(.init(microphone: "unavailable", inputMethod: "focused"))
        #expect(facts.report.check("microphone")?.fix?.contains("pactl info") == true)
        #expect(!facts.report.ok)
    }

    @Test func sttdUnreachableNamesHowToStartIt() throws {
        var facts = Self.x11WithoutIBus()
        facts.service = .unreachable("sttd is not running and could not be started")
        let report = facts.report
        #expect(!report.ok)
        #expect(report.check("service")?.fix?.contains("systemctl --user start sttd") == true)
        #expect(report.check("engine") == nil, "nothing to ask without sttd")
    }

    @Test func jsonHasTheVerdictAndEveryCheck() throws {
        let report = Self.x11WithoutIBus().report
        let object = try #require(
            try JSONSerialization.jsonObject(with: Data(report.jsonLine.utf8)) as? [String: Any])
        #expect(object["ok"] as? Bool == true)
        #expect(object["route"] as? String == "typing")
        let checks = try #require(object["checks"] as? [[String: Any]])
        #expect(checks.count == report.checks.count)
        let component = try #require(checks.first { $0["id"] as? String == "ibus-component" })
        #expect(component["status"] as? String == "warning")
        #expect(component["fix"] as? String == report.check("ibus-component")?.fix)
        #expect(checks.first { $0["id"] as? String == "service" }?["fix"] is NSNull)
    }
}
