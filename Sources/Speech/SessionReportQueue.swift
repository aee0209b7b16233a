import Capture
import NIOCore
import Recognition
import Synchronization

/// What a running session tells the core, in the order it happened.
enum SessionReport: Sendable {
    /// The recognizer and the microphone are open: the session listens.
    case opened
    case recognition(RecognitionEvent)
    /// The capture's own voice detector changed its mind.
    case voice(VoiceDetector.Change, at: NIODeadline)
    /// The sound server went away (down), or capture runs again.
    case microphone(down: Bool)
    /// The core fell ``SpeechCore/reportQueueBound`` reports behind: the session ends.
    case overflowed
}

/// Where everything a session tells the core goes: from its pipeline and from its recognizer and
/// capture threads, one enqueue onto the core's loop each, no task, in order. The core takes a
/// report only while `session` is its session.
///
/// Bounded: at most ``SpeechCore/reportQueueBound`` reports may wait; when results or voice
/// changes would exceed it, the session fails with a clear `SessionFailed` instead, and the finals
/// so far are kept. Level readings do not pass through it.
final class SessionReportQueue: RecognitionEventSink {
    private let core: SpeechCore
    /// The token of the session the reports are from.
    private let session: Int
    private let levels: LevelGate
    private let waiting = Atomic<Int>(0)
    private let overflowed = Atomic<Bool>(false)

    init(core: SpeechCore, session: Int, levels: LevelGate) {
        self.core = core
        self.session = session
        self.levels = levels
    }

    /// Streaming recognizers read their socket on the core's loop: results arrive without a hop.
    var eventLoop: (any EventLoop)? { core.loop }

    /// The pipeline's own reports (opened, the microphone link): never dropped, and counted as
    /// waiting, so a result handed over in place cannot overtake them.
    func send(_ report: SessionReport) { enqueue(report, bounded: false) }

    func deliver(_ event: RecognitionEvent) {
        // Already on the core's loop (a WebSocket read there), nothing waiting: hand it over in place.
        if core.loop.inEventLoop, waiting.load(ordering: .relaxed) == 0 {
            return core.assumeIsolated { [session] in $0.report(.recognition(event), session: session) }
        }
        enqueue(.recognition(event), bounded: true)
    }

    /// A voice detector change: like a result, never skipped (auto-stop depends on it).
    func deliverVoice(_ change: VoiceDetector.Change) {
        enqueue(.voice(change, at: .now()), bounded: true)
    }

    /// Hands `report` to the core; a `bounded` one only within the bound: past it the session
    /// fails, once.
    private func enqueue(_ report: SessionReport, bounded: Bool) {
        let count = waiting.wrappingAdd(1, ordering: .relaxed).newValue
        guard !bounded || count <= SpeechCore.reportQueueBound else {
            waiting.wrappingSubtract(1, ordering: .relaxed)
            guard !overflowed.exchange(true, ordering: .relaxed) else { return }
            core.submit { [session] in $0.report(.overflowed, session: session) }
            return
        }
        core.submit { [self] core in
            waiting.wrappingSubtract(1, ordering: .relaxed)
            core.report(report, session: session)
        }
    }

    /// A level reading goes out from the capture thread, not through the core's loop: ten a
    /// second, it would be most of the loop's wake-ups while listening. The D-Bus queue drops
    /// readings first when it backs up.
    func deliverLevel(_ level: Double) {
        levels.publish(.audioLevel(level), to: core.hub)
    }
}
