import Capture
import Dictation
import NIOCore
import Recognition
import Waiting

/// Hands-free dictation as clients see it (the `HandsFree` property). `State` stays `idle` while
/// armed: nothing is transcribed then, and clients that treat anything but `idle` as listening
/// must not show a recording indicator.
public enum HandsFreeState: String, Sendable, CaseIterable {
    /// Not armed: sttd starts only on a call.
    case off
    /// The microphone is open and sttd listens, on this computer, for the wake phrase.
    case armed
    /// A session runs; sttd is armed again when it ends.
    case dictating
    /// Armed, but the microphone or the offline engine is out; sttd retries.
    case paused
}

/// The core's hands-free record: what is wanted, and the listener while it is open.
struct HandsFreeRecord {
    var state = HandsFreeState.off
    /// The phrase checked when arming.
    var phrase: WakePhrase?
    var listener: WakeListener?
    /// Counts wake streams and captures: a report from an older one counts for nothing.
    var generation = 0
    /// Counts the listener's captures, for the same reason.
    var captures = 0
    /// An arming in flight: later arms share its answer.
    var arming: SetOnce<SpeechError?>?
    /// Off was asked for while arming: the arming closes what it opened.
    var disarmWhileArming = false
    /// A re-arm in flight.
    var resuming = false
    /// The microphone and the words after the phrase, for the session the phrase starts.
    var handOver: (microphone: any Microphone, remainder: String)?
    var retry: Scheduled<Void>?
    /// The wait before the next retry while paused: 2 s, doubling to 30 s.
    var retryDelay = HandsFreeRecord.firstRetry

    static let firstRetry = TimeAmount.seconds(2)
    static let lastRetry = TimeAmount.seconds(30)
    /// The most of an utterance's start the engine decodes while waiting: the phrase fits.
    static let wakeSegment = Duration.seconds(3)
}

/// The capture that stays open while armed, and the relay that routes its audio: to the wake
/// stream while waiting, then to the session the phrase starts.
struct WakeListener {
    let id: Int
    let capture: any MicrophoneStream
    let relay: CaptureRelay
    /// The wake stream now decoding, if any.
    var stream: (any RecognitionStream)?
}

/// Passes the wake stream's finals to the core, one submit each; nothing else (no activity, no
/// level) leaves it. Finals come at most one per utterance start, so the loop's queue stays short.
struct WakeSink: RecognitionEventSink {
    let core: SpeechCore
    let generation: Int

    func deliver(_ event: RecognitionEvent) {
        guard case .result(let result) = event, result.isFinal, !result.text.isEmpty else { return }
        let generation = generation
        core.submit { core in core.wakeHeard(result, generation: generation) }
    }

    var eventLoop: (any EventLoop)? { core.loop }
}
