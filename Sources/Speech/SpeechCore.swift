import Capture
import Foundation
import History
import Logging
import NIOCore
import NIOPosix
import Recognition

/// The core's record of the running session.
private struct ActiveSession {
    let run: SessionRun
    /// Cancelled: the pending interim was dropped and a recognizer error is expected, not a failure.
    var cancelled = false
    /// Why the core itself ended the session, if it did.
    var failure: SpeechError?
    /// Why the offline engine took the session over from the streaming backend, if it did.
    var fellBack: RecognitionError?
    /// Trailing silence that stops the session by itself (nil: auto-stop is off).
    let autoStopAfter: TimeAmount?
    var autoStop: AutoStop?
}

/// The desktop output of the running (or just ended) session.
private struct ActiveOutput {
    let mode: OutputMode
    let session: any DictationOutputSession
    /// Whether a final was typed yet: the next one is preceded by a space.
    var typedAny = false
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
    public static let inboxBound = 1024

    /// The event loop the core runs on.
    public nonisolated let loop: any EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.executor.asUnownedSerialExecutor() }

    private let configuration: Configuration
    private let microphone: any Microphone
    private let recognizers: Recognizers
    private let history: HistoryStore?
    private let output: (any DictationOutput)?
    private let logger: Logger
    /// Thread-safe: level readings are published from the capture thread (see ``SessionRun/levels``).
    nonisolated let hub: EventHub
    private let jobs: AsyncStream<@Sendable () async -> Void>
    private let jobQueue: AsyncStream<@Sendable () async -> Void>.Continuation
    /// The loop's group when the core made its own (shut down with the core).
    private let ownGroup: MultiThreadedEventLoopGroup?

    private var machine = Machine()
    private var transcript = Transcript()
    private var waiting: [Machine.CallID: @Sendable (Machine.Reply, String) -> Void] = [:]
    private var nextCallID: Machine.CallID = 0
    private var session: ActiveSession? {
        // A run that is no longer the session publishes no more levels, before anything that follows.
        didSet { if let old = oldValue?.run, old !== session?.run { old.levels.close() } }
    }
    private var sessionCounter = 0
    private var stopTimer: Scheduled<Void>?
    private var autoStopTimer: Scheduled<Void>?
    private var activeOutput: ActiveOutput?
    /// Which links of the running session are down; `State` is `reconnecting` while any is.
    private var recognizerDown = false
    private var microphoneDown = false
    private var speaking = false
    /// The running session's history row, if history is kept and the row could be written.
    private var historyID: String?
    private var lastPruned = ContinuousClock.now
    private var authorizationWaiters: [@Sendable (RecognizerAuthorization) -> Void] = []
    private var sourceWaiters: [@Sendable (Result<[AudioSource], SpeechError>) -> Void] = []

    public private(set) var settings: SpeechSettings
    public private(set) var authorization = RecognizerAuthorization.notDetermined
    public private(set) var microphoneStatus = MicrophoneStatus.notDetermined
    public private(set) var lastError: SpeechError?

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
        settings = SpeechSettings(
            backend: configuration.backend, language: configuration.language, source: configuration.source)
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
    private func prepare() async {
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

    /// Calls `observer` with every event, on the core's executor, in order. It must not block.
    public func observe(_ observer: @escaping @Sendable (SpeechEvent) -> Void) { hub.observe(observer) }

    /// Every event from now on that `wants` takes, in order (bounded: see ``EventHub``). Ends
    /// when the core does. A subscriber that has no use for level readings should skip them:
    /// each event it takes wakes its task, ten times a second while listening.
    public nonisolated func events(
        where wants: @escaping @Sendable (SpeechEvent) -> Bool = { _ in true }
    ) -> AsyncStream<SpeechEvent> { hub.stream(where: wants) }

    private func publish(_ event: SpeechEvent) { hub.publish(event) }

    // MARK: Methods (callback forms, for callers on other threads; replies come on the core's loop)

    /// Runs `body` on the core, after everything submitted before it.
    public nonisolated func submit(_ body: @escaping @Sendable (isolated SpeechCore) -> Void) {
        loop.execute { self.assumeIsolated { body($0) } }
    }

    public nonisolated func start(_ options: StartOptions, reply: @escaping @Sendable (SpeechError?) -> Void) {
        submit { core in
            core.call({ .start($0, options) }) { outcome, _ in
                if case .error(let error) = outcome { reply(error) } else { reply(nil) }
            }
        }
    }

    /// Replies with the session's final transcript once every final is in.
    public nonisolated func stop(reply: @escaping @Sendable (String) -> Void) {
        submit { core in core.call({ .stop($0) }) { _, text in reply(text) } }
    }

    /// Replies with whether it is now listening.
    public nonisolated func toggle(
        _ options: StartOptions, reply: @escaping @Sendable (Result<Bool, SpeechError>) -> Void
    ) {
        submit { core in
            core.call({ .toggle($0, options) }) { outcome, _ in
                switch outcome {
                case .error(let error): reply(.failure(error))
                case .toggled(let listening): reply(.success(listening))
                default: reply(.success(false))
                }
            }
        }
    }

    public nonisolated func cancel(reply: @escaping @Sendable () -> Void) {
        submit { core in core.call({ .cancel($0) }) { _, _ in reply() } }
    }

    /// Probes the microphone and the recognizer now; replies with the recognizer's status.
    public nonisolated func requestAuthorization(reply: @escaping @Sendable (RecognizerAuthorization) -> Void) {
        submit { core in
            core.authorizationWaiters.append(reply)
            guard core.authorizationWaiters.count == 1 else { return }
            core.jobQueue.yield { [core] in
                let status = await core.probeAuthorization()
                await core.answerAuthorization(status)
            }
        }
    }

    public nonisolated func sources(reply: @escaping @Sendable (Result<[AudioSource], SpeechError>) -> Void) {
        submit { core in
            core.sourceWaiters.append(reply)
            guard core.sourceWaiters.count == 1 else { return }
            core.jobQueue.yield { [core] in
                let result: Result<[AudioSource], SpeechError>
                do throws(CaptureError) {
                    result = .success(try await core.microphone.sources())
                } catch {
                    result = .failure(SpeechError(error))
                    await core.setMicrophone(Self.microphoneStatus(for: error))
                }
                await core.answerSources(result)
            }
        }
    }

    // MARK: Methods (async forms)

    public func start(_ options: StartOptions) async throws(SpeechError) {
        let error = await withCheckedContinuation { continuation in
            start(options) { continuation.resume(returning: $0) }
        }
        if let error { throw error }
    }

    /// Stops and returns the transcript once every final is in.
    public func stop() async -> String {
        await withCheckedContinuation { continuation in stop { continuation.resume(returning: $0) } }
    }

    /// Starts if idle, stops if listening; returns whether it is now listening.
    public func toggle(_ options: StartOptions) async throws(SpeechError) -> Bool {
        try await withCheckedContinuation { continuation in toggle(options) { continuation.resume(returning: $0) } }
            .get()
    }

    public func cancel() async {
        await withCheckedContinuation { continuation in cancel { continuation.resume() } }
    }

    public func requestAuthorization() async -> RecognizerAuthorization {
        await withCheckedContinuation { continuation in requestAuthorization { continuation.resume(returning: $0) } }
    }

    public func sources() async throws(SpeechError) -> [AudioSource] {
        try await withCheckedContinuation { continuation in sources { continuation.resume(returning: $0) } }.get()
    }

    /// Clears the transcript (and says so with an empty final update); listening goes on.
    public func resetTranscript() {
        transcript.reset()
        showInterim("")
        publish(.transcript("", update: TranscriptUpdate(segment: "", isFinal: true)))
    }

    /// Changes what later starts fall back to.
    public func update(_ settings: SpeechSettings) {
        guard settings != self.settings else { return }
        self.settings = settings
        publish(.settings(settings))
    }

    public var state: SessionState { machine.state }
    public var currentTranscript: String { transcript.text }

    /// Sessions with text, newest first (`limit` 0: all), in one query.
    public func history(limit: Int) throws(SpeechError) -> [HistoryEntry] {
        guard let history else { return [] }
        do {
            return try history.sessions(limit: limit)
        } catch {
            throw SpeechError.internal(error.description)
        }
    }

    /// Answers once the core is free; the watchdog's proof of life.
    public func isResponsive() -> Bool { true }

    // MARK: The machine

    private func call(
        _ makeEvent: (Machine.CallID) -> Machine.Event, reply: @escaping @Sendable (Machine.Reply, String) -> Void
    ) {
        nextCallID += 1
        waiting[nextCallID] = reply
        handle(makeEvent(nextCallID))
    }

    private func handle(_ event: Machine.Event) {
        let before = machine.state
        let actions = machine.handle(event)
        if machine.state != before { publish(.state(machine.state)) }
        for action in actions { execute(action) }
    }

    private func execute(_ action: Machine.Action) {
        switch action {
        case .open(let options):
            open(options)
        case .close(let flush):
            guard let run = session?.run else { return }
            run.close(flush: flush)
            cancelAutoStop()
            if flush {
                armStopTimeout(for: run)
            } else {
                session?.cancelled = true
                dropInterim()
            }
        case .reply(let id, let reply):
            waiting.removeValue(forKey: id)?(reply, transcript.text)
        case .recordFailure(let error, let signal):
            logger.warning(
                "session failed", metadata: ["error": "\(error.code.rawValue)", "reason": "\(error.message)"])
            setLastError(error)
            if signal { publish(.sessionFailed(error)) }
        }
    }

    private func open(_ options: StartOptions) {
        sessionCounter += 1
        let mode = options.output ?? configuration.output
        do throws(SpeechError) {
            activeOutput = try beginOutput(mode)
        } catch {
            return handle(.openFailed(error))
        }
        transcript.reset()
        publish(.transcript("", update: nil))
        let client = options.client ?? SessionClient(name: "host")
        publish(.client(client))
        let backend = options.backend ?? settings.backend
        let source = options.source ?? settings.source
        let sessionOptions = SessionOptions(
            language: options.language ?? settings.language,
            interimResults: options.interimResults ?? configuration.interimResults, keyterms: options.keyterms)
        let run = SessionRun(
            token: sessionCounter, backend: backend, source: source.isEmpty ? nil : source, options: sessionOptions,
            recognizer: recognizers[backend], microphone: microphone, core: self,
            reconnectLimit: .milliseconds(Int(configuration.microphoneReconnectMilliseconds)), logger: logger,
            mediaName: client.privateDestination == nil
                ? PulseAudio.defaultMediaName : "\(PulseAudio.defaultMediaName) for \(client.name)",
            audioDirectory: configuration.debug.audioDirectory.isEmpty ? nil : configuration.debug.audioDirectory)
        let autoStopMilliseconds = options.autoStopMilliseconds ?? configuration.autoStopMilliseconds
        session = ActiveSession(
            run: run, autoStopAfter: autoStopMilliseconds > 0 ? .milliseconds(Int64(autoStopMilliseconds)) : nil)
        if case .terminated = jobQueue.yield({ await run.run() }) {
            session = nil
            handle(.openFailed(.internal("sttd is shutting down; start it again (`systemctl --user start sttd`).")))
        }
    }

    private func armStopTimeout(for session: SessionRun) {
        stopTimer?.cancel()
        let token = session.token
        stopTimer = loop.scheduleTask(in: .milliseconds(Int64(configuration.stopTimeoutMilliseconds))) {
            self.assumeIsolated { $0.stopTimedOut(token: token) }
        }
    }

    /// The flush took too long: the pending interim becomes a final (it is the best text there
    /// is) and the session ends now, without waiting for the engine to end it: a wedged engine
    /// cannot hold the reply. The run is cancelled and goes on as a child of ``run()`` until its
    /// engine lets go; nothing it reports counts any more.
    private func stopTimedOut(token: Int) {
        guard let ending = session, ending.run.token == token else { return }
        logger.warning(
            "stop timed out; the pending interim becomes the last final",
            metadata: [
                "stop_timeout_ms": "\(configuration.stopTimeoutMilliseconds)",
                "promoted": "\(!transcript.interim.isEmpty)",
            ])
        ending.run.abandon()
        conclude(ending, outcome: .closed)
    }

    // MARK: Reports from the running session

    func opened(_ run: SessionRun) {
        guard let current = session, current.run === run else { return }
        let fellBack = current.fellBack
        recognizerDown = false
        microphoneDown = false
        // Started offline: a refused key still shows (denied, NotAuthorized) until the next session opens.
        if let status = fellBack == nil ? .authorized : fellBack?.authorization { setAuthorization(status) }
        setMicrophone(.authorized)
        setLastError(fellBack.flatMap(Self.fallbackError))
        let backend = fellBack == nil ? run.backend : .local
        publish(.activeBackend(backend))
        beginHistory(run, backend: backend)
        if let after = session?.autoStopAfter {
            session?.autoStop = AutoStop(
                silence: after, noSpeech: .milliseconds(Int64(configuration.autoStopNoSpeechMilliseconds)),
                opened: .now())
            armAutoStop()
        }
        logger.info(
            "listening", metadata: ["source": "\(run.source ?? "(default)")", "backend": "\(run.backend.rawValue)"])
        handle(.opened)
    }

    func openFailed(_ run: SessionRun, _ failure: SessionRun.OpenFailure) {
        guard session?.run === run else { return }
        session = nil
        // Nothing was said: there is nothing to deliver, and the tools it started can go.
        activeOutput?.session.finish(transcript: nil) {}
        activeOutput = nil
        let error: SpeechError
        switch failure {
        case .recognizer(let recognitionError):
            // A refused key says "denied", a missing model or key "restricted"; a network failure says nothing.
            if let status = recognitionError.authorization ?? (run.backend == .local ? .restricted : nil) {
                setAuthorization(status)
            }
            error = SpeechError(recognitionError)
        case .microphone(let captureError):
            setMicrophone(Self.microphoneStatus(for: captureError))
            error = SpeechError(captureError)
        }
        handle(.openFailed(error))
    }

    func received(_ event: RecognitionEvent, from run: SessionRun) {
        guard let session, session.run === run else { return }
        switch event {
        case .result(let result):
            apply(result)
        case .reconnecting(let down):
            recognizerDown = down
            updateReconnecting()
        case .speechActivity(let now):
            setSpeaking(now)
            if now { autoStopHeardSpeech() } else { autoStopHeardSilence(since: .now()) }
        case .fellBack(let reason):
            self.session?.fellBack = reason
            // The streaming backend's interim will not become a final: the offline engine
            // recognizes that audio again.
            dropInterim()
            logger.notice("dictation continues offline", metadata: ["reason": "\(reason.message)"])
            publish(.continuingOffline(SpeechError(reason)))
            // At the start, `opened` shows it; mid-session, now.
            guard machine.state != .starting else { return }
            noteFallback(reason)
            publish(.activeBackend(.local))
        }
    }

    /// What a fallback says about the streaming backend: a refused key is `denied` and
    /// `NotAuthorized`, so the user learns the key is wrong although dictation goes on.
    private func noteFallback(_ reason: RecognitionError) {
        if let status = reason.authorization { setAuthorization(status) }
        if let error = Self.fallbackError(reason) { setLastError(error) }
    }

    /// The `LastError` a fallback leaves: only a refused key (the network needs no fixing).
    static func fallbackError(_ reason: RecognitionError) -> SpeechError? {
        reason.kind == .notAuthorized ? SpeechError(reason) : nil
    }

    /// The capture's own voice detector changed its mind.
    func voice(_ change: VoiceDetector.Change, at instant: NIODeadline, from run: SessionRun) {
        guard session?.run === run else { return }
        switch change {
        case .speech: autoStopHeardSpeech()
        case .silence(let ago): autoStopHeardSilence(since: instant - TimeAmount(ago))
        }
    }

    func microphoneLink(down: Bool, from run: SessionRun) {
        guard session?.run === run else { return }
        microphoneDown = down
        setMicrophone(down ? .unavailable : .authorized)
        updateReconnecting()
    }

    /// A recognizer or capture thread got too far ahead of the core: end the session, keep the finals.
    func inboxOverflowed(_ run: SessionRun) {
        guard session?.run === run else { return }
        logger.error(
            "the core fell behind the recognizer; ending the session", metadata: ["bound": "\(Self.inboxBound)"])
        session?.failure = SpeechError.internal(
            "sttd fell more than \(Self.inboxBound) results behind the recognizer (the computer is too busy); the session stopped. What was recognized before is kept."
        )
        run.close(flush: false)
    }

    func ended(_ run: SessionRun, captureError: CaptureError?, recognitionError: RecognitionError?) {
        guard let ending = session, ending.run === run else { return }
        let outcome: Machine.Event
        if let failure = ending.failure {
            outcome = .failed(failure)
        } else if let captureError {
            setMicrophone(Self.microphoneStatus(for: captureError))
            outcome = .failed(SpeechError(captureError))
        } else if let recognitionError, !ending.cancelled {
            outcome = .failed(SpeechError(recognitionError))
        } else {
            outcome = .closed
        }
        conclude(ending, outcome: outcome)
    }

    /// Ends the core's side of a session: its text kept, history closed, desktop output done,
    /// then the machine hears `outcome`.
    private func conclude(_ ending: ActiveSession, outcome: Machine.Event) {
        stopTimer?.cancel()
        stopTimer = nil
        cancelAutoStop()
        // Stop, timeout, failure: the pending interim is kept as the last final (and typed).
        // Cancel dropped it.
        if !ending.cancelled { promoteInterim() }
        session = nil
        setSpeaking(false)
        publish(.activeBackend(nil))
        endHistory()
        pruneHistoryDaily()
        // The session is over once its text is on the desktop too: a Stop's reply comes after
        // the last final was typed or the transcript is on the clipboard.
        guard let output = activeOutput else { return handle(outcome) }
        activeOutput = nil
        output.session.finish(transcript: ending.cancelled ? nil : transcript.finalText) { [self] in
            submit { core in core.handle(outcome) }
        }
    }

    // MARK: Transcript

    private func apply(_ result: RecognitionResult) {
        guard transcript.apply(result) else { return }
        if result.isFinal {
            store(result)
            typeFinal(result.text)
        } else {
            showInterim(result.text)
        }
        publish(
            .transcript(
                transcript.text,
                update: TranscriptUpdate(segment: Transcript.normalized(result.text), isFinal: result.isFinal)))
    }

    /// Keeps the pending interim as a final: stored, then reported as one.
    private func promoteInterim() {
        guard !transcript.interim.isEmpty else { return }
        apply(RecognitionResult(text: transcript.interim, isFinal: true))
    }

    private func dropInterim() {
        guard !transcript.interim.isEmpty else { return }
        transcript.dropInterim()
        showInterim("")
        publish(.transcript(transcript.text, update: nil))
    }

    // MARK: Status

    private func setSpeaking(_ now: Bool) {
        guard speaking != now else { return }
        speaking = now
        publish(.speechActivity(now))
    }

    private func updateReconnecting() {
        let before = machine.state
        machine.setReconnecting(recognizerDown || microphoneDown)
        if machine.state != before { publish(.state(machine.state)) }
    }

    private func setAuthorization(_ status: RecognizerAuthorization) {
        guard status != authorization else { return }
        authorization = status
        publish(.authorization(status))
    }

    private func setMicrophone(_ status: MicrophoneStatus) {
        guard status != microphoneStatus else { return }
        microphoneStatus = status
        publish(.microphone(status))
    }

    private func setLastError(_ error: SpeechError?) {
        guard error != lastError else { return }
        lastError = error
        publish(.lastError(error))
    }

    private func probeAuthorization() async -> RecognizerAuthorization {
        do {
            try await microphone.probe(source: settings.source.isEmpty ? nil : settings.source)
            setMicrophone(.authorized)
        } catch {
            setMicrophone(Self.microphoneStatus(for: error))
        }
        let status = await recognizers[settings.backend].authorize().0
        setAuthorization(status)
        return status
    }

    private func answerAuthorization(_ status: RecognizerAuthorization) {
        let waiters = authorizationWaiters
        authorizationWaiters = []
        for waiter in waiters { waiter(status) }
    }

    private func answerSources(_ result: Result<[AudioSource], SpeechError>) {
        let waiters = sourceWaiters
        sourceWaiters = []
        for waiter in waiters { waiter(result) }
    }

    static func microphoneStatus(for error: CaptureError) -> MicrophoneStatus {
        error.kind == .accessDenied ? .denied : .unavailable
    }

    // MARK: History

    private func beginHistory(_ run: SessionRun, backend: Backend) {
        historyID = nil
        guard let history else { return }
        let id = UUID().uuidString.lowercased()
        do {
            try history.beginSession(
                id: id, started: Date(), backend: backend.rawValue, language: run.options.language,
                source: run.source ?? "")
            historyID = id
        } catch {
            logger.error("history: session not recorded", metadata: ["reason": "\(error.description)"])
        }
    }

    /// Commits a final before anyone hears of it, so a crash right after loses nothing signalled.
    private func store(_ result: RecognitionResult) {
        guard let history, let historyID else { return }
        let text = Transcript.normalized(result.text)
        guard !text.isEmpty else { return }
        do {
            try history.appendFinal(
                sessionID: historyID, text: text, audioStart: result.audioStart, audioEnd: result.audioEnd)
        } catch {
            logger.error("history: final not stored", metadata: ["reason": "\(error.description)"])
        }
    }

    private func endHistory() {
        guard let history, let historyID else { return }
        self.historyID = nil
        do {
            try history.endSession(id: historyID)
        } catch {
            logger.error("history: session end not recorded", metadata: ["reason": "\(error.description)"])
        }
    }

    /// Deletes sessions older than `history_days` (if set), at most once a day (startup pruned already).
    private func pruneHistoryDaily() {
        guard let history, configuration.historyDays > 0, ContinuousClock.now - lastPruned > .seconds(86_400) else {
            return
        }
        lastPruned = .now
        do {
            let pruned = try history.prune(startedBefore: Configuration.historyCutoff(days: configuration.historyDays))
            if pruned > 0 { logger.info("pruned history", metadata: ["sessions": "\(pruned)"]) }
        } catch {
            logger.error("history pruning failed", metadata: ["reason": "\(error.description)"])
        }
    }

    // MARK: Auto-stop

    private func autoStopHeardSpeech() {
        guard session?.autoStop != nil else { return }
        session?.autoStop?.speechStarted()
        armAutoStop()
    }

    private func autoStopHeardSilence(since instant: NIODeadline) {
        guard session?.autoStop != nil else { return }
        session?.autoStop?.silenceBegan(at: instant)
        armAutoStop()
    }

    private func armAutoStop() {
        autoStopTimer?.cancel()
        autoStopTimer = nil
        guard let session, let deadline = session.autoStop?.deadline else { return }
        let token = session.run.token
        autoStopTimer = loop.scheduleTask(deadline: deadline) {
            self.assumeIsolated { $0.autoStopDue(token: token) }
        }
    }

    private func cancelAutoStop() {
        autoStopTimer?.cancel()
        autoStopTimer = nil
        session?.autoStop = nil
    }

    /// Stops exactly as `StopTranscribing` would: flushed, every word kept, no failure.
    private func autoStopDue(token: Int) {
        guard let session, session.run.token == token, let autoStop = session.autoStop,
            machine.state == .listening || machine.state == .reconnecting
        else { return }
        logger.info(
            autoStop.heardSpeech ? "auto-stop: silence after speech" : "auto-stop: nobody spoke",
            metadata: [
                "after_ms":
                    "\(autoStop.heardSpeech ? autoStop.silence.nanoseconds / 1_000_000 : autoStop.noSpeech.nanoseconds / 1_000_000)"
            ])
        call({ .stop($0) }) { _, _ in }
    }

    // MARK: Desktop output

    private func beginOutput(_ mode: OutputMode) throws(SpeechError) -> ActiveOutput? {
        guard mode != .none else { return nil }
        guard let output else {
            throw .invalidConfiguration("output = \"\(mode.rawValue)\" is not available in this build of sttd.")
        }
        let outputSession = try output.begin(mode) { [self] message in
            submit { core in core.outputFailed(message) }
        }
        return ActiveOutput(mode: mode, session: outputSession)
    }

    private func typeFinal(_ text: String) {
        guard var output = activeOutput, output.mode == .type else { return }
        let text = Transcript.normalized(text)
        guard !text.isEmpty else { return }
        output.session.type(output.typedAny ? " " + text : text)
        output.typedAny = true
        activeOutput = output
    }

    /// The pending interim, shown where the next final will be typed (an input method's preedit).
    private func showInterim(_ text: String) {
        guard let output = activeOutput, output.mode == .type else { return }
        let text = Transcript.normalized(text)
        output.session.preedit(text.isEmpty || !output.typedAny ? text : " " + text)
    }

    /// A tool failed: the session goes on and the text stays in the transcript and history.
    private func outputFailed(_ message: String) {
        logger.warning(
            "desktop output failed; the text is kept in the transcript and history",
            metadata: ["reason": "\(message)"])
        let error = SpeechError.invalidConfiguration(message)
        setLastError(error)
        publish(.outputFailed(error))
    }
}

// MARK: Calls made at once, for callers already on the core

extension SpeechCore {
    /// ``start(_:reply:)`` made at once, inside ``submit(_:)``: the bus adapter checks there who
    /// owns the session, and the call it lets through must not queue behind later calls.
    public func startNow(_ options: StartOptions, reply: @escaping @Sendable (SpeechError?) -> Void) {
        call({ .start($0, options) }) { outcome, _ in
            if case .error(let error) = outcome { reply(error) } else { reply(nil) }
        }
    }

    /// ``stop(reply:)`` made at once (see ``startNow(_:reply:)``).
    public func stopNow(reply: @escaping @Sendable (String) -> Void) {
        call({ .stop($0) }) { _, text in reply(text) }
    }

    /// ``toggle(_:reply:)`` made at once (see ``startNow(_:reply:)``).
    public func toggleNow(_ options: StartOptions, reply: @escaping @Sendable (Result<Bool, SpeechError>) -> Void) {
        call({ .toggle($0, options) }) { outcome, _ in
            switch outcome {
            case .error(let error): reply(.failure(error))
            case .toggled(let listening): reply(.success(listening))
            default: reply(.success(false))
            }
        }
    }

    /// ``cancel(reply:)`` made at once (see ``startNow(_:reply:)``).
    public func cancelNow(reply: @escaping @Sendable () -> Void) {
        call({ .cancel($0) }) { _, _ in reply() }
    }
}
