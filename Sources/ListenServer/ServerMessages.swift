import Foundation
import Recognition

/// Server -> client messages in Deepgram's schema, and client messages decoded; plain values.
public enum ServerMessages {
    /// The model named in `Results.metadata.model_info` and `Metadata`.
    public struct ModelInfo: Sendable, Equatable {
        public var name: String
        public var version: String
        public var arch: String
        /// A stable id for the model (Deepgram sends a UUID).
        public var uuid: String

        public init(name: String, version: String = "local", arch: String = "sttd") {
            self.name = name
            self.version = version
            self.arch = arch
            uuid = Self.uuid(for: name)
        }

        /// A name-based UUID (FNV-1a of the name spread over 16 bytes): stable across runs.
        static func uuid(for name: String) -> String {
            var hash: UInt64 = 0xcbf2_9ce4_8422_2325
            var bytes: [UInt8] = []
            for round in 0..<2 {
                for byte in Array(name.utf8) + [UInt8(round)] {
                    hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3
                }
                bytes += withUnsafeBytes(of: hash.bigEndian) { Array($0) }
            }
            let hex = bytes.map { String(format: "%02x", $0) }.joined()
            let parts = [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { range in
                String(
                    hex[
                        hex.index(
                            hex.startIndex, offsetBy: range.lowerBound)..<hex.index(
                                hex.startIndex, offsetBy: range.upperBound)])
            }
            return parts.joined(separator: "-")
        }
    }

    /// A client text message.
    enum ClientMessage: Sendable, Equatable {
        case keepAlive, finalize, closeStream
        /// Not a message this server knows: answered with an `Error` of variant `SchemaError`.
        case unknown(description: String)
    }

    static func decodeClient(_ text: String) -> ClientMessage {
        guard let data = text.data(using: .utf8),
            let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
        else { return .unknown(description: "the message is not a JSON object") }
        guard let type = object["type"] as? String else {
            return .unknown(description: "the message has no \"type\" field")
        }
        switch type {
        case "KeepAlive": return .keepAlive
        case "Finalize": return .finalize
        case "CloseStream": return .closeStream
        default:
            return .unknown(description: "unknown message type \"\(type)\"; known: KeepAlive, Finalize, CloseStream")
        }
    }

    /// Deepgram's answer to a client text message it cannot parse; the stream goes on.
    static func schemaError(description: String, original: String) -> String {
        json([
            "type": "Error", "variant": "SchemaError", "description": description,
            // Echoed for the client's debugging, bounded so a huge frame is not sent back.
            "message": String(original.prefix(1024)),
        ])
    }

    static func metadata(requestID: String, created: Date, duration: Double, model: ModelInfo) -> String {
        json([
            "type": "Metadata", "transaction_key": "deprecated", "request_id": requestID,
            // Deepgram sends the audio's SHA-256; sttd keeps no copy of the audio to hash.
            "sha256": "",
            "created": ISO8601DateFormatter().string(from: created), "duration": rounded(duration), "channels": 1,
            "models": [model.uuid],
            "model_info": [model.uuid: ["name": model.name, "version": model.version, "arch": model.arch]],
        ])
    }

    /// A `Results` message. Words get evenly spread timings over `start…end` (the engine gives
    /// none per word).
    static func results(
        transcript: String, start: Double, end: Double, isFinal: Bool, speechFinal: Bool, fromFinalize: Bool,
        requestID: String, model: ModelInfo
    ) -> String {
        let tokens = transcript.split(whereSeparator: \.isWhitespace).map(String.init)
        let duration = max(0, end - start)
        let step = tokens.isEmpty ? 0 : duration / Double(tokens.count)
        let words: [[String: Any]] = tokens.enumerated().map { index, token in
            [
                "word": token.lowercased().filter { $0.isLetter || $0.isNumber || $0 == "'" || $0 == "-" },
                "punctuated_word": token,
                "start": rounded(start + Double(index) * step), "end": rounded(start + Double(index + 1) * step),
                "confidence": 1.0,
            ]
        }
        return json([
            "type": "Results", "channel_index": [0, 1], "start": rounded(start), "duration": rounded(duration),
            "is_final": isFinal, "speech_final": speechFinal, "from_finalize": fromFinalize,
            "channel": [
                "alternatives": [
                    ["transcript": transcript, "confidence": transcript.isEmpty ? 0.0 : 1.0, "words": words]
                ]
            ],
            "metadata": [
                "request_id": requestID, "model_uuid": model.uuid,
                "model_info": ["name": model.name, "version": model.version, "arch": model.arch],
            ],
        ])
    }

    static func speechStarted(timestamp: Double) -> String {
        json(["type": "SpeechStarted", "channel": [0], "timestamp": rounded(timestamp)])
    }

    static func utteranceEnd(lastWordEnd: Double) -> String {
        json(["type": "UtteranceEnd", "channel": [0, 1], "last_word_end": rounded(lastWordEnd)])
    }

    static func rounded(_ seconds: Double) -> Double { (seconds * 1000).rounded() / 1000 }

    static func json(_ object: [String: Any]) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else {
            return "{}"
        }
        return String(decoding: data, as: UTF8.self)
    }
}

/// Turns a session's recognition events into the stream's messages, as Deepgram would send them
/// for the request: interims only when asked, `SpeechStarted` with `vad_events`, `UtteranceEnd`
/// with `utterance_end_ms`. Pure: the caller passes how much audio the stream has received.
struct ResultsTranslator: Sendable {
    let request: ListenRequest
    let requestID: String
    let model: ServerMessages.ModelInfo
    /// End of the last final, where the next result starts when the engine gives no times.
    private var lastFinalEnd = 0.0
    private var lastWordEnd = 0.0
    /// Words were sent since the last `UtteranceEnd`, and one is owed once their final is out.
    private var wordsSinceUtteranceEnd = false
    private var utteranceEndOwed = false

    init(request: ListenRequest, requestID: String, model: ServerMessages.ModelInfo) {
        self.request = request
        self.requestID = requestID
        self.model = model
    }

    mutating func messages(for event: RecognitionEvent, audioSeconds: Double) -> [String] {
        switch event {
        case .result(let result):
            guard result.isFinal || request.interimResults else { return [] }
            let start = result.audioStart ?? lastFinalEnd
            let end = max(start, result.audioEnd ?? audioSeconds)
            var messages = [
                ServerMessages.results(
                    transcript: result.text, start: start, end: end, isFinal: result.isFinal,
                    // The engine's finals end an utterance at a pause (its own endpointing); a
                    // flush is not one. With endpointing off Deepgram never says speech_final.
                    speechFinal: result.isFinal && !result.fromFinalize && request.endpointing != nil,
                    fromFinalize: result.fromFinalize, requestID: requestID, model: model)
            ]
            if result.isFinal {
                lastFinalEnd = end
                if !result.text.isEmpty {
                    lastWordEnd = end
                    wordsSinceUtteranceEnd = true
                }
                if utteranceEndOwed, let message = utteranceEnd() { messages.append(message) }
            }
            return messages
        case .speechActivity(true):
            utteranceEndOwed = false
            return request.vadEvents ? [ServerMessages.speechStarted(timestamp: audioSeconds)] : []
        case .speechActivity(false):
            // Sent after the utterance's last final, so clients that close an utterance on it
            // have its words.
            guard request.utteranceEndMilliseconds != nil else { return [] }
            if let message = utteranceEnd() { return [message] }
            utteranceEndOwed = true
            return []
        case .reconnecting, .fellBack:
            return []
        }
    }

    private mutating func utteranceEnd() -> String? {
        guard request.utteranceEndMilliseconds != nil, wordsSinceUtteranceEnd else { return nil }
        wordsSinceUtteranceEnd = false
        utteranceEndOwed = false
        return ServerMessages.utteranceEnd(lastWordEnd: lastWordEnd)
    }
}
