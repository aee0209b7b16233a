import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// Issue 37, rule 1: an app the user allowed, in a bwrap sandbox, gets its own transcript and
    /// nothing else. The desktop has a real X11 window with the typing tools on sttd's PATH, the
    /// config says `output = "type"`, a second null sink plays the desktop's own audio, and a
    /// streaming server counts who connects.
    @Suite("An allowed app stays in its sandbox", .serialized)
    struct SandboxTrustTests {
        static let notAuthorized = SpeechAPI.errorName("NotAuthorized")

        @Test func itNeitherTypesNorPicksTheMicrophoneNorTheBackend() async throws {
            var script = DeepgramTestServer.Script()
            script.vocabulary = ["cloud"]
            let server = try await DeepgramTestServer(script: script)
            let window = try await ReceivingWindow.open(.x11, .textField)
            defer { window.close() }
            let sttd = try await DesktopDictationTests.sttd(
                on: window,
                config: """
                    consent = "allow"
                    output = "type"
                    [deepgram]
                    url = "\(server.url())"
                    """, environment: ["STTD_API_KEY": script.key])
            try sttd.pulse.pactl(["load-module", "module-null-sink", "sink_name=desktop", "rate=16000", "channels=1"])
            let app = try FlatpakSandbox(appID: "org.example.Notes", busAddress: sttd.bus.address).launchApp()

            // What reaches outside the sandbox is refused by name, for Start and Toggle alike.
            let refused: [([String: Any], String)] = [
                (["output": "type"], "'output'"), (["output": "clipboard"], "'output'"),
                (["source": "desktop.monitor"], "'source'"), (["backend": "deepgram"], "'backend'"),
            ]
            for (options, name) in refused {
                for member in ["StartTranscribing", "ToggleTranscribing"] {
                    let answer = try await app.call(member, options: options)
                    #expect(answer.failed(with: Self.notAuthorized), "\(member) \(options): \(answer)")
                    #expect(answer.message.contains(name), "\(answer)")
                }
            }
            #expect(try await sttd.property("State") == .string("idle"))
            #expect(server.connections.isEmpty, "no audio went to the cloud")

            // Values the user already has are fine; the session types nothing although the config
            // says `type`, and records the user's microphone, not the desktop's audio.
            let started = try await app.call(
                "StartTranscribing", options: ["output": "none", "source": "", "backend": "local", "language": "en-US"])
            #expect(started.error == nil, "\(started)")
            let desktopAudio = try sttd.pulse.startPlaying(try LibriVox.recordings()[0].path, device: "desktop")
            defer { desktopAudio.stop() }
            try await sttd.pulse.play(try LibriVox.recordings()[1].path)
            let reply = try await app.call("StopTranscribing")
            let words = (reply.value ?? "").split(separator: " ")
            #expect(reply.error == nil && !words.isEmpty, "\(reply)")
            #expect(window.text.isEmpty, "typed into the host's window: \(window.text)")
            #expect(server.connections.isEmpty)

            // The host keeps every option.
            try await sttd.speech.call(
                Speech1.startTranscribing, StartRequest(source: "desktop.monitor", output: "none"))
            try await sttd.speech.call(Speech1.cancelTranscribing)
            _ = server
        }
    }
}
