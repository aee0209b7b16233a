import Foundation
import Output
import TestSupport
import Testing

/// Time from `type()` to the text's last byte in a real window, per tool. A measurement, not an
/// assertion: it runs only when asked (`STTD_MEASURE_OUTPUT=1`) and prints p50/p99.
@Suite("Typing latency", .serialized, .enabled(if: ProcessInfo.processInfo.environment["STTD_MEASURE_OUTPUT"] == "1"))
struct TypingLatency {
    @Test(arguments: [
        (DesktopKind.x11, "hello world "), (.x11, "café Straße "), (.wayland, "hello world "),
        (.wayland, "café Straße "),
    ])
    func typeToArrival(_ kind: DesktopKind, _ text: String) async throws {
        let window = try await ReceivingWindow.open(kind)
        defer { window.close() }
        let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
        var samples: [Duration] = []
        var expected = 0
        for _ in 0..<40 {
            expected += text.utf8.count
            let start = ContinuousClock.now
            output.type(text) { _ in }
            while window.bytes.count < expected {
                guard ContinuousClock.now - start < .seconds(10) else { break }
                usleep(500)
            }
            samples.append(ContinuousClock.now - start)
        }
        samples.sort()
        let tool = try output.typingTool()
        print(
            "LATENCY \(kind) \(tool) \(text.debugDescription): p50 \(samples[samples.count / 2]) p99 \(samples[samples.count * 99 / 100]) max \(samples.last!)"
        )
        #expect(window.text == String(repeating: text, count: 40))
    }
}

/// How many of 200 finals mixing ASCII and other characters arrive byte for byte, per window. A
/// measurement: it runs only when asked (`STTD_MEASURE_OUTPUT=1`) and prints the count.
@Suite("Typing exactness", .serialized, .enabled(if: ProcessInfo.processInfo.environment["STTD_MEASURE_OUTPUT"] == "1"))
struct TypingExactness {
    static let words = [
        "café", "naïve", "–", "“quoted”", "日本", "ü€", "hello", "world", "it's", "Straße", "✓", "Señor", "ZÜRICH", "😀",
    ]

    @Test(arguments: [(DesktopKind.x11, WindowApp.terminal), (.x11, .textField), (.wayland, .terminal)])
    func finalsArriveExactly(_ kind: DesktopKind, _ app: WindowApp) async throws {
        let window = try await ReceivingWindow.open(kind, app)
        defer { window.close() }
        let output = DesktopOutput(environment: window.environment, typingTool: nil, logger: logger)
        let count = Int(ProcessInfo.processInfo.environment["STTD_MEASURE_FINALS"] ?? "") ?? 200
        var expected: [UInt8] = []
        var exact = 0
        for round in 0..<count {
            let final =
                " \(round) "
                + (0..<(3 + round % 5)).map { Self.words[(round * 7 + $0 * 3) % Self.words.count] }
                .joined(separator: " ")
            let before = expected
            expected += Array(final.utf8)
            #expect(await typed(output, final) == nil)
            // A final that does not arrive in time counts as missed (and fails the count below).
            let arrived = await happens(within: .seconds(3)) { window.bytes.count >= expected.count }
            let received = window.bytes
            if received == expected {
                exact += 1
            } else {
                print(
                    "MISSED\(arrived ? "" : " (timed out)") \(final.debugDescription): \(String(decoding: received.dropFirst(before.count), as: UTF8.self).debugDescription)"
                )
            }
            expected = received
        }
        print("EXACTNESS \(kind) \(app) \(try output.typingTool()): \(exact) of \(count) finals byte-exact")
        #expect(exact == count)
    }
}
