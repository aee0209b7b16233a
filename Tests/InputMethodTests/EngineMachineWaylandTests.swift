import SpeechAPI
import Testing

@testable import InputMethod

/// KWin's fields through ibus-wayland: their purpose comes from `sttd-ibus --wayland`.
@Suite struct EngineMachineWaylandTests {
    typealias Action = EngineMachine.Action
    static let field = EngineMachineTests.field

    /// An enabled engine whose ibus-wayland field has the focus, settled, its purpose unknown.
    static func activatedMachine() -> EngineMachine {
        var machine = EngineMachine()
        _ = machine.handle(.created(path: field))
        _ = machine.handle(.enabled(path: field))
        _ = machine.handle(.waylandPurpose(nil))
        _ = machine.handle(.focusIn(path: field, client: "wayland"))
        _ = machine.handle(.settled(1))
        return machine
    }

    @Test func textWaitsUntilTheFieldsPurposeIsKnownThenGoesIn() {
        var machine = Self.activatedMachine()
        #expect(machine.state == InputMethodState(active: true), "not a field sttd may type into yet")
        #expect(machine.handle(.preedit("hel")) == [])
        #expect(machine.handle(.deliver(.commit("Hello."))) == [])
        #expect(
            machine.handle(.waylandPurpose(0)) == [
                .commit(path: Self.field, text: "Hello."), .report(InputMethodState(active: true, focused: true)),
            ])
    }

    @Test func aPasswordFieldGetsNothingAndSttdHearsSecret() {
        var machine = Self.activatedMachine()
        #expect(machine.handle(.deliver(.commit("hunter2"))) == [])
        #expect(
            machine.handle(.waylandPurpose(8)) == [
                .dropped(characters: 7, secret: true),
                .report(InputMethodState(active: true, focused: true, secret: true)),
            ])
        #expect(machine.handle(.preedit("pass")) == [])
        #expect(machine.handle(.deliver(.commit("word"))) == [.dropped(characters: 4, secret: true)])
    }

    /// The proxy's purpose is for ibus-wayland's contexts alone; other clients' fields keep IBus's.
    @Test func otherClientsIgnoreTheWaylandPurpose() {
        var machine = EngineMachineTests.focusedMachine()
        _ = machine.handle(.waylandPurpose(nil))
        #expect(machine.handle(.deliver(.commit("Hi"))) == [.commit(path: Self.field, text: "Hi")])
        _ = machine.handle(.waylandPurpose(8))
        #expect(machine.state == InputMethodState(active: true, focused: true))
    }

    /// Without the proxy (plain ibus-wayland) a field is ordinary, as before.
    @Test func withoutTheProxyAWaylandFieldIsOrdinary() {
        var machine = EngineMachine()
        _ = machine.handle(.created(path: Self.field))
        _ = machine.handle(.enabled(path: Self.field))
        _ = machine.handle(.focusIn(path: Self.field, client: "wayland"))
        _ = machine.handle(.settled(1))
        #expect(machine.handle(.deliver(.commit("Hi"))) == [.commit(path: Self.field, text: "Hi")])
    }
}
