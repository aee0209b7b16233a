import Capture
import DBus
import Foundation
import History
import Logging
import Recognition
import Synchronization

/// The speech service: runs the session state machine and carries out its actions, keeping the
/// D-Bus object's properties and signals in step.
public actor SpeechService {
    typealias Machine = SessionMachine<StartOptions>

    private var machine = Machine()
    private var transcript = Transcript()
    private var waiting: [Machine.CallID: CheckedContinuation<(Machine.Reply, String), Never>] = [:]
    private var nextCallID: Machine.CallID = 0
    private var session: ActiveSession?
    private var sessionCounter = 0
    private var object: DBusObject?
    /// Which links of the running session are down; `State` is `reconnecting` while any is.
    private var recognizerDown = false
    private var microphoneDown = false
    private var speaking = false
    /// The running session's history row, if history is kept and the row could be written.
    private var historyID: String?
    private var lastPruned = ContinuousClock.now

    private let configuration: Configuration
    private let localRecognizer: PocketSphinxRecognizer
    private let streamingRecognizer: any Recognizer
    private let pulseServer: String?
    private let history: HistoryStore?
    private let logger: Logger

    /// - Parameters:
    ///   - streamingRecognizer: the `deepgram` backend.
    ///   - pulseServer: a PulseAudio server address, or nil for the usual lookup.
    ///   - history: where finals are kept, or nil to keep none.
    public init(
        configuration: Configuration, localRecognizer: PocketSphinxRecognizer, streamingRecognizer: any Recognizer,
        pulseServer: String? = nil, history: HistoryStore? = nil, logger: Logger
    ) {
        self.configuration = configuration
        self.localRecognizer = localRecognizer
        self.streamingRecognizer = streamingRecognizer
        self.pulseServer = pulseServer
        self.history = history
        self.logger = logger
    }

    private func recognizer(for backend: Backend) -> any Recognizer {
        switch backend {
        case .local: localRecognizer
        case .deepgram: streamingRecognizer
        }
    }

    /// Connects the service to the object whose properties and signals it drives.
    public func attach(_ object: DBusObject) { self.object = object }

    /// Loads what sessions need up front, so a hotkey start is instant.
    public func prepare() async {
        guard configuration.backend == .local else { return }
        let (status, _) = await localRecognizer.authorize()
        if status != .authorized { object?.setProperty("AuthorizationStatus", .string(status.rawValue)) }
    }

    // MARK: Methods

    public func start(_ options: StartOptions) async throws(SpeechError) {
        if case .error(let error) = await call({ .start($0, options) }).0 { throw error }
    }

    /// Stops and returns the transcript once every final is in.
    public func stop() async -> String {
        await call { .stop($0) }.1
    }

    /// Starts if idle, stops if listening; returns whether it is now listening.
    public func toggle(_ options: StartOptions) async throws(SpeechError) -> Bool {
        switch await call({ .toggle($0, options) }).0 {
        case .error(let error): throw error
        case .toggled(let listening): return listening
        default: return machine.state == .listening
        }
    }

    public func cancel() async {
        _ = await call { .cancel($0) }
    }

    public func resetTranscript() {
        transcript.reset()
        object?.emit("TranscriptChanged", [.string(""), .string(""), .boolean(true)])
        object?.setProperty("Transcript", .string(""))
    }

    /// Probes the microphone and the recognizer now; returns `AuthorizationStatus`.
    public func requestAuthorization() async -> String {
        let source = currentSource
        do {
            try await PulseAudio.probe(source: source, server: pulseServer)
            object?.setProperty("MicrophoneStatus", .string("authorized"))
        } catch {
            object?.setProperty("MicrophoneStatus", .string(Self.microphoneStatus(for: error)))
        }
        let status = await recognizer(for: currentBackend).authorize().0
        object?.setProperty("AuthorizationStatus", .string(status.rawValue))
        return status.rawValue
    }

    public func listSources() async throws(SpeechError) -> [AudioSource] {
        do {
            return try await PulseAudio.sources(server: pulseServer)
        } catch {
            object?.setProperty("MicrophoneStatus", .string(Self.microphoneStatus(for: error)))
            throw SpeechError(error)
        }
    }

    /// Sessions with text, newest first (`limit` 0: all): id, start (Unix µs), transcript.
    public func recentHistory(limit: Int) throws(SpeechError) -> [HistoryEntry] {
        guard let history else { return [] }
        do {
            return try history.sessions(limit: limit)
        } catch {
            throw SpeechError.internal(error.description)
        }
    }

    /// Deletes sessions older than `history_days` (if set), at most once a day (startup pruned already).
    private func pruneHistoryDaily() {
        guard let history, configuration.historyDays > 0, ContinuousClock.now - lastPruned > .seconds(86_400) else {
            return
        }
        lastPruned = .now
        do {
            let pruned = try history.prune(startedBefore: SttdApp.historyCutoff(days: configuration.historyDays))
            if pruned > 0 { logger.info("pruned history", metadata: ["sessions": "\(pruned)"]) }
        } catch {
            logger.error("history pruning failed", metadata: ["reason": "\(error.description)"])
        }
    }

    /// Answers once the actor is free; the watchdog's proof of life.
    public func isResponsive() -> Bool { true }

    /// Service shutdown: a listening session stops as a Stop would (its last final is stored).
    public func shutdown() async {
        switch machine.state {
        case .idle: return
        case .listening, .reconnecting: _ = await stop()
        default: await cancel()
        }
    }

    // MARK: The machine

    private func call(_ makeEvent: (Machine.CallID) -> Machine.Event) async -> (Machine.Reply, String) {
        nextCallID += 1
        let id = nextCallID
        return await withCheckedContinuation { continuation in
            waiting[id] = continuation
            handle(makeEvent(id))
        }
    }

    private func handle(_ event: Machine.Event) {
        let before = machine.state
        let actions = machine.handle(event)
        if machine.state != before { object?.setProperty("State", .string(machine.state.rawValue)) }
        for action in actions { execute(action) }
    }

    private func execute(_ action: Machine.Action) {
        switch action {
        case .open(let options):
            sessionCounter += 1
            let token = sessionCounter
            transcript.reset()
            object?.setProperty("Transcript", .string(""))
            Task { await self.open(options, token: token) }
        case .close(let flush):
            session?.close(flush: flush)
            if flush {
                armStopTimeout()
            } else {
                transcript.dropInterim()
                object?.setProperty("Transcript", .string(transcript.text))
            }
        case .reply(let id, let reply):
            waiting.removeValue(forKey: id)?.resume(returning: (reply, transcript.text))
        case .recordFailure(let error, let signal):
            logger.warning("session failed", metadata: ["error": "\(error.name)", "reason": "\(error.message)"])
            object?.setProperty("LastError", .string(error.name))
            if signal { object?.emit("SessionFailed", [.string(error.name), .string(error.message)]) }
        }
    }

    private var currentBackend: Backend {
        object?.property("Backend")?.string.flatMap(Backend.init(rawValue:)) ?? configuration.backend
    }
    private var currentLanguage: String { object?.property("Language")?.string ?? configuration.language }
    /// The source to capture from; nil means the server's default.
    private var currentSource: String? {
        let source = object?.property("Source")?.string ?? configuration.source
        return source.isEmpty ? nil : source
    }

    private func open(_ options: StartOptions, token: Int) async {
        let backend = options.backend ?? currentBackend
        let source = options.source.map { $0.isEmpty ? nil : $0 } ?? currentSource
        let sessionOptions = SessionOptions(
            language: options.language ?? currentLanguage,
            interimResults: options.interimResults ?? configuration.interimResults, keyterms: options.keyterms)
        let recognition: any RecognitionSession
        do {
            recognition = try await recognizer(for: backend).startSession(sessionOptions)
            object?.setProperty("AuthorizationStatus", .string("authorized"))
        } catch {
            // A refused key says "denied", a missing model or key "restricted"; a network failure says nothing.
            if let status = error.authorization ?? (backend == .local ? .restricted : nil) {
                object?.setProperty("AuthorizationStatus", .string(status.rawValue))
            }
            return handle(.openFailed(SpeechError(error)))
        }
        let tap = AudioTap(recognition: recognition, levels: object)
        let capture: Capture
        do {
            capture = try await PulseAudio.capture(
                source: source, server: pulseServer, logger: logger, deliver: tap.deliver)
            object?.setProperty("MicrophoneStatus", .string("authorized"))
        } catch {
            recognition.cancel()
            object?.setProperty("MicrophoneStatus", .string(Self.microphoneStatus(for: error)))
            return handle(.openFailed(SpeechError(error)))
        }
        let pulseServer = pulseServer
        let logger = logger
        let active = ActiveSession(
            token: token, capture: capture, recognition: recognition,
            reconnectLimit: .milliseconds(Int(configuration.microphoneReconnectMilliseconds)),
            reopen: {
                try await PulseAudio.capture(source: source, server: pulseServer, logger: logger, deliver: tap.deliver)
            })
        session = active
        recognizerDown = false
        microphoneDown = false
        object?.setProperty("LastError", .string(""))
        beginHistory(backend: backend, language: sessionOptions.language, source: source ?? "")
        active.run(service: self)
        logger.info("listening", metadata: ["source": "\(source ?? "(default)")", "backend": "\(backend.rawValue)"])
        handle(.opened)
    }

    private func armStopTimeout() {
        guard let session else { return }
        let token = session.token
        let limit = Duration.milliseconds(Int(configuration.stopTimeoutMilliseconds))
        Task {
            try? await eventLoopSleep(for: limit)
            self.stopTimedOut(token: token)
        }
    }

    private func stopTimedOut(token: Int) {
        guard let session, session.token == token else { return }
        logger.warning(
            "stop timed out; ending the session with the finals received so far",
            metadata: ["stop_timeout_ms": "\(configuration.stopTimeoutMilliseconds)"])
        session.close(flush: false)
    }

    // MARK: Reports from the running session

    private func beginHistory(backend: Backend, language: String, source: String) {
        historyID = nil
        guard let history else { return }
        let id = UUID().uuidString.lowercased()
        do {
            try history.beginSession(
                id: id, started: Date(), backend: backend.rawValue, language: language, source: source)
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

    func received(_ result: RecognitionResult, token: Int) {
        guard session?.token == token, transcript.apply(result) else { return }
        if result.isFinal { store(result) }
        let text = transcript.text
        object?.emit(
            "TranscriptChanged", [.string(text), .string(Transcript.normalized(result.text)), .boolean(result.isFinal)])
        object?.setProperty("Transcript", .string(text))
    }

    /// Which link of a session changed.
    enum Link { case recognizer, microphone }

    func linkChanged(_ link: Link, down: Bool, token: Int) {
        guard session?.token == token else { return }
        switch link {
        case .recognizer: recognizerDown = down
        case .microphone:
            microphoneDown = down
            object?.setProperty("MicrophoneStatus", .string(down ? "unavailable" : "authorized"))
        }
        let before = machine.state
        machine.setReconnecting(recognizerDown || microphoneDown)
        if machine.state != before { object?.setProperty("State", .string(machine.state.rawValue)) }
    }

    func speechActivity(_ now: Bool, token: Int) {
        guard session?.token == token else { return }
        setSpeaking(now)
    }

    private func setSpeaking(_ now: Bool) {
        guard speaking != now else { return }
        speaking = now
        object?.emit("SpeechActivity", [.boolean(now)])
    }

    func sessionEnded(token: Int, captureError: CaptureError?, recognitionError: (any Error)?) {
        guard let ended = session, ended.token == token else { return }
        session = nil
        ended.cancelCapture()
        setSpeaking(false)
        endHistory()
        pruneHistoryDaily()
        if let captureError {
            object?.setProperty("MicrophoneStatus", .string(Self.microphoneStatus(for: captureError)))
            return handle(.failed(SpeechError(captureError)))
        }
        if let recognitionError {
            let error =
                (recognitionError as? RecognitionError).map(SpeechError.init) ?? .internal("\(recognitionError)")
            return handle(.failed(error))
        }
        handle(.closed)
    }

    static func microphoneStatus(for error: CaptureError) -> String {
        error.kind == .accessDenied ? "denied" : "unavailable"
    }
}

/// A running session: the capture pump and the results reader.
final class ActiveSession: Sendable {
    typealias Reopen = @Sendable () async throws -> Capture

    let token: Int
    let recognition: any RecognitionSession
    private let reconnectLimit: Duration
    private let reopen: Reopen
    /// The current capture (replaced when the sound server comes back) and whether the
    /// session is closing, which ends any wait for the server.
    private let captureState: Mutex<(capture: Capture, closing: Bool)>

    init(
        token: Int, capture: Capture, recognition: any RecognitionSession, reconnectLimit: Duration,
        reopen: @escaping Reopen
    ) {
        self.token = token
        self.recognition = recognition
        self.reconnectLimit = reconnectLimit
        self.reopen = reopen
        captureState = Mutex((capture, false))
    }

    func close(flush: Bool) {
        let capture = captureState.withLock { state in
            state.closing = true
            return state.capture
        }
        if flush {
            capture.stop()
        } else {
            capture.cancel()
            recognition.cancel()
        }
    }

    func cancelCapture() { captureState.withLock { $0.capture }.cancel() }

    /// Starts the two loops: the capture's end (its audio goes to an ``AudioTap`` on the capture
    /// thread) and the recognizer's events.
    func run(service: SpeechService) {
        let token = token
        let recognition = recognition
        let captureOutcome = CaptureOutcome()
        Task.detached { [self] in
            var chunks = captureState.withLock { $0.capture.chunks }
            while true {
                do {
                    for try await _ in chunks {}
                    break
                } catch let error as CaptureError where error.kind == .lost {
                    await service.linkChanged(.microphone, down: true, token: token)
                    guard let capture = await reconnect() else {
                        // Closed while waiting is a normal stop; otherwise the server stayed away.
                        if !captureState.withLock({ $0.closing }) { captureOutcome.error = error }
                        break
                    }
                    chunks = capture.chunks
                    await service.linkChanged(.microphone, down: false, token: token)
                } catch {
                    captureOutcome.error = error as? CaptureError ?? CaptureError(.lost, "\(error)")
                    break
                }
            }
            // Recognize what was heard before the end (or the failure), then end the results.
            recognition.finish()
        }
        Task.detached {
            var failure: (any Error)?
            do {
                for try await event in recognition.events {
                    switch event {
                    case .result(let result): await service.received(result, token: token)
                    case .reconnecting(let down): await service.linkChanged(.recognizer, down: down, token: token)
                    case .speechActivity(let speaking): await service.speechActivity(speaking, token: token)
                    }
                }
            } catch {
                failure = error
            }
            await service.sessionEnded(token: token, captureError: captureOutcome.error, recognitionError: failure)
        }
    }

    /// Reopens capture until the sound server is back, the limit passes or the session closes.
    private func reconnect() async -> Capture? {
        let deadline = ContinuousClock.now + reconnectLimit
        while ContinuousClock.now < deadline, !captureState.withLock({ $0.closing }) {
            try? await eventLoopSleep(for: .milliseconds(200))
            guard let capture = try? await reopen() else { continue }
            let closing = captureState.withLock { state in
                if !state.closing { state.capture = capture }
                return state.closing
            }
            if closing {
                capture.cancel()
                return nil
            }
            return capture
        }
        return nil
    }
}

/// Where captured audio goes, on the capture thread: to the recognizer (which never blocks) and
/// to the level meter, whose readings go straight to the bus. Nothing waits on the service actor.
final class AudioTap: Sendable {
    private let recognition: any RecognitionSession
    private let levels: DBusObject?
    private let meter = Mutex(LevelMeter())

    init(recognition: any RecognitionSession, levels: DBusObject?) {
        self.recognition = recognition
        self.levels = levels
    }

    @Sendable func deliver(_ chunk: AudioChunk) {
        recognition.send(chunk)
        if let level = meter.withLock({ $0.add(chunk) }) { levels?.emit("AudioLevel", [.double(level)]) }
    }
}

/// How capture ended, written by the pump before the recognizer's results end.
final class CaptureOutcome: Sendable {
    private let storage = Mutex<CaptureError?>(nil)
    var error: CaptureError? {
        get { storage.withLock { $0 } }
        set { storage.withLock { $0 = newValue } }
    }
}
