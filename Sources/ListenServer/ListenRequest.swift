import Foundation
import Recognition

/// What a client asked for in its `GET /v1/listen?…` handshake, once accepted.
struct ListenRequest: Sendable, Equatable {
    var interimResults = false
    /// Endpointing in milliseconds, or nil when the client turned it off (`endpointing=false`).
    /// The engine's own voice activity detection ends utterances; this only decides whether
    /// finals carry `speech_final`.
    var endpointing: Int? = 10
    var utteranceEndMilliseconds: Int?
    var vadEvents = false
    var punctuate = false
    var smartFormat = false
    /// The model the client named; the local one is used whatever it says (`Metadata` names it).
    var model: String?
    var language = "en-US"
    var keyterms: [String] = []

    init() {}

    /// The session options the recognizer gets.
    var streamOptions: StreamOptions {
        StreamOptions(
            language: language, interimResults: interimResults, keyterms: keyterms,
            servedTo: "a client of sttd's /v1/listen server")
    }
}

/// A refused handshake: the HTTP status and Deepgram's `err_code`/`err_msg`.
struct ListenRefusal: Error, Sendable, Equatable {
    var status: Int
    var code: String
    var message: String
    /// Seconds a client should wait before trying again (`Retry-After`), when that is known to help.
    var retryAfter: Int?
    /// The `Origin` a web page sent, when that is why it was refused (for the log).
    var refusedOrigin: String?

    init(status: Int, code: String, message: String, retryAfter: Int? = nil, refusedOrigin: String? = nil) {
        self.status = status
        self.code = code
        self.message = message
        self.retryAfter = retryAfter
        self.refusedOrigin = refusedOrigin
    }

    static func badRequest(_ message: String) -> Self {
        Self(status: 400, code: "Bad Request", message: message)
    }
    static let invalidAuth = Self(
        status: 401, code: "INVALID_AUTH",
        message:
            "Invalid credentials. Send the server's key as `Authorization: Token KEY` or the subprotocols `token, KEY`."
    )
    /// A web page's handshake (browsers always send `Origin`) from an origin not listed.
    static func originNotAllowed(_ origin: String) -> Self {
        Self(
            status: 403, code: "INSUFFICIENT_PERMISSIONS",
            message:
                "Web pages from origin \"\(origin)\" may not use this server; to allow them, add it to [server] allowed_origins in sttd's config.toml.",
            refusedOrigin: origin)
    }
    static let tooManyStreams = Self(
        status: 429, code: "TOO_MANY_REQUESTS",
        message: "Too many concurrent streams: this server's max_streams are all in use. Retry later.")
    static let notFound = Self(
        status: 404, code: "NOT_FOUND", message: "Unknown path; streams go to /v1/listen.")
    /// The engine is serving a session it cannot share (pocketsphinx during dictation).
    static func engineBusy(_ reason: String) -> Self {
        Self(status: 503, code: "SERVICE_UNAVAILABLE", message: reason, retryAfter: 5)
    }
    /// The engine could not start a session (e.g. its model is missing).
    static func engineUnavailable(_ reason: String) -> Self {
        Self(status: 503, code: "SERVICE_UNAVAILABLE", message: "The local engine could not start: \(reason)")
    }
    static let upgradeRequired = Self(
        status: 426, code: "Bad Request", message: "/v1/listen takes a WebSocket upgrade (GET with Upgrade: websocket)."
    )
}

/// The handshake's checks as a pure function: path, origin, authentication (exactly as
/// Deepgram's), then the query. Unknown parameters are ignored, as Deepgram does; known ones of
/// the wrong type are refused with 400.
enum ListenHandshake {
    static let path = "/v1/listen"

    /// What the handshake decided, and the subprotocol to answer with (`token` when the client
    /// authenticated, or offered, that way).
    static func evaluate(
        uri: String, headers: [(String, String)], key: APIKey?, allowedOrigins: Set<WebOrigin> = []
    ) -> Result<(request: ListenRequest, subprotocol: String?), ListenRefusal> {
        guard let components = URLComponents(string: uri),
            components.path == path || components.path == path + "/"
        else { return .failure(.notFound) }
        func header(_ name: String) -> String? {
            headers.first { $0.0.lowercased() == name }?.1
        }
        // Any web page the user visits can open a WebSocket to loopback, and its browser always
        // sends the page's Origin; local programs send none. So a page gets the engine only when
        // its origin is listed, whatever key it holds.
        for (name, value) in headers where name.lowercased() == "origin" {
            guard let origin = WebOrigin(value), allowedOrigins.contains(origin) else {
                return .failure(.originNotAllowed(value.trimmingCharacters(in: .whitespaces)))
            }
        }
        // Without a body the request is complete with its head, so the server never waits on a
        // client between accepting its request and upgrading it.
        if header("transfer-encoding") != nil || (header("content-length").map { $0 != "0" } ?? false) {
            return .failure(.badRequest("A WebSocket handshake has no body; send GET /v1/listen without one."))
        }
        let offered =
            header("sec-websocket-protocol")?.split(separator: ",").map {
                $0.trimmingCharacters(in: .whitespaces)
            } ?? []
        let subprotocol = offered.first { $0.lowercased() == "token" }
        if let key {
            guard authenticated(authorization: header("authorization"), subprotocols: offered, key: key) else {
                return .failure(.invalidAuth)
            }
        }
        switch parse(components.queryItems ?? []) {
        case .success(let request): return .success((request, subprotocol))
        case .failure(let refusal): return .failure(refusal)
        }
    }

    /// `Authorization: Token KEY`, or `Sec-WebSocket-Protocol: token, KEY`. `Bearer` takes a
    /// short-lived JWT on Deepgram, never an API key, so a Bearer header is refused here.
    static func authenticated(authorization: String?, subprotocols: [String], key: APIKey) -> Bool {
        if let authorization {
            let parts = authorization.split(separator: " ", maxSplits: 1).map(String.init)
            guard parts.count == 2, parts[0].lowercased() == "token" else { return false }
            return key.matches(parts[1].trimmingCharacters(in: .whitespaces))
        }
        guard subprotocols.count == 2, subprotocols[0].lowercased() == "token" else { return false }
        return key.matches(subprotocols[1])
    }

    /// Reads the query parameters Deepgram defines and sttd can honour.
    static func parse(_ items: [URLQueryItem]) -> Result<ListenRequest, ListenRefusal> {
        var request = ListenRequest()
        func values(_ name: String) -> [String] { items.filter { $0.name == name }.map { $0.value ?? "" } }
        func last(_ name: String) -> String? { values(name).last }
        func bool(_ name: String, _ value: inout Bool) -> ListenRefusal? {
            guard let text = last(name) else { return nil }
            // Deepgram takes lowercase booleans only: `False` gets a 400.
            switch text {
            case "true": value = true
            case "false": value = false
            default: return .badRequest("\(name)=\(text) is not a boolean; use true or false.")
            }
            return nil
        }
        func integer(_ name: String) -> Result<Int?, ListenRefusal> {
            guard let text = last(name) else { return .success(nil) }
            guard let number = Int(text), number >= 0 else {
                return .failure(.badRequest("\(name)=\(text) is not a whole number."))
            }
            return .success(number)
        }

        if let encoding = last("encoding"), encoding != "linear16" {
            return .failure(
                .badRequest("encoding=\(encoding) is not supported; this server takes linear16 (16-bit PCM)."))
        }
        switch integer("sample_rate") {
        case .failure(let refusal): return .failure(refusal)
        case .success(let rate?) where rate != 16_000:
            // Resampling would hide a client's mistake and cost CPU on every stream: refused.
            return .failure(.badRequest("sample_rate=\(rate) is not supported; this server takes 16000 Hz audio."))
        case .success: break
        }
        switch integer("channels") {
        case .failure(let refusal): return .failure(refusal)
        case .success(let channels?) where channels != 1:
            return .failure(.badRequest("channels=\(channels) is not supported; this server takes mono audio (1)."))
        case .success: break
        }
        for (name, keyPath) in [
            ("interim_results", \ListenRequest.interimResults), ("vad_events", \.vadEvents),
            ("punctuate", \.punctuate), ("smart_format", \.smartFormat),
        ] {
            if let refusal = bool(name, &request[keyPath: keyPath]) { return .failure(refusal) }
        }
        // Accepted for compatibility, with no effect here; their types are still checked.
        var ignored = false
        for name in [
            "diarize", "numerals", "profanity_filter", "dictation", "multichannel", "no_delay", "filler_words",
        ] {
            if let refusal = bool(name, &ignored) { return .failure(refusal) }
        }
        if let text = last("endpointing") {
            if text == "false" {
                request.endpointing = nil
            } else if text == "true" {
                request.endpointing = 10
            } else if let milliseconds = Int(text), milliseconds >= 0 {
                request.endpointing = milliseconds
            } else {
                return .failure(.badRequest("endpointing=\(text) must be a number of milliseconds or false."))
            }
        }
        switch integer("utterance_end_ms") {
        case .failure(let refusal): return .failure(refusal)
        case .success(let milliseconds): request.utteranceEndMilliseconds = milliseconds
        }
        request.model = last("model")
        if let language = last("language"), !language.isEmpty { request.language = language }
        request.keyterms = values("keyterm").filter { !$0.isEmpty }
        return .success(request)
    }
}

extension ListenRefusal {
    /// Deepgram's error body: `{"err_code","err_msg","request_id"}`.
    func body(requestID: String) -> String {
        ServerMessages.json([
            "err_code": code, "err_msg": message, "request_id": requestID,
        ])
    }
}
