import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    @Suite("Streaming backend through sttd", .serialized)
    struct StreamingTests {
        /// `fallback = "none"`: what a start does without the offline engine behind it.
        static func config(_ server: DeepgramTestServer, fallback: String = "local") -> String {
            "backend = \"deepgram\"\n[deepgram]\nurl = \"\(server.url())\"\nreconnect_attempts = 5\nfallback = \"\(fallback)\"\n"
        }

        /// With every proxy variable pointing at a real proxy, sttd streams to a server on
        /// loopback directly: the proxy sees no CONNECT, so the key never leaves the machine.
        @Test func aLoopbackServerIsNeverReachedThroughAProxy() async throws {
            let server = try await DeepgramTestServer()
            let proxy = try ConnectProxy()
            defer { proxy.stop() }
            let proxyURL = "http://127.0.0.1:\(proxy.port)"
            let sttd = try await SttdFixture(
                config: Self.config(server),
                environment: [
                    "STTD_API_KEY": server.script.key, "http_proxy": proxyURL, "https_proxy": proxyURL,
                    "all_proxy": proxyURL, "HTTP_PROXY": proxyURL, "ALL_PROXY": proxyURL,
                ])
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let transcript = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(!transcript.isEmpty)
            #expect(transcript == server.finalsSent.filter { !$0.isEmpty }.joined(separator: " "))
            #expect(proxy.requestedTargets == [], "the stream went through the proxy")
            #expect(server.connections.contains { $0.upgraded })
        }

        /// A LibriVox file through PulseAudio into sttd, streamed to the loopback server: the
        /// transcript is what the server sent for the whole file, and the key shows up nowhere.
        @Test func dictatesThroughPulseAudioToTheServerAndNeverShowsTheKey() async throws {
            let server = try await DeepgramTestServer()
            let key = server.script.key
            let sttd = try await SttdFixture(config: Self.config(server), environment: ["STTD_API_KEY": key])
            let recorder = try await sttd.record()
            #expect(try await sttd.speech.call(Speech1.requestAuthorization) == "authorized")
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(try LibriVox.recordings()[0].path)
            let transcript = try await sttd.speech.call(Speech1.stopTranscribing)
            let sent = server.finalsSent.filter { !$0.isEmpty }.joined(separator: " ")
            #expect(!sent.isEmpty)
            #expect(transcript == sent)
            let upgraded = server.connections.filter(\.upgraded)
            #expect(upgraded.last?.controls.map(\.type).suffix(2) == ["Finalize", "CloseStream"])
            #expect(upgraded.last.map { $0.audioBytes >= 7 * 32_000 } == true, "the whole file was streamed")
            #expect(recorder.signals(named: "TranscriptChanged").contains { $0.arguments.last == .boolean(true) })

            // Everything a person or another program could see of this run.
            let status = try sttd.sttctl(["status", "--json"])
            let watchable = recorder.signals.map { "\($0.arguments)" }.joined(separator: "\n")
            sttd.sttd.stop()
            for (what, text) in [("log", sttd.log), ("status", status.stdout + status.stderr), ("signals", watchable)] {
                #expect(!text.contains(key), "the key appears in the \(what)")
            }
            #expect(sttd.log.contains("stream connected"), "the log is not empty: \(sttd.log.suffix(500))")
        }

        /// Issue 26, defect 4: a server whose transcripts hold NUL, ESC and other control
        /// characters breaks nothing: every signal and the reply go out, without them.
        @Test func controlCharactersFromTheServerNeverReachTheBus() async throws {
            var script = DeepgramTestServer.Script()
            // JSON escapes: the server's transcripts decode to NUL, ESC and NEL.
            script.vocabulary = [#"nul\u0000word"#, #"esc\u001b[2Jclear"#, #"nel\u0085line"#, "plain"]
            let server = try await DeepgramTestServer(script: script)
            let sttd = try await SttdFixture(config: Self.config(server), environment: ["STTD_API_KEY": script.key])
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(try LibriVox.recordings()[1].path)
            let reply = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(reply.hasPrefix("nulword esc[2Jclear nel line plain nulword"), "\(reply)")
            let finals = recorder.signals(named: "TranscriptChanged").filter { $0.arguments.last == .boolean(true) }
            #expect(finals.count >= 3, "finals keep coming after the first: \(finals.count)")
            let texts = recorder.signals(named: "TranscriptChanged").flatMap(\.arguments).compactMap(\.string) + [reply]
            #expect(!texts.contains { $0.unicodeScalars.contains { $0.properties.generalCategory == .control } })
            #expect(try await sttd.property("LastError") == .string(""))
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            #expect(try await sttd.property("State") == .string("listening"))
            try await sttd.speech.call(Speech1.stopTranscribing)
        }

        @Test func refusedKeyIsDeniedAndSaysSo() async throws {
            let server = try await DeepgramTestServer()
            let wrong = "not-the-right-key-42"
            let sttd = try await SttdFixture(
                config: Self.config(server, fallback: "none"), environment: ["STTD_API_KEY": wrong])
            #expect(try await sttd.speech.call(Speech1.requestAuthorization) == "denied")
            let error = await #expect(throws: DBusError.self) {
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            }
            #expect(error?.name == SpeechAPI.errorName("NotAuthorized"))
            #expect(error?.message.contains("401") == true)
            #expect(error?.message.contains(wrong) == false)
            #expect(try await sttd.property("AuthorizationStatus") == .string("denied"))
            let refused = try sttd.sttctl(["start"])
            #expect(refused.status == 4)
            sttd.sttd.stop()
            #expect(!(sttd.log + refused.stderr).contains(wrong))
            #expect(sttd.log.contains("status=401"))
        }

        /// Defect: a 401 whose body never completes left the service `starting` forever, with
        /// Stop and Cancel queued behind it. The status line decides, at once.
        @Test func aRefusalWhoseBodyNeverEndsIsDeniedAtOnce() async throws {
            var script = DeepgramTestServer.Script()
            script.stallRefusalBody = true
            let server = try await DeepgramTestServer(script: script)
            let sttd = try await SttdFixture(
                config: Self.config(server, fallback: "none"), environment: ["STTD_API_KEY": "wrong-key"])
            let started = ContinuousClock.now
            let error = await #expect(throws: DBusError.self) {
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            }
            let waited = ContinuousClock.now - started
            #expect(error?.name == SpeechAPI.errorName("NotAuthorized"))
            #expect(waited < .seconds(10), "answered after \(waited): the body is read for about 2 s at most")
            #expect(try await sttd.property("AuthorizationStatus") == .string("denied"))
            #expect(try await sttd.property("State") == .string("idle"))
            try await sttd.speech.call(Speech1.cancelTranscribing)  // a typed call checks that no values came back
        }

        /// Whatever the server does, StartTranscribing answers within the connect timeout.
        @Test func aServerThatNeverAnswersFailsTheStartInTime() async throws {
            var script = DeepgramTestServer.Script()
            script.neverAnswer = true
            let server = try await DeepgramTestServer(script: script)
            let sttd = try await SttdFixture(
                config: Self.config(server, fallback: "none"), environment: ["STTD_API_KEY": script.key])
            let started = ContinuousClock.now
            let error = await #expect(throws: DBusError.self) {
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            }
            let waited = ContinuousClock.now - started
            #expect(error?.name == SpeechAPI.errorName("BackendUnavailable"))
            #expect(waited < .seconds(20), "the connect timeout (10 s) bounds the start; took \(waited)")
            #expect(try await sttd.property("State") == .string("idle"))
        }

        @Test func droppedStreamReconnectsWhileListening() async throws {
            var script = DeepgramTestServer.Script()
            // By time, not bytes: when the monitor source delivers audio to the server is up to
            // PulseAudio, and the drop must land while listening.
            script.dropAfter = .milliseconds(1_500)
            let server = try await DeepgramTestServer(script: script)
            let sttd = try await SttdFixture(config: Self.config(server), environment: ["STTD_API_KEY": script.key])
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(try LibriVox.recordings()[3].path)
            let transcript = try await sttd.speech.call(Speech1.stopTranscribing)
            let states = recorder.changes(of: "State").compactMap(\.string)
            let streamLog = sttd.log.split(separator: "\n").filter { $0.contains("stream") }.joined(separator: "\n")
            #expect(states.contains("reconnecting"), "\(states)\n\(streamLog)")
            #expect(server.connections.filter(\.upgraded).count == 2)
            #expect(transcript == server.finalsSent.filter { !$0.isEmpty }.joined(separator: " "))
        }
    }
}
