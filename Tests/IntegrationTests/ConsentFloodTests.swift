import Foundation
import SpeechAPI
import TestSupport
import Testing

extension Integration {
    /// Issue 37: an app that has not been allowed floods sttd with calls from many connections
    /// while its prompt is open. What waits is bounded: one call per connection in the consent
    /// gate, at most 256 in all (`Busy` beyond), and at most 32 behind it per connection and
    /// 1024 in all (`LimitsExceeded` beyond); sttd's memory does not grow with the flood.
    @Suite("Calls waiting for consent are bounded", .serialized)
    struct ConsentFloodTests {
        @Test func aFloodWhileThePromptIsOpenIsRefusedAndCostsNoMemory() async throws {
            let sttd = try await SttdFixture(config: "consent_timeout_ms = 20000\n")
            let server = try await NotificationServer(busAddress: sttd.bus.address, actions: true)
            defer { server.stop() }
            let sandbox = try FlatpakSandbox(appID: "org.example.Flood", busAddress: sttd.bus.address)
            let directory = try makeTemporaryDirectory("sttd-flood")
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let (connections, calls) = (320, 40)
            let total = connections * calls
            let before = try #require(residentBytes(of: sttd.sttd.pid))
            let flood = try sandbox.startClient(
                "flood.py", [sttd.bus.address, "\(connections)", "\(calls)"], stdout: "\(directory)/out")
            defer { flood.stop() }
            func lines() -> [[String: Any]] {
                ((try? String(contentsOfFile: "\(directory)/out", encoding: .utf8)) ?? "").split(separator: "\n")
                    .compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            }
            try await waitFor("flood.py to send every call", timeout: .seconds(120)) {
                !lines().isEmpty || !flood.isRunning
            }
            try #require(lines().first?["sent"] as? Int == total, "flood.py: \(lines())")
            // Every call has reached sttd; the prompt is still open.
            let during = try #require(residentBytes(of: sttd.sttd.pid))
            // A program outside the sandbox, met for the first time, is not held up by the flood.
            let status = try sttd.sttctl(["status"])
            #expect(status.status == 0, "\(status)")
            try await waitFor("the prompt", timeout: .seconds(20)) { !ConsentTests.prompts(server).isEmpty }
            let prompt = try #require(ConsentTests.prompts(server).first, "a prompt for the app")
            #expect(prompt.body.contains("cannot type into other windows"), "the prompt says what an app cannot do")
            server.invokeAction("deny", on: prompt.id)
            try await waitFor("every reply: \(lines())", timeout: .seconds(150)) { lines().count == 2 }
            let summary = try #require(lines().last)
            let errors = summary["errors"] as? [String: Int] ?? [:]
            print("consent flood: \(summary); RSS \(before / 1024) kB -> \(during / 1024) kB")
            #expect(summary["replies"] as? Int == total, "every call is answered")
            let refused = (errors[SpeechAPI.errorName("Busy")] ?? 0) + (errors["org.freedesktop.DBus.Error.LimitsExceeded"] ?? 0)
            let waited = errors[SpeechAPI.errorName("NotAuthorized")] ?? 0
            #expect(waited <= 256 + 1024, "calls that waited for the answer: \(errors)")
            #expect(refused == total - waited, "the rest were refused at once: \(errors)")
            #expect((errors[SpeechAPI.errorName("Busy")] ?? 0) > 0, "more connections than the gate holds: \(errors)")
            #expect(ConsentTests.prompts(server).count == 1, "one prompt however many calls")
            // Measured: about 8 MB for this flood, most of it the 320 connections' own state; a call
            // held costs little, so this bound is for a regression that keeps much per call.
            #expect(during - before <= 16 * 1024 * 1024, "RSS grew by \((during - before) / 1024) kB")
            #expect(sttd.sttd.isRunning)
        }
    }
}
