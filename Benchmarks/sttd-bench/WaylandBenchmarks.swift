import TestSupport

/// sttd's Wayland input method against wtype, into the same kind of window in the same run.
enum WaylandBenchmarks {
    /// A final's `TranscriptChanged` at a subscriber → its text in foot on sway, through
    /// `zwp_input_method_v2` and through wtype (`[wayland] input_method = false`).
    static func inputMethodLatency() async throws -> Row {
        let inputMethod = try await DesktopBenchmarks.typingLatency(on: .wayland, waylandInputMethod: true)
        let wtype = try await DesktopBenchmarks.typingLatency(on: .wayland, waylandInputMethod: false)
        let summary = { (samples: [Double]) in
            "p50 \(format(percentile(samples, 50), 1)) ms, p99 \(format(percentile(samples, 99), 1)) ms"
        }
        return Row(
            number: 18,
            name:
                "Wayland input method (final at a subscriber → its text in foot on sway, \(inputMethod.count) finals; wtype \(wtype.count) finals)",
            result: "input method \(summary(inputMethod)); wtype \(summary(wtype))",
            aim: "≤ 10 ms p50 (IBus path, row 15: 2.3 ms)",
            values: [
                "foot_p50_ms": percentile(inputMethod, 50), "foot_p99_ms": percentile(inputMethod, 99),
                "wtype_foot_p50_ms": percentile(wtype, 50), "wtype_foot_p99_ms": percentile(wtype, 99),
            ])
    }
}
