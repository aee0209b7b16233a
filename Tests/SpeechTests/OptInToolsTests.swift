import TestSupport
import Testing

@testable import Speech

/// Issue 41 step 9: a session typing through sttd's Wayland input method sends its text through
/// the typing tools while no field has the focus in an app opted in to them (`toolsAllowed`,
/// from `[wayland] typing_tools_for_apps`), and through the input method otherwise. The fake
/// tools record what they typed (`harness.output.typed`).
@Suite("Typing tools for opted-in apps")
struct OptInToolsTests {
    static let wayland = InputMethodID.wayland(seat: "seat0")
    static let field = InputMethodReport(active: true, focused: true)
    static let optedIn = InputMethodReport(active: true, toolsAllowed: true)
    static let noField = InputMethodReport(active: true)

    /// What the core sent to the Wayland input method, in order.
    static func sentToWayland(_ events: [SpeechEvent]) -> [InputMethodText] {
        events.compactMap { if case .inputMethodText(let text, to: wayland) = $0 { text } else { nil } }
    }

    static func commitsToWayland(_ events: [SpeechEvent]) -> [String] {
        sentToWayland(events).compactMap { if case .commit(let text) = $0 { text } else { nil } }
    }

    static func outputProblems(_ events: [SpeechEvent]) -> [String] {
        events.compactMap { if case .outputFailed(let error) = $0 { error.message } else { nil } }
    }

    @Test func finalsFollowTheFocusBetweenTheFieldAndTheTools() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let core = harness.core
            await core.reportInputMethod(Self.field, from: Self.wayland)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("One.")
            try await harness.log.wait { Self.commitsToWayland($0) == ["One."] }
            await core.reportInputMethod(Self.optedIn, from: Self.wayland)
            session.final("Two.")
            try await waitFor { harness.output.typed == [" Two."] }
            await core.reportInputMethod(Self.field, from: Self.wayland)
            session.final("Three.")
            try await harness.log.wait { Self.commitsToWayland($0) == ["One.", " Three."] }
            await core.reportInputMethod(Self.optedIn, from: Self.wayland)
            session.final("Four.")
            #expect(await core.stop() == "One. Two. Three. Four.")
            #expect(harness.output.typed == [" Two.", " Four."], "the Stop's reply comes after the tools typed")
            #expect(harness.output.modes == [.type], "one lane, started when first needed, kept for the session")
            #expect(harness.output.finished.count == 1, "and finished with the session")
            #expect(Self.commitsToWayland(harness.log.all) == ["One.", " Three."])
            #expect(Self.outputProblems(harness.log.all).isEmpty)
        }
    }

    @Test func aSessionThatNeverNeedsTheToolsNeverStartsThem() async throws {
        let harness = try await CoreHarness()
        harness.output.unavailable = .invalidConfiguration("typing needs wtype: sudo apt install wtype")
        try await harness.run {
            await harness.core.reportInputMethod(Self.field, from: Self.wayland)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Only the field.")
            #expect(await harness.core.stop() == "Only the field.")
            #expect(harness.output.modes.isEmpty)
            #expect(Self.commitsToWayland(harness.log.all) == ["Only the field."])
            #expect(Self.outputProblems(harness.log.all).isEmpty, "a missing tool troubles no such session")
        }
    }

    /// Whatever else a report says, a focused password field gets nothing from the tools.
    @Test func aSecretFieldNeverGetsToolText() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let core = harness.core
            await core.reportInputMethod(Self.optedIn, from: Self.wayland)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Typed.")
            try await waitFor { harness.output.typed == ["Typed."] }
            let secret = InputMethodReport(active: true, focused: true, secret: true, toolsAllowed: true)
            await core.reportInputMethod(secret, from: Self.wayland)
            session.final("hunter2")
            session.final("press enter")
            #expect(await core.stop() == "Typed. hunter2")
            #expect(harness.output.typed == ["Typed."])
            // As before the opt-in: the input method is told, drops it, and the user hears why once.
            #expect(Self.commitsToWayland(harness.log.all) == [" hunter2"])
            #expect(Self.outputProblems(harness.log.all) == [OutputProblem.secretField])
        }
    }

    @Test func withoutTheOptInNoFieldMeansNothingTypedSaidOnce() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            await harness.core.reportInputMethod(Self.noField, from: Self.wayland)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Lost.")
            session.final("Also lost.")
            #expect(await harness.core.stop() == "Lost. Also lost.")
            #expect(harness.output.modes.isEmpty)
            #expect(Self.outputProblems(harness.log.all) == [OutputProblem.noField])
        }
    }

    /// "scratch that" takes a final back where it went, and the tools' BackSpaces only while
    /// such a window still has the focus (they would land in whatever has it).
    @Test func scratchThatTakesBackOnlyWhatTheToolsTyped() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let core = harness.core
            await core.reportInputMethod(Self.optedIn, from: Self.wayland)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Gone soon.")
            session.final("scratch that")
            try await waitFor { harness.output.typed == ["Gone soon.", "<-10>"] }
            await core.reportInputMethod(Self.field, from: Self.wayland)
            session.final("Kept.")
            try await harness.log.wait { Self.commitsToWayland($0) == ["Kept."] }
            await core.reportInputMethod(Self.optedIn, from: Self.wayland)
            session.final("scratch that")
            try await harness.log.wait { Self.sentToWayland($0).contains(.delete(characters: 5)) }
            session.final("Typed.")
            try await waitFor { harness.output.typed.count == 3 }
            await core.reportInputMethod(Self.field, from: Self.wayland)
            session.final("scratch that")
            #expect(await core.stop() == "")
            #expect(harness.output.typed == ["Gone soon.", "<-10>", "Typed."], "no BackSpaces into the field")
            let deletes = Self.sentToWayland(harness.log.all).filter { if case .delete = $0 { true } else { false } }
            #expect(deletes == [.delete(characters: 5)], "the tools' words are not the input method's to delete")
        }
    }

    @Test func keysGoWhereTheFinalsGo() async throws {
        let harness = try await CoreHarness()
        try await harness.run {
            let core = harness.core
            await core.reportInputMethod(Self.optedIn, from: Self.wayland)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("press enter")
            try await waitFor { harness.output.typed == ["<Return>"] }
            await core.reportInputMethod(Self.field, from: Self.wayland)
            session.final("press enter")
            try await harness.log.wait { Self.sentToWayland($0) == [.key("Return")] }
            _ = await core.stop()
            #expect(harness.output.typed == ["<Return>"])
        }
    }

    @Test func toolsThatCannotTypeAreSaidOnceAndTheSessionGoesOn() async throws {
        let harness = try await CoreHarness()
        harness.output.unavailable = .invalidConfiguration("typing needs wtype: sudo apt install wtype")
        try await harness.run {
            await harness.core.reportInputMethod(Self.optedIn, from: Self.wayland)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("One.")
            session.final("Two.")
            #expect(await harness.core.stop() == "One. Two.")
            let problems = Self.outputProblems(harness.log.all)
            let tools = problems.filter { $0.contains("[wayland] typing_tools_for_apps") }
            #expect(tools.count == 1, "\(problems)")
            #expect(tools.first?.contains("sudo apt install wtype") == true)
            #expect(tools.first?.hasSuffix(OutputProblem.textIsKept) == true)
            #expect(harness.output.typed.isEmpty)
        }
    }

    /// Only sttd's Wayland input method opts apps in: IBus sessions behave as before.
    @Test func aReportOnTheBusNeverSendsTextToTheTools() async throws {
        let ibus = InputMethodID.bus(":1.10")
        let harness = try await CoreHarness()
        try await harness.run {
            await harness.core.reportInputMethod(Self.optedIn, from: ibus)
            let (session, _) = try await harness.start(StartOptions(output: .type))
            session.final("Through IBus.")
            try await harness.log.wait { $0.contains(.inputMethodText(.commit("Through IBus."), to: ibus)) }
            _ = await harness.core.stop()
            #expect(harness.output.modes.isEmpty)
            #expect(harness.output.typed.isEmpty)
            #expect(Self.outputProblems(harness.log.all) == [OutputProblem.noField])
        }
    }

    @Test func noInputMethodOptsAnAppInUnlessItSaysSo() {
        #expect(!InputMethodReport(active: true).toolsAllowed)
        #expect(InputMethodReport(active: true) != Self.optedIn)
    }
}
