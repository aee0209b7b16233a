import DBus
import Foundation
import TestSupport

/// The local Deepgram-compatible server: several clients sharing one loaded model, against one
/// process per client (each loading its own model, what users do today).
extension Benchmarks {
    /// What one or more SDK clients measured: finals' latencies (from sending a final's last
    /// audio to receiving it), words, errors.
    struct ServerRun {
        var latencies: [Double] = []
        var finals = 0
        var errors: [String] = []
        var cpuSeconds = 0.0
        var peakRSSKB = 0
    }

    /// Runs `Tests/Clients/deepgram_sdk_stream.py` as a child process (its wait polls, so no
    /// thread blocks) and returns the summaries of its clients.
    static func sdkClients(url: String, wav: String, options: [String]) async throws -> [[String: Any]] {
        let python = try DeepgramSDKClient.interpreter()
        let directory = try makeTemporaryDirectory("sttd-bench-sdk")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let child = try ChildProcess(
            python, [DeepgramSDKClient.script, url, wav] + options, stdout: "\(directory)/out",
            stderr: "\(directory)/err")
        let started = ContinuousClock.now
        while child.isRunning {
            guard ContinuousClock.now - started < .seconds(600) else {
                child.stop(grace: 1)
                throw BenchError("the SDK client did not finish within 10 minutes")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        let output = (try? String(contentsOfFile: "\(directory)/out", encoding: .utf8)) ?? ""
        guard let line = output.split(separator: "\n").last,
            let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        else {
            let errors = (try? String(contentsOfFile: "\(directory)/err", encoding: .utf8)) ?? ""
            throw BenchError("the SDK client failed: \(errors.suffix(1000))")
        }
        return (object["clients"] as? [[String: Any]]) ?? [object]
    }

    static func summarize(_ clients: [[String: Any]], into run: inout ServerRun) {
        for client in clients {
            let finals = (client["finals"] as? [[String: Any]]) ?? []
            run.finals += finals.count
            run.latencies += finals.compactMap { $0["latency"] as? Double }
            run.errors += (client["errors"] as? [String]) ?? []
        }
    }

    /// Streams each WAV to its service at once (in real time; `clients` SDK clients per WAV, from
    /// one client process in lockstep), and measures the services' CPU time and the sum of their
    /// peak RSS.
    static func serverRun(
        _ streams: [(service: SttdFixture, wav: String)], clients: Int = 1
    ) async throws -> ServerRun {
        var services: [SttdFixture] = []
        for stream in streams where !services.contains(where: { $0 === stream.service }) {
            services.append(stream.service)
        }
        var addresses: [String] = []
        for stream in streams { addresses.append(try await stream.service.property("ServerAddress")?.string ?? "") }
        let before = try services.map { try ProcessSample(pid: $0.sttd.pid) }
        var run = ServerRun()
        try await withThrowingTaskGroup(of: ServerRun.self) { group in
            for (address, stream) in zip(addresses, streams) {
                group.addTask {
                    let options = ["--trail-silence", "1.5"] + (clients > 1 ? ["--clients", "\(clients)"] : [])
                    var part = ServerRun()
                    summarize(try await sdkClients(url: address, wav: stream.wav, options: options), into: &part)
                    return part
                }
            }
            for try await part in group {
                run.latencies += part.latencies
                run.finals += part.finals
                run.errors += part.errors
            }
        }
        let after = try services.map { try ProcessSample(pid: $0.sttd.pid) }
        run.cpuSeconds = zip(before, after).reduce(0) { $0 + $1.1.cpuSeconds - $1.0.cpuSeconds }
        run.peakRSSKB = after.reduce(0) { $0 + $1.peakRSSKB }
        return run
    }

    // 14
    static func localServerConcurrency() async throws -> Row {
        _ = try sherpaSettings()
        let directory = try makeTemporaryDirectory("sttd-bench-server")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        // The five clips, each followed by a second of silence (separate utterances): ~30 s.
        // Independent speakers: stream k says the clips starting from the k-th, so the four
        // streams hold the same speech but their sentences end at different moments. Lockstep
        // (all four the same file at once, every final due in the same 10 ms) is the worst case.
        let clips = try LibriVox.recordings().map { try wavSamples($0.path) + [Int16](repeating: 0, count: 16_000) }
        var orders: [String] = []
        for first in 0..<4 {
            let path = "\(directory)/clips-from-\(first).wav"
            try writeWAV(Array((clips[first...] + clips[..<first]).joined()), to: path)
            orders.append(path)
        }
        let audio = Double(clips.reduce(0) { $0 + $1.count }) / 16_000
        let warmUp = try LibriVox.recordings()[1].path
        let config = "[server]\nlisten = \"127.0.0.1:0\"\n[local]\nengine = \"moonshine\"\n"
        func service() async throws -> SttdFixture {
            let sttd = try await SttdFixture(config: config, environment: ["STTD_LOG_LEVEL": "info"])
            // Loads the model (a cold start is row 11's).
            _ = try await sdkClients(
                url: try await sttd.property("ServerAddress")?.string ?? "", wav: warmUp, options: ["--pace", "0.02"])
            return sttd
        }

        let shared = try await service()
        // One stream four times in turn, once per order: its p99 then comes from as many finals of
        // the same sentences as the four streams' (a p99 of 10 finals is about their
        // median-to-max, of 40 nearer the max).
        var single = ServerRun()
        for wav in orders {
            let run = try await serverRun([(shared, wav)])
            single.latencies += run.latencies
            single.errors += run.errors
            single.peakRSSKB = max(single.peakRSSKB, run.peakRSSKB)
        }
        let four = try await serverRun(orders.map { (shared, $0) })
        let lockstep = try await serverRun([(shared, orders[0])], clients: 4)
        var separate: [SttdFixture] = []
        for _ in 0..<4 { separate.append(try await service()) }
        let processes = try await serverRun(Array(zip(separate, orders)))
        let processesLockstep = try await serverRun(separate.map { ($0, orders[0]) })
        let runs = [single, four, lockstep, processes, processesLockstep]
        let problems = runs.flatMap(\.errors)
        guard problems.isEmpty else { throw BenchError("clients failed: \(problems.prefix(3))") }
        guard runs.allSatisfy({ !$0.latencies.isEmpty }) else { throw BenchError("a run got no finals") }

        let mb = { (kb: Int) in Double(kb) / 1024 }
        let ms = { (latencies: [Double], p: Double) in percentile(latencies, p) * 1000 }
        let p99Single = ms(single.latencies, 99)
        return Row(
            number: 14,
            name:
                "local server: 4 concurrent SDK streams of the LibriVox clips (\(format(audio, 0)) s each, real time; each stream the clips in another order, and in lockstep)",
            result:
                "one sttd: peak RSS \(format(mb(four.peakRSSKB), 0)) MB (\(format(Double(four.peakRSSKB) / Double(single.peakRSSKB), 2))× one stream), finals p50 \(format(ms(four.latencies, 50), 0)) ms, p99 \(format(ms(four.latencies, 99), 0)) ms (\(format(ms(four.latencies, 99) / p99Single, 2))× one stream's \(format(p99Single, 0)) ms, 4 runs in turn); in lockstep p50 \(format(ms(lockstep.latencies, 50), 0)) ms, p99 \(format(ms(lockstep.latencies, 99), 0)) ms (\(format(ms(lockstep.latencies, 99) / p99Single, 2))×); CPU \(format(four.cpuSeconds / audio / 4, 3)) s per audio s per stream",
            aim: "RSS < 1.3× one process, finals p99 ≤ 2× one stream's",
            anchor:
                "4 processes, one stream each: RSS \(format(mb(processes.peakRSSKB), 0)) MB in all, finals p50 \(format(ms(processes.latencies, 50), 0)) ms, p99 \(format(ms(processes.latencies, 99), 0)) ms; in lockstep p50 \(format(ms(processesLockstep.latencies, 50), 0)) ms, p99 \(format(ms(processesLockstep.latencies, 99), 0)) ms; CPU \(format(processes.cpuSeconds / audio / 4, 3)) s per audio s per stream",
            values: [
                "rss_mb": mb(four.peakRSSKB), "single_stream_rss_mb": mb(single.peakRSSKB),
                "processes_rss_mb": mb(processes.peakRSSKB), "p50_ms": ms(four.latencies, 50),
                "p99_ms": ms(four.latencies, 99), "lockstep_p50_ms": ms(lockstep.latencies, 50),
                "lockstep_p99_ms": ms(lockstep.latencies, 99), "single_p99_ms": p99Single,
                "processes_p99_ms": ms(processes.latencies, 99),
                "processes_lockstep_p99_ms": ms(processesLockstep.latencies, 99),
                "cpu_per_audio_second_per_stream": four.cpuSeconds / audio / 4,
                "processes_cpu_per_audio_second_per_stream": processes.cpuSeconds / audio / 4,
                "finals": Double(four.finals),
            ])
    }
}

extension Array {
    fileprivate func asyncMap<T>(_ transform: (Element) async throws -> T) async rethrows -> [T] {
        var result: [T] = []
        for element in self { result.append(try await transform(element)) }
        return result
    }
}
