import DBus
import Foundation
import SpeechAPI
import TestSupport

extension Benchmarks {
    // 8
    static func activation() async throws -> Row {
        let services = try makeTemporaryDirectory("sttd-bench-services")
        let home = try makeTemporaryDirectory("sttd-bench-home")
        defer {
            try? FileManager.default.removeItem(atPath: services)
            try? FileManager.default.removeItem(atPath: home)
        }
        try """
        [D-BUS Service]
        Name=io.github.sttd.Speech1
        Exec=\(try builtExecutable("sttd"))
        """.write(toFile: "\(services)/io.github.sttd.Speech1.service", atomically: true, encoding: .utf8)
        let pulse = try HeadlessPulse()
        let environment = pulse.serviceEnvironment(home: home)
        let bus = try PrivateBus(serviceDirectory: services, environment: environment)
        defer { bus.stop() }
        let client = try await DBusConnection.connect(to: .address(bus.address))
        func busCall(_ member: String, _ arguments: [DBusValue]) async throws -> [DBusValue] {
            try await client.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: member, arguments: arguments, timeout: .seconds(30))
        }
        var samples: [Double] = []
        for _ in 0..<20 {
            let started = ContinuousClock.now
            _ = try await busCall("StartServiceByName", [.string(SpeechAPI.busName), .uint32(0)])
            samples.append(milliseconds(ContinuousClock.now - started))
            let owner = try await busCall("GetConnectionUnixProcessID", [.string(SpeechAPI.busName)])
            if let pid = owner.first?.uint32 { kill(pid_t(pid), SIGTERM) }
            for _ in 0..<200 {
                let owned = try await busCall("NameHasOwner", [.string(SpeechAPI.busName)])
                if owned.first?.boolean != true { break }
                try await Task.sleep(for: .milliseconds(10))
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        client.close()
        return Row(
            number: 8, name: "bus activation from cold (20 times, request → name owned)",
            result: "p50 \(format(percentile(samples, 50))) ms, max \(format(samples.max() ?? .nan)) ms",
            aim: "≤ 100 ms", values: ["p50_ms": percentile(samples, 50), "max_ms": samples.max() ?? .nan])
    }
}
