import Testing

@testable import Speech

/// Issue 37: each input method's last report is kept; when the newest leaves, the one still on
/// the bus takes over at once.
@Suite("The input methods")
struct InputMethodsTests {
    static let focused = InputMethodReport(active: true, focused: true)

    @Test func anImpostorThatReportsAndExitsHandsTheRouteBack() {
        var methods = InputMethods()
        methods.update(from: .bus(":1.10"), Self.focused)
        methods.update(from: .bus(":1.99"), InputMethodReport(active: false))
        #expect(methods.active == nil, "the newest report counts")
        #expect(methods.departed(.bus(":1.99"))?.report == InputMethodReport(active: false))
        #expect(methods.active?.report == Self.focused, "sttd-ibus takes over again at once")
    }

    @Test func theCurrentOneLeavingWithNoOtherLeavesNone() {
        var methods = InputMethods()
        methods.update(from: .bus(":1.10"), Self.focused)
        #expect(methods.departed(.bus(":1.7")) == nil, "not an input method")
        #expect(methods.active?.report == Self.focused)
        #expect(methods.departed(.bus(":1.10"))?.report == Self.focused)
        #expect(methods.active == nil)
    }

    @Test func anOlderOneLeavingChangesNothing() {
        var methods = InputMethods()
        methods.update(from: .bus(":1.10"), InputMethodReport(active: true))
        methods.update(from: .bus(":1.11"), Self.focused)
        methods.departed(.bus(":1.10"))
        #expect(methods.active?.report == Self.focused)
    }

    @Test func theReportsKeptAreBounded() {
        var methods = InputMethods()
        for index in 0..<(InputMethods.limit * 4) { methods.update(from: .bus(":1.\(index)"), Self.focused) }
        for index in (InputMethods.limit * 3)..<(InputMethods.limit * 4) { methods.departed(.bus(":1.\(index)")) }
        #expect(methods.active == nil, "only the newest \(InputMethods.limit) were kept")
    }

    @Test func theLastReportSaysWhetherPushToTalkWasHeld() {
        var methods = InputMethods()
        methods.update(from: .bus(":1.10"), InputMethodReport(active: true, focused: true, pushToTalk: true))
        #expect(methods.departed(.bus(":1.10"))?.report.pushToTalk == true)
    }
}
