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
    /// The stop timed out: late results are ignored.
    var ignoresResults = false
    /// Why the core itself ended the session, if it did.
    var failure: SpeechError?
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
    /// this the session fails (`SessionFailed`) rather than queue without bound; level readings
    /// are skipped already at half of it.
    public static let inboxBound = 1024

    /// The event loop the core runs on.
    public nonisolated let loop: any EventLoop
    public nonisolated var unownedExecutor: UnownedSerialExecutor { loop.executor.asUnownedSerialExecutor() }

    private let configuration: Configuration
    private let microphone: any Microphone
    private let recognizers: Recognizers
    private let history: HistoryStore?
    private let logger: Logger
    private let hub: EventHub
    private let jobs: AsyncStream<@Sendable () async -> Void>
    private let jobQueue: AsyncStream<@Sendable () async -> Void>.Continuation
    /// The loop's group when the core made its own (shut down with the core).
    private let ownGroup: MultiThreadedEventLoopGroup?

    private var machine = Machine()
    private var transcript = Transcript()
    private var waiting: [Machine.CallID: @Sendable (Machine.Reply, String) -> Void] = [:]
    private var nextCallID: Machine.CallID = 0
    private var session: ActiveSession?
    private var sessionCounter = 0
    private var stopTimer: Scheduled<Void>?
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
    ///   - loop: the loop to run on; by default the core starts one of its own.
    public init(
        configuration: Configuration, microphone: any Microphone, recognizers: Recognizers,
        history: HistoryStore? = nil, logger: Logger, loop: (any EventLoop)? = nil
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

    /// Loads the configured backend's model, so a hotkey start is instant.
    private func prepare() async {
        guard configuration.backend == .local else { return }
        let (status, _) = await recognizers.local.authorize()
        if status != .authorized { setAuthorization(status) }
    }

    // MARK: Events

    /// Calls `observer` with every event, on the core's executor, in order. It must not block.
    public func observe(_ observer: @escaping @Sendable (SpeechEvent) -> Void) { hub.observe(observer) }

    /// Every event from now on, in order (bounded: see ``EventHub``). Ends when the core does.
    public nonisolated func events() -> AsyncStream<SpeechEvent> { hub.stream() }

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
        transcript.reset()
        publish(.transcript("", update: nil))
        let backend = options.backend ?? settings.backend
        let source = options.source ?? settings.source
        let sessionOptions = SessionOptions(
            language: options.language ?? settings.language,
            interimResults: options.interimResults ?? configuration.interimResults, keyterms: options.keyterms)
        let run = SessionRun(
            token: sessionCounter, backend: backend, source: source.isEmpty ? nil : source, options: sessionOptions,
            recognizer: recognizers[backend], microphone: microphone, core: self,
            reconnectLimit: .milliseconds(Int(configuration.microphoneReconnectMilliseconds)), logger: logger)
        session = ActiveSession(run: run)
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
    /// is), later results are ignored, and the session ends now.
    private func stopTimedOut(token: Int) {
        guard let run = session?.run, run.token == token else { return }
        logger.warning(
            "stop timed out; the pending interim becomes the last final",
            metadata: [
                "stop_timeout_ms": "\(configuration.stopTimeoutMilliseconds)",
                "promoted": "\(!transcript.interim.isEmpty)",
            ])
        promoteInterim()
        session?.ignoresResults = true
        run.close(flush: false)
    }

    // MARK: Reports from the running session

    func opened(_ run: SessionRun) {
        guard session?.run === run else { return }
        recognizerDown = false
        microphoneDown = false
        setAuthorization(.authorized)
        setMicrophone(.authorized)
        setLastError(nil)
        beginHistory(run)
        logger.info(
            "listening", metadata: ["source": "\(run.source ?? "(default)")", "backend": "\(run.backend.rawValue)"])
        handle(.opened)
    }

    func openFailed(_ run: SessionRun, _ failure: SessionRun.OpenFailure) {
        guard session?.run === run else { return }
        session = nil
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
            guard !session.ignoresResults else { return }
            apply(result)
        case .reconnecting(let down):
            recognizerDown = down
            updateReconnecting()
        case .speechActivity(let now):
            setSpeaking(now)
        }
    }

    func level(_ level: Double, from run: SessionRun) {
        guard session?.run === run else { return }
        publish(.audioLevel(level))
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
        session = nil
        stopTimer?.cancel()
        stopTimer = nil
        // Stop, timeout, failure: the pending interim is kept as the last final. Cancel dropped it.
        if !ending.cancelled { promoteInterim() }
        setSpeaking(false)
        endHistory()
        pruneHistoryDaily()
        if let failure = ending.failure { return handle(.failed(failure)) }
        if let captureError {
            setMicrophone(Self.microphoneStatus(for: captureError))
            return handle(.failed(SpeechError(captureError)))
        }
        if let recognitionError, !ending.ignoresResults, !ending.cancelled {
            return handle(.failed(SpeechError(recognitionError)))
        }
        handle(.closed)
    }

    // MARK: Transcript

    private func apply(_ result: RecognitionResult) {
        guard transcript.apply(result) else { return }
        if result.isFinal { store(result) }
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

    private func beginHistory(_ run: SessionRun) {
        historyID = nil
        guard let history else { return }
        let id = UUID().uuidString.lowercased()
        do {
            try history.beginSession(
                id: id, started: Date(), backend: run.backend.rawValue, language: run.options.language,
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
}
