import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

@testable import InputMethod

/// The input method's rules, in-process: events in, actions out.
@Suite struct EngineMachineTests {
    typealias Action = EngineMachine.Action
    static let field = "/org/freedesktop/IBus/Engine/1"

    /// An enabled engine whose ordinary field has the focus, settled; reports dropped.
    static func focusedMachine(purpose: UInt32 = 0) -> EngineMachine {
        var machine = EngineMachine()
        _ = machine.handle(.created(path: field))
        _ = machine.handle(.focusIn(path: field, client: "gtk3-im:test"))
        _ = machine.handle(.enabled(path: field))
        _ = machine.handle(.contentType(path: field, purpose: purpose))
        _ = machine.handle(.settled(1))
        return machine
    }

    static func texts(_ actions: [Action]) -> [Action] {
        actions.filter { if case .report = $0 { false } else { true } }
    }

    @Test func reportsActiveThenFocusedOnlyOnceTheFocusSettled() {
        var machine = EngineMachine()
        // The first event tells sttd there is an input method, inactive so far.
        #expect(machine.handle(.created(path: Self.field)) == [.report(InputMethodState())])
        #expect(machine.handle(.enabled(path: Self.field)) == [.report(InputMethodState(active: true))])
        #expect(machine.handle(.focusIn(path: Self.field, client: "gtk3-im:test")) == [.settle(1)])
        #expect(machine.handle(.contentType(path: Self.field, purpose: 0)) == [])
        #expect(machine.handle(.settled(1)) == [.report(InputMethodState(active: true, focused: true))])
        #expect(machine.handle(.focusOut(path: Self.field)) == [.report(InputMethodState(active: true))])
        #expect(machine.handle(.disabled(path: Self.field)) == [.report(InputMethodState())])
    }

    /// Issue 29: "scratch that" and "press enter" reach the focused field in order with the text;
    /// while a focus change settles they wait with it; with no field they go nowhere.
    @Test func deletionsAndKeysFollowTheTextInOrder() {
        var machine = Self.focusedMachine()
        #expect(machine.handle(.deliver(.commit("Hello"))) == [.commit(path: Self.field, text: "Hello")])
        #expect(machine.handle(.deliver(.delete(5))) == [.deleteBefore(path: Self.field, characters: 5)])
        #expect(machine.handle(.deliver(.key("Return"))) == [.forwardKey(path: Self.field, keysym: "Return")])
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk3-im:other"))
        #expect(machine.handle(.deliver(.commit("hi"))) == [])
        #expect(machine.handle(.deliver(.delete(2))) == [])
        #expect(machine.handle(.deliver(.key("Tab"))) == [])
        #expect(
            Self.texts(machine.handle(.settled(2))) == [
                .commit(path: Self.field, text: "hi"), .deleteBefore(path: Self.field, characters: 2),
                .forwardKey(path: Self.field, keysym: "Tab"),
            ])
        _ = machine.handle(.focusOut(path: Self.field))
        #expect(machine.handle(.deliver(.delete(2))) == [.deleteRefused(characters: 2)], "no field: nothing to delete")
        #expect(machine.handle(.deliver(.key("Return"))) == [], "no field: no key")
    }

    @Test func aDestroyedEngineStaysGone() {
        var machine = Self.focusedMachine()
        _ = machine.handle(.destroyed(path: Self.field))
        _ = machine.handle(.enabled(path: Self.field))
        #expect(machine.state == InputMethodState(), "a late Enable does not revive it")
    }

    @Test func theDesktopIsNoField() {
        var machine = EngineMachine()
        _ = machine.handle(.created(path: Self.field))
        _ = machine.handle(.enabled(path: Self.field))
        #expect(machine.handle(.focusIn(path: Self.field, client: "fake")) == [])
        #expect(machine.state == InputMethodState(active: true))
        #expect(machine.handle(.deliver(.commit("lost"))) == [.dropped(characters: 4, secret: false)])
    }

    /// Issue 39: IBus 1.5.27 asks `FocusId`, then sends the engine's first focus (its fake
    /// context's) without a client before the answer. That is no field; the next named one is.
    @Test func aFocusWithoutAClientAfterFocusIdWasAskedIsNoField() {
        var machine = EngineMachine()
        _ = machine.handle(.created(path: Self.field))
        #expect(machine.handle(.focusIdAsked(path: Self.field)) == [])
        _ = machine.handle(.enabled(path: Self.field))
        #expect(machine.handle(.focusIn(path: Self.field, client: nil)) == [])
        #expect(machine.state == InputMethodState(active: true))
        #expect(machine.handle(.deliver(.commit("lost"))) == [.dropped(characters: 4, secret: false)])
        #expect(machine.handle(.focusIn(path: Self.field, client: "gtk3-im:test")) == [.settle(1)])

        // An IBus that never asks sends no ids: its focus is a field.
        var older = EngineMachine()
        _ = older.handle(.created(path: Self.field))
        _ = older.handle(.enabled(path: Self.field))
        #expect(older.handle(.focusIn(path: Self.field, client: nil)) == [.settle(1)])
    }

    @Test func interimsArePreeditAndAFinalReplacesThem() {
        var machine = Self.focusedMachine()
        #expect(machine.handle(.preedit("hel")) == [.showPreedit(path: Self.field, text: "hel")])
        #expect(machine.handle(.preedit("hello wor")) == [.showPreedit(path: Self.field, text: "hello wor")])
        #expect(
            machine.handle(.deliver(.commit("hello world")))
                == [.showPreedit(path: Self.field, text: ""), .commit(path: Self.field, text: "hello world")])
        // A commit with no preedit shown commits only.
        #expect(machine.handle(.deliver(.commit(" again"))) == [.commit(path: Self.field, text: " again")])
        // An empty interim hides nothing that is not shown.
        #expect(machine.handle(.preedit("")) == [])
    }

    @Test func aPasswordOrPINFieldGetsNeitherPreeditNorCommits() {
        for purpose: UInt32 in [8, 9] {
            var machine = Self.focusedMachine(purpose: purpose)
            #expect(machine.state == InputMethodState(active: true, focused: true, secret: true))
            #expect(machine.handle(.preedit("secret words")) == [])
            #expect(machine.handle(.deliver(.commit("secret words"))) == [.dropped(characters: 12, secret: true)])
        }
    }

    @Test func textWaitsWhileAFocusChangeSettlesSoAPasswordFieldNeverGetsIt() {
        var machine = Self.focusedMachine()
        let password = "/org/freedesktop/IBus/Engine/2"
        _ = machine.handle(.created(path: password))
        _ = machine.handle(.enabled(path: password))
        // The focus moves; the new field's purpose comes with the messages after the focus.
        #expect(
            Self.texts(machine.handle(.focusIn(path: password, client: "gtk3-im:test"))) == [.settle(2)])
        #expect(machine.state == InputMethodState(active: true), "not focused until settled")
        #expect(machine.handle(.deliver(.commit("meant for nobody"))) == [])
        #expect(machine.handle(.contentType(path: password, purpose: 8)) == [])
        let settled = machine.handle(.settled(2))
        #expect(Self.texts(settled) == [.dropped(characters: 16, secret: true)])
        #expect(settled.contains(.report(InputMethodState(active: true, focused: true, secret: true))))
    }

    @Test func textThatWaitedForAnOrdinaryFieldIsCommittedThereInOrder() {
        var machine = Self.focusedMachine()
        let other = "/org/freedesktop/IBus/Engine/2"
        _ = machine.handle(.created(path: other))
        _ = machine.handle(.enabled(path: other))
        _ = machine.handle(.focusIn(path: other, client: "gtk3-im:test"))
        _ = machine.handle(.deliver(.commit("one")))
        _ = machine.handle(.deliver(.commit(" two")))
        _ = machine.handle(.preedit(" thr"))
        #expect(machine.handle(.settled(1)) == [], "an older round settles nothing")
        #expect(
            Self.texts(machine.handle(.settled(2)))
                == [
                    .commit(path: other, text: "one"), .commit(path: other, text: " two"),
                    .showPreedit(path: other, text: " thr"),
                ])
    }

    @Test func thePreeditFollowsTheFocus() {
        var machine = Self.focusedMachine()
        _ = machine.handle(.preedit("half a sen"))
        // IBus drops a clear-mode preedit at focus-out; nothing to send.
        #expect(Self.texts(machine.handle(.focusOut(path: Self.field))) == [])
        #expect(Self.texts(machine.handle(.focusIn(path: Self.field, client: "gtk3-im:test"))) == [.settle(2)])
        #expect(Self.texts(machine.handle(.settled(2))) == [.showPreedit(path: Self.field, text: "half a sen")])
        // A field that becomes a password field loses it at once.
        #expect(
            Self.texts(machine.handle(.contentType(path: Self.field, purpose: 8)))
                == [.showPreedit(path: Self.field, text: "")])
    }

    @Test func aHeldPushToTalkKeyStartsOneSessionAndSttdKnowsItIsHeld() {
        var machine = Self.focusedMachine()
        let held = InputMethodState(active: true, focused: true, pushToTalk: true)
        #expect(machine.handle(.pushToTalk(pressed: true)) == [.startSession, .report(held)])
        #expect(machine.handle(.pushToTalk(pressed: true)) == [], "auto-repeat")
        #expect(machine.handle(.pushToTalk(pressed: true)) == [], "auto-repeat")
        #expect(
            machine.handle(.pushToTalk(pressed: false))
                == [.stopSession, .report(InputMethodState(active: true, focused: true))])
        #expect(machine.handle(.pushToTalk(pressed: false)) == [], "a stray release")
    }

    /// Issue 37: the release goes to whichever window has the focus. Without the focus back
    /// within the grace, it can never arrive here: the session stops.
    @Test func pushToTalkStopsWhenTheFocusLeavesAndDoesNotComeBack() {
        var machine = Self.focusedMachine()
        _ = machine.handle(.pushToTalk(pressed: true))
        #expect(Self.texts(machine.handle(.focusOut(path: Self.field))) == [.watchFocus(1)])
        #expect(
            machine.handle(.focusGraceOver(1)) == [.stopSession, .report(InputMethodState(active: true))],
            "stopped, and the key counts as released")
        #expect(machine.handle(.focusGraceOver(1)) == [], "once")
        // Back in a field with the key still down: auto-repeat starts a new session.
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk3-im:test"))
        #expect(Self.texts(machine.handle(.pushToTalk(pressed: true))) == [.startSession])
    }

    @Test func pushToTalkGoesOnWhenTheFocusComesBackWithinTheGrace() {
        var machine = Self.focusedMachine()
        _ = machine.handle(.pushToTalk(pressed: true))
        #expect(Self.texts(machine.handle(.focusOut(path: Self.field))) == [.watchFocus(1)])
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk3-im:other"))
        #expect(Self.texts(machine.handle(.focusGraceOver(1))) == [])
        // Only the newest loss counts.
        #expect(Self.texts(machine.handle(.focusOut(path: Self.field))) == [.watchFocus(2)])
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk3-im:test"))
        _ = machine.handle(.focusOut(path: Self.field))
        #expect(Self.texts(machine.handle(.focusGraceOver(2))) == [])
        #expect(Self.texts(machine.handle(.focusGraceOver(3))) == [.stopSession])
    }

    @Test func aFocusLossWithoutPushToTalkWatchesNothing() {
        var machine = Self.focusedMachine()
        #expect(Self.texts(machine.handle(.focusOut(path: Self.field))) == [])
        #expect(machine.handle(.focusGraceOver(1)) == [])
    }

    /// Issue 37: "scratch that" deletes only text this engine committed into the field that
    /// still has the focus, newest first.
    @Test func scratchThatDeletesOnlyWhatWasCommittedIntoTheFocusedField() {
        var machine = Self.focusedMachine()
        _ = machine.handle(.deliver(.commit("One.")))
        _ = machine.handle(.deliver(.commit(" Two.")))
        #expect(machine.handle(.deliver(.delete(5))) == [.deleteBefore(path: Self.field, characters: 5)])
        #expect(machine.handle(.deliver(.delete(4))) == [.deleteBefore(path: Self.field, characters: 4)])
        #expect(machine.handle(.deliver(.delete(4))) == [.deleteRefused(characters: 4)], "nothing left of ours")

        // A final that went nowhere (no field), then the focus on a field with the user's text.
        _ = machine.handle(.focusOut(path: Self.field))
        #expect(machine.handle(.deliver(.commit("lost"))) == [.dropped(characters: 4, secret: false)])
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk3-im:notes"))
        _ = machine.handle(.settled(2))
        #expect(machine.handle(.deliver(.delete(4))) == [.deleteRefused(characters: 4)])

        // What the user typed, a click (reset) or a key sttd pressed makes the text the field's own.
        for event in [EngineMachine.Event.userKey(path: Self.field), .reset(path: Self.field)] {
            _ = machine.handle(.deliver(.commit("Hello")))
            _ = machine.handle(event)
            #expect(machine.handle(.deliver(.delete(5))) == [.deleteRefused(characters: 5)], "\(event)")
        }
        _ = machine.handle(.deliver(.commit("Hello")))
        _ = machine.handle(.deliver(.key("Return")))
        #expect(machine.handle(.deliver(.delete(5))) == [.deleteRefused(characters: 5)])
        // Another field's text is not this field's.
        _ = machine.handle(.deliver(.commit("Hello")))
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk3-im:other"))
        _ = machine.handle(.settled(3))
        #expect(machine.handle(.deliver(.delete(5))) == [.deleteRefused(characters: 5)])
    }

    @Test func aRestartedSttdHearsTheStateAgain() {
        var machine = Self.focusedMachine()
        #expect(machine.handle(.sttdAppeared) == [.report(InputMethodState(active: true, focused: true))])
    }

    @Test func finalsWaitingForAFocusAreBounded() {
        var machine = Self.focusedMachine()
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk3-im:other"))
        _ = machine.handle(.focusOut(path: Self.field))
        _ = machine.handle(.focusIn(path: Self.field, client: "gtk3-im:test"))
        for index in 0..<(EngineMachine.pendingLimit + 10) { _ = machine.handle(.deliver(.commit("w\(index)"))) }
        let commits = machine.handle(.settled(3)).compactMap { action -> String? in
            if case .commit(_, let text) = action { return text } else { return nil }
        }
        #expect(commits.count == EngineMachine.pendingLimit)
        #expect(commits.first == "w10" && commits.last == "w\(EngineMachine.pendingLimit + 9)", "oldest dropped first")
    }
}

@Suite struct InputMethodPiecesTests {
    @Test func theStateArgumentIsCheckedKeyByKey() throws {
        let state = InputMethodState(active: true, focused: true, secret: false)
        #expect(try InputMethodState(dbusValue: state.dbusValue) == state)
        #expect(try InputMethodState(dbusValue: .vardict([])) == InputMethodState())
        #expect(throws: DBusError.self) { try InputMethodState(dbusValue: .vardict([("focus", .boolean(true))])) }
        #expect(throws: DBusError.self) { try InputMethodState(dbusValue: .vardict([("active", .string("yes"))])) }
        #expect(throws: DBusError.self) { try InputMethodState(dbusValue: .string("active")) }
        #expect(InputMethodState(active: true, focused: true, secret: true).summary == "secret")
        #expect(InputMethodState(active: false, focused: true).summary == "")
    }

    @Test func theAddressFileIsFoundAsLibIBusFindsIt() throws {
        let root = try makeTemporaryDirectory("sttd-ibus-root")
        defer { try? FileManager.default.removeItem(atPath: root) }
        try FileManager.default.createDirectory(atPath: "\(root)/etc", withIntermediateDirectories: true)
        try "0123abcd\n".write(toFile: "\(root)/etc/machine-id", atomically: true, encoding: .utf8)
        let config = "\(root)/config"
        try FileManager.default.createDirectory(atPath: "\(config)/ibus/bus", withIntermediateDirectories: true)
        let file = "\(config)/ibus/bus/0123abcd-unix-3"
        try "# ibus\nIBUS_ADDRESS=unix:path=/tmp/ibus-test\nIBUS_DAEMON_PID=\(getpid())\n".write(
            toFile: file, atomically: true, encoding: .utf8)
        let environment = ["DISPLAY": ":3.0", "XDG_CONFIG_HOME": config]
        #expect(try IBus.address(environment: environment, root: root) == "unix:path=/tmp/ibus-test")
        #expect(try IBus.address(environment: ["IBUS_ADDRESS": "unix:abstract=x"], root: root) == "unix:abstract=x")
        // Wayland names the file by the socket; a dead daemon's file is no address.
        #expect(throws: IBusError.self) {
            try IBus.address(environment: ["WAYLAND_DISPLAY": "wayland-0", "XDG_CONFIG_HOME": config], root: root)
        }
        try "IBUS_ADDRESS=unix:path=/tmp/old\nIBUS_DAEMON_PID=999999999\n".write(
            toFile: file, atomically: true, encoding: .utf8)
        #expect(throws: IBusError.self) { try IBus.address(environment: environment, root: root) }
    }

    @Test func thePushToTalkKeyIsAnXKeysymName() throws {
        #expect(try EngineConfiguration(pushToTalk: "F9").pushToTalk == 0xFFC6)
        #expect(try EngineConfiguration(pushToTalk: "Pause").pushToTalk == 0xFF13)
        #expect(try EngineConfiguration(pushToTalk: "").pushToTalk == nil)
        #expect(throws: IBusError.self) { try EngineConfiguration(pushToTalk: "F99x") }
        let directory = try makeTemporaryDirectory("sttd-ibus-config")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let path = "\(directory)/config.toml"
        try "backend = \"local\"\n[ibus]\npush_to_talk = \"Scroll_Lock\"\n".write(
            toFile: path, atomically: true, encoding: .utf8)
        #expect(try EngineConfiguration.load(path: path).pushToTalk == 0xFF14)
        #expect(try EngineConfiguration.load(path: "\(directory)/missing.toml") == EngineConfiguration())
        try "[ibus\n".write(toFile: path, atomically: true, encoding: .utf8)
        #expect(throws: IBusError.self) { try EngineConfiguration.load(path: path) }
        #expect(EngineConfiguration.path(environment: ["STTD_CONFIG": "/x.toml"]) == "/x.toml")
        #expect(EngineConfiguration.path(environment: ["XDG_CONFIG_HOME": "/c"]) == "/c/sttd/config.toml")
    }

    @Test func theComponentFileRunsThisProgramWithTheDefaultLayout() {
        let xml = ComponentFile.xml(exec: "/opt/a&b/sttd-ibus")
        #expect(xml.contains("<exec>/opt/a&amp;b/sttd-ibus --ibus</exec>"))
        #expect(xml.contains("<name>io.github.sttd.IBus</name>"))
        #expect(xml.contains("<name>sttd</name>"))
        #expect(xml.contains("<longname>Dictation</longname>"))
        #expect(xml.contains("<layout>default</layout>"))
    }

    /// `sttd-ibus` is a link to the multicall `sttd`: ibus-daemon must run the link, not the binary.
    @Test func theComponentRunsTheNameThisProgramWasStartedBy() {
        func ownPath(_ argument0: String, path: String? = "/nope:/usr/bin", executables: Set<String> = []) -> String {
            ComponentFile.ownPath(
                argument0: argument0, workingDirectory: "/home/a/src", searchPath: path,
                executable: "/opt/sttd/bin/sttd", isExecutable: executables.contains)
        }
        #expect(ownPath("/usr/local/bin/sttd-ibus") == "/usr/local/bin/sttd-ibus")
        #expect(ownPath(".build/debug/./sttd-ibus") == "/home/a/src/.build/debug/sttd-ibus")
        #expect(ownPath("../bin/sttd-ibus") == "/home/a/bin/sttd-ibus")
        // Started through PATH: the first directory holding it, as the shell found it.
        #expect(ownPath("sttd-ibus", executables: ["/usr/bin/sttd-ibus"]) == "/usr/bin/sttd-ibus")
        // Not found (or no PATH): the link installed next to the binary.
        #expect(ownPath("sttd-ibus") == "/opt/sttd/bin/sttd-ibus")
        #expect(ownPath("sttd-ibus", path: nil, executables: ["/usr/bin/sttd-ibus"]) == "/opt/sttd/bin/sttd-ibus")
        #expect(ownPath("") == "/opt/sttd/bin/sttd-ibus")
    }
}
