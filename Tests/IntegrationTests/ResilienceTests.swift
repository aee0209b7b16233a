import DBus
import Foundation
import History
import SpeechAPI
import Synchronization
import TestSupport
import Testing

/// Final segments signalled so far, in order.
func signalledFinals(_ recorder: SignalRecorder) -> [String] {
    recorder.signals(named: "TranscriptChanged").filter { $0.arguments.last == .boolean(true) }
        .compactMap { $0.arguments[1].string }.filter { !$0.isEmpty }
}

/// `GetHistory` entries.
func history(_ sttd: SttdFixture, limit: UInt32 = 0) async throws -> [HistoryItem] {
    try await sttd.speech.call(Speech1.getHistory, limit)
}

extension Integration {
    @Suite("History and resilience", .serialized)
    struct ResilienceTests {
        @Test func killDashNineKeepsEverySignalledFinal() async throws {
            let sttd = try await SttdFixture()
            let recorder = try await sttd.record()
            // Speech that goes on well past the first final (one recording is one utterance, whose
            // final comes as it ends): the five recordings, a pause after each.
            let speech = "\(sttd.home)/speech.wav"
            try writeWAV(
                try LibriVox.recordings().flatMap { try wavSamples($0.path) + [Int16](repeating: 0, count: 8_000) },
                to: speech)
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            let player = try sttd.pulse.startPlaying(speech)
            defer { player.stop() }
            try await recorder.wait("a final while the recording plays") { _ in !signalledFinals(recorder).isEmpty }
            // Kill at an arbitrary moment of the dictation: up to 3 s after the first final. (Not
            // after a number of further updates: the offline engine sends about one a second.)
            try await Task.sleep(for: .milliseconds(Int.random(in: 0...3_000)))
            #expect(player.isRunning, "killed while the speech goes on")
            sttd.sttd.signal(SIGKILL)
            #expect(await sttd.sttd.exit(timeout: .seconds(10)) == 128 + SIGKILL)
            let signalled = signalledFinals(recorder).joined(separator: " ")

            try await sttd.restartService()
            let entries = try await history(sttd)
            #expect(entries.count == 1)
            let stored = entries.first?.text ?? ""
            #expect(stored.hasPrefix(signalled), "signalled: \(signalled)\nstored: \(stored)")
        }

        @Test func pulseAudioRestartResumesTheSession() async throws {
            let sttd = try await SttdFixture()
            let recorder = try await sttd.record()
            let recordings = try LibriVox.recordings()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(recordings[4].path)
            // A pause after speaking ends the utterance before the server goes.
            try await recorder.wait("a final", timeout: .seconds(30)) { _ in !signalledFinals(recorder).isEmpty }

            try sttd.pulse.kill()
            try await recorder.wait("State reconnecting when the sound server dies", timeout: .seconds(30)) { _ in
                recorder.changes(of: "State").contains(.string("reconnecting"))
            }
            try await recorder.wait("MicrophoneStatus unavailable while it is down", timeout: .seconds(30)) { _ in
                recorder.changes(of: "MicrophoneStatus").contains(.string("unavailable"))
            }
            try sttd.pulse.start()
            let states: @Sendable () -> [DBusValue] = { recorder.changes(of: "State") }
            try await recorder.wait("State listening again: \(states())", timeout: .seconds(10)) { _ in
                states().last == .string("listening")
            }
            #expect(try await sttd.property("MicrophoneStatus") == .string("authorized"))
            let before = signalledFinals(recorder).count

            try await sttd.pulse.play(recordings[2].path)
            let transcript = try await sttd.speech.call(Speech1.stopTranscribing)
            let after = signalledFinals(recorder).dropFirst(before).joined(separator: " ")
            let errorRate = wordErrorRate(reference: recordings[2].reference, hypothesis: normalizedWords(after))
            #expect(!after.isEmpty && errorRate < 70, "words after the restart: \(after) (WER \(errorRate)%)")
            #expect(transcript.hasSuffix(after))
            #expect(recorder.signals(named: "SessionFailed").isEmpty)
        }

        @Test func soundServerThatStaysAwayFailsTheSessionAfterTheWait() async throws {
            let sttd = try await SttdFixture(config: "microphone_reconnect_ms = 700\n")
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try sttd.pulse.kill()
            try await recorder.wait("SessionFailed", timeout: .seconds(10)) { signals in
                signals.contains { $0.member == "SessionFailed" }
            }
            #expect(
                recorder.signals(named: "SessionFailed").first?.arguments.first
                    == .string(SpeechAPI.errorName("MicrophoneUnavailable")))
            #expect(recorder.changes(of: "State").map(\.string) == ["starting", "listening", "reconnecting", "idle"])
        }

        @Test func namedSourceThatDisappearsFailsTheSession() async throws {
            let sttd = try await SttdFixture()
            let module = try sttd.pulse.pactl([
                "load-module", "module-null-sink", "sink_name=desk", "rate=16000", "channels=1",
            ]).trimmingCharacters(in: .whitespacesAndNewlines)
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(source: "desk.monitor"))
            try sttd.pulse.pactl(["unload-module", module])
            try await recorder.wait("SessionFailed", timeout: .seconds(30)) { signals in
                signals.contains { $0.member == "SessionFailed" }
            }
            let failure = recorder.signals(named: "SessionFailed").first?.arguments
            #expect(failure?.first == .string(SpeechAPI.errorName("MicrophoneUnavailable")))
            #expect(failure?.last?.string?.contains("desk.monitor") == true, "\(failure ?? [])")
            #expect(
                !recorder.changes(of: "State").contains(.string("reconnecting")), "a named source is not waited for")
            #expect(try await sttd.property("State") == .string("idle"))
        }

        @Test func defaultSourceIsFollowedBetweenSessions() async throws {
            let sttd = try await SttdFixture()
            let recording = try LibriVox.recordings()[4].path
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(recording)
            #expect(try await sttd.speech.call(Speech1.stopTranscribing).isEmpty == false)

            try sttd.pulse.pactl(["load-module", "module-null-sink", "sink_name=desk", "rate=16000", "channels=1"])
            try sttd.pulse.pactl(["set-default-source", "desk.monitor"])
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(recording)  // into "mic", no longer the default
            #expect(try await sttd.speech.call(Speech1.stopTranscribing) == "")
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(recording, device: "desk")
            #expect(try await sttd.speech.call(Speech1.stopTranscribing).isEmpty == false)
        }

        @Test func historyIsKeptSearchableAndPrivate() async throws {
            let sttd = try await SttdFixture()
            let recorder = try await sttd.record()
            let started = Date().microseconds
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(language: "en-GB"))
            try await sttd.pulse.play(try LibriVox.recordings()[4].path)
            let transcript = try await sttd.speech.call(Speech1.stopTranscribing)
            try #require(!transcript.isEmpty)
            let activity = recorder.signals(named: "SpeechActivity").compactMap { $0.arguments.first?.boolean }
            #expect(activity.first == true && activity.last == false, "SpeechActivity: \(activity)")
            #expect(zip(activity, activity.dropFirst()).allSatisfy { $0 != $1 }, "changes only: \(activity)")
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.speech.call(Speech1.stopTranscribing)  // nothing said: not listed

            let entries = try await history(sttd)
            #expect(entries.count == 1)
            #expect(entries.first?.text == transcript)
            #expect((entries.first?.started ?? 0) >= started && (entries.first?.started ?? 0) <= Date().microseconds)
            #expect(try await history(sttd, limit: 1).count == 1)

            let attributes = try FileManager.default.attributesOfItem(atPath: sttd.historyPath)
            #expect(attributes[.posixPermissions] as? Int == 0o600)

            #expect(try sttd.sttctl(["last"]).stdout == transcript + "\n")
            let listed = try sttd.sttctl(["history"])
            #expect(listed.status == 0 && listed.stdout.contains(transcript))
            let word = try #require(transcript.split(separator: " ").max { $0.count < $1.count })
            #expect(try sttd.sttctl(["history", "--search", String(word)]).stdout.contains(transcript))
            #expect(try sttd.sttctl(["history", "--search", "zebraxylophone"]).stdout.isEmpty)
            let json = try sttd.sttctl(["history", "--json", "--limit", "1"]).stdout
            #expect(json.hasPrefix("{\"id\":\"\(entries.first?.id ?? "")\""))
            #expect(json.contains("\"language\":\"en-GB\"") && json.contains("\"backend\":\"local\""))
            #expect(try sttd.sttctl(["history", "--limit", "-1"]).status == 2)
        }

        @Test func historyFalseWritesNothing() async throws {
            let sttd = try await SttdFixture(config: "history = false\n")
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(try LibriVox.recordings()[4].path)
            #expect(try await sttd.speech.call(Speech1.stopTranscribing).isEmpty == false)
            #expect(try await history(sttd).isEmpty)
            #expect(!FileManager.default.fileExists(atPath: "\(sttd.home)/data/sttd"))
            #expect(try sttd.sttctl(["last"]).stdout.isEmpty)
        }

        @Test func oldSessionsArePrunedAtStartup() async throws {
            let sttd = try await SttdFixture(config: "history_days = 30\n") { home in
                let store = try HistoryStore(path: "\(home)/data/sttd/history.sqlite")
                for (id, days) in [("old", 45.0), ("recent", 2.0)] {
                    let started = Date().addingTimeInterval(-days * 86_400)
                    try store.beginSession(id: id, started: started, backend: "local", language: "en-US", source: "")
                    try store.appendFinal(sessionID: id, text: "\(id) words", audioStart: 0, audioEnd: 1)
                    try store.endSession(id: id, ended: started.addingTimeInterval(5))
                }
            }
            #expect(try await history(sttd).map(\.text) == ["recent words"])
        }

        @Test func systemdNotificationsWatchdogAndCleanStop() async throws {
            let socketPath = try makeTemporaryDirectory("sttd-notify") + "/notify"
            let listener = try NotifyListener(path: socketPath)
            let sttd = try await SttdFixture(environment: [
                "NOTIFY_SOCKET": socketPath, "WATCHDOG_USEC": "200000",
            ])
            try await listener.wait("READY=1") { $0.contains { $0.hasPrefix("READY=1") } }
            try await listener.wait("three WATCHDOG=1") { $0.filter { $0 == "WATCHDOG=1" }.count >= 3 }

            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(try LibriVox.recordings()[4].path)
            sttd.sttd.signal(SIGTERM)
            #expect(await sttd.sttd.exit(timeout: .seconds(15)) == 0)
            #expect(listener.messages.contains("STOPPING=1"))
            // The session stopped as a Stop would: its words are in history, the session ended.
            let store = try #require(try HistoryStore(readingAt: sttd.historyPath))
            let sessions = try store.sessions()
            #expect(sessions.count == 1 && sessions.first?.ended != nil && sessions.first?.text.isEmpty == false)
        }

        @Test func fuzzedCallsGetErrorsNeverCrashesOrGrowth() async throws {
            let sttd = try await SttdFixture()
            // Warm up what a session allocates once (PulseAudio client, decoder buffers).
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.speech.call(Speech1.stopTranscribing)
            let before = try #require(residentBytes(of: sttd.sttd.pid))
            let seed = Int.random(in: 1...1_000_000)
            let summary = try PythonClient.run("fuzz.py", [sttd.bus.address, "10000", "\(seed)"], timeout: 600)
            let after = try #require(residentBytes(of: sttd.sttd.pid))
            print("fuzz seed \(seed): \(summary); RSS \(before / 1024) kB -> \(after / 1024) kB")
            #expect(summary["calls"] as? Int == 10_000)
            #expect(summary["no_reply"] as? Int == 0, "every call is answered")
            #expect(sttd.sttd.isRunning)
            try await sttd.call("Ping", interface: "org.freedesktop.DBus.Peer")
            let all = try await sttd.call(
                "GetAll", [.string(SttdFixture.interface)], interface: "org.freedesktop.DBus.Properties")
            #expect(all.first?.stringVariantDictionary?.contains { $0.key == "Version" } == true)
            #expect(after - before <= 5 * 1024 * 1024, "RSS grew by \((after - before) / 1024) kB")
        }

        @Test func twentyClientsForAMinuteNeverDeadlock() async throws {
            let sttd = try await SttdFixture()
            let recorder = try await sttd.record()
            let summary = try PythonClient.run("load.py", [sttd.bus.address, "20", "60", "7"], timeout: 300)
            print("load: \(summary)")
            #expect(summary["clients_finished"] as? Int == 20)
            #expect(summary["no_reply"] as? Int == 0, "every call is answered")
            #expect((summary["bad_states"] as? [String])?.isEmpty == true)
            #expect((summary["calls"] as? Int ?? 0) > 1000)
            // Signals still in flight have arrived once the last State change is the current value.
            let current = try await sttd.property("State")
            try await recorder.wait("the State change to \(String(describing: current))", timeout: .seconds(30)) { _ in
                recorder.changes(of: "State").last == current
            }
            let states = recorder.changes(of: "State").compactMap(\.string)
            let allowed: Set = ["idle", "starting", "listening", "stopping", "reconnecting"]
            #expect(states.allSatisfy(allowed.contains))
            #expect(try await sttd.property("State")?.string == states.last)
            try await sttd.call("Ping", interface: "org.freedesktop.DBus.Peer")
        }

        @Test func clientsVanishingMidCallWedgeNothing() async throws {
            let sttd = try await SttdFixture()
            let recorder = try await sttd.record()
            // The client sends and exits: each reply finds nobody to go to.
            let sent = try PythonClient.run(
                "vanish.py",
                [sttd.bus.address, "StartTranscribing", "ToggleTranscribing", "StopTranscribing", "StartTranscribing"],
                timeout: 30)
            #expect(sent["sent"] as? Int == 4)
            // Every call's State change has come once Toggle's stop has and the last Start's listening
            // follows it: starting, stopping, starting, listening when all four calls come before
            // the microphone opens (SessionMachineTests.callsDuringStartingKeepTheirOrder), more
            // when it opens sooner.
            let states: @Sendable () -> [DBusValue] = { recorder.changes(of: "State") }
            try await recorder.wait("the four calls' State changes: \(states())", timeout: .seconds(30)) { _ in
                states().contains(.string("stopping")) && states().last == .string("listening")
            }
            #expect(try await sttd.property("State") == .string("listening"), "\(recorder.changes(of: "State"))")
            try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(try await sttd.property("State") == .string("idle"))
        }
    }
}

/// A datagram socket standing in for systemd's `NOTIFY_SOCKET`.
final class NotifyListener: Sendable {
    private let received = Mutex<[String]>([])

    init(path: String) throws {
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: Array(path.utf8) + [0]) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard fd >= 0, bound == 0 else { throw MissingPrerequisite(description: "cannot bind \(path)") }
        Thread.detachNewThread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = recv(fd, &buffer, buffer.count, 0)
                guard count > 0 else { break }
                let text = String(decoding: buffer[..<count], as: UTF8.self)
                self.received.withLock { $0 += text.split(separator: "\n").map(String.init) }
            }
        }
    }

    var messages: [String] { received.withLock { $0 } }

    /// Waits until `condition` holds for the messages so far; throws ``WaitTimedOut`` if it does not.
    func wait(
        _ what: @autoclosure () -> String, timeout: Duration = .seconds(10), fileID: String = #fileID,
        line: Int = #line, until condition: ([String]) -> Bool
    ) async throws {
        try await waitFor(
            "\(what()); received: \(describeLast(messages))", timeout: timeout, fileID: fileID, line: line
        ) { condition(messages) }
    }
}
