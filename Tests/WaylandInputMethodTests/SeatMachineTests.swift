import Testing

@testable import WaylandInputMethod

@Suite("The Wayland input method's rules (SeatMachine)")
struct SeatMachineTests {
    typealias Action = SeatMachine.Action

    /// A machine holding the seat, with a field of this content type activated.
    static func machine(purpose: UInt32 = 0, hint: UInt32 = 0, surrounding: String? = nil) -> SeatMachine {
        var machine = SeatMachine()
        _ = machine.handle(.bound)
        _ = activate(&machine, purpose: purpose, hint: hint, surrounding: surrounding)
        return machine
    }

    @discardableResult
    static func activate(
        _ machine: inout SeatMachine, purpose: UInt32 = 0, hint: UInt32 = 0, surrounding: String? = nil
    ) -> [Action] {
        _ = machine.handle(.activate)
        if let surrounding { _ = machine.handle(.surroundingText(surrounding, cursor: UInt32(surrounding.utf8.count))) }
        _ = machine.handle(.contentType(ContentType(hint: hint, purpose: purpose)))
        return machine.handle(.done)
    }

    static func sent(_ actions: [Action]) -> [Commit] {
        actions.compactMap { if case .send(let commit) = $0 { commit } else { nil } }
    }

    @Test func stateChangesOnlyAtDoneAndReportsOnlyChanges() {
        var machine = SeatMachine()
        #expect(machine.handle(.bound) == [.report(FieldReport(active: true))])
        #expect(machine.handle(.activate) == [])
        #expect(machine.handle(.contentType(ContentType(purpose: 8))) == [])
        #expect(machine.handle(.done) == [.report(FieldReport(active: true, focused: true, secret: true))])
        #expect(machine.handle(.done) == [])
        _ = machine.handle(.deactivate)
        #expect(machine.handle(.done) == [.report(FieldReport(active: true))])
    }

    @Test func aFinalIsCommittedWithTheDoneCountAsSerial() {
        var machine = Self.machine()
        let commits = Self.sent(machine.handle(.deliver(.commit(" café 😀"))))
        #expect(commits == [Commit(preedit: "", text: " café 😀", serial: 1)])
        _ = machine.handle(.done)
        #expect(Self.sent(machine.handle(.deliver(.commit("x")))).map(\.serial) == [2])
    }

    @Test(arguments: [(UInt32(8), UInt32(0)), (9, 0), (0, 0x40), (0, 0x80)])
    func secretFieldsGetNothing(purpose: UInt32, hint: UInt32) {
        var machine = Self.machine(purpose: purpose, hint: hint)
        #expect(machine.report.secret)
        #expect(machine.handle(.preedit("hello")) == [])
        #expect(machine.handle(.deliver(.commit("hunter2"))) == [.dropped(characters: 7, secret: true)])
        #expect(machine.handle(.deliver(.key("Return"))) == [])
    }

    @Test func textWithNoActiveFieldIsDropped() {
        var machine = SeatMachine()
        _ = machine.handle(.bound)
        #expect(machine.handle(.deliver(.commit("Hello"))) == [.dropped(characters: 5, secret: false)])
        #expect(machine.handle(.deliver(.key("Return"))) == [])
    }

    @Test func textWaitsForTheDoneOfAnActivation() {
        var machine = SeatMachine()
        _ = machine.handle(.bound)
        _ = machine.handle(.activate)
        #expect(machine.handle(.deliver(.commit("Hello"))) == [])
        _ = machine.handle(.contentType(ContentType(purpose: 8)))
        let actions = machine.handle(.done)
        #expect(actions.contains(.dropped(characters: 5, secret: true)))
        #expect(Self.sent(actions).isEmpty)
    }

    @Test func thePreeditRidesWithEveryCommitAndFollowsANewField() {
        var machine = Self.machine()
        #expect(Self.sent(machine.handle(.preedit(" hel"))) == [Commit(preedit: " hel", serial: 1)])
        // A final clears the interim it ends; a later interim rides with the next commit.
        #expect(Self.sent(machine.handle(.deliver(.commit(" hello")))).map(\.preedit) == [""])
        _ = machine.handle(.preedit(" wor"))
        #expect(Self.sent(machine.handle(.deliver(.key("Return")))) == [])
        #expect(Self.sent(Self.activate(&machine)) == [Commit(preedit: " wor", serial: 2)])
    }

    @Test func aFieldThatBecomesSecretLosesItsPreedit() {
        var machine = Self.machine()
        _ = machine.handle(.preedit("secret words"))
        _ = machine.handle(.contentType(ContentType(purpose: 8)))
        #expect(Self.sent(machine.handle(.done)) == [Commit(preedit: "", serial: 2)])
    }

    @Test func scratchThatDeletesTheNewestCommitInBytes() {
        var machine = Self.machine()
        _ = machine.handle(.deliver(.commit(" Hello")))
        #expect(machine.handle(.deliver(.delete(characters: 5))) == [.deleteRefused(characters: 5)])
        _ = machine.handle(.deliver(.commit(" Hello")))
        #expect(
            Self.sent(machine.handle(.deliver(.delete(characters: 6))))
                == [Commit(preedit: "", deleteBefore: 6, serial: 1)])
        // Only once: the text before it was committed before the refusal, and is the field's own.
        #expect(machine.handle(.deliver(.delete(characters: 1))) == [.deleteRefused(characters: 1)])
    }

    /// GTK 3 takes delete_surrounding_text's bytes for characters: text that is not ASCII goes
    /// with one BackSpace per character.
    @Test func scratchThatOfTextThatIsNotASCIIIsBackSpaces() {
        var machine = Self.machine()
        _ = machine.handle(.deliver(.commit(" café 😀")))
        #expect(machine.handle(.deliver(.delete(characters: 7))) == Array(repeating: .pressKey("BackSpace"), count: 7))
    }

    @Test func scratchThatInATerminalIsBackSpaces() {
        var machine = Self.machine(purpose: 13)
        _ = machine.handle(.deliver(.commit(" né")))
        #expect(machine.handle(.deliver(.delete(characters: 3))) == Array(repeating: .pressKey("BackSpace"), count: 3))
    }

    @Test func aNewActivationOrAKeyMakesEarlierTextTheFieldsOwn() {
        var machine = Self.machine()
        _ = machine.handle(.deliver(.commit("One")))
        Self.activate(&machine)
        #expect(machine.handle(.deliver(.delete(characters: 3))) == [.deleteRefused(characters: 3)])
        _ = machine.handle(.deliver(.commit("Two")))
        #expect(machine.handle(.deliver(.key("Return"))) == [.pressKey("Return")])
        #expect(machine.handle(.deliver(.delete(characters: 3))) == [.deleteRefused(characters: 3)])
    }

    @Test func userTextAfterTheCommitWasSeenRefusesTheDeletion() {
        var machine = Self.machine(surrounding: "Keep")
        _ = machine.handle(.deliver(.commit(" mine")))
        // A report older than the commit changes nothing.
        _ = machine.handle(.surroundingText("Keep", cursor: 4))
        _ = machine.handle(.done)
        _ = machine.handle(.surroundingText("Keep mine", cursor: 9))
        _ = machine.handle(.done)
        _ = machine.handle(.surroundingText("Keep mine typed", cursor: 15))
        _ = machine.handle(.done)
        #expect(machine.handle(.deliver(.delete(characters: 5))) == [.deleteRefused(characters: 5)])
    }

    /// Firefox reports its text a batch late (and with the cause "other" even for sttd's own commit, which the machine does not read).
    @Test func aLateReportOfTheFieldsTextRefusesNothing() {
        var machine = Self.machine(surrounding: "Keep")
        _ = machine.handle(.deliver(.commit(" mine")))
        _ = machine.handle(.surroundingText("Keep", cursor: 4))
        _ = machine.handle(.done)
        #expect(
            Self.sent(machine.handle(.deliver(.delete(characters: 5))))
                == [Commit(preedit: "", deleteBefore: 5, serial: 2)])
    }

    @Test func unavailableNeverReportsActive() {
        var machine = SeatMachine()
        #expect(machine.handle(.unavailable) == [.report(FieldReport())])
        #expect(machine.handle(.deliver(.commit("x"))) == [.dropped(characters: 1, secret: false)])
    }

    @Test func longTextIsCommittedInPiecesThatKeepCharactersWhole() {
        let text = String(repeating: "e\u{301}😀", count: 700)  // 7 bytes in two characters
        let pieces = Commit.pieces(of: text)
        #expect(pieces.joined() == text)
        #expect(pieces.allSatisfy { $0.utf8.count <= Commit.stringLimit })
        // A character cut in two would count twice.
        #expect(pieces.map(\.count).reduce(0, +) == text.count)
        var machine = Self.machine()
        let commits = Self.sent(machine.handle(.deliver(.commit(text))))
        #expect(commits.count == pieces.count)
        #expect(Commit.shownPreedit(text).utf8.count <= Commit.stringLimit)
    }
}
