import Testing

@testable import Speech

/// Issue 41: IBus (for XWayland apps) beside sttd's Wayland input method. Text goes to the one
/// whose field has the focus, whichever reported last; IBus alone behaves as before
/// (InputMethodsTests).
@Suite("Input methods of two kinds")
struct InputMethodKindsTests {
    static let ibus = InputMethodID.bus(":1.10")
    static let wayland = InputMethodID.wayland(seat: "seat0")
    static let focused = InputMethodReport(active: true, focused: true)
    static let unfocused = InputMethodReport(active: true)

    @Test func aWaylandInputMethodIsKnownByItsSeat() {
        #expect(Self.wayland.description == "wayland:seat0")
        #expect(Self.wayland != .bus("wayland:seat0"))
    }

    @Test func theFocusedFieldsInputMethodIsCurrentWhicheverReportedLast() {
        var methods = InputMethods()
        methods.update(from: Self.ibus, Self.focused)
        methods.update(from: Self.wayland, Self.unfocused)
        #expect(methods.current?.id == Self.ibus, "an XWayland app's field has the focus")
        methods.update(from: Self.wayland, Self.focused)
        methods.update(from: Self.ibus, Self.unfocused)
        #expect(methods.current?.id == Self.wayland, "a focus-out after the other's focus-in takes nothing away")
        methods.update(from: Self.ibus, Self.focused)
        #expect(methods.current?.id == Self.ibus, "both say focused (for a moment): the newest")
    }

    @Test func withNoFieldFocusedTheNewestIsCurrent() {
        var methods = InputMethods()
        methods.update(from: Self.wayland, Self.unfocused)
        methods.update(from: Self.ibus, InputMethodReport(active: false))
        #expect(methods.current?.id == Self.ibus)
        #expect(methods.active == nil)
        methods.update(from: Self.wayland, Self.unfocused)
        #expect(methods.active?.id == Self.wayland)
    }

    @Test func aSecretFieldIsWhatTheFocusedOneSays() {
        var methods = InputMethods()
        methods.update(from: Self.ibus, InputMethodReport(active: true, focused: true, secret: true))
        methods.update(from: Self.wayland, Self.unfocused)
        #expect(methods.secretFieldFocused)
        methods.update(from: Self.wayland, Self.focused)
        methods.update(from: Self.ibus, Self.unfocused)
        #expect(!methods.secretFieldFocused)
    }

    /// As with IBus alone, a newer report on the bus (an impostor's) hides an older engine's.
    @Test func ofOneKindTheNewestReportStandsForIt() {
        var methods = InputMethods()
        methods.update(from: .bus(":1.10"), Self.focused)
        methods.update(from: Self.wayland, Self.unfocused)
        methods.update(from: .bus(":1.99"), InputMethodReport(active: false))
        #expect(methods.current?.id == .bus(":1.99"))
        methods.departed(.bus(":1.99"))
        #expect(methods.current?.id == .bus(":1.10"))
    }

    @Test func reportsOnTheBusCannotPushTheWaylandOneOut() {
        var methods = InputMethods()
        methods.update(from: Self.wayland, Self.focused)
        for index in 0..<(InputMethods.limit * 2) { methods.update(from: .bus(":1.\(index)"), Self.unfocused) }
        #expect(methods.contains(Self.wayland))
        #expect(methods.current?.id == Self.wayland)
        #expect(methods.engines.count == InputMethods.limit + 1)
    }

    @Test func whenTheWaylandOneDepartsIBusTakesOver() {
        var methods = InputMethods()
        methods.update(from: Self.ibus, Self.unfocused)
        methods.update(from: Self.wayland, Self.focused)
        #expect(methods.departed(.wayland(seat: "seat1")) == nil)
        #expect(methods.departed(Self.wayland)?.wasCurrent == true)
        #expect(methods.current?.id == Self.ibus)
    }

    /// Finals go to the input method whose field has the focus; `InputMethod` shows its report.
    @Test func dictationFollowsTheFocusedField() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            await harness.core.reportInputMethod(Self.focused, from: Self.ibus)
            await harness.core.reportInputMethod(Self.unfocused, from: Self.wayland)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("into xterm")
            try await harness.log.wait { $0.contains(.inputMethodText(.commit("into xterm"), to: Self.ibus)) }
            await harness.core.reportInputMethod(Self.focused, from: Self.wayland)
            await harness.core.reportInputMethod(Self.unfocused, from: Self.ibus)
            session.final("into foot")
            try await harness.log.wait { $0.contains(.inputMethodText(.commit(" into foot"), to: Self.wayland)) }
            #expect(await harness.core.stop() == "into xterm into foot")
            let shown = harness.log.all.compactMap { if case .inputMethod(let report) = $0 { report } else { nil } }
            #expect(shown == [Self.focused, Self.focused], "the focus-outs of the one not current are not shown")
            let commits = harness.log.all.compactMap { event -> String? in
                if case .inputMethodText(.commit(let text), let id) = event { "\(id) \(text)" } else { nil }
            }
            #expect(commits == [":1.10 into xterm", "wayland:seat0  into foot"])
        }
    }

    @Test func theWaylandOneDepartingHandsTheTextBackToIBus() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            await harness.core.reportInputMethod(Self.focused, from: Self.ibus)
            await harness.core.reportInputMethod(Self.focused, from: Self.wayland)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            await harness.core.inputMethodDeparted(Self.wayland)
            await harness.core.inputMethodDeparted(Self.wayland)
            session.final("hello")
            try await harness.log.wait { $0.contains(.inputMethodText(.commit("hello"), to: Self.ibus)) }
            #expect(await harness.core.state == .listening, "the session goes on")
            let shown = harness.log.all.compactMap { if case .inputMethod(let report) = $0 { report } else { nil } }
            #expect(shown == [Self.focused, Self.focused, Self.focused], "IBus's report, shown again; once")
            _ = await harness.core.stop()
        }
    }

    /// Only a connection on the bus can leave it: a session never depends on the Wayland one.
    @Test func aWaylandInputMethodHoldsNoSessionOpen() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            await harness.core.reportInputMethod(Self.focused, from: Self.wayland)
            #expect(await harness.core.mustStay(Caller(name: "host", connection: "seat0")) == nil)
            #expect(await harness.core.mustStay(Caller(name: "host", connection: "wayland:seat0")) == nil)
        }
    }
}
