import SpeechAPI
import Testing

@testable import Control

/// `sttctl doctor` on a wlroots compositor, where sttd can be the input method itself
/// (`WaylandInputMethod`, issue 41).
@Suite("sttctl doctor on sway")
struct DoctorWaylandTests {
    static let sway = ["WAYLAND_DISPLAY": "wayland-1", "XDG_SESSION_TYPE": "wayland", "XDG_CURRENT_DESKTOP": "sway"]

    /// sway with no IBus at all and wtype installed; sttd says `waylandInputMethod`.
    static func sway(_ waylandInputMethod: WaylandInputMethodStatus, inputMethod: String = "") -> DoctorFacts {
        DoctorFacts(
            service: .reachable(
                .init(version: "0.1.0", inputMethod: inputMethod, waylandInputMethod: waylandInputMethod)),
            session: sway, serviceEnvironment: ["WAYLAND_DISPLAY": "wayland-1"],
            component: .missing(searched: ["/usr/share/ibus/component"]), currentEngine: nil, typing: .works("wtype"))
    }

    @Test func sttdHoldingTheSeatIsTheInputMethodRoute() throws {
        let report = Self.sway(.held(seat: "seat0"), inputMethod: "active").report
        #expect(report.ok)
        #expect(report.route == .inputMethod)
        let source = try #require(report.check("input-source"))
        #expect(source.status == .ok)
        #expect(source.finding == "sttd is the input method on seat0 (live text through zwp_input_method_v2)")
        #expect(source.fix == nil)
        #expect(report.check("input-method")?.status == .ok)
        // IBus serves XWayland apps at most: its absence cannot stop the route.
        let component = try #require(report.check("ibus-component"))
        #expect(component.status == .warning)
        #expect(component.finding.contains("sttd is the input method"))
        #expect(report.check("im-modules")?.finding.hasSuffix("apps hand their text fields to sttd") == true)
    }

    @Test func anotherInputMethodOnTheSeatNamesQuittingItOrTheSetting() throws {
        var facts = Self.sway(.unavailable(seat: "seat0"))
        facts.typing = .fails("typing with wtype needs wtype, which is not installed: sudo apt install wtype")
        let report = facts.report
        #expect(!report.ok)
        let source = try #require(report.check("input-source"))
        #expect(source.status == .problem)
        #expect(source.finding.contains("another one holds it"))
        #expect(
            source.fix
                == "another input method (e.g. fcitx5) holds seat0: quit it, or set `[wayland] input_method = false` to keep the typing tools"
        )
        #expect(report.check("input-method")?.fix == source.fix, "not `ibus engine sttd`")
    }

    /// With wtype working the tools carry the text: the taken seat is then a warning.
    @Test func anotherInputMethodOnTheSeatLeavesTheTypingTools() throws {
        let report = Self.sway(.unavailable(seat: "seat1")).report
        #expect(report.ok)
        #expect(report.route == .typing)
        let source = try #require(report.check("input-source"))
        #expect(source.status == .warning)
        #expect(source.fix?.contains("holds seat1") == true)
    }

    /// Off, no such protocol, or the compositor gone: today's advice (type with wtype).
    @Test(arguments: [WaylandInputMethodStatus.off, .unsupported, .disconnected])
    func withoutTheSeatTheAdviceIsWtype(_ status: WaylandInputMethodStatus) throws {
        var facts = Self.sway(status)
        facts.typing = .fails("typing with wtype needs wtype, which is not installed: sudo apt install wtype")
        let source = try #require(facts.report.check("input-source"))
        #expect(source.status == .problem)
        #expect(source.finding == "sway on Wayland does not hand text fields to IBus")
        #expect(source.fix == "type with wtype: `sudo apt install wtype wl-clipboard`")
        #expect(facts.report.check("ibus-component")?.status == .problem)
    }

    /// GTK_IM_MODULE=ibus keeps GTK's fields away from the compositor, so from sttd's input method.
    @Test func gtkWithTheIBusModuleIsAWarningWhereSttdHoldsTheSeat() throws {
        var facts = Self.sway(.held(seat: "seat0"), inputMethod: "active")
        facts.session["GTK_IM_MODULE"] = "ibus"
        let check = try #require(facts.report.check("im-modules"))
        #expect(check.status == .warning)
        #expect(check.finding.contains("GTK apps use the ibus input method module, not sttd's"))
        #expect(check.fix?.contains("remove GTK_IM_MODULE") == true)
        facts.session["GTK_IM_MODULE"] = "wayland"
        #expect(facts.report.check("im-modules")?.status == .ok)
    }

    @Test func everyStatusReadsBackFromTheProperty() {
        let statuses: [WaylandInputMethodStatus] = [
            .off, .held(seat: "seat0"), .unavailable(seat: "seat0"), .unsupported, .disconnected,
        ]
        #expect(statuses.map(\.rawValue) == ["", "seat0", "unavailable:seat0", "unsupported", "disconnected"])
        for status in statuses { #expect(WaylandInputMethodStatus(rawValue: status.rawValue) == status) }
    }
}
