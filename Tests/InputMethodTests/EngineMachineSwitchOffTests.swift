import SpeechAPI
import Testing

@testable import InputMethod

/// GNOME Shell switches IBus to the keyboard layout while a password field has the focus: the
/// engine is disabled (or destroyed), and sttd must still hear "a password field", or it would
/// type there with its tools instead.
@Suite struct EngineMachineSwitchOffTests {
    static let field = EngineMachineTests.field
    static let secretOff = InputMethodState(active: false, focused: true, secret: true)

    @Test(arguments: [true, false])
    func switchedOffInAPasswordFieldStaysSecretUntilAFieldHasTheFocus(focusOutFirst: Bool) {
        var machine = EngineMachineTests.focusedMachine(purpose: IBus.password)
        if focusOutFirst { _ = machine.handle(.focusOut(path: Self.field)) }
        #expect(machine.handle(.disabled(path: Self.field)).last == .report(Self.secretOff))
        #expect(machine.state.summary == "secret")
        // ibus-daemon focuses its own context (the desktop) while it switches engines: no field.
        _ = machine.handle(.focusIn(path: Self.field, client: "fake"))
        #expect(machine.state == Self.secretOff)
        _ = machine.handle(.destroyed(path: Self.field))
        #expect(machine.state == Self.secretOff)

        // Back in an ordinary field, GNOME switches Dictation on again: a new engine.
        let next = "/org/freedesktop/IBus/Engine/2"
        _ = machine.handle(.created(path: next))
        #expect(machine.handle(.enabled(path: next)).last == .report(InputMethodState(active: true)))
        _ = machine.handle(.focusIn(path: next, client: "gtk3-im:test"))
        _ = machine.handle(.settled(2))  // the machine's second focus
        #expect(machine.state == InputMethodState(active: true, focused: true))
    }

    /// On a busy machine GNOME switches off before the focus change has settled.
    @Test func switchedOffBeforeTheFocusSettledInAPasswordFieldIsSecret() {
        var machine = EngineMachine()
        _ = machine.handle(.created(path: Self.field))
        _ = machine.handle(.enabled(path: Self.field))
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk4-im:test"))
        _ = machine.handle(.contentType(path: Self.field, purpose: IBus.password))
        #expect(machine.handle(.disabled(path: Self.field)).last == .report(Self.secretOff))
    }

    /// The user switching away from Dictation in an ordinary field: the input method is off, and
    /// says nothing of a field.
    @Test func switchedOffInAnOrdinaryFieldIsOff() {
        var machine = EngineMachineTests.focusedMachine()
        #expect(machine.handle(.disabled(path: Self.field)).last == .report(InputMethodState()))
        #expect(machine.state.summary == "")
    }

    /// A password field left for a window without the input method, then a new focus: not secret.
    @Test func aFocusAfterThePasswordFieldEndsIt() {
        var machine = EngineMachineTests.focusedMachine(purpose: IBus.password)
        _ = machine.handle(.focusOut(path: Self.field))
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk3-im:other"))
        _ = machine.handle(.contentType(path: Self.field, purpose: 0))
        _ = machine.handle(.disabled(path: Self.field))
        #expect(machine.state == InputMethodState())
    }
}
