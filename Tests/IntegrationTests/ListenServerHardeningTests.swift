import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

@testable import Recognition

extension Integration {
    /// What other local clients of sttd's `/v1/listen` server can do to the user's dictation:
    /// nothing. sttd runs pocketsphinx, which decodes one session at a time.
    @Suite("The local server beside dictation", .serialized)
    struct ListenServerBesideDictationTests {
        static let config = "[local]\nengine = \"pocketsphinx\"\n[server]\nlisten = \"127.0.0.1:0\"\n"

        static func requireModel() throws {
            _ = try requireFile("/usr/share/pocketsphinx/model/en-us", package: "pocketsphinx-en-us")
        }

        /// A real WebSocket client of the server at `address`.
        static func connect(_ address: String, logs: LogRecorder) async throws -> WebSocketConnection {
            try await WebSocketConnection.connect(
                url: URL(string: "\(address)/v1/listen?encoding=linear16&sample_rate=16000&channels=1")!, headers: [],
                tls: nil, timeout: .seconds(10), logger: logs.logger()
            ) { _ in }
        }

        /// The most descriptors `pid` had open while `body` ran.
        static func peakDescriptors(of pid: pid_t, during body: () async throws -> Void) async throws -> Int {
            let peak = Peak()
            try await withThrowingTaskGroup(of: Void.self) { group in
                group.addTask {
                    while !Task.isCancelled {
                        peak.record(openDescriptors(of: pid))
                        try? await Task.sleep(for: .milliseconds(10))
                    }
                }
                try await body()
                group.cancelAll()
            }
            return peak.value
        }

        /// A LibriVox clip after half a second of silence, as a file paplay can play.
        static func clip(in sttd: SttdFixture, _ index: Int = 0) throws -> String {
            let file = "\(sttd.home)/clip-\(index).wav"
            try writeWAV(
                [Int16](repeating: 0, count: 8_000) + wavSamples(try LibriVox.recordings()[index].path), to: file)
            return file
        }

        /// A client connecting while the user dictates is answered 503 with `Retry-After`, and
        /// the dictation goes on to its end; a D-Bus Start while a client streams is answered
        /// `Busy`, and the stream goes on; after each, the other gets the engine.
        @Test func aClientDuringDictationGets503AndNeverEndsIt() async throws {
            try Self.requireModel()
            let logs = LogRecorder()
            let sttd = try await SttdFixture(config: Self.config)
            let address = try #require(try await sttd.property("ServerAddress")?.string)
            let recorder = try await sttd.record()
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            let playing = try sttd.pulse.startPlaying(try Self.clip(in: sttd))
            // Speech recognized: the session is decoding when the client comes.
            try await recorder.wait("recognized speech") { $0.contains { $0.member == "TranscriptChanged" } }

            let refusal = await #expect(throws: HandshakeRefusal.self) {
                let connection = try await Self.connect(address, logs: logs)
                connection.abort()
            }
            #expect(refusal?.status == 503)
            #expect(refusal?.header("Retry-After") == "5")
            #expect(refusal?.header("dg-error")?.contains("dictation is using it") == true, "\(refusal?.body ?? "")")
            #expect(try await sttd.property("State") == .string("listening"))

            #expect(await playing.exit(timeout: .seconds(30)) == 0, "paplay played the clip")
            let transcript = try await sttd.speech.call(Speech1.stopTranscribing)
            #expect(!transcript.isEmpty)
            #expect(try await sttd.property("State") == .string("idle"))
            #expect(recorder.signals(named: "SessionFailed").isEmpty)

            // Now a client holds the engine: dictation is refused with Busy, the stream goes on.
            let stream = try await Self.connect(address, logs: logs)
            let busy = await #expect(throws: DBusError.self) {
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            }
            #expect(busy?.name == SpeechAPI.errorName("Busy"))
            #expect(busy?.message.contains("/v1/listen") == true, "\(busy?.message ?? "")")
            #expect(try await sttd.property("AuthorizationStatus") == .string("authorized"))
            stream.send(binary: [Int16](repeating: 0, count: 1_600))
            stream.send(text: #"{"type":"CloseStream"}"#)
            #expect(await stream.end == .closed(code: 1000, reason: ""))

            // And dictation gets the engine back.
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
            try await sttd.pulse.play(try Self.clip(in: sttd, 1))
            #expect(try await sttd.speech.call(Speech1.stopTranscribing).isEmpty == false)
            #expect(sttd.sttd.isRunning)
        }

        /// A web page the user visits can open a WebSocket to the server: sttd refuses it with
        /// 403 and logs its origin unless `[server] allowed_origins` lists it; programs that send
        /// no Origin are served.
        @Test func onlyListedWebPagesGetTheEngine() async throws {
            try Self.requireModel()
            let logs = LogRecorder()
            let sttd = try await SttdFixture(
                config: Self.config + "allowed_origins = [\"https://notes.example\"]\n")
            let address = try #require(try await sttd.property("ServerAddress")?.string)
            let url = URL(string: "\(address)/v1/listen?encoding=linear16&sample_rate=16000&channels=1")!
            func connect(origin: String?) async throws -> WebSocketConnection {
                try await WebSocketConnection.connect(
                    url: url, headers: origin.map { [("Origin", $0)] } ?? [], tls: nil, timeout: .seconds(10),
                    logger: logs.logger()
                ) { _ in }
            }
            let refusal = await #expect(throws: HandshakeRefusal.self) {
                try await connect(origin: "http://evil.example").abort()
            }
            #expect(refusal?.status == 403)
            #expect(refusal?.header("dg-error")?.contains("allowed_origins") == true, "\(refusal?.body ?? "")")
            #expect(sttd.log.contains("allowed_origins") && sttd.log.contains("http://evil.example"))
            for origin in [nil, "https://notes.example"] {
                let stream = try await connect(origin: origin)
                stream.send(text: #"{"type":"CloseStream"}"#)
                #expect(await stream.end == .closed(code: 1000, reason: ""), "\(origin ?? "no Origin")")
            }
        }

        /// 300 idle sockets, more than twice what the server keeps open, against an sttd allowed
        /// 200 descriptors (a bounded count showing what ~1 100 do against the usual 1024):
        /// sttd's descriptors stay bounded, dictation works meanwhile, and once the handshake
        /// timeout has passed sttd holds none of them.
        @Test func idleSocketsCannotStarveDictationOfDescriptors() async throws {
            try Self.requireModel()
            let prlimit = try requireTool("prlimit", package: "util-linux")
            let sttd = try await SttdFixture(config: Self.config)
            let address = try #require(try await sttd.property("ServerAddress")?.string)
            let port = try #require(address.split(separator: ":").last.flatMap { Int($0) })
            let pid = sttd.sttd.pid
            let limited = try await run(prlimit, ["--pid", "\(pid)", "--nofile=200:200"])
            try #require(limited.status == 0, "\(limited.stderr)")
            // One dictation first, so that the engine and PulseAudio hold what they keep, and
            // what a dictation itself adds is known.
            let alone = try await Self.peakDescriptors(of: pid) {
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
                try await sttd.pulse.play(try Self.clip(in: sttd))
                #expect(try await sttd.speech.call(Speech1.stopTranscribing).isEmpty == false)
            }
            let before = openDescriptors(of: pid)

            var batches: [IdleSockets] = []
            let peak = try await Self.peakDescriptors(of: pid) {
                // In batches below the listen backlog (64): a burst past it would leave sockets
                // the kernel dropped, which never reach sttd at all.
                for _ in 0..<12 {
                    batches.append(try IdleSockets(port: port, count: 25))
                    try await Task.sleep(for: .milliseconds(20))
                }
                try await sttd.speech.call(Speech1.startTranscribing, StartRequest())
                try await sttd.pulse.play(try Self.clip(in: sttd, 1))
                let transcript = try await sttd.speech.call(Speech1.stopTranscribing)
                #expect(!transcript.isEmpty, "dictation with 300 idle sockets opened")
                try await waitFor(
                    "sttd to let go of the descriptors: it holds \(openDescriptors(of: pid) - before) more than before",
                    timeout: .seconds(30)
                ) { openDescriptors(of: pid) <= before + 2 }
            }
            let closedByServer = await batches.asyncMap { await $0.waitUntilClosed(timeout: .zero) }.reduce(0, +)
            print(
                "sttd's descriptors: \(before) idle, at most \(alone) dictating, at most \(peak) dictating with 300 idle sockets opened, \(openDescriptors(of: pid)) after; \(closedByServer) of the 300 closed by sttd"
            )
            // The 128 connections the server keeps, what a dictation holds, and connections
            // accepted a moment before they are closed: 157–165 seen, with 24 idle and 28 alone.
            // Without a cap the 300 sockets take sttd to its limit, and accept(), PulseAudio and
            // /proc reads fail. (A margin over alone + 128 depends on how many accepts are in
            // flight on a loaded machine: before + 140 failed once in a loaded clean-clone run.)
            #expect(peak < 200, "sttd stayed below its descriptor limit (200): \(peak) at most")
            #expect(sttd.log.contains("too many connections open"))
            #expect(sttd.sttd.isRunning)
        }
    }
}

extension Array {
    func asyncMap<T>(_ transform: (Element) async -> T) async -> [T] {
        var results: [T] = []
        for element in self { results.append(await transform(element)) }
        return results
    }
}

/// The highest value recorded.
final class Peak: @unchecked Sendable {
    private let lock = NSLock()
    private var highest = 0

    func record(_ value: Int) {
        lock.lock()
        highest = max(highest, value)
        lock.unlock()
    }

    var value: Int {
        lock.lock()
        defer { lock.unlock() }
        return highest
    }
}
