import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    @Suite("Dictating recorded speech through PulseAudio", .serialized)
    struct DictationTests {
        /// Every LibriVox file through the virtual microphone; the word errors are compared with
        /// `pocketsphinx_continuous -infile` on the same file.
        @Test func transcribesEveryLibriVoxFileLikeTheReferenceTool() async throws {
            let reference = try requireTool("pocketsphinx_continuous", package: "pocketsphinx")
            let recordings = try LibriVox.recordings()
            let expected = try await referenceErrors(reference, recordings)
            let sttd = try await SttdFixture(config: "[local]\nengine = \"pocketsphinx\"\n")
            var ourTotal = 0
            var report: [String] = []
            for (recording, theirs) in zip(recordings, expected) {
                let recorder = try await sttd.record()
                try await sttd.call("StartTranscribing", [.vardict([])])
                // The null sink's monitor misses the first ~100 ms of a stream that starts while it
                // runs: half a second of silence first, as before a person speaks.
                let file = "\(sttd.home)/\(recording.id).wav"
                try writeWAV([Int16](repeating: 0, count: 8_000) + wavSamples(recording.path), to: file)
                try sttd.pulse.play(file)
                // Trailing silence lets the endpointer close the last utterance, as it would for a
                // person; stopping before that would flush it a little earlier or later each run.
                // Only an end of speech after the file has played counts: the engine runs behind
                // the audio, and an earlier pause's end would stop before the last words arrive.
                let played = recorder.signals.count
                await recorder.wait(timeout: .seconds(3)) { signals in
                    signals.dropFirst(played).contains {
                        $0.member == "SpeechActivity" && $0.arguments.first == .boolean(false)
                    }
                }
                let transcript = try await sttd.call("StopTranscribing").first?.string ?? ""

                let ours = wordErrors(reference: recording.reference, hypothesis: normalizedWords(transcript))
                ourTotal += ours
                // One word more than the worst sampled shift: a shift between two sampled ones
                // may read one word differently again.
                #expect(
                    ours <= theirs.max()! + 1,
                    "\(recording.id): sttd \(ours) word errors, pocketsphinx_continuous \(theirs) at each shift")
                report.append(
                    "\(recording.id): sttd \(ours) of \(recording.reference.count) \"\(transcript)\" | pocketsphinx_continuous \(theirs.min()!)–\(theirs.max()!)"
                )

                let updates = recorder.signals(named: "TranscriptChanged")
                let firstFinal = try #require(
                    updates.firstIndex { $0.arguments.last == .boolean(true) }, "a final for \(recording.id)")
                #expect(
                    updates[..<firstFinal].contains { $0.arguments.last == .boolean(false) },
                    "interim before final: \(recording.id)")
                #expect(!recorder.signals(named: "AudioLevel").isEmpty)
            }
            let words = recordings.reduce(0) { $0 + $1.reference.count }
            let theirBest = expected.reduce(0) { $0 + $1.min()! }
            let theirWorst = expected.reduce(0) { $0 + $1.max()! }
            print(
                "Word errors in \(words) words: sttd \(ourTotal), pocketsphinx_continuous \(theirBest)–\(theirWorst) by shift"
            )
            for line in report { print("  " + line) }
            #expect(
                ourTotal <= theirWorst, "sttd \(ourTotal) word errors, pocketsphinx_continuous at most \(theirWorst)")
        }

        /// The reference tool's word errors for each recording, decoded at each of 8 shifts across
        /// one 10 ms analysis frame (160 samples).
        ///
        /// The speech reaches sttd at whatever sample offset the virtual microphone's monitor
        /// happens to start the stream at, and pocketsphinx's words change with where the speech
        /// falls in its frames: at some shifts it reads 0920's "woman" as "wall and", and the five
        /// files' errors range from 24 to 30 of 71 words. So sttd is held to the range, not to
        /// one shift.
        private func referenceErrors(
            _ tool: String, _ recordings: [(id: String, path: String, reference: [String])]
        ) async throws -> [[Int]] {
            let directory = try makeTemporaryDirectory("sttd-reference")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let shifts = Array(stride(from: 0, to: 160, by: 20))
            var jobs: [(recording: Int, file: String)] = []
            for (index, recording) in recordings.enumerated() {
                let samples = try wavSamples(recording.path)
                for shift in shifts {
                    let file = "\(directory)/\(recording.id)-\(shift).wav"
                    try writeWAV([Int16](repeating: 0, count: 8_000 + shift) + samples, to: file)
                    jobs.append((index, file))
                }
            }
            var errors = [[Int]](repeating: [], count: recordings.count)
            // Two decodes at a time (the CI machine's cores): each takes seconds of CPU.
            for batch in stride(from: 0, to: jobs.count, by: 2) {
                try await withThrowingTaskGroup(of: (recording: Int, text: String).self) { group in
                    for job in jobs[batch..<min(batch + 2, jobs.count)] {
                        group.addTask {
                            let arguments = ["-infile", job.file, "-logfn", "/dev/null"]
                            let result = try await run(tool, arguments, timeout: 120)
                            guard result.status == 0 else {
                                throw MissingPrerequisite(
                                    description: "pocketsphinx_continuous -infile \(job.file) failed: \(result.stderr)")
                            }
                            return (job.recording, result.stdout)
                        }
                    }
                    for try await (recording, text) in group {
                        errors[recording].append(
                            wordErrors(reference: recordings[recording].reference, hypothesis: normalizedWords(text)))
                    }
                }
            }
            return errors
        }

        @Test func killingPulseAudioFailsTheSessionAndKeepsFinals() async throws {
            let sttd = try await SttdFixture(config: "microphone_reconnect_ms = 500\n")
            let recorder = try await sttd.record()
            try await sttd.call("StartTranscribing", [.vardict([])])
            try sttd.pulse.play(try LibriVox.recordings()[1].path)
            let gotFinal = await recorder.wait { signals in
                signals.contains { $0.member == "TranscriptChanged" && $0.arguments.last == .boolean(true) }
            }
            #expect(gotFinal)
            let finals = recorder.signals(named: "TranscriptChanged").filter { $0.arguments.last == .boolean(true) }
            let heard = finals.last?.arguments.first?.string ?? ""
            #expect(!heard.isEmpty)

            sttd.pulse.kill()
            let failed = await recorder.wait { signals in signals.contains { $0.member == "SessionFailed" } }
            // Failed once in a loaded local run (the session neither failed nor stopped for 45 s;
            // not reproduced since): the service's log says where it stood.
            #expect(failed, "no SessionFailed 20 s after PulseAudio was killed; sttd's log:\n\(sttd.log)")
            let failure = recorder.signals(named: "SessionFailed").first?.arguments
            #expect(failure?.first == .string(SpeechAPI.errorName("MicrophoneUnavailable")))
            #expect(try await sttd.property("State") == .string("idle"))
            #expect(try await sttd.property("Transcript") == .string(heard))
            #expect(try await sttd.property("MicrophoneStatus") == .string("unavailable"))
            #expect(
                try await sttd.property("LastError") == .string(SpeechAPI.errorName("MicrophoneUnavailable")))

            // Without a sound server, starting fails clearly; the service keeps answering.
            let down = await #expect(throws: DBusError.self) {
                try await sttd.call("StartTranscribing", [.vardict([])])
            }
            #expect(down?.name == SpeechAPI.errorName("MicrophoneUnavailable"))
            try await sttd.call("Ping", interface: "org.freedesktop.DBus.Peer")

            try sttd.pulse.start()
            try await sttd.call("StartTranscribing", [.vardict([])])
            #expect(try await sttd.property("State") == .string("listening"))
            #expect(try await sttd.property("MicrophoneStatus") == .string("authorized"))
            _ = try await sttd.call("StopTranscribing")
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
            let subscribed = try await waitFor(timeout: .seconds(10)) {
                try await sttd.call("ResetTranscript")
                return !watched().isEmpty
            }
            #expect(subscribed, "sttctl watch never printed the reset")
            let recorder = try await sttd.record()
            try sttd.pulse.play(try LibriVox.recordings()[4].path)
            // Stop after the pause that ends the last utterance, as a person would.
            await recorder.wait(timeout: .seconds(5)) { signals in
                signals.contains { $0.member == "SpeechActivity" && $0.arguments == [.boolean(false)] }
            }
            let stop = try sttd.sttctl(["stop"])
            #expect(stop.status == 0)
            let spoken = stop.stdout.trimmingCharacters(in: .whitespacesAndNewlines)
            #expect(!spoken.isEmpty)
            let followed = try await waitFor(timeout: .seconds(5)) {
                watched().contains("{\"transcript\":\"\(spoken)\",\"segment\":")
            }
            #expect(followed, "the watcher saw the final transcript: \(watched())")
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
