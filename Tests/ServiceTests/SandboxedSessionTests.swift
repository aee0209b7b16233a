@testable import Speech
import Testing

@testable import SpeechBus

/// Issue 37: what an allowed sandboxed app's session may be.
@Suite("A sandboxed app's session stays in its sandbox")
struct SandboxedSessionTests {
    static let settings = SpeechSettings(backend: .local, language: "en-US", source: "alsa_input.usb-mic")

    static func confine(_ options: StartOptions) throws(SpeechError) -> StartOptions {
        try SandboxedSession.confine(options, app: "org.example.Notes", settings: settings)
    }

    @Test func withoutOptionsItGetsTheUsersSourceAndBackendAndTypesNothing() throws {
        let confined = try Self.confine(StartOptions())
        #expect(confined.output == OutputMode.none, "not the config's output")
        #expect(confined.source == "alsa_input.usb-mic")
        #expect(confined.backend == .local)
    }

    @Test func theOptionsOfItsOwnTranscriptAreKept() throws {
        let options = StartOptions(
            language: "de-DE", interimResults: false, keyterms: ["Notes"], autoStopMilliseconds: 1500, output: OutputMode.none)
        let confined = try Self.confine(options)
        #expect(confined.language == "de-DE")
        #expect(confined.interimResults == false)
        #expect(confined.keyterms == ["Notes"])
        #expect(confined.autoStopMilliseconds == 1500)
    }

    @Test func valuesTheUserAlreadyHasAreAccepted() throws {
        _ = try Self.confine(StartOptions(backend: .local, source: "alsa_input.usb-mic"))
        _ = try Self.confine(StartOptions(source: ""))
    }

    @Test(arguments: [
        (StartOptions(output: .type), "'output'"),
        (StartOptions(output: .clipboard), "'output'"),
        (StartOptions(source: "alsa_output.pci.monitor"), "'source'"),
        (StartOptions(backend: .deepgram), "'backend'"),
    ])
    func anOptionReachingOutsideIsRefusedByName(options: StartOptions, named option: String) {
        #expect {
            _ = try Self.confine(options)
        } throws: { error in
            guard let error = error as? SpeechError else { return false }
            return error.code == .notAuthorized && error.message.contains(option)
                && error.message.contains("org.example.Notes")
        }
    }
}
