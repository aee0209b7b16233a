import DBus
import Foundation
import Recognition
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// sttd serving its offline engine as a Deepgram-compatible `/v1/listen` server, to
    /// Deepgram's own Python SDK and to another sttd.
    @Suite("The local Deepgram-compatible server", .serialized)
    struct ListenServerTests {
        static func requireEngine() throws {
            let settings = SherpaSettings.installed()
            guard settings.libraryPath != nil, settings.modelDirectory != nil else {
                throw MissingPrerequisite(description: "sherpa-onnx and Moonshine are not in .build: run scripts/setup")
            }
        }

        /// The text of a summary's finals, joined as sttd joins them.
        static func finalsText(_ summary: [String: Any]) -> String {
            ((summary["finals"] as? [[String: Any]]) ?? []).compactMap { $0["transcript"] as? String }
                .filter { !$0.isEmpty }.joined(separator: " ")
        }

        /// Each LibriVox file, in real time, through Deepgram's official Python SDK: interims and
        /// finals come, the stream ends with Metadata and 1000, and the finals' text is what
        /// sttd's own D-Bus session makes of the same file through the virtual microphone.
        @Test func officialPythonSDKGetsTheSameFinalsAsADBusSession() async throws {
            try Self.requireEngine()
            _ = try DeepgramSDKClient.interpreter()
            let captures = try makeTemporaryDirectory("sttd-captured")
            defer { try? FileManager.default.removeItem(atPath: captures) }
            let sttd = try await SttdFixture(
                config: "[server]\nlisten = \"127.0.0.1:0\"\n[debug]\naudio_dir = \"\(captures)\"\n")
            let address = try #require(try await sttd.property("ServerAddress")?.string)
            #expect(address.hasPrefix("ws://127.0.0.1:") && !address.hasSuffix(":0"), "\(address)")
            let padded = try makeTemporaryDirectory("padded-clips")
            defer { try? FileManager.default.removeItem(atPath: padded) }
            for recording in try LibriVox.recordings() {
                // The D-Bus session, as MoonshineTests dictates it.
                let kept = Set(try FileManager.default.contentsOfDirectory(atPath: captures))
                let (viaDBus, _) = try await sttd.dictatePadded(recording.path, as: recording.id, in: padded)
                let captured = try FileManager.default.contentsOfDirectory(atPath: captures).filter {
                    !kept.contains($0)
                }
                let capture = try #require(captured.count == 1 ? captured.first : nil, "one capture: \(captured)")

                // The very samples that session captured, through the SDK (the microphone starts a
                // stream at a varying offset, and the engine's words may depend on it).
                let summary = try DeepgramSDKClient.stream(url: address, wav: "\(captures)/\(capture)", options: [])
                let viaSDK = Self.finalsText(summary)
                print("\(recording.id): D-Bus \"\(viaDBus)\" | SDK \"\(viaSDK)\"")
                #expect((summary["errors"] as? [String])?.isEmpty == true, "\(summary)")
                #expect((summary["interims"] as? Int ?? 0) > 0, "interims for \(recording.id)")
                #expect(!viaSDK.isEmpty, "finals for \(recording.id)")
                #expect(viaSDK == viaDBus, "\(recording.id)")
                #expect(summary["metadata"] as? Int == 1)
                #expect(summary["close"] as? Int == 1000)
                #expect((summary["types"] as? [String])?.last == "Metadata")
                #expect((summary["types"] as? [String])?.contains("SpeechStarted") == true)
                #expect(
                    ((summary["finals"] as? [[String: Any]]) ?? []).allSatisfy {
                        ($0["words"] as? Int ?? 0) > 0 || ($0["transcript"] as? String)?.isEmpty == true
                    })
            }
            // Finalize: exactly one from_finalize final answers it.
            let recording = try LibriVox.recordings()[0]
            let flushed = try DeepgramSDKClient.stream(url: address, wav: recording.path, options: ["--finalize"])
            let fromFinalize = ((flushed["finals"] as? [[String: Any]]) ?? []).filter {
                $0["from_finalize"] as? Bool == true
            }
            #expect(fromFinalize.count == 1, "\(flushed)")
            #expect(sttd.sttd.isRunning)
        }

        /// A D-Bus session and a server stream at the same time, on the one loaded model: each
        /// gets its own speech.
        @Test func aDBusSessionAndAServerStreamAtOnceShareTheModel() async throws {
            try Self.requireEngine()
            let sttd = try await SttdFixture(config: "[server]\nlisten = \"127.0.0.1:0\"\n")
            let address = try #require(try await sttd.property("ServerAddress")?.string)
            let recordings = try LibriVox.recordings()
            let padded = try makeTemporaryDirectory("padded-clip")
            defer { try? FileManager.default.removeItem(atPath: padded) }
            let file = "\(padded)/clip.wav"
            try writeWAV([Int16](repeating: 0, count: 8_000) + wavSamples(recordings[0].path), to: file)

            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            let playing = try sttd.pulse.startPlaying(file)
            let summary = try await DeepgramSDKClient.streaming(
                url: address, wav: recordings[3].path, options: ["--trail-silence", "1.5"])
            #expect(await playing.exit(timeout: .seconds(30)) == 0, "paplay played the clip")
            try await recorder.wait("SpeechActivity false after the clip", timeout: .seconds(15)) { signals in
                signals.last { $0.member == "SpeechActivity" }?.arguments.first == .boolean(false)
            }
            let viaDBus = try await sttd.speech.call(Speech1.stopTranscribing)
            let viaSDK = Self.finalsText(summary)
            print("at once: D-Bus \"\(viaDBus)\" | SDK \"\(viaSDK)\"")
            let dbusWER = wordErrorRate(
                reference: recordings[0].reference, hypothesis: MoonshineDictationTests.words(viaDBus))
            let sdkWER = wordErrorRate(
                reference: recordings[3].reference, hypothesis: MoonshineDictationTests.words(viaSDK))
            #expect(dbusWER <= 10, "\(viaDBus)")
            #expect(sdkWER <= 10, "\(viaSDK)")
            #expect(summary["close"] as? Int == 1000)
            #expect(
                sttd.log.components(separatedBy: "offline model loaded").count == 2, "the model is loaded once")
        }

        /// sttd's own `deepgram` backend streaming to a second sttd's server (each on its own
        /// bus, the second with an API key): dictation works, stop sends Finalize, and a restart
        /// of the serving sttd is bridged by reconnecting and replaying the audio.
        @Test func sttdsDeepgramBackendThroughASecondSttd() async throws {
            try Self.requireEngine()
            let secrets = try makeTemporaryDirectory("server-key")
            defer { try? FileManager.default.removeItem(atPath: secrets) }
            let keyFile = "\(secrets)/key"
            let key = "local-server-key-\(UInt32.random(in: 0...UInt32.max))"
            try key.write(toFile: keyFile, atomically: true, encoding: .utf8)
            chmod(keyFile, 0o600)
            let port = try freeLoopbackPort()
            let server = try await SttdFixture(
                config: "[server]\nlisten = \"127.0.0.1:\(port)\"\napi_key_file = \"\(keyFile)\"\n")
            #expect(try await server.property("ServerAddress") == .string("ws://127.0.0.1:\(port)"))
            let client = try await SttdFixture(
                config: """
                    backend = "deepgram"
                    [deepgram]
                    url = "ws://127.0.0.1:\(port)/v1/listen"
                    api_key_file = "\(keyFile)"
                    model = "moonshine"
                    reconnect_attempts = 10
                    """)
            #expect(try await client.speech.call(Speech1.requestAuthorization) == "authorized")

            // Dictation; stop flushes with Finalize then CloseStream.
            let recordings = try LibriVox.recordings()
            try await client.speech.call(Speech1.startTranscribing, StartRequest())
            try await client.pulse.play(recordings[0].path)
            let first = try await client.speech.call(Speech1.stopTranscribing)
            let firstWER = wordErrorRate(
                reference: recordings[0].reference, hypothesis: MoonshineDictationTests.words(first))
            print("through a second sttd: \"\(first)\" (WER \(firstWER)%)")
            #expect(firstWER <= 15, "\(first)")
            try await waitFor("Finalize, then CloseStream at the server: \(server.log.suffix(3000))") {
                server.log.contains("type=Finalize") && server.log.contains("reason=CloseStream")
            }

            // The serving sttd dies mid-utterance and comes back: the client reconnects and
            // replays what was not answered. (A graceful restart would flush the cut utterance
            // as a final first; a crash leaves all of it to the replay.)
            let recorder = try await client.record()
            try await client.speech.call(Speech1.startTranscribing, StartRequest())
            let playing = try client.pulse.startPlaying(recordings[3].path)
            try await Task.sleep(for: .milliseconds(2_500))
            try await server.restartService(signal: SIGKILL)
            #expect(await playing.exit(timeout: .seconds(30)) == 0, "paplay played the recording")
            try await recorder.wait("SpeechActivity false after the recording", timeout: .seconds(20)) { signals in
                signals.last { $0.member == "SpeechActivity" }?.arguments.first == .boolean(false)
            }
            let second = try await client.speech.call(Speech1.stopTranscribing)
            let secondWER = wordErrorRate(
                reference: recordings[3].reference, hypothesis: MoonshineDictationTests.words(second))
            print("across a server restart: \"\(second)\" (WER \(secondWER)%)")
            #expect(
                recorder.changes(of: "State").contains(.string("reconnecting")),
                "\(recorder.changes(of: "State"))")
            #expect(secondWER <= 25, "\(second)")
            #expect(client.sttd.isRunning && server.sttd.isRunning)
            for log in [server.log, client.log] { #expect(!log.contains(key), "the key is in a log") }
        }

        /// A non-loopback address without TLS and a key is a configuration error (exit 78)
        /// that names the loopback rule; so is a key file others may read.
        @Test func nonLoopbackPlainServerIsRefusedAtConfigLoad() throws {
            let home = try makeTemporaryDirectory("server-config")
            defer { try? FileManager.default.removeItem(atPath: home) }
            let config = "\(home)/config.toml"
            try "[server]\nlisten = \"0.0.0.0:8765\"\n".write(toFile: config, atomically: true, encoding: .utf8)
            var environment = ProcessInfo.processInfo.environment
            environment["HOME"] = home
            environment["DBUS_SESSION_BUS_ADDRESS"] = "unix:path=\(home)/no-bus"
            let result = try run(try builtExecutable("sttd"), ["--config", config], environment: environment)
            #expect(result.status == 78, "\(result.stderr)")
            #expect(result.stderr.contains("loopback"), "\(result.stderr)")

            // A server key file others can read is refused as the client's is (exit 78), and
            // the key is not in the message.
            let bus = try PrivateBus()
            defer { bus.stop() }
            let keyFile = "\(home)/key"
            try "readable-by-all-0123".write(toFile: keyFile, atomically: true, encoding: .utf8)
            chmod(keyFile, 0o644)
            try "[server]\nlisten = \"127.0.0.1:0\"\napi_key_file = \"\(keyFile)\"\n".write(
                toFile: config, atomically: true, encoding: .utf8)
            environment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
            environment["XDG_DATA_HOME"] = "\(home)/data"
            let readable = try run(try builtExecutable("sttd"), ["--config", config], environment: environment)
            #expect(readable.status == 78, "\(readable.stderr)")
            #expect(readable.stderr.contains("chmod 600"), "\(readable.stderr)")
            #expect(!readable.stderr.contains("readable-by-all-0123"))
        }

        /// Four clients stream a minute of speech each at once, a fifth is refused with 429, and
        /// sttd keeps serving with bounded memory. Timing is the benchmark's business, not this test's.
        @Test func fourConcurrentClientsForAMinuteAndAFifthGets429() async throws {
            try Self.requireEngine()
            _ = try DeepgramSDKClient.interpreter()
            let sttd = try await SttdFixture(config: "[server]\nlisten = \"127.0.0.1:0\"\nmax_streams = 4\n")
            let address = try #require(try await sttd.property("ServerAddress")?.string)
            // A minute of the clips with a second of silence after each, as separate utterances.
            let recordings = try LibriVox.recordings()
            var samples: [Int16] = []
            var reference: [String] = []
            while samples.count < 60 * 16_000 {
                for recording in recordings where samples.count < 60 * 16_000 {
                    samples += try wavSamples(recording.path) + [Int16](repeating: 0, count: 16_000)
                    reference += recording.reference
                }
            }
            let directory = try makeTemporaryDirectory("load-clip")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            try writeWAV(samples, to: "\(directory)/minute.wav")
            // Warm up: one stream, then the resident memory of one loaded model.
            _ = try DeepgramSDKClient.stream(url: address, wav: recordings[0].path, options: ["--pace", "0.02"])
            let warm = residentBytes(of: sttd.sttd.pid) ?? 0

            let load = try DeepgramSDKClient.stream(
                url: address, wav: "\(directory)/minute.wav",
                options: ["--clients", "4", "--probe-extra", "--trail-silence", "1.5"], timeout: 240)
            let loaded = residentBytes(of: sttd.sttd.pid) ?? 0
            let clients = try #require(load["clients"] as? [[String: Any]])
            #expect(clients.count == 4)
            for (index, summary) in clients.enumerated() {
                let text = Self.finalsText(summary)
                let wer = wordErrorRate(reference: reference, hypothesis: MoonshineDictationTests.words(text))
                print("client \(index): \(reference.count) words, WER \(wer)%, interims \(summary["interims"] ?? 0)")
                #expect(
                    (summary["errors"] as? [String])?.isEmpty == true, "client \(index): \(summary["errors"] ?? "")")
                #expect(summary["close"] as? Int == 1000, "client \(index)")
                #expect(summary["metadata"] as? Int == 1, "client \(index)")
                // Every final came: the whole minute is there.
                #expect(wer <= 10, "client \(index): \(text)")
            }
            #expect((load["extra"] as? [String: Any])?["status"] as? Int == 429, "\(load["extra"] ?? "")")
            print("RSS: one stream \(warm / 1_048_576) MB, four streams \(loaded / 1_048_576) MB")
            #expect(loaded < warm * 5 / 2, "memory stays bounded: \(warm) -> \(loaded)")
            #expect(sttd.sttd.isRunning)
            #expect(try await sttd.property("ServerAddress") == .string(address))
        }
    }
}
