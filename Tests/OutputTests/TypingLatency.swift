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
