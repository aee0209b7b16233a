import Capture
import NIOCore
import Recognition
import Synchronization
import Waiting

/// One capture shared by the wake listener and the session the phrase starts: while armed the
/// capture stays open, and the phrase's session takes over its audio from the sample where the
/// phrase ended, so nothing is lost or heard twice at the seam, and the indicator never flickers.
///
/// Everything happens under one lock, on the capture thread or the caller's: the route, the
/// sample clock (since ``listen(to:)``), the ring of the last `ring` of audio (RAM only, for the
/// audio between the phrase's end and the match) and the hand-over buffer. Nothing here blocks:
/// a wake stream's `send` and a session's `deliver` never do.
final class CaptureRelay: Sendable {
    /// The microphone a session's reopening uses once the relay's capture is lost.
    let fallback: any Microphone
    private let ringSamples: Int
    private let handOverLimit: Duration
    private let state = Mutex(State())

    private enum Route {
        /// Chunks are dropped.
        case parked
        /// Only the wake stream gets audio (no meter, no voice detector: nothing is published).
        case wake(any RecognitionStream)
        /// After a match: the session's audio waits until it attaches.
        case buffering(handOver: Int)
        /// The hand-over's start failed (too slow, or the capture was lost): attach throws this.
        case failed(handOver: Int, CaptureError)
        case session(Session)
    }

    private struct Session {
        let handOver: Int
        let deliver: @Sendable (AudioChunk) -> Void
        let ended: SetOnce<CaptureError?>
        /// Stopping: the next chunk is the last one.
        var draining = false
    }

    private struct State {
        var route = Route.parked
        /// Samples since the wake stream began: the clock of its finals' `audioEnd`.
        var clock = 0
        /// The last chunks the wake stream got, with their first sample on the clock.
        var ring = CircularBuffer<(start: Int, chunk: AudioChunk)>()
        var ringCount = 0
        /// A hand-over's audio, from sample `keepFrom` on.
        var buffer: [AudioChunk] = []
        var buffered = 0
        var keepFrom = 0
        var handOvers = 0

        /// Goes to `route`; a session left behind has ended (nil: stopped), and the audio held
        /// for the wake stream or a hand-over is forgotten.
        mutating func enter(_ route: Route, ending error: CaptureError? = nil) {
            if case .session(let session) = self.route { session.ended.resolve(error) }
            self.route = route
            ring.removeAll()
            ringCount = 0
            buffer = []
            buffered = 0
        }
    }

    init(fallback: any Microphone, ring: Duration = .seconds(10), handOverLimit: Duration = .seconds(30)) {
        self.fallback = fallback
        ringSamples = AudioFormat.samples(in: ring)
        self.handOverLimit = handOverLimit
    }

    /// The capture's deliver (capture thread, never blocks).
    func deliver(_ chunk: AudioChunk) {
        state.withLock { state in
            let start = state.clock
            state.clock += chunk.samples.count
            switch state.route {
            case .parked, .failed:
                return
            case .wake(let stream):
                stream.send(chunk)
                state.ring.append((start, chunk))
                state.ringCount += chunk.samples.count
                while let oldest = state.ring.first, state.ringCount - oldest.chunk.samples.count >= ringSamples {
                    state.ringCount -= state.ring.removeFirst().chunk.samples.count
                }
            case .buffering(let handOver):
                keep(chunk, startingAt: start, for: handOver, &state)
            case .session(let session):
                session.deliver(chunk)
                if session.draining { state.enter(.parked) }
            }
        }
    }

    /// Routes audio to a new wake stream: sample clock to 0, ring cleared.
    func listen(to stream: any RecognitionStream) {
        state.withLock { state in
            state.enter(.wake(stream))
            state.clock = 0
        }
    }

    /// After a match: audio from sample `n` of the wake stream's clock on is kept for the session
    /// (the ring's, then live chunks appended, at most `handOverLimit`); the wake stream gets no
    /// more. Unless a wake stream is listening (the relay was parked meanwhile), the hand-over is
    /// void: its attach throws.
    func handOver(fromSample n: Int) -> CaptureHandOver {
        let handOver = state.withLock { state in
            state.handOvers += 1
            let handOver = state.handOvers
            guard case .wake = state.route else { return handOver }
            let ring = state.ring
            state.enter(.buffering(handOver: handOver))
            state.keepFrom = n
            for (start, chunk) in ring { keep(chunk, startingAt: start, for: handOver, &state) }
            return handOver
        }
        return CaptureHandOver(relay: self, handOver: handOver)
    }

    /// Drops everything (no wake stream, no session); a session attached ends (nil).
    func park() {
        state.withLock { $0.enter(.parked) }
    }

    /// The real capture ended with an error: a session attached gets it from `ended()`, a
    /// hand-over not yet attached from its attach.
    func captureLost(_ error: CaptureError) {
        state.withLock { state in
            switch state.route {
            case .buffering(let handOver): state.enter(.failed(handOver: handOver, error))
            default: state.enter(.parked, ending: error)
            }
        }
    }

    /// Appends what of `chunk` lies at or after the hand-over's first sample to its buffer; past
    /// the limit the hand-over fails (the session did not start in time).
    private func keep(_ chunk: AudioChunk, startingAt start: Int, for handOver: Int, _ state: inout State) {
        let skip = state.keepFrom - start
        guard case .buffering = state.route, skip < chunk.samples.count else { return }
        let kept = skip > 0 ? AudioChunk(samples: Array(chunk.samples[skip...])) : chunk
        guard state.buffered + kept.samples.count <= AudioFormat.samples(in: handOverLimit) else {
            let error = CaptureError(
                .failed,
                "The dictation session did not start within \(Int(handOverLimit / .seconds(1))) s of the wake phrase, so what was said after it is dropped. Say the phrase again."
            )
            state.enter(.failed(handOver: handOver, error))
            return
        }
        state.buffer.append(kept)
        state.buffered += kept.samples.count
    }

    /// A hand-over's session takes the audio: the buffer is replayed, then live chunks follow,
    /// all under the lock, so they reach `deliver` in order.
    fileprivate func attach(
        _ handOver: Int, deliver: @escaping @Sendable (AudioChunk) -> Void
    ) throws(CaptureError) -> any MicrophoneStream {
        try state.withLock { state throws(CaptureError) -> any MicrophoneStream in
            switch state.route {
            case .buffering(handOver: handOver):
                for chunk in state.buffer { deliver(chunk) }
                let ended = SetOnce<CaptureError?>()
                state.enter(.session(Session(handOver: handOver, deliver: deliver, ended: ended)))
                return HandOverCapture(relay: self, handOver: handOver, ended: ended)
            case .failed(handOver: handOver, let error):
                throw error
            default:
                throw CaptureError(
                    .failed, "The hands-free microphone closed before the dictation session started. Start it again.")
            }
        }
    }

    /// The session's capture stops after one more chunk (a capture's stop delivers what the
    /// server already recorded).
    fileprivate func stop(_ handOver: Int) {
        state.withLock { state in
            guard case .session(var session) = state.route, session.handOver == handOver else { return }
            session.draining = true
            state.route = .session(session)
        }
    }

    /// The session's capture ends now; one already ended (the relay listens for a new wake
    /// stream by then) is left alone.
    fileprivate func cancel(_ handOver: Int) {
        state.withLock { state in
            guard case .session(let session) = state.route, session.handOver == handOver else { return }
            state.enter(.parked)
        }
    }
}

/// A Microphone whose first `open` attaches to the relay's buffered audio (replayed, then live,
/// in order); any later `open` (the pipeline's reopen after `.lost`) opens the relay's
/// `fallback`, the real microphone.
final class CaptureHandOver: Microphone {
    private let relay: CaptureRelay
    private let handOver: Int
    private let opened = Atomic(false)

    fileprivate init(relay: CaptureRelay, handOver: Int) {
        self.relay = relay
        self.handOver = handOver
    }

    func open(source: String?, deliver: @escaping @Sendable (AudioChunk) -> Void) async throws(CaptureError)
        -> any MicrophoneStream
    {
        try await open(source: source, mediaName: PulseAudio.defaultMediaName, deliver: deliver)
    }

    func open(source: String?, mediaName: String, deliver: @escaping @Sendable (AudioChunk) -> Void)
        async throws(CaptureError) -> any MicrophoneStream
    {
        if !opened.exchange(true, ordering: .relaxed) { return try relay.attach(handOver, deliver: deliver) }
        return try await relay.fallback.open(source: source, mediaName: mediaName, deliver: deliver)
    }

    func sources() async throws(CaptureError) -> [AudioSource] { try await relay.fallback.sources() }

    func probe(source: String?) async throws(CaptureError) { try await relay.fallback.probe(source: source) }
}

/// The session's view of the relay's capture.
final class HandOverCapture: MicrophoneStream {
    private let relay: CaptureRelay
    private let handOver: Int
    private let outcome: SetOnce<CaptureError?>

    init(relay: CaptureRelay, handOver: Int, ended: SetOnce<CaptureError?>) {
        self.relay = relay
        self.handOver = handOver
        outcome = ended
    }

    var hasEnded: Bool { outcome.isResolved }

    func ended() async -> CaptureError? { await outcome.value }
    func stop() { relay.stop(handOver) }
    func cancel() { relay.cancel(handOver) }
}
