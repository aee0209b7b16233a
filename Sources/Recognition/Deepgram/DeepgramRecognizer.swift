import Capture
import Foundation
import Logging
import NIOCore
import NIOSSL

/// Settings of the streaming backend (the `[deepgram]` table plus the session-wide limits).
public struct DeepgramSettings: Sendable {
    public var url: String
    /// Present the key as `Sec-WebSocket-Protocol: token, KEY` instead of `Authorization: Token KEY`.
    public var useSubprotocol: Bool
    public var apiKeyFile: String
    public var model: String
    public var caFile: String
    public var parameters: [String: String]
    /// Retries of a connection lost during a session.
    public var backoff: Backoff
    /// Audio kept for replay after a dropped connection (see ``StreamLedger`` for the policy).
    var replayCapacity: Duration
    /// How long connecting may take: one attempt (TCP, proxy, TLS, handshake), and for a
    /// session's first connection all its retries of 429, 5xx and network errors together.
    /// Clamped to 0.1...15 s.
    public var connectTimeout: Duration
    /// A KeepAlive goes out when nothing else did for this long (the protocol asks for 3-5 s).
    var keepAliveInterval: Duration

    public init(
        url: String, useSubprotocol: Bool = false, apiKeyFile: String = "", model: String = "nova-3",
        caFile: String = "", parameters: [String: String] = [:], backoff: Backoff = Backoff(),
        replayCapacity: Duration = .seconds(60), connectTimeout: Duration = .seconds(10),
        keepAliveInterval: Duration = .seconds(4)
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
        self.keepAliveInterval = keepAliveInterval
    }

    /// ``connectTimeout`` within its bounds.
    var effectiveConnectTimeout: Duration { min(max(connectTimeout, .milliseconds(100)), .seconds(15)) }
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

    /// Performs one real handshake, bounded by the connect timeout, then closes cleanly.
    public func authorize() async -> (RecognizerAuthorization, RecognitionError?) {
        do {
            let connection = try await connect(StreamOptions(), retrying: false) { _ in }
            connection.send(text: DeepgramProtocol.closeStream)
            connection.close()
            return (.authorized, nil)
        } catch {
            return (error.authorization ?? .notDetermined, error)
        }
    }

    /// Connects (retrying 429, 5xx and network errors until the connect timeout) and returns the
    /// stream. Its events go to `events`, from the connection's event loop.
    public func startStream(_ options: StreamOptions, events: any RecognitionEventSink) async throws(RecognitionError)
        -> any RecognitionStream
    {
        let stream = DeepgramStream(
            options: options, settings: settings, events: events, logger: logger,
            // One handshake per reconnect attempt: the stream's machine owns the backoff.
            connect: { [self] onMessage throws(RecognitionError) in
                try await connect(options, retrying: false, on: events.eventLoop, onMessage: onMessage)
            })
        let connection = try await connect(
            options, retrying: true, on: events.eventLoop, onMessage: stream.receive)
        stream.adopt(connection)
        return stream
    }

    /// Connects within the connect timeout. With `retrying`, refusals and network errors worth
    /// retrying are retried with ``DeepgramSettings/backoff`` as long as the same deadline allows.
    func connect(
        _ options: StreamOptions, retrying: Bool, on eventLoop: (any EventLoop)? = nil,
        onMessage: @escaping WebSocketConnection.MessageHandler
    ) async throws(RecognitionError) -> WebSocketConnection {
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
        let timeout = settings.effectiveConnectTimeout
        let deadline = ContinuousClock.now + timeout
        var backoff = settings.backoff
        var attempts = 0
        // The failure before the one at hand: more telling than a last attempt the deadline cut short.
        var previous: RecognitionError?
        while true {
            attempts += 1
            let failure: RecognitionError
            let retryable: Bool
            do {
                let connection = try await WebSocketConnection.connect(
                    url: url, headers: headers, tls: tls, proxy: ProxySettings.forURL(url, environment: environment),
                    timeout: deadline - .now, on: eventLoop, logger: logger, onMessage: onMessage)
                logger.debug("stream connected", metadata: ["host": "\(url.host ?? "")"])
                return connection
            } catch let refusal as HandshakeRefusal {
                retryable = DeepgramProtocol.isRetryable(handshakeStatus: refusal.status)
                failure = Self.error(for: refusal, key: key).unreachable(retryable)
                logger.warning(
                    "stream handshake refused",
                    metadata: [
                        "status": "\(refusal.status)", "dg-request-id": "\(refusal.header("dg-request-id") ?? "")",
                        "dg-error": "\(key.redact(refusal.header("dg-error") ?? ""))",
                    ])
            } catch is CancellationError {
                throw Self.cancelled
            } catch {
                let message = key.redact("\(error)")
                logger.warning("stream connection failed", metadata: ["reason": "\(message)"])
                if error is NIOSSLError || error is NIOSSLExtraError {
                    throw RecognitionError(
                        .backendUnavailable,
                        "The server's TLS certificate was not accepted (\(message)). For a self-hosted server, set [deepgram] ca_file to its CA."
                    )
                }
                failure = RecognitionError(.backendUnavailable, "Cannot reach \(url.host ?? "the server"): \(message).")
                    .unreachable(true)
                retryable = true
            }
            // Retry only if the wait leaves time for a handshake before the deadline.
            guard retrying, retryable, let delay = backoff.next(),
                ContinuousClock.now + delay + Self.shortestAttempt < deadline
            else {
                guard attempts > 1 else { throw failure }
                var error = ContinuousClock.now >= deadline ? previous ?? failure : failure
                error.message += " Gave up after \(attempts) attempts within the \(timeout) connect timeout."
                throw error
            }
            previous = failure
            do {
                try await eventLoopSleep(for: delay)
            } catch {
                throw Self.cancelled
            }
        }
    }

    /// Less time than this left before the deadline is not worth another attempt.
    static let shortestAttempt = Duration.milliseconds(200)

    static let cancelled = RecognitionError(.failed, "Connecting to the recognizer was cancelled.")

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
