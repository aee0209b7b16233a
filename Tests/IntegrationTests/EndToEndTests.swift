import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    @Suite("Dictating recorded speech through PulseAudio", .serialized)
    struct DictationTests {
        /// Every LibriVox file through the virtual microphone: sttd's transcript is word for word
        /// what `pocketsphinx_continuous -infile` makes of the very samples sttd captured (kept
        /// by `[debug] audio_dir`).
        ///
        /// Not of the file itself: the null sink's monitor starts a new stream at a varying point
        /// in the first ~100 ms, and pocketsphinx's words depend on where the speech falls in its
        /// 10 ms frames (on these clips 24–30 errors of 71 words, by offset). Held to the capture,
        /// the assertion holds whatever offset the microphone gives.
        @Test func transcribesEveryLibriVoxFileExactlyAsTheReferenceToolDoesOnTheCapturedAudio() async throws {
            let reference = try requireTool("pocketsphinx_continuous", package: "pocketsphinx")
            let recordings = try LibriVox.recordings()
            let audio = try makeTemporaryDirectory("sttd-captured")
            defer { try? FileManager.default.removeItem(atPath: audio) }
            let sttd = try await SttdFixture(
                config: "[local]\nengine = \"pocketsphinx\"\n[debug]\naudio_dir = \"\(audio)\"\n")
            var ourErrors = 0
            var words = 0
            for recording in recordings {
                let kept = Set(try FileManager.default.contentsOfDirectory(atPath: audio))
                let recorder = try await sttd.record()
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
                // The null sink's monitor misses the first ~100 ms of a stream that starts while it
                // runs: half a second of silence first, as before a person speaks.
                let file = "\(sttd.home)/\(recording.id).wav"
                let clip = try wavSamples(recording.path)
                try writeWAV([Int16](repeating: 0, count: 8_000) + clip, to: file)
                try await sttd.pulse.play(file)
                // Stop after the pause that ends the last utterance, as a person would (a stop
                // before it is just as exact, but flushes the last words a little differently).
                let played = recorder.signals.count
                try await recorder.wait("\(recording.id): the end of speech", timeout: .seconds(30)) { signals in
                    signals.dropFirst(played).contains {
                        $0.member == "SpeechActivity" && $0.arguments.first == .boolean(false)
                    }
                }
                let transcript = try await sttd.speech.call(Speech1.stopTranscribing)

                let captures = try FileManager.default.contentsOfDirectory(atPath: audio).filter { !kept.contains($0) }
                let capture = try #require(captures.count == 1 ? captures.first : nil, "one capture: \(captures)")
                let captured = try wavSamples("\(audio)/\(capture)")
                #expect(captured.count >= clip.count, "\(recording.id): the capture holds the clip")
                let decoded = try await run(reference, ["-infile", "\(audio)/\(capture)", "-logfn", "/dev/null"])
                #expect(decoded.status == 0, "pocketsphinx_continuous: \(decoded.stderr)")
                #expect(
                    normalizedWords(transcript) == normalizedWords(decoded.stdout),
                    "\(recording.id): sttd \"\(transcript)\", pocketsphinx_continuous \"\(decoded.stdout)\"")

                let errors = wordErrors(reference: recording.reference, hypothesis: normalizedWords(transcript))
                ourErrors += errors
                words += recording.reference.count
                print("\(recording.id): \(errors) errors of \(recording.reference.count): \"\(transcript)\"")
                let updates = recorder.signals(named: "TranscriptChanged")
                let firstFinal = try #require(
                    updates.firstIndex { $0.arguments.last == .boolean(true) }, "a final for \(recording.id)")
                #expect(
                    updates[..<firstFinal].contains { $0.arguments.last == .boolean(false) },
                    "interim before final: \(recording.id)")
                #expect(!recorder.signals(named: "AudioLevel").isEmpty)
            }
            // A sanity bound far outside the engine's spread (24–30 of 71 by offset): what fails it
            // is a broken capture, not a different offset.
            print("Word errors in \(words) words: \(ourErrors)")
            #expect(ourErrors * 2 < words, "\(ourErrors) word errors in \(words) words")
        }

        @Test func killingPulseAudioFailsTheSessionAndKeepsFinals() async throws {
            let sttd = try await SttdFixture(config: "microphone_reconnect_ms = 500\n")
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(try LibriVox.recordings()[1].path)
            try await recorder.wait("a final") { signals in
                signals.contains { $0.member == "TranscriptChanged" && $0.arguments.last == .boolean(true) }
            }
            let finals = recorder.signals(named: "TranscriptChanged").filter { $0.arguments.last == .boolean(true) }
            let heard = finals.last?.arguments.first?.string ?? ""
            #expect(!heard.isEmpty)

            try sttd.pulse.kill()
            // Failed once in a loaded local run (the session neither failed nor stopped for 45 s;
            // not reproduced since): the service's log says where it stood.
            try await recorder.wait("SessionFailed after PulseAudio was killed; sttd's log:\n\(sttd.log)") { signals in
                signals.contains { $0.member == "SessionFailed" }
            }
            let failure = recorder.signals(named: "SessionFailed").first?.arguments
            #expect(failure?.first == .string(SpeechAPI.errorName("MicrophoneUnavailable")))
            #expect(try await sttd.property("State") == .string("idle"))
            #expect(try await sttd.property("Transcript") == .string(heard))
            #expect(try await sttd.property("MicrophoneStatus") == .string("unavailable"))
            #expect(
                try await sttd.property("LastError") == .string(SpeechAPI.errorName("MicrophoneUnavailable")))

            // Without a sound server, starting fails clearly; the service keeps answering.
            let down = await #expect(throws: DBusError.self) {
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            }
            #expect(down?.name == SpeechAPI.errorName("MicrophoneUnavailable"))
            try await sttd.call("Ping", interface: "org.freedesktop.DBus.Peer")

            try sttd.pulse.start()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            #expect(try await sttd.property("State") == .string("listening"))
            #expect(try await sttd.property("MicrophoneStatus") == .string("authorized"))
            try await sttd.speech.call(Speech1.stopTranscribing)
        }

        @Test func sttctlDrivesTheServiceWithContractExitCodes() async throws {
            let sttd = try await SttdFixture()
            #expect(try sttd.sttctl(["start"]).status == 0)
            let status = try sttd.sttctl(["status", "--json"])
            #expect(status.status == 0)
            for key in [
                "\"State\":\"listening\"", "\"Transcript\":", "\"AuthorizationStatus\":", "\"MicrophoneStatus\":",
                "\"Backend\":\"local\"", "\"Language\":", "\"Source\":", "\"LastError\":", "\"Version\":",
            ] {
                #expect(status.stdout.contains(key), "\(key) in \(status.stdout)")
            }
            // `watch --json` follows the transcript while a recording plays.
            let watchOutput = "\(sttd.home)/watch.jsonl"
            let watch = try ChildProcess(
                try builtExecutable("sttctl"), ["watch", "--json"], environment: sttd.environment, stdout: watchOutput)
            func watched() -> String { (try? String(contentsOfFile: watchOutput, encoding: .utf8)) ?? "" }
            // The watcher is subscribed once it sees a reset's update.
            try await waitFor("sttctl watch to print the reset", timeout: .seconds(10)) {
                try await sttd.speech.call(Speech1.resetTranscript)
                return !watched().isEmpty
            }
            let recorder = try await sttd.record()
            try await sttd.pulse.play(try LibriVox.recordings()[4].path)
            // Stop after the pause that ends the last utterance, as a person would.
            try await recorder.wait("the end of speech", timeout: .seconds(30)) { signals in
                signals.contains { $0.member == "SpeechActivity" && $0.arguments == [.boolean(false)] }
            }
            let stop = try sttd.sttctl(["stop"])
            #expect(stop.status == 0)
            let spoken = stop.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(!spoken.isEmpty)
            try await waitFor("the watcher to see the final transcript: \(watched())", timeout: .seconds(30)) {
                watched().contains("{\"transcript\":\"\(spoken)\",\"segment\":")
            }
            watch.stop()
            let lines = watched().split(separator: "\n")
            #expect(lines.contains { $0.contains("\"is_final\":true") && !$0.contains("\"segment\":\"\"") })
            #expect(lines.contains { $0.contains("\"is_final\":false") })
            #expect(lines.allSatisfy { $0.hasPrefix("{\"transcript\":") && $0.contains("\"segment\":") })

            #expect(try sttd.sttctl(["transcript"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines) == spoken)
            #expect(try sttd.sttctl(["sources"]).stdout.contains("* mic.monitor"))
            #expect(try sttd.sttctl(["authorize"]).stdout.contains("recognizer: authorized"))
            #expect(try sttd.sttctl(["toggle"]).status == 0)
            #expect(try sttd.sttctl(["toggle"]).status == 0)
            #expect(try sttd.sttctl(["cancel"]).status == 0)
            #expect(try sttd.sttctl(["reset"]).status == 0)
            #expect(try sttd.sttctl(["transcript"]).stdout.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty)

            let refused = try sttd.sttctl(["start", "--language", "not a language"])
            #expect(refused.status == 4)
            #expect(refused.stderr.contains("org.freedesktop.DBus.Error.InvalidArgs"))
            #expect(try sttd.sttctl(["start", "--output", "keyboard"]).status == 2)
            #expect(try sttd.sttctl(["start", "--frobnicate"]).status == 2)
            #expect(try sttd.sttctl(["dance"]).status == 2)
            #expect(try sttd.sttctl(["--help"]).status == 0)
            #expect(try sttd.sttctl(["--generate-completion-script", "bash"]).stdout.contains("sttctl"))

            sttd.sttd.stop()
            let unreachable = try sttd.sttctl(["status"])
            #expect(unreachable.status == 3)
            #expect(unreachable.stderr.contains("systemctl --user start sttd"))
        }
    }

}

extension Integration {
    @Suite("Desktop integration files")
    struct DesktopIntegrationTests {
        @Test func busActivationStartsTheService() async throws {
            let services = try makeTemporaryDirectory("sttd-services")
            let home = try makeTemporaryDirectory("sttd-home")
            defer {
                try? FileManager.default.removeItem(atPath: services)
                try? FileManager.default.removeItem(atPath: home)
            }
            let template = try String(
                contentsOfFile: "\(packageRoot)/dbus/io.github.sttd.Speech1.service", encoding: .utf8)
            #expect(template.contains("SystemdService=sttd.service"))
            let activation = template.split(separator: "\n").map { line in
                line.hasPrefix("Exec=") ? "Exec=\(try! builtExecutable("sttd"))" : String(line)
            }.joined(separator: "\n")
            try activation.write(
                toFile: "\(services)/io.github.sttd.Speech1.service", atomically: true, encoding: .utf8)
            let pulse = try HeadlessPulse()
            var environment = pulse.serviceEnvironment(home: home)
            let bus = try PrivateBus(serviceDirectory: services, environment: environment)
            defer { bus.stop() }
            environment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
            let status = try await run(try builtExecutable("sttctl"), ["status"], environment: environment, timeout: 30)
            #expect(status.status == 0, "\(status.stderr)")
            #expect(status.stdout.contains("State: idle"))
            // Stop the activated service through its bus name owner.
            let client = try await DBusConnection.connect(to: .address(bus.address))
            let owner = try await client.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetConnectionUnixProcessID", arguments: [.string(SpeechAPI.busName)])
            if let pid = owner.first?.uint32 { kill(pid_t(pid), SIGTERM) }
            client.close()
        }

        @Test func systemdAcceptsTheUnit() throws {
            let analyze = try requireTool("systemd-analyze", package: "systemd")
            let directory = try makeTemporaryDirectory("sttd-unit")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            // The unit's ExecStart must exist for verify; point it at the built binary.
            let unit = try String(contentsOfFile: "\(packageRoot)/systemd/sttd.service", encoding: .utf8)
                .replacingOccurrences(
                    of: "@bindir@",
                    with: URL(fileURLWithPath: try builtExecutable("sttd")).deletingLastPathComponent().path)
            try unit.write(toFile: "\(directory)/sttd.service", atomically: true, encoding: .utf8)
            try FileManager.default.createDirectory(atPath: "\(directory)/runtime", withIntermediateDirectories: true)
            var environment = ProcessInfo.processInfo.environment
            environment["XDG_RUNTIME_DIR"] = "\(directory)/runtime"
            for mode in [["--user"], []] {
                let result = try run(
                    analyze, ["verify"] + mode + ["--man=no", "\(directory)/sttd.service"], environment: environment,
                    timeout: 60)
                #expect(result.status == 0, "systemd-analyze verify \(mode): \(result.stdout)\(result.stderr)")
                #expect(result.stdout.isEmpty && result.stderr.isEmpty, "no warnings: \(result.stdout)\(result.stderr)")
            }
        }
    }
}
