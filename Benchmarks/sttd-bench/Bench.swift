import DBus
import Foundation
import TestSupport

/// `make bench`: measures a release sttd in the real environment (private bus, headless
/// PulseAudio, the loopback Deepgram-protocol server) and writes `bench/results.json` and
/// `bench/results.md`. Numbers are reported, never asserted.
@main
enum Bench {
    static func main() async {
        let arguments = CommandLine.arguments.dropFirst()
        if arguments.first == "subscribe" {
            return Subscriber.run(address: arguments.dropFirst().first ?? "", output: arguments.last ?? "")
        }
        let only = Set(arguments.compactMap(Int.init))
        var rows: [Row] = []
        for (number, benchmark) in Benchmarks.all.enumerated() where only.isEmpty || only.contains(number + 1) {
            print("bench \(number + 1): \(benchmark.name)…")
            do {
                let row = try await benchmark.run()
                print("  \(row.result)")
                rows.append(row)
            } catch {
                print("  failed: \(error)")
                rows.append(
                    Row(number: number + 1, name: benchmark.name, result: "failed: \(error)", aim: "", values: [:]))
            }
        }
        do {
            try Report.write(rows, machine: Machine.describe())
        } catch {
            print("cannot write the report: \(error)")
        }
    }
}

/// One line of the results table.
struct Row: Sendable {
    var number: Int
    var name: String
    var result: String
    var aim: String
    var anchor = ""
    var values: [String: Double]
}

/// Process figures from /proc, of a process and its child processes together (sttd runs the
/// offline model in a child): CPU of both, RSS and peaks added up.
struct ProcessSample {
    /// CPU time of the process and its children (tick resolution), threads that ended included.
    var cpuSeconds: Double
    /// CPU time of the process alone, without its children (sttd without its engine process).
    var ownCPUSeconds: Double
    /// Run time of each live thread (by thread id), to the nanosecond.
    var threadRunSeconds: [String: Double]

    /// Run time since `earlier` of the threads alive now (a thread that ended in between is not
    /// counted; its context switches are not either).
    func runSeconds(since earlier: ProcessSample) -> Double {
        threadRunSeconds.reduce(0) { total, thread in total + thread.value - (earlier.threadRunSeconds[thread.key] ?? 0)
        }
    }
    /// Context switches of each live thread (by thread id).
    var threadSwitches: [String: Int]

    /// Context switches since `earlier` of the threads alive now.
    func contextSwitches(since earlier: ProcessSample) -> Int {
        threadSwitches.reduce(0) { total, thread in total + thread.value - (earlier.threadSwitches[thread.key] ?? 0) }
    }
    var rssKB: Int
    var peakRSSKB: Int
    /// The process's own pages (anonymous, and library pages it wrote): RSS without the shared,
    /// clean library pages that every process mapping those libraries also counts.
    var ownKB: Int

    init(pid: pid_t) throws {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
            let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        else { throw BenchError("process \(pid) is gone") }
        // Fields after the command name (which may contain spaces) start at ") ".
        let fields = stat[stat.range(of: ") ")!.upperBound...].split(separator: " ")
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        // Its own, and its children's that ended (cutime, cstime).
        ownCPUSeconds = (Double(fields[11])! + Double(fields[12])!) / ticks
        cpuSeconds = ownCPUSeconds + (Double(fields[13])! + Double(fields[14])!) / ticks
        // utime/stime are tick-sampled and rescaled (they can show 10 ms where nothing ran);
        // each live thread's schedstat has its run time in nanoseconds.
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        threadRunSeconds = Dictionary(
            uniqueKeysWithValues: tasks.map { task in
                let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/schedstat", encoding: .utf8)) ?? ""
                return (task, (Double(text.split(separator: " ").first ?? "0") ?? 0) / 1e9)
            })
        func value(_ key: String) -> Int {
            let line = status.split(separator: "\n").first { $0.hasPrefix(key + ":") } ?? ""
            return Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "0") ?? 0
        }
        // /proc/PID/status counts the main thread only; wake-ups happen on every thread.
        threadSwitches = Dictionary(
            uniqueKeysWithValues: tasks.map { task in
                let text = (try? String(contentsOfFile: "/proc/\(pid)/task/\(task)/status", encoding: .utf8)) ?? ""
                let switches = ["voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"].reduce(0) { sum, key in
                    let line = text.split(separator: "\n").first { $0.hasPrefix(key + ":") } ?? ""
                    return sum
                        + (Int(line.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "0") ?? 0)
                }
                return (task, switches)
            })
        rssKB = value("VmRSS")
        peakRSSKB = value("VmHWM")
        let rollup = (try? String(contentsOfFile: "/proc/\(pid)/smaps_rollup", encoding: .utf8)) ?? ""
        let anonymous = rollup.split(separator: "\n").first { $0.hasPrefix("Anonymous:") } ?? ""
        ownKB = Int(anonymous.split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first ?? "0") ?? 0
        for child in childProcesses(of: pid) {
            guard let sample = try? ProcessSample(pid: child) else { continue }
            cpuSeconds += sample.cpuSeconds
            for (thread, seconds) in sample.threadRunSeconds { threadRunSeconds["\(child)/\(thread)"] = seconds }
            for (thread, switches) in sample.threadSwitches { threadSwitches["\(child)/\(thread)"] = switches }
            rssKB += sample.rssKB
            peakRSSKB += sample.peakRSSKB
            ownKB += sample.ownKB
        }
    }
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// CPU seconds used by reaped children of this process.
func childrenCPUSeconds() -> Double {
    var usage = rusage()
    getrusage(__rusage_who_t(RUSAGE_CHILDREN.rawValue), &usage)
    return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec)
        + Double(usage.ru_stime.tv_usec) / 1e6
}

/// The nearest-rank percentile.
func percentile(_ values: [Double], _ p: Double) -> Double {
    guard !values.isEmpty else { return .nan }
    let rank = Int((p / 100 * Double(values.count)).rounded(.up))
    return values.sorted()[min(max(rank, 1), values.count) - 1]
}

func milliseconds(_ duration: Duration) -> Double {
    Double(duration.components.seconds) * 1000 + Double(duration.components.attoseconds) / 1e15
}

func format(_ value: Double, _ digits: Int = 2) -> String { String(format: "%.\(digits)f", value) }

/// The config of an sttd streaming to a loopback test server.
func streamingConfig(_ server: DeepgramTestServer) -> String {
    """
    backend = "deepgram"
    [deepgram]
    url = "\(server.url())"
    """
}

enum Machine {
    static func describe() -> String {
        let cpu =
            (try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8))?.split(separator: "\n")
            .first { $0.hasPrefix("model name") }?.split(separator: ":").last?.trimmingCharacters(in: .whitespaces)
            ?? "unknown CPU"
        let memory =
            (try? String(contentsOfFile: "/proc/meminfo", encoding: .utf8))?.split(separator: "\n").first?
            .split(whereSeparator: { $0 == " " || $0 == "\t" }).dropFirst().first.flatMap { Int($0) } ?? 0
        let os =
            (try? String(contentsOfFile: "/etc/os-release", encoding: .utf8))?.split(separator: "\n")
            .first { $0.hasPrefix("PRETTY_NAME=") }?.dropFirst(12).trimmingCharacters(
                in: CharacterSet(charactersIn: "\""))
            ?? "Linux"
        return "\(cpu), \(ProcessInfo.processInfo.activeProcessorCount) cores, \(memory / 1024 / 1024) GB RAM, \(os)"
    }
}

enum Report {
    static func write(_ measured: [Row], machine: String) throws {
        let directory = "bench"
        // A run of some benchmarks keeps the other rows of the last report.
        var rows = measured
        if let data = FileManager.default.contents(atPath: "\(directory)/results.json"),
            let old = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
            let oldRows = old["rows"] as? [[String: Any]]
        {
            for row in oldRows {
                guard let number = row["number"] as? Int, !measured.contains(where: { $0.number == number }) else {
                    continue
                }
                rows.append(
                    Row(
                        number: number, name: row["name"] as? String ?? "", result: row["result"] as? String ?? "",
                        aim: row["aim"] as? String ?? "", anchor: row["anchor"] as? String ?? "",
                        values: row["values"] as? [String: Double] ?? [:]))
            }
            rows.sort { $0.number < $1.number }
        }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let build = URL(fileURLWithPath: buildDirectory).lastPathComponent
        var table = "Measured on \(machine), \(ISO8601DateFormatter().string(from: Date())), \(build) build.\n\n"
        table += "| # | benchmark | sttd | anchor (same run) | aim |\n|---|---|---|---|---|\n"
        for row in rows {
            table +=
                "| \(row.number) | \(row.name) | \(row.result) | \(row.anchor.isEmpty ? "—" : row.anchor) | \(row.aim) |\n"
        }
        try table.write(toFile: "\(directory)/results.md", atomically: true, encoding: .utf8)
        let json: [String: Any] = [
            "machine": machine, "date": ISO8601DateFormatter().string(from: Date()),
            "rows": rows.map { row in
                [
                    "number": row.number, "name": row.name, "result": row.result, "anchor": row.anchor,
                    "aim": row.aim, "values": row.values,
                ] as [String: Any]
            },
        ]
        let data = try JSONSerialization.data(withJSONObject: json, options: [.prettyPrinted, .sortedKeys])
        try data.write(to: URL(fileURLWithPath: "\(directory)/results.json"))
        print("\n" + table)
    }
}
