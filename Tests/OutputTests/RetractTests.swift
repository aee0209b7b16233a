import Foundation
import Output
import TestSupport
import Testing

/// Takes back `text` and waits for the worker's answer: whether BackSpaces were sent.
func retracted(_ output: DesktopOutput, _ text: String) async -> Result<Bool, OutputError> {
    await withCheckedContinuation { continuation in output.retract(text) { continuation.resume(returning: $0) } }
}

/// Issue 37: "scratch that" through the typing tools deletes only what the tool typed, and on X11
/// only while the window it typed into still has the keyboard focus.
@Suite("Scratch that through the typing tools", .serialized)
struct RetractTests {
    @Test func backSpacesGoOnlyToTheWindowTheTextWasTypedInto() async throws {
        let window = try await ReceivingWindow.open(.x11, .terminal)
        defer { window.close() }
        let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
        #expect(await typed(output, "Hello") == nil)
        #expect(await typed(output, " there") == nil)
        try await window.waitForText("Hello there")
        #expect(try await retracted(output, " there").get(), "typed here, and the window still has the focus")
        try await window.waitForText("Hello", context: "the BackSpaces arrived: \(window.text.debugDescription)")

        #expect(try await retracted(output, " never typed").get() == false)
        #expect(await typed(output, " again") == nil)
        try await window.waitForText("Hello again")
        // The focus moves to another window: what was typed is no longer before its cursor.
        let other = try await openFocusedXterm(
            environment: window.environment, title: "sttd-other-\(UInt32.random(in: 0...UInt32.max))")
        defer { other.stop() }
        #expect(try await retracted(output, " again").get() == false, "its window lost the focus")
        #expect(window.text == "Hello again")
    }
}
