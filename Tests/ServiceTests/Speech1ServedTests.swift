import DBus
import SpeechAPI
import Testing

@testable import Service
@testable import SpeechBus

@Suite("The interface's declaration")
struct Speech1ServedTests {
    /// The spec is the one list of methods: each has its serve line, in the spec's order.
    @Test func everyMethodOfTheInterfaceIsServed() async throws {
        let sttd = try await InProcessSttd()
        defer { sttd.cleanUp() }
        let adapter = sttd.application.adapter
        let calls = SpeechCalls(core: adapter.core, consent: adapter.consent)
        #expect(calls.methods(tasks: DBusCallTasks()).map(\.name) == Speech1.methods.map(\.name))
    }
}
