import Testing

@testable import WaylandInputMethod

/// A field that hides its text activates the input method as an ordinary one on sway (GTK's
/// entry with visibility off): the probe tells them apart before any text goes in.
@Suite("The Wayland input method's probe for hidden fields")
struct SeatMachineProbeTests {
    typealias Action = SeatMachine.Action

    /// A machine with an empty field that reports its text.
    static func emptyField() -> SeatMachine {
        SeatMachineTests.machine(surrounding: "")
    }

    static func answer(_ machine: inout SeatMachine, _ shown: String) -> [Action] {
        _ = machine.handle(.surroundingText(shown, cursor: UInt32(shown.utf8.count)))
        return machine.handle(.done)
    }

    @Test func anOrdinaryEmptyFieldGetsTheProbeTakenBackThenTheText() {
        var machine = Self.emptyField()
        #expect(
            machine.handle(.deliver(.commit("Hello")))
                == [.send(Commit(preedit: "", text: " ", serial: 1)), .probeSent])
        // A report from before the probe arrived decides nothing; an empty commit asks again.
        #expect(Self.answer(&machine, "") == [.send(Commit(preedit: "", serial: 2))])
        #expect(
            SeatMachineTests.sent(Self.answer(&machine, " "))
                == [Commit(preedit: "", deleteBefore: 1, serial: 3), Commit(preedit: "", text: "Hello", serial: 3)])
        #expect(!machine.report.secret)
    }

    @Test func aHiddenFieldGetsNothingAndReportsSecret() {
        var machine = Self.emptyField()
        _ = machine.handle(.preedit("hunter"))
        let actions = Self.answer(&machine, "●")
        #expect(SeatMachineTests.sent(actions) == [Commit(preedit: "", deleteBefore: 1, serial: 2)])
        #expect(actions.contains(.report(FieldReport(active: true, focused: true, secret: true))))
        #expect(machine.handle(.deliver(.commit("hunter2"))) == [.dropped(characters: 7, secret: true)])
        #expect(machine.handle(.preedit("more")) == [])
    }

    @Test func aFieldShowingOnlyInvisibleCharactersIsHiddenWithoutAProbe() {
        var machine = SeatMachineTests.machine(surrounding: "•••")
        #expect(machine.handle(.deliver(.commit("x"))) == [.dropped(characters: 1, secret: true), .report(FieldReport(active: true, focused: true, secret: true))])
    }

    @Test func aFieldWithTextIsOrdinaryWithoutAProbe() {
        var machine = SeatMachineTests.machine(surrounding: "Dear Ann,")
        #expect(SeatMachineTests.sent(machine.handle(.deliver(.commit(" hi")))).map(\.text) == [" hi"])
    }

    /// A field that does not show its text gets nothing, as a hidden one; a key takes the space back.
    @Test func aFieldThatDoesNotAnswerGetsNothing() {
        var machine = Self.emptyField()
        _ = machine.handle(.deliver(.commit("Hello")))
        let actions = machine.handle(.probeOverdue)
        #expect(actions.prefix(2) == [.probeUnanswered, .pressKey("BackSpace")])
        #expect(actions.contains(.dropped(characters: 5, secret: true)))
        #expect(SeatMachineTests.sent(actions).isEmpty)
    }

    @Test func aNewFieldIsProbedAgain() {
        var machine = Self.emptyField()
        _ = machine.handle(.deliver(.commit("Hello")))
        _ = Self.answer(&machine, " ")
        SeatMachineTests.activate(&machine, surrounding: "")
        #expect(machine.handle(.deliver(.commit("Again"))).contains(.probeSent))
    }

    @Test func terminalsAndFieldsWithoutSurroundingTextAreNotProbed() {
        var terminal = SeatMachineTests.machine(purpose: 13, surrounding: "")
        #expect(!terminal.handle(.deliver(.commit("ls"))).contains(.probeSent))
        var silent = SeatMachineTests.machine()
        #expect(!silent.handle(.deliver(.commit("ls"))).contains(.probeSent))
    }

    @Test(arguments: ["firefox-esr", "chromium", "Google-chrome"])
    func browsersAreNotProbed(_ app: String) {
        var machine = SeatMachine()
        _ = machine.handle(.bound)
        _ = machine.handle(.focusedApp(app))
        SeatMachineTests.activate(&machine, surrounding: "")
        #expect(!machine.handle(.deliver(.commit("Hello"))).contains(.probeSent))
    }

    @Test(arguments: ["●●●", "***", "•"])
    func invisibleCharactersLookHidden(_ text: String) {
        #expect(SeatMachine.looksHidden(text))
    }

    @Test(arguments: ["", "a●", "●*", " "])
    func otherTextDoesNot(_ text: String) {
        #expect(!SeatMachine.looksHidden(text))
    }
}
