import Capture
import Dictation
import Foundation
import Recognition
import Speech
import Synchronization
import Waiting

/// A microphone the test drives: it opens when `available`, and the test pushes audio into the
/// open stream or makes it lose the sound server.
final class FakeMicrophone: Microphone {
    private struct State {
        var available = true
        var streams: [FakeStream] = []
        var opensInFlight = 0
        var holdOpens = false
        var heldOpens: [CheckedContinuation<Void, Never>] = []
    }
    private let state = Mutex(State())

    var available: Bool {
        get { state.withLock { $0.available } }
        set { state.withLock { $0.available = newValue } }
    }

    /// Streams opened so far, oldest first.
    var streams: [FakeStream] { state.withLock { $0.streams } }
    /// Streams open right now (opened and not ended).
    var openStreams: Int { state.withLock { $0.streams.filter { !$0.hasEnded }.count } }
    var opensInFlight: Int { state.withLock { $0.opensInFlight } }
    var current: FakeStream? { state.withLock { $0.streams.last } }

    /// Makes later opens wait until ``releaseOpens()``.
    func holdOpens() { state.withLock { $0.holdOpens = true } }

    func releaseOpens() {
        let held = state.withLock { state in
            state.holdOpens = false
            defer { state.heldOpens = [] }
            return state.heldOpens
        }
        for open in held { open.resume() }
    }

    func open(source: String?, deliver: @escaping @Sendable (AudioChunk) -> Void) async throws(CaptureError)
        -> any MicrophoneStream
    {
        state.withLock { $0.opensInFlight += 1 }
        defer { state.withLock { $0.opensInFlight -= 1 } }
        await withCheckedContinuation { continuation in
            let held = state.withLock { state in
                if state.holdOpens { state.heldOpens.append(continuation) }
                return state.holdOpens
            }
            if !held { continuation.resume() }
        }
        let stream = try state.withLock { state throws(CaptureError) -> FakeStream in
            guard state.available else {
                throw CaptureError(.serverUnavailable, "Cannot reach the sound server (fake).")
            }
            let stream = FakeStream(deliver: deliver)
            state.streams.append(stream)
            return stream
        }
        return stream
    }

    func sources() async throws(CaptureError) -> [AudioSource] {
        guard available else { throw CaptureError(.serverUnavailable, "Cannot reach the sound server (fake).") }
        return [AudioSource(name: "fake.monitor", description: "Fake microphone", isDefault: true)]
    }

    func probe(source: String?) async throws(CaptureError) {
        guard available else { throw CaptureError(.serverUnavailable, "Cannot reach the sound server (fake).") }
    }
}

/// One open fake capture.
final class FakeStream: MicrophoneStream {
    private let deliver: @Sendable (AudioChunk) -> Void
    private let outcome = SetOnce<CaptureError?>()

    init(deliver: @escaping @Sendable (AudioChunk) -> Void) { self.deliver = deliver }

    var hasEnded: Bool { outcome.isResolved }

    /// Delivers audio as the capture thread would (here: on the caller's thread).
    func push(_ chunk: AudioChunk) {
        guard !hasEnded else { return }
        deliver(chunk)
    }

    /// A chunk the capture thread had read when the capture was stopped: it still arrives.
    func pushLate(_ chunk: AudioChunk) { deliver(chunk) }

    /// The sound server went away.
    func lose() { outcome.resolve(CaptureError(.lost, "Lost the sound server while listening (fake).")) }

    func ended() async -> CaptureError? { await outcome.value }
    func stop() { outcome.resolve(nil) }
    func cancel() { outcome.resolve(nil) }
}

/// A recognizer whose sessions the test drives: it emits results, and decides what a flush says.
final class FakeRecognizer: Recognizer {
    private struct State {
        var sessions: [FakeRecognitionStream] = []
        var startError: RecognitionError?
        /// What a session says when it is finished (flushed); nil: no final.
        var finalOnFinish: String?
        /// Sessions ignore finish() (a stuck flush).
        var finishHangs = false
        /// Sessions ignore cancel() too (a wedged engine) until ``FakeRecognitionStream/release()``.
        var cancelHangs = false
        var decodesWakeSegments = false
    }
    private let state = Mutex(State())

    var sessions: [FakeRecognitionStream] { state.withLock { $0.sessions } }
    var current: FakeRecognitionStream? { state.withLock { $0.sessions.last } }

    var startError: RecognitionError? {
        get { state.withLock { $0.startError } }
        set { state.withLock { $0.startError = newValue } }
    }
    var finalOnFinish: String? {
        get { state.withLock { $0.finalOnFinish } }
        set { state.withLock { $0.finalOnFinish = newValue } }
    }
    var finishHangs: Bool {
        get { state.withLock { $0.finishHangs } }
        set { state.withLock { $0.finishHangs = newValue } }
    }
    var cancelHangs: Bool {
        get { state.withLock { $0.cancelHangs } }
        set { state.withLock { $0.cancelHangs = newValue } }
    }
    /// Claims to honour `StreamOptions.wakeSegments` (each session's options are kept).
    var decodesWakeSegments: Bool {
        get { state.withLock { $0.decodesWakeSegments } }
        set { state.withLock { $0.decodesWakeSegments = newValue } }
    }

    func authorize() async -> (RecognizerAuthorization, RecognitionError?) {
        if let startError { return (startError.authorization ?? .restricted, startError) }
        return (.authorized, nil)
    }

    func startStream(_ options: StreamOptions, events: any RecognitionEventSink) async throws(RecognitionError)
        -> any RecognitionStream
    {
        let session = try state.withLock { state throws(RecognitionError) -> FakeRecognitionStream in
            if let error = state.startError { throw error }
            let session = FakeRecognitionStream(
                sink: events, options: options, finalOnFinish: state.finalOnFinish,
                finishHangs: state.finishHangs || state.cancelHangs, cancelHangs: state.cancelHangs)
            state.sessions.append(session)
            return session
        }
        return session
    }
}

/// One fake recognition session.
final class FakeRecognitionStream: RecognitionStream {
    let options: StreamOptions
    private let sink: any RecognitionEventSink
    private let finalOnFinish: String?
    private let finishHangs: Bool
    private let cancelHangs: Bool
    private let state = Mutex<
        (audio: [Int16], end: Result<Void, RecognitionError>?, waiter: CheckedContinuation<Void, any Error>?)
    >(
        ([], nil, nil))

    init(
        sink: any RecognitionEventSink, options: StreamOptions, finalOnFinish: String?, finishHangs: Bool,
        cancelHangs: Bool = false
    ) {
        self.cancelHangs = cancelHangs
        self.sink = sink
        self.options = options
        self.finalOnFinish = finalOnFinish
        self.finishHangs = finishHangs
    }

    /// Samples received so far.
    var samples: Int { state.withLock { $0.audio.count } }
    /// The samples received so far, in order.
    var audio: [Int16] { state.withLock { $0.audio } }
    var hasEnded: Bool { state.withLock { $0.end != nil } }

    /// Reports an event as the engine's thread would.
    func emit(_ event: RecognitionEvent) { sink.deliver(event) }
    func interim(_ text: String) { emit(.result(RecognitionResult(text: text, isFinal: false))) }
    func final(_ text: String) { emit(.result(RecognitionResult(text: text, isFinal: true))) }

    /// Ends the session with an error, as a dropped server would.
    func fail(_ error: RecognitionError) { end(.failure(error)) }

    /// Ends the session without an error although nobody asked (an engine that gave it up).
    func endByItself() { end(.success(())) }

    /// Lets a wedged session (``FakeRecognizer/cancelHangs``) end.
    func release() { end(.success(())) }

    func run() async throws(RecognitionError) {
        let outcome: Result<Void, RecognitionError>? = await withTaskCancellationHandler {
            do {
                try await withCheckedThrowingContinuation { continuation in
                    let end = state.withLock { state -> Result<Void, RecognitionError>? in
                        if state.end == nil { state.waiter = continuation }
                        return state.end
                    }
                    if let end { continuation.resume(with: end.mapError { $0 as any Error }) }
                }
                return .success(())
            } catch let error as RecognitionError {
                return .failure(error)
            } catch {
                return nil
            }
        } onCancel: {
            cancel()
        }
        if case .failure(let error) = outcome { throw error }
    }

    func send(_ chunk: AudioChunk) { state.withLock { $0.audio += chunk.samples } }

    /// Like a real engine, the flush completes on the engine's own thread, not the caller's.
    func finish() {
        guard !finishHangs, !hasEnded else { return }
        let thread = Thread { [self] in
            if let finalOnFinish { final(finalOnFinish) }
            end(.success(()))
        }
        thread.start()
    }

    func finalize() { emit(.result(RecognitionResult(text: "", isFinal: true, fromFinalize: true))) }

    func cancel() {
        guard !cancelHangs else { return }
        end(.success(()))
    }

    private func end(_ outcome: Result<Void, RecognitionError>) {
        let waiter = state.withLock { state -> CheckedContinuation<Void, any Error>? in
            guard state.end == nil else { return nil }
            state.end = outcome
            defer { state.waiter = nil }
            return state.waiter
        }
        waiter?.resume(with: outcome.mapError { $0 as any Error })
    }
}

extension AudioChunk {
    /// 100 ms of a tone loud enough for the level meter.
    static var tone: AudioChunk { AudioChunk(samples: (0..<1600).map { Int16(8000 * sin(Double($0) / 5)) }) }
}

extension AudioChunk {
    /// 100 ms of digital silence.
    static var silence: AudioChunk { AudioChunk(samples: Array(repeating: 0, count: 1600)) }
}

/// A desktop output that records what it was asked to type and copy.
final class FakeOutput: DictationOutput {
    private struct State {
        var modes: [OutputMode] = []
        var typed: [String] = []
        var finished: [String?] = []
        var unavailable: SpeechError?
        var toolFailure: String?
        var heldFinish: (@Sendable () -> Void)?
        var holdFinish = false
    }
    private let state = Mutex(State())

    var typed: [String] { state.withLock { $0.typed } }
    /// The transcripts sessions finished with (nil: cancelled), in order.
    var finished: [String?] { state.withLock { $0.finished } }
    var modes: [OutputMode] { state.withLock { $0.modes } }
    /// Makes `begin` throw this, as when no typing tool is installed.
    var unavailable: SpeechError? {
        get { state.withLock { $0.unavailable } }
        set { state.withLock { $0.unavailable = newValue } }
    }
    /// Makes `finish` wait until ``releaseFinish()``.
    func holdFinish() { state.withLock { $0.holdFinish = true } }
    func releaseFinish() { state.withLock { $0.heldFinish }?() }
    var isHoldingFinish: Bool { state.withLock { $0.heldFinish != nil } }

    /// Makes the next typing fail with `message`, as a typing tool exiting with an error would.
    func failTool(_ message: String) { state.withLock { $0.toolFailure = message } }

    func begin(_ mode: OutputMode) throws(SpeechError) -> any DictationOutputSession {
        try state.withLock { state throws(SpeechError) in
            if let unavailable = state.unavailable { throw unavailable }
            state.modes.append(mode)
        }
        return FakeOutputSession(output: self)
    }

    fileprivate func type(_ text: String) -> String? {
        state.withLock { state in
            state.typed.append(text)
            defer { state.toolFailure = nil }
            return state.toolFailure
        }
    }

    fileprivate func finish(_ transcript: String?) async {
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in
            let hold = state.withLock { state in
                state.finished.append(transcript)
                if state.holdFinish { state.heldFinish = { done.resume() } }
                return state.holdFinish
            }
            if !hold { done.resume() }
        }
    }
}

private struct FakeOutputSession: DictationOutputSession {
    let output: FakeOutput
    func type(_ text: String) async -> String? { output.type(text) }
    /// Recorded among the typed text as `<Return>`.
    func press(_ key: Key) async -> String? { output.type("<\(key.keysym)>") }
    /// Recorded among the typed text as `<-N>`, N characters taken back.
    func retract(_ typed: String) async -> String? { output.type("<-\(typed.count)>") }
    func finish(transcript: String?) async -> String? {
        await output.finish(transcript)
        return nil
    }
}
