import Capture
import Foundation
import Logging
import NIOSSL
import Synchronization

/// Settings of the streaming backend (the `[deepgram]` table plus the session-wide limits).
public struct DeepgramSettings: Sendable {
    public var url: String
    /// Present the key as `Sec-WebSocket-Protocol: token, KEY` instead of `Authorization: Token KEY`.
    public var useSubprotocol: Bool
    public var apiKeyFile: String
    public var model: String
    public var caFile: String
    public var parameters: [String: String]
    public var backoff: Backoff
    /// Audio kept for replay after a dropped connection.
    public var replayCapacity: Duration
    /// How long a connection attempt may take.
    public var connectTimeout: Duration

    public init(
        url: String, useSubprotocol: Bool = false, apiKeyFile: String = "", model: String = "nova-3",
        caFile: String = "", parameters: [String: String] = [:], backoff: Backoff = Backoff(),
        replayCapacity: Duration = .seconds(60), connectTimeout: Duration = .seconds(10)
    ) {
        self.url = url
        self.useSubprotocol = useSubprotocol
        self.apiKeyFile = apiKeyFile
        self.model = model
        self.caFile = caFile
        self.parameters = parameters
        self.backoff = backoff
        self.replayCapacity = replayCapacity
        self.connectTimeout = connectTimeout
    }
}

/// A streaming client for any Deepgram-compatible `/v1/listen` API (Deepgram, SubQ, self-hosted).
public final class DeepgramRecognizer: Recognizer {
    private let settings: DeepgramSettings
    private let environment: [String: String]
    private let logger: Logger

    public init(settings: DeepgramSettings, environment: [String: String], logger: Logger) {
        self.settings = settings
        self.environment = environment
        self.logger = logger
    }

    /// Performs a real handshake, then closes cleanly.
    public func authorize() async -> (RecognizerAuthorization, RecognitionError?) {
        do {
            let connection = try await connect(SessionOptions(), backoff: nil)
            connection.send(text: DeepgramProtocol.closeStream)
            connection.close()
            return (.authorized, nil)
        } catch {
            return (error.authorization ?? .notDetermined, error)
        }
    }

    public func startSession(_ options: SessionOptions) async throws(RecognitionError) -> any RecognitionSession {
        let connection = try await connect(options, backoff: settings.backoff)
        let session = DeepgramSession(
            options: options, settings: settings, logger: logger,
            reconnect: { [self] backoff throws(RecognitionError) in try await connect(options, backoff: backoff) })
        session.start(with: connection)
        return session
    }

    /// Connects, retrying refusals and network errors worth retrying while `backoff` allows.
    func connect(_ options: SessionOptions, backoff: Backoff?) async throws(RecognitionError) -> WebSocketConnection {
        guard let key = try APIKey.load(keyFile: settings.apiKeyFile, environment: environment) else {
            throw RecognitionError(
                .notAuthorized,
                "No API key is configured for the deepgram backend: set [deepgram] api_key_file, a systemd credential named api-key, or STTD_API_KEY.",
                authorization: .restricted)
        }
        guard
            let url = DeepgramProtocol.streamURL(
                base: settings.url, model: settings.model, language: options.language,
                interimResults: options.interimResults, keyterms: options.keyterms, parameters: settings.parameters)
        else { throw RecognitionError(.invalidConfiguration, "deepgram.url \(settings.url) is not a valid URL.") }
        let tls = try tlsConfiguration(for: url)
        let headers =
            settings.useSubprotocol
            ? [("Sec-WebSocket-Protocol", key.subprotocolHeader)] : [("Authorization", key.authorizationHeader)]
        var backoff = backoff
        while true {
            do {
                let connection = try await WebSocketConnection.connect(
                    url: url, headers: headers, tls: tls, proxy: ProxySettings.forURL(url, environment: environment),
                    timeout: settings.connectTimeout, logger: logger)
                logger.debug("stream connected", metadata: ["host": "\(url.host ?? "")"])
                return connection
            } catch let refusal as HandshakeRefusal {
                let error = Self.error(for: refusal, key: key)
                logger.warning(
                    "stream handshake refused",
                    metadata: [
                        "status": "\(refusal.status)", "dg-request-id": "\(refusal.header("dg-request-id") ?? "")",
                        "dg-error": "\(key.redact(refusal.header("dg-error") ?? ""))",
                    ])
                guard DeepgramProtocol.isRetryable(handshakeStatus: refusal.status), let delay = backoff?.next() else {
                    throw error
                }
                try? await eventLoopSleep(for: delay)
            } catch {
                let message = key.redact("\(error)")
                logger.warning("stream connection failed", metadata: ["reason": "\(message)"])
                if error is NIOSSLError || error is NIOSSLExtraError {
                    throw RecognitionError(
                        .backendUnavailable,
                        "The server's TLS certificate was not accepted (\(message)). For a self-hosted server, set [deepgram] ca_file to its CA."
                    )
                }
                guard let delay = backoff?.next() else {
                    throw RecognitionError(.backendUnavailable, "Cannot reach \(url.host ?? "the server"): \(message).")
                }
                try? await eventLoopSleep(for: delay)
            }
        }
    }

    private func tlsConfiguration(for url: URL) throws(RecognitionError) -> TLSConfiguration? {
        guard url.scheme?.lowercased() == "wss" else { return nil }
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.certificateVerification = .fullVerification
        if !settings.caFile.isEmpty {
            guard FileManager.default.isReadableFile(atPath: settings.caFile) else {
                throw RecognitionError(.invalidConfiguration, "deepgram.ca_file \(settings.caFile) cannot be read.")
            }
            tls.additionalTrustRoots = [.file(settings.caFile)]
        }
        return tls
    }

    /// Maps a refused handshake to an error and what it says about authorization.
    static func error(for refusal: HandshakeRefusal, key: APIKey) -> RecognitionError {
        let reason = key.redact(providerReason(refusal))
        switch refusal.status {
        case 401, 403:
            return RecognitionError(
                .notAuthorized,
                "The server refused the API key (HTTP \(refusal.status)\(reason.isEmpty ? "" : ": \(reason)")). Check the key in api_key_file, the api-key credential or STTD_API_KEY.",
                authorization: .denied)
        case 402:
            return RecognitionError(
                .notAuthorized,
                "The provider will not serve this account (HTTP 402\(reason.isEmpty ? "" : ": \(reason)")): check its balance or plan.",
                authorization: .restricted)
        case 400:
            return RecognitionError(
                .invalidConfiguration,
                "The server rejected the stream settings (HTTP 400\(reason.isEmpty ? "" : ": \(reason)")). Check model, language and params in [deepgram]."
            )
        case 429:
            return RecognitionError(
                .backendUnavailable,
                "The server has too many streams open for this account (HTTP 429); try again later.")
        default:
            return RecognitionError(
                .backendUnavailable,
                "The server refused the stream (HTTP \(refusal.status)\(reason.isEmpty ? "" : ": \(reason)")).")
        }
    }

    /// `err_msg` from the JSON body, else the `dg-error` header.
    static func providerReason(_ refusal: HandshakeRefusal) -> String {
        if let data = refusal.body.data(using: .utf8),
            let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any],
            let message = object["err_msg"] as? String
        {
            return message
        }
        return refusal.header("dg-error") ?? ""
    }
}

/// One streaming session: reconnects on retryable failures and replays the audio the server has
/// not answered for.
final class DeepgramSession: RecognitionSession {
    typealias Reconnect = @Sendable (Backoff) async throws(RecognitionError) -> WebSocketConnection

    let events: AsyncThrowingStream<RecognitionEvent, any Error>
    private let continuation: AsyncThrowingStream<RecognitionEvent, any Error>.Continuation
    private let options: SessionOptions
    private let settings: DeepgramSettings
    private let logger: Logger
    private let reconnect: Reconnect

    private struct State {
        var ledger: StreamLedger
        /// The open connection, if any (none while reconnecting).
        var connection: WebSocketConnection?
        /// Audio waiting to go out paced (a replay, or audio that came faster than the pacer allows).
        var queued: [[Int16]] = []
        /// A task is sending `queued`; new audio lines up behind it.
        var draining = false
        var pacer = Pacer()
        var finishing = false
        var closingSent = false
        var cancelled = false
        var speaking = false
        var unknownTypesLogged = Set<String>()
    }
    private let state: Mutex<State>

    init(options: SessionOptions, settings: DeepgramSettings, logger: Logger, reconnect: @escaping Reconnect) {
        self.options = options
        self.settings = settings
        self.logger = logger
        self.reconnect = reconnect
        state = Mutex(State(ledger: StreamLedger(capacity: settings.replayCapacity)))
        (events, continuation) = AsyncThrowingStream.makeStream()
    }

    func start(with connection: WebSocketConnection) {
        Task { await run(first: connection) }
    }

    /// Live audio goes straight to the socket from the caller's thread (the capture thread);
    /// only a replay, or audio arriving faster than the pacer allows, waits in `queued`.
    func send(_ chunk: AudioChunk) {
        let startDrain = state.withLock { state -> WebSocketConnection? in
            guard !state.finishing, !state.cancelled else { return nil }
            state.ledger.append(chunk)
            guard let connection = state.connection else { return nil }  // replayed after reconnecting
            // Sent under the lock, so frames leave in the order chunks arrived.
            if !state.draining, state.pacer.wait(at: .now) == .zero {
                state.pacer.sent(samples: chunk.samples.count)
                connection.send(binary: chunk.samples)
                return nil
            }
            state.queued.append(chunk.samples)
            guard !state.draining else { return nil }
            state.draining = true
            return connection
        }
        if let startDrain { drain(startDrain) }
    }

    func finish() {
        state.withLock { state in
            guard !state.finishing else { return }
            state.finishing = true
            // Flush, then ask the server to close once it has sent every final. While audio is
            // still queued (or no connection is open) the drain sends these after it.
            if let connection = state.connection, !state.draining { Self.sendClosing(connection, &state) }
        }
    }

    func cancel() {
        state.withLock { state in
            state.cancelled = true
            // Close now rather than when the server notices the silence.
            state.connection?.abort()
        }
        continuation.finish()
    }

    private static func sendClosing(_ connection: WebSocketConnection, _ state: inout State) {
        guard !state.closingSent else { return }
        state.closingSent = true
        connection.send(text: DeepgramProtocol.finalize)
        connection.send(text: DeepgramProtocol.closeStream)
    }

    /// Sends `queued` at the pacer's rate until it is empty, then lets audio go straight out again.
    private func drain(_ connection: WebSocketConnection) {
        Task {
            while true {
                // Sends the next chunk if the pacer allows; returns how long to wait, nil when done.
                let wait = state.withLock { state -> Duration? in
                    guard state.connection === connection, !state.cancelled else { return nil }
                    guard let samples = state.queued.first else {
                        state.draining = false
                        if state.finishing { Self.sendClosing(connection, &state) }
                        return nil
                    }
                    let wait = state.pacer.wait(at: .now)
                    if wait == .zero {
                        state.queued.removeFirst()
                        state.pacer.sent(samples: samples.count)
                        connection.send(binary: samples)
                    }
                    return wait
                }
                guard let wait else { return }
                if wait > .zero { try? await eventLoopSleep(for: wait) }
            }
        }
    }

    private func run(first: WebSocketConnection) async {
        var connection: WebSocketConnection? = first
        var backoff = settings.backoff
        while let current = connection {
            let end = await serve(current)
            let (finishing, cancelled) = state.withLock { ($0.finishing, $0.cancelled) }
            if cancelled { return }
            switch end {
            case .closed(let code, _) where finishing && code == 1000:
                logger.debug("stream closed", metadata: ["code": "\(code)"])
                continuation.finish()
                return
            case .closed(let code, let reason) where !DeepgramProtocol.isRetryable(closeCode: code):
                let error =
                    code == 1008 || code == 1002
                    ? RecognitionError(.failed, "The server could not decode the audio (close \(code) \(reason)).")
                    : RecognitionError(
                        .backendUnavailable,
                        "The server ended the stream (close \(code)\(reason.isEmpty ? "" : " \(reason)")).")
                continuation.finish(throwing: error)
                return
            default:
                logger.warning("stream dropped; reconnecting", metadata: ["reason": "\(end)"])
                continuation.yield(.reconnecting(true))
                connection = nil
                while connection == nil {
                    guard let delay = backoff.next() else {
                        continuation.finish(
                            throwing: RecognitionError(
                                .backendUnavailable,
                                "Lost the connection to the recognizer and could not get it back after \(backoff.attempts) attempts."
                            ))
                        return
                    }
                    try? await eventLoopSleep(for: delay)
                    if state.withLock({ $0.cancelled }) { return }
                    // One handshake per attempt: this loop owns the backoff.
                    var once = settings.backoff
                    once.maxAttempts = 0
                    do {
                        connection = try await reconnect(once)
                    } catch  where error.kind != .backendUnavailable {
                        // A refused key or settings will not get better by retrying.
                        continuation.finish(throwing: error)
                        return
                    } catch {
                        logger.debug("reconnect attempt failed", metadata: ["attempt": "\(backoff.attempts)"])
                    }
                }
                backoff.reset()
                continuation.yield(.reconnecting(false))
            }
        }
    }

    /// Runs one connection: replays the audio not yet answered for, then streams; returns how it ended.
    private func serve(_ connection: WebSocketConnection) async -> WebSocketEnd {
        let replay = state.withLock { state -> Bool in
            state.connection = connection
            state.pacer = Pacer()
            state.closingSent = false
            state.queued = state.ledger.beginConnection()
            if state.cancelled { connection.abort() }
            state.draining = !state.queued.isEmpty
            if !state.draining, state.finishing { Self.sendClosing(connection, &state) }
            return state.draining
        }
        if replay { drain(connection) }
        connection.keepAlive(DeepgramProtocol.keepAlive, every: .seconds(4))
        for await message in connection.messages {
            guard case .text(let text) = message else { continue }
            handle(text)
        }
        let end = await connection.end
        state.withLock { state in
            state.connection = nil
            state.queued = []
            state.draining = false
        }
        return end
    }

    /// Reports speech activity on changes only: results with words start it (SpeechStarted needs
    /// `vad_events`), `speech_final` and `UtteranceEnd` end it.
    private func speaking(_ now: Bool) {
        let changed = state.withLock { state in
            defer { state.speaking = now }
            return state.speaking != now
        }
        if changed { continuation.yield(.speechActivity(now)) }
    }

    private func handle(_ text: String) {
        let message: DeepgramProtocol.ServerMessage
        do {
            message = try DeepgramProtocol.decode(text)
        } catch {
            logger.warning(
                "skipping a malformed server message",
                metadata: ["reason": "\(error.description)", "bytes": "\(text.utf8.count)"])
            return
        }
        switch message {
        case .results(let results):
            if !results.transcript.isEmpty { speaking(true) }
            if results.isFinal {
                let span = state.withLock { state -> (Double, Double)? in
                    guard state.ledger.acceptFinal(start: results.start, duration: results.duration) else { return nil }
                    return (state.ledger.sessionTime(results.start), state.ledger.sessionTime(results.end))
                }
                guard let (start, end) = span else { return }
                continuation.yield(
                    .result(
                        RecognitionResult(text: results.transcript, isFinal: true, audioStart: start, audioEnd: end)))
            } else if options.interimResults, !results.transcript.isEmpty {
                continuation.yield(.result(RecognitionResult(text: results.transcript, isFinal: false)))
            }
            if results.speechFinal { speaking(false) }
        case .metadata(let requestID):
            logger.debug("stream metadata", metadata: ["request_id": "\(requestID ?? "")"])
        case .speechStarted:
            speaking(true)
        case .utteranceEnd:
            speaking(false)
        case .unknown(let type):
            let first = state.withLock { $0.unknownTypesLogged.insert(type).inserted }
            if first { logger.notice("ignoring unknown server message type", metadata: ["type": "\(type)"]) }
        }
    }
}
