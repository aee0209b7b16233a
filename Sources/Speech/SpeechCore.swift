import Capture
import Dictation
import Foundation
import History
import Logging
import NIOCore
import NIOPosix
import Recognition
import Synchronization
import Waiting

/// The core's record of the running session.
struct SessionRecord {
    let pipeline: SessionPipeline
    /// Cancelled: the pending interim was dropped and a recognizer error is expected, not a failure.
    var cancelled = false
    /// Why the core itself ended the session, if it did.
    var failure: SpeechError?
    /// Why the offline engine took the session over from the streaming backend, if it did.
    var fellBack: RecognitionError?
    /// Trailing silence that stops the session by itself (nil: auto-stop is off).
    let autoStopAfter: TimeAmount?
    var autoStop: AutoStop?
    /// The `[text]` rules for the engine now recognizing.
    var dictation: Dictation
    /// The words said after the wake phrase: the session's first final, once it opens.
    var firstWords: String?
}

/// The engines a core starts sessions with, by backend.
public struct Recognizers: Sendable {
    public var local: any Recognizer
    public var deepgram: any Recognizer

    public init(local: any Recognizer, deepgram: any Recognizer) {
        self.local = local
        self.deepgram = deepgram
    }

    public subscript(backend: Backend) -> any Recognizer {
        switch backend {
        case .local: local
        case .deepgram: deepgram
        }
    }
}

/// The speech core: runs the session state machine, assembles the transcript, keeps history and
/// reports every change as a ``SpeechEvent``. It knows no D-Bus; the bus adapter, the tests and
/// other outputs drive it through typed methods and follow its events.
///
/// It runs on an event loop of its own (not one of the loops that serve network I/O and Swift
/// tasks), so recognizer threads hand it results with one enqueue and no task, and the blocking
/// SQLite commit of each final happens here, before anyone hears of the final, without holding
/// up a network loop. Sessions run as child tasks of ``run()``.
public actor SpeechCore {
    typealias Machine = SessionMachine<StartOptions>
    /// Events from recognizer and capture threads not yet taken by the core, per session. Past
    /// this the session fails (`SessionFailed`) rather than queue without bound. Level readings
    /// do not pass through it (the capture thread publishes them).
    static let reportQueueBound = 1024
    static let shuttingDown = "sttd is shutting down; start it again (`systemctl --user start sttd`)."

    /// The event loop the core runs on.
    public nonisolated let loop: any EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.executor.asUnownedSerialExecutor() }

    let configuration: Configuration
    let microphone: any Microphone
    let recognizers: Recognizers
    let history: HistoryStore?
    let output: (any DictationOutput)?
    let logger: Logger
    /// Thread-safe: level readings are published from the capture thread (see ``SessionPipeline/levels``).
    nonisolated let hub: EventHub
    let jobs: AsyncStream<@Sendable () async -> Void>
    let jobQueue: AsyncStream<@Sendable () async -> Void>.Continuation
    /// The loop's group when the core made its own (shut down with the core).
    let ownGroup: MultiThreadedEventLoopGroup?

    var machine = Machine()
    /// The session's text, as results change it.
    var editor = TranscriptEditor()
    var waiting: [Machine.CallID: @Sendable (Machine.Reply, String) -> Void] = [:]
    var nextCallID: Machine.CallID = 0
    var session: SessionRecord? {
        // A pipeline that is no longer the session publishes no more levels, before anything that follows.
        didSet { if let old = oldValue?.pipeline, old !== session?.pipeline { old.levels.close() } }
    }
    var sessionCounter = 0
    var stopTimer: Scheduled<Void>?
    var autoStopTimer: Scheduled<Void>?
    var activeOutput: ActiveOutput?
    /// Which links of the running session are down; `State` is `reconnecting` while any is.
    var recognizerDown = false
    var microphoneDown = false
    var speaking = false
    /// The running session's history row, if history is kept and the row could be written.
    var historyID: String?
    var lastPruned = ContinuousClock.now
    /// The authorization probe and the source listing in flight, if any: callers meanwhile share their answer.
    var authorizationProbe: SetOnce<RecognizerAuthorization>?
    var sourceListing: SetOnce<Result<[AudioSource], SpeechError>>?
    /// The input methods that reported; text of `output = type` sessions goes through the current one.
    var inputMethods = InputMethods()
    var handsFree = HandsFreeRecord()
    nonisolated let sharedSettings: Mutex<SpeechSettings>
    public internal(set) var authorization = RecognizerAuthorization.notDetermined
    public internal(set) var microphoneStatus = MicrophoneStatus.notDetermined
    public internal(set) var lastError: SpeechError?

    /// - Parameters:
    ///   - history: where finals are kept, or nil to keep none.
    ///   - output: where `output = type | clipboard` sends text, or nil for none (such starts fail).
    ///   - loop: the loop to run on; by default the core starts one of its own.
    public init(
        configuration: Configuration, microphone: any Microphone, recognizers: Recognizers,
        history: HistoryStore? = nil, output: (any DictationOutput)? = nil, logger: Logger,
        loop: (any EventLoop)? = nil
    ) {
        if let loop {
            self.loop = loop
            ownGroup = nil
        } else {
            let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
            self.loop = group.next()
            ownGroup = group
        }
        self.configuration = configuration
        self.microphone = microphone
        self.recognizers = recognizers
        self.history = history
        self.output = output
        self.logger = logger
        hub = EventHub(logger: logger)
        sharedSettings = Mutex(
            SpeechSettings(
                backend: configuration.backend, language: configuration.language, source: configuration.source))
        // A session, one authorization probe, one source listing and the model preload at most:
        // requests of the same kind share the one in flight.
        (jobs, jobQueue) = AsyncStream.makeStream()
    }

    deinit {
        ownGroup?.shutdownGracefully { _ in }
    }

    // MARK: Lifetime

    /// Runs the core: loads what sessions need up front, then runs each session and request as a
    /// child task until ``shutdown()``.
    public func run() async {
        jobQueue.yield { [self] in await prepare() }
        await withDiscardingTaskGroup { group in
            for await job in jobs { group.addTask { await job() } }
        }
        hub.finish()
    }

    /// Stops a listening session as a Stop would (its last finals stored), then lets ``run()``
    /// end once its children have. Returns at once; `done` is called when the session is over.
    public nonisolated func shutDown(done: @escaping @Sendable () -> Void) {
        submit { core in
            core.closeListenerForGood()
            let jobQueue = core.jobQueue
            let finish: @Sendable (Machine.Reply, String) -> Void = { _, _ in
                jobQueue.finish()
                done()
            }
            switch core.machine.state {
            case .idle: finish(.cancelled, "")
            case .starting: core.call({ .cancel($0) }, reply: finish)
            case .listening, .reconnecting, .stopping: core.call({ .stop($0) }, reply: finish)
            }
        }
    }

    /// ``shutDown(done:)``, waiting until the session is over.
    public func shutDown() async {
        await withCheckedContinuation { continuation in shutDown { continuation.resume() } }
    }

    /// Loads the configured backend's model, so a hotkey start is instant; with the streaming
    /// backend and its fallback on, the offline model, so a takeover does not wait for it.
    func prepare() async {
        if configuration.handsFree.armAtStart { await armAtStart() }
        guard configuration.backend == .local else {
            if configuration.backend == .deepgram, configuration.deepgram.fallback != StreamingFallback.none {
                _ = await recognizers.local.authorize()
            }
            return
        }
        let (status, _) = await recognizers.local.authorize()
        if status != .authorized { setAuthorization(status) }
    }

    // MARK: Events

    /// Calls `observer` with every event and the session as it stands after it, on the core's
    /// executor, in order. It must not block.
    public func observe(_ observer: @escaping @Sendable (SpeechEvent, SessionSnapshot) -> Void) {
        hub.observe(observer)
    }

    /// The session as last published; from any thread.
    public nonisolated var snapshot: SessionSnapshot { hub.snapshot }

    /// Every event from now on that `wants` takes, in order (bounded: see ``EventHub``). Ends
    /// when the core does. A subscriber that has no use for level readings should skip them:
    /// each event it takes wakes its task, ten times a second while listening.
    public nonisolated func events(
        where wants: @escaping @Sendable (SpeechEvent) -> Bool = { _ in true }
    ) -> AsyncStream<SpeechEvent> { hub.stream(where: wants) }

    func publish(_ event: SpeechEvent) { hub.publish(event) }

    // MARK: Settings

    /// What later starts fall back to; the bus's `Backend`, `Language` and `Source` properties
    /// read and write them here, on the bus thread.
    public nonisolated var settings: SpeechSettings { sharedSettings.withLock { $0 } }

    /// Changes what later starts fall back to.
    public nonisolated func update(_ change: (inout SpeechSettings) -> Void) { sharedSettings.withLock { change(&$0) } }

    public var state: SessionState { machine.state }
    var currentTranscript: String { editor.transcript.text }

    /// Answers once the core is free; the watchdog's proof of life.
    public func isResponsive() -> Bool { true }

    // MARK: The machine

    func call(
        _ makeEvent: (Machine.CallID) -> Machine.Event, reply: @escaping @Sendable (Machine.Reply, String) -> Void
    ) {
        nextCallID += 1
        waiting[nextCallID] = reply
        handle(makeEvent(nextCallID))
    }

    func handle(_ event: Machine.Event) {
        let before = machine.state
        let actions = machine.handle(event)
        if machine.state != before { publish(.state(machine.state)) }
        for action in actions { execute(action) }
        if machine.state == .idle, before != .idle { handsFreeSessionOver() }
    }

    func execute(_ action: Machine.Action) {
        switch action {
        case .open(let options):
            open(options)
        case .close(let flush):
            guard let pipeline = session?.pipeline else { return }
            pipeline.close(flush: flush)
            cancelAutoStop()
            if flush {
                armStopTimeout(for: pipeline)
            } else {
                session?.cancelled = true
                perform(editor.dropInterim())
            }
        case .reply(let id, let reply):
            waiting.removeValue(forKey: id)?(reply, editor.transcript.text)
        case .recordFailure(let error, let signal):
            logger.warning(
                "session failed", metadata: ["error": "\(error.code.rawValue)", "reason": "\(error.message)"])
            setLastError(error)
            if signal { publish(.sessionFailed(error)) }
        }
    }

    func open(_ options: StartOptions) {
        sessionCounter += 1
        let mode = options.output ?? configuration.output
        do throws(SpeechError) {
            activeOutput = try beginOutput(mode)
        } catch {
            return handle(.openFailed(error))
        }
        editor.reset()
        publish(.transcript("", update: nil))
        let client = options.caller ?? Caller(name: "host")
        publish(.owner(client, stopsWhenGone: mustStay(client)))
        let (microphone, firstWords) = handsFreeMicrophoneForSession()
        let settings = settings
        let backend = options.backend ?? settings.backend
        let source = options.source ?? settings.source
        let streamOptions = StreamOptions(
            language: options.language ?? settings.language,
            interimResults: options.interimResults ?? configuration.interimResults,
            keyterms: options.keyterms.isEmpty ? configuration.text.vocabulary : options.keyterms)
        let pipeline = SessionPipeline(
            token: sessionCounter, backend: backend, source: source.isEmpty ? nil : source, options: streamOptions,
            recognizer: recognizers[backend], microphone: microphone, reportingTo: self,
            reconnectLimit: .milliseconds(Int(configuration.microphoneReconnectMilliseconds)), logger: logger,
            mediaName: client.privateDestination == nil
                ? PulseAudio.defaultMediaName : "\(PulseAudio.defaultMediaName) for \(client.name)",
            audioDirectory: configuration.debug.audioDirectory.isEmpty ? nil : configuration.debug.audioDirectory)
        let autoStopMilliseconds = options.autoStopMilliseconds ?? configuration.autoStopMilliseconds
        session = SessionRecord(
            pipeline: pipeline,
            autoStopAfter: autoStopMilliseconds > 0 ? .milliseconds(Int64(autoStopMilliseconds)) : nil,
            dictation: dictation(for: backend, language: streamOptions.language), firstWords: firstWords)
        if case .terminated = jobQueue.yield({ [self] in await finished(pipeline.run(), session: pipeline.token) }) {
            session = nil
            handle(.openFailed(.internal(Self.shuttingDown)))
        }
    }

    /// The `[text]` rules for `backend`'s engine and `language`.
    func dictation(for backend: Backend, language: String) -> Dictation {
        let engine = recognizers[backend]
        return Dictation(
            rules: configuration.text.rules(
                language: language, enginePunctuates: engine.writesPunctuation, offline: backend == .local))
    }

    func armStopTimeout(for session: SessionPipeline) {
        stopTimer?.cancel()
        let token = session.token
        stopTimer = loop.scheduleTask(in: .milliseconds(Int64(configuration.stopTimeoutMilliseconds))) {
            self.assumeIsolated { $0.stopTimedOut(token: token) }
        }
    }

    /// The flush took too long: the pending interim becomes a final (it is the best text there
    /// is) and the session ends now, without waiting for the engine to end it: a wedged engine
    /// cannot hold the reply. The pipeline is cancelled and goes on as a child of ``run()`` until its
    /// engine lets go; nothing it reports counts any more.
    func stopTimedOut(token: Int) {
        guard let ending = session, ending.pipeline.token == token else { return }
        logger.warning(
            "stop timed out; the pending interim becomes the last final",
            metadata: [
                "stop_timeout_ms": "\(configuration.stopTimeoutMilliseconds)",
                "promoted": "\(!editor.transcript.interim.isEmpty)",
            ])
        ending.pipeline.abandon()
        conclude(ending, outcome: .closed)
    }

}
