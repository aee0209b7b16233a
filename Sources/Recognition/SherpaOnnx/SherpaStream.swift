import Capture
import Foundation
import Logging
import Synchronization
import Waiting

/// The sherpa-onnx engine's stream of one session. Its audio is cut into utterances as it arrives (on the
/// caller's thread: the energy VAD is cheap); what needs the model goes to the shared decoders as
/// ``SherpaWork``, which run a session's work in order, one item at a time, and deliver its events.
final class SherpaStream: RecognitionStream {
    let events: any RecognitionEventSink
    let interimResults: Bool
    let library: SherpaLibrary
    let model: SherpaModel
    let decoders: SherpaDecoderPool
    private let input: Mutex<Input>
    private let outcome = SetOnce<Result<Void, RecognitionError>>()

    /// What `send`, `finalize`, `finish` and `cancel` share: segmentation and the interim pace.
    private struct Input {
        var segmenter: UtteranceSegmenter
        var open = true
        /// Where the last interim was cut, and how much new audio the next one needs.
        var lastInterimAt = 0
        var interimSpacing = SherpaStream.minInterimSpacing
        /// Audio received, and the time interim decodes took so far: the interims' budget.
        var received = 0
        var interimTime = Duration.zero
        /// Counted in the decoders' `speakingSessions`.
        var speaking = false
    }

    /// Interims: the first 1.5 s into an utterance, then at least twenty times the last interim
    /// decode's time apart (a decode's cost grows with the prefix, so the spacing does too), and
    /// only while the session's interim decodes so far (and, after an utterance's first, the one
    /// about to run) took at most a quarter of what decoding all the audio it received would take
    /// on this machine. That budget bounds their cost however utterances fall (short ones each
    /// start with an interim at 1.5 s, and an interim a final overtakes is wasted), relative to
    /// the engine's own speed, so a faster model or machine does not make interims dearer than
    /// the finals. Under 1.5 s Moonshine often invents words, so an earlier interim would say
    /// little. Under load (more sessions speaking than the decoder threads kept from interims can
    /// take finals for) no interims are queued.
    static let minInterimSpacing = AudioFormat.sampleRate * 3 / 2
    static let interimSpacingFactor = 20
    static let interimBudgetShare = 0.25

    // Decoder-side state: touched only by the thread running the session's non-interim work
    // (SherpaDecoderPool runs that one item at a time).
    nonisolated(unsafe) var speculative: (text: String, samples: Int)?
    /// An interim may decode beside the session's other work; this decides whether it still
    /// goes out. Results are delivered under this lock, so a void interim never follows a final.
    let interims = Mutex(Interims())

    struct Interims {
        var lastText = ""
        /// Newer work was taken while an interim decoded: its text must not go out.
        var void = false
    }

    init(
        decoders: SherpaDecoderPool, library: SherpaLibrary, model: SherpaModel, interimResults: Bool,
        segmenter: UtteranceSegmenter, events: any RecognitionEventSink
    ) {
        self.decoders = decoders
        self.library = library
        self.model = model
        self.interimResults = interimResults
        self.events = events
        input = Mutex(Input(segmenter: segmenter))
    }

    func run() async throws(RecognitionError) {
        try await outcome.wait { [self] in cancel() }
    }

    func send(_ chunk: AudioChunk) {
        guard !chunk.samples.isEmpty else { return }
        input.withLock { input in
            guard input.open else { return }
            input.received += chunk.samples.count
            var work: [SherpaWork] = []
            for event in input.segmenter.append(chunk.samples) {
                switch event {
                case .started:
                    setSpeaking(true, &input)
                    input.lastInterimAt = 0
                    input.interimSpacing = Self.minInterimSpacing
                    work.append(.event(.speechActivity(true)))
                case .paused:
                    // Decode during the hangover: if speech does not resume, this is the final.
                    work.append(.speculative(input.segmenter.current))
                case .resumed:
                    work.append(.resumed)
                case .split(let head):
                    input.lastInterimAt = 0
                    work.append(.final(head, fromFinalize: false))
                case .ended(let utterance):
                    setSpeaking(false, &input)
                    if let utterance { work.append(.final(utterance, fromFinalize: false)) }
                    work.append(.event(.speechActivity(false)))
                }
            }
            // After the first, the spacing is counted from the last interim's cut to the earliest
            // point this one may be cut at, so the interims' ends are at least that far apart.
            let spacing = input.interimSpacing + (input.lastInterimAt > 0 ? UtteranceSegmenter.wordBoundaryWindow : 0)
            if interimResults, input.segmenter.inSpeech, !input.segmenter.isPaused, decoders.interimsHaveRoom,
                input.segmenter.length - input.lastInterimAt >= spacing,
                interimBudgetAllows(input)
            {
                let prefix = input.segmenter.currentAtWordBoundary
                input.lastInterimAt = prefix.samples.count
                work.append(.interim(prefix))
            }
            if !work.isEmpty { enqueue(work, &input) }
        }
    }

    func finalize() {
        input.withLock { input in
            guard input.open else { return }
            enqueue(flush(&input, fromFinalize: true), &input)
        }
    }

    func finish() {
        input.withLock { input in
            guard input.open else { return }
            input.open = false
            enqueue(flush(&input, fromFinalize: false) + [.end(nil)], &input)
        }
    }

    func cancel() { end(abandoning: false) }

    /// A stop timed out: the engine is restarted if it is still on this session's work.
    func abandon() { end(abandoning: true) }

    private func end(abandoning: Bool) {
        input.withLock { input in
            input.open = false
            setSpeaking(false, &input)
        }
        // Also after finish(): queued decodes are dropped and the session ends next.
        if !hasEnded { decoders.stop(self, error: nil, abandon: abandoning) }
        // run() returns now, not after a decode in progress (onnxruntime cannot stop one, and a
        // worker may have stopped answering). Under the results' lock: nothing goes out after.
        interims.withLock { _ in _ = outcome.resolve(.success(())) }
    }

    /// The pending utterance as work; a Finalize always gets its one (maybe empty) final.
    private func flush(_ input: inout Input, fromFinalize: Bool) -> [SherpaWork] {
        let wasInSpeech = input.segmenter.inSpeech
        let position = input.segmenter.position
        var work: [SherpaWork] = []
        if let pending = input.segmenter.flush() {
            work.append(.final(pending, fromFinalize: fromFinalize))
        } else if fromFinalize {
            work.append(.final(UtteranceSegmenter.Utterance(samples: [], start: position), fromFinalize: true))
        }
        if wasInSpeech { work.append(.event(.speechActivity(false))) }
        setSpeaking(false, &input)
        input.lastInterimAt = 0
        return work
    }

    private func enqueue(_ work: [SherpaWork], _ input: inout Input) {
        if let overflow = decoders.enqueue(work, for: self) {
            input.open = false
            decoders.logger.warning("sherpa-onnx engine fell behind, session stopped")
            decoders.stop(self, error: overflow)
        }
    }

    /// The decoders report how long an interim took: the next waits for twenty times as much
    /// audio, and the session's interim budget is charged.
    func interimDecoded(took: Duration) {
        input.withLock { input in
            input.interimTime += took
            input.interimSpacing = max(
                Self.minInterimSpacing, Self.interimSpacingFactor * AudioFormat.samples(in: took))
        }
    }

    private func setSpeaking(_ speaking: Bool, _ input: inout Input) {
        guard input.speaking != speaking else { return }
        input.speaking = speaking
        decoders.speakingSessions.wrappingAdd(speaking ? 1 : -1, ordering: .relaxed)
    }

    /// Whether the session's interims stay within their share of decoding all it heard. An
    /// utterance's first interim needs the interims so far within it; a later one needs them
    /// *and itself* (its prefix at the engine's measured speed) within it, so the last interim
    /// before a final cannot overshoot by a whole utterance's decode.
    private func interimBudgetAllows(_ input: Input) -> Bool {
        guard let cost = decoders.decodeCostPerAudioSecond else { return true }
        let rate = Double(AudioFormat.sampleRate)
        let heard = Double(input.received) / rate
        let upcoming = input.lastInterimAt > 0 ? Double(input.segmenter.length) / rate : 0
        return input.interimTime.seconds + cost * upcoming <= Self.interimBudgetShare * cost * heard
    }

    /// Called by the decoders after the session's last event; the first outcome counts.
    func complete(_ result: Result<Void, RecognitionError>) {
        input.withLock { input in
            input.open = false
            setSpeaking(false, &input)
        }
        outcome.resolve(result)
    }

    var hasEnded: Bool { outcome.isResolved }

    /// Delivers an event unless the session has ended (a cancel does not wait for the decode in
    /// progress); call it under ``interims``' lock.
    func deliverIfRunning(_ event: RecognitionEvent) {
        guard !hasEnded else { return }
        events.deliver(event)
    }
}

/// One item of a session's work for the decoders, run in the order the session queued them.
enum SherpaWork: Sendable, Equatable {
    /// Delivered as it is, in order with the results.
    case event(RecognitionEvent)
    /// Re-decode the utterance so far; skipped under load or when newer work makes it stale.
    case interim(UtteranceSegmenter.Utterance)
    /// Decode the utterance ahead of its end, during the hangover; its final may reuse the text.
    case speculative(UtteranceSegmenter.Utterance)
    /// Speech resumed: a speculative decode is void.
    case resumed
    /// A final, never skipped; an empty utterance only for a Finalize with nothing pending.
    case final(UtteranceSegmenter.Utterance, fromFinalize: Bool)
    /// The session is over (error nil: finished or cancelled).
    case end(RecognitionError?)

    /// Work for the model other than an interim: what interims wait for.
    var isDecode: Bool {
        switch self {
        case .speculative, .final: true
        case .event, .interim, .resumed, .end: false
        }
    }

    /// What it is, for the log.
    var kind: String {
        switch self {
        case .event: "event"
        case .interim: "interim"
        case .speculative: "speculative"
        case .final: "final"
        case .resumed: "resumed"
        case .end: "end"
        }
    }

    /// Samples of audio it holds, for the backlog bound.
    var weight: Int {
        switch self {
        case .interim(let utterance), .speculative(let utterance), .final(let utterance, _): utterance.samples.count
        case .event, .resumed, .end: 0
        }
    }
}
