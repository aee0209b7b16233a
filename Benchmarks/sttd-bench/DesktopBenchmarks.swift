import DBus
import Foundation
import SpeechAPI
import TestSupport

/// The dictation benchmarks: typing into real windows, and auto-stop's timing.
enum DesktopBenchmarks {
    /// Typing: a final's `TranscriptChanged` at a subscriber → its text in a real window, per
    /// desktop (the streaming test server sends a final per second of audio).
    static func typingLatency() async throws -> Row {
        var results: [(DesktopKind, [Double])] = []
        for kind in DesktopKind.allCases {
            results.append((kind, try await typingLatency(on: kind, waylandInputMethod: false)))
        }
        let tools: [DesktopKind: String] = [.x11: "xdotool (X11)", .wayland: "wtype (sway)"]
        var values: [String: Double] = [:]
        for (kind, samples) in results {
            values["\(kind)_p50_ms"] = percentile(samples, 50)
            values["\(kind)_p99_ms"] = percentile(samples, 99)
        }
        return Row(
            number: 12,
            name:
                "typing (final at a subscriber → its text in a real window, \(results.map(\.1.count).reduce(0, +)) finals)",
            result: results.map { kind, samples in
                "\(tools[kind] ?? "\(kind)") p50 \(format(percentile(samples, 50), 1)) ms, p99 \(format(percentile(samples, 99), 1)) ms"
            }.joined(separator: "; "),
            aim: "typing adds ≤ 50 ms p50", values: values)
    }

    /// `waylandInputMethod`: on sway, text goes through sttd's input method instead of wtype.
    static func typingLatency(on kind: DesktopKind, waylandInputMethod: Bool) async throws -> [Double] {
        let window = try await ReceivingWindow.open(kind)
        defer { window.close() }
        let server = try await DeepgramTestServer()
        var environment = ["DISPLAY": "", "WAYLAND_DISPLAY": "", "STTD_API_KEY": server.script.key]
        environment.merge(window.environment) { $1 }
        let config = streamingConfig(server) + "\n[wayland]\ninput_method = \(waylandInputMethod)\n"
        let sttd = try await SttdFixture(config: config, environment: environment)
        if waylandInputMethod {
            try await waitFor("sttd holding foot's field", timeout: .seconds(10)) {
                try await sttd.property("InputMethod") == .string("focused")
            }
        }
        let signals = try await sttd.client.signals(sender: SttdFixture.name, member: "TranscriptChanged")
        try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
        let player = try sttd.pulse.startPlaying(try LibriVox.recordings()[0].path)
        var samples: [Double] = []
        for await signal in signals {
            guard signal.arguments.last == .boolean(true), let transcript = signal.arguments.first?.string else {
                continue
            }
            let received = ContinuousClock.now
            let length = transcript.utf8.count
            // The window's file grows as the terminal receives keys; 1 ms polling.
            while window.bytes.count < length, ContinuousClock.now - received < .seconds(5) {
                try await Task.sleep(for: .milliseconds(1))
            }
            samples.append(milliseconds(ContinuousClock.now - received))
            if !player.isRunning, samples.count >= 5 { break }
        }
        try await sttd.speech.call(Speech1.stopTranscribing)
        return samples
    }

    /// The input method: a final's `TranscriptChanged` at a subscriber → its text committed in a
    /// GTK field through `sttd-ibus` and ibus-daemon (Xvfb), over three recordings.
    static func inputMethodLatency() async throws -> Row {
        let server = try await DeepgramTestServer()
        var environment = try DesktopKind.x11.environment()
        environment["WAYLAND_DISPLAY"] = ""
        environment["STTD_API_KEY"] = server.script.key
        environment["PATH"] = "/nonexistent"  // no typing tool: the text comes through the engine
        let sttd = try await SttdFixture(config: streamingConfig(server), environment: environment)
        let desktop = try await IBusDesktop.start(for: sttd)
        defer { desktop.close() }
        let field = try await desktop.openField()
        defer { field.close() }
        while try await sttd.property("InputMethod") != .string("focused") {
            try await Task.sleep(for: .milliseconds(20))
        }
        var samples: [Double] = []
        for recording in try LibriVox.recordings().prefix(3) {
            // A stream per session: the last session's flushed finals are not this one's.
            let signals = try await sttd.client.signals(sender: SttdFixture.name, member: "TranscriptChanged")
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(output: "type"))
            let player = try sttd.pulse.startPlaying(recording.path)
            for await signal in signals {
                guard signal.arguments.last == .boolean(true), let transcript = signal.arguments.first?.string else {
                    continue
                }
                let received = ContinuousClock.now
                // The field's record is rewritten on each change; 1 ms polling.
                while field.text.unicodeScalars.count < transcript.unicodeScalars.count,
                    ContinuousClock.now - received < .seconds(5)
                {
                    try await Task.sleep(for: .milliseconds(1))
                }
                samples.append(milliseconds(ContinuousClock.now - received))
                if !player.isRunning { break }
            }
            try await sttd.speech.call(Speech1.stopTranscribing)
            try await sttd.speech.call(Speech1.resetTranscript)
            try await field.xdotool(["key", "ctrl+a", "BackSpace"])
            while !field.text.isEmpty { try await Task.sleep(for: .milliseconds(10)) }
        }
        return Row(
            number: 15,
            name:
                "input method (final at a subscriber → committed in a GTK field via sttd-ibus, \(samples.count) finals)",
            result: "p50 \(format(percentile(samples, 50), 1)) ms, p99 \(format(percentile(samples, 99), 1)) ms",
            aim: "≤ 10 ms p50 (xdotool ~19 ms, wtype ~340 ms)",
            values: ["p50_ms": percentile(samples, 50), "p99_ms": percentile(samples, 99)])
    }

    /// Auto-stop: from the end of speech to `State` leaving `listening`, with `auto_stop_ms` =
    /// 1000, over the five recordings (offline engine). The end of speech is the file's last
    /// 20 ms above -40 dBFS: the time after it in the file counts as silence already heard.
    static func autoStopTiming() async throws -> Row {
        let sttd = try await Benchmarks.localService()
        var samples: [Double] = []
        for recording in try LibriVox.recordings() {
            let trailing = trailingSilenceMilliseconds(try wavSamples(recording.path))
            try await sttd.speech.call(Speech1.startTranscribing, StartRequest(autoStopMilliseconds: 1000))
            try await sttd.pulse.play(recording.path)
            let ended = ContinuousClock.now
            while try await sttd.property("State") == .string("listening"), ContinuousClock.now - ended < .seconds(10) {
                try await Task.sleep(for: .milliseconds(5))
            }
            samples.append(trailing + milliseconds(ContinuousClock.now - ended))
            while try await sttd.property("State") != .string("idle") { try await Task.sleep(for: .milliseconds(20)) }
        }
        return Row(
            number: 13, name: "auto-stop (end of a recording → the session stops itself, auto_stop_ms = 1000)",
            result:
                "stopped after \(format(percentile(samples, 50), 0)) ms of silence p50, max \(format(samples.max() ?? .nan, 0)) ms (\(samples.count) recordings)",
            aim: "≈ auto_stop_ms",
            values: ["p50_ms": percentile(samples, 50), "max_ms": samples.max() ?? .nan])
    }

    static func trailingSilenceMilliseconds(_ samples: [Int16]) -> Double {
        let frame = 320
        var end = samples.count
        while end >= frame {
            let energy = samples[(end - frame)..<end].reduce(0.0) { $0 + Double($1) * Double($1) } / Double(frame)
            if 10 * log10(max(energy, 1) / (32768.0 * 32768.0)) > -40 { break }
            end -= frame
        }
        return Double(samples.count - end) / 16
    }
}
