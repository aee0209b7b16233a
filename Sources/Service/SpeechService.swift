import Capture
import DBus
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

    private let configuration: Configuration
    private let localRecognizer: PocketSphinxRecognizer
    private let streamingRecognizer: any Recognizer
    private let pulseServer: String?
    private let logger: Logger

    /// - Parameters:
    ///   - streamingRecognizer: the `deepgram` backend.
    ///   - pulseServer: a PulseAudio server address, or nil for the usual lookup.
    public init(
        configuration: Configuration, localRecognizer: PocketSphinxRecognizer, streamingRecognizer: any Recognizer,
        pulseServer: String? = nil, logger: Logger
    ) {
        self.configuration = configuration
        self.localRecognizer = localRecognizer
        self.streamingRecognizer = streamingRecognizer
        self.pulseServer = pulseServer
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

    /// Ends any session at once (service shutdown).
    public func shutdown() async {
        if machine.state != .idle { await cancel() }
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
        let capture: Capture
        do {
            capture = try await PulseAudio.capture(source: source, server: pulseServer, logger: logger)
            object?.setProperty("MicrophoneStatus", .string("authorized"))
        } catch {
            recognition.cancel()
            object?.setProperty("MicrophoneStatus", .string(Self.microphoneStatus(for: error)))
            return handle(.openFailed(SpeechError(error)))
        }
        let active = ActiveSession(token: token, capture: capture, recognition: recognition)
        session = active
        object?.setProperty("LastError", .string(""))
        active.run(service: self, levels: object)
        logger.info("listening", metadata: ["source": "\(source ?? "(default)")", "backend": "\(backend.rawValue)"])
        handle(.opened)
    }

    private func armStopTimeout() {
        guard let session else { return }
        let token = session.token
        let limit = Duration.milliseconds(Int(configuration.stopTimeoutMilliseconds))
        Task {
            try? await Task.sleep(for: limit)
            await self.stopTimedOut(token: token)
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

    func received(_ result: RecognitionResult, token: Int) {
        guard session?.token == token, transcript.apply(result) else { return }
        let text = transcript.text
        object?.emit(
            "TranscriptChanged", [.string(text), .string(Transcript.normalized(result.text)), .boolean(result.isFinal)])
        object?.setProperty("Transcript", .string(text))
    }

    func linkChanged(reconnecting: Bool, token: Int) {
        guard session?.token == token else { return }
        let before = machine.state
        machine.setReconnecting(reconnecting)
        if machine.state != before { object?.setProperty("State", .string(machine.state.rawValue)) }
    }

    func sessionEnded(token: Int, captureError: CaptureError?, recognitionError: (any Error)?) {
        guard let ended = session, ended.token == token else { return }
        session = nil
        ended.capture.cancel()
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
    let token: Int
    let capture: Capture
    let recognition: any RecognitionSession

    init(token: Int, capture: Capture, recognition: any RecognitionSession) {
        self.token = token
        self.capture = capture
        self.recognition = recognition
    }

    func close(flush: Bool) {
        if flush {
            capture.stop()
        } else {
            capture.cancel()
            recognition.cancel()
        }
    }

    /// Starts the two loops. Audio goes straight from capture to the recognizer, off the actor.
    func run(service: SpeechService, levels: DBusObject?) {
        let token = token
        let recognition = recognition
        let chunks = capture.chunks
        let captureOutcome = CaptureOutcome()
        Task.detached {
            var meter = LevelMeter()
            do {
                for try await chunk in chunks {
                    recognition.send(chunk)
                    if let level = meter.add(chunk) { levels?.emit("AudioLevel", [.double(level)]) }
                }
            } catch {
                captureOutcome.error = error as? CaptureError ?? CaptureError(.lost, "\(error)")
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
                    case .reconnecting(let down): await service.linkChanged(reconnecting: down, token: token)
                    }
                }
            } catch {
                failure = error
            }
            await service.sessionEnded(token: token, captureError: captureOutcome.error, recognitionError: failure)
        }
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
