import SpeechAPI
import Testing

@testable import SpeechBus

/// Issue 37: each input method's last report is kept; when the newest leaves, the one still on
/// the bus takes over at once.
@Suite("The input method route")
struct InputMethodRouteTests {
    static let focused = InputMethodState(active: true, focused: true)

    @Test func anImpostorThatReportsAndExitsHandsTheRouteBack() {
        let route = InputMethodRoute()
        route.update(from: ":1.10", Self.focused)
        route.update(from: ":1.99", InputMethodState(active: false))
        #expect(route.activeState == nil, "the newest report counts")
        #expect(route.departed(":1.99") == InputMethodState(active: false))
        #expect(route.activeState == Self.focused, "sttd-ibus takes over again at once")
    }

    @Test func theCurrentOneLeavingWithNoOtherLeavesNone() {
        let route = InputMethodRoute()
        route.update(from: ":1.10", Self.focused)
        #expect(route.departed(":1.7") == nil, "not an input method")
        #expect(route.activeState == Self.focused)
        #expect(route.departed(":1.10") == Self.focused)
        #expect(route.activeState == nil)
    }

    @Test func anOlderOneLeavingChangesNothing() {
        let route = InputMethodRoute()
        route.update(from: ":1.10", InputMethodState(active: true))
        route.update(from: ":1.11", Self.focused)
        route.departed(":1.10")
        #expect(route.activeState == Self.focused)
    }

    @Test func theReportsKeptAreBounded() {
        let route = InputMethodRoute()
        for index in 0..<(InputMethodRoute.limit * 4) { route.update(from: ":1.\(index)", Self.focused) }
        for index in (InputMethodRoute.limit * 3)..<(InputMethodRoute.limit * 4) { route.departed(":1.\(index)") }
        #expect(route.activeState == nil, "only the newest \(InputMethodRoute.limit) were kept")
    }

    @Test func theLastReportSaysWhetherPushToTalkWasHeld() {
        let route = InputMethodRoute()
        route.update(from: ":1.10", InputMethodState(active: true, focused: true, pushToTalk: true))
        #expect(route.departed(":1.10")?.pushToTalk == true)
    }
}
