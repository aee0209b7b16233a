import Capture
import Recognition

/// An error of the speech core; the bus adapter maps its code once to an
/// `io.github.sttd.Speech1.Error.*` name.
public struct SpeechError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The kinds of failure the contract names (§1 Errors); the raw value is the error name's last part.
    public enum Code: String, Sendable, CaseIterable {
        case notAuthorized = "NotAuthorized"
        case microphoneUnavailable = "MicrophoneUnavailable"
        case backendUnavailable = "BackendUnavailable"
        case invalidConfiguration = "InvalidConfiguration"
        case busy = "Busy"
        case `internal` = "Internal"
    }

    public let code: Code
    /// What went wrong and what to do about it, for a person.
    public let message: String

    private init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    public static func notAuthorized(_ message: String) -> SpeechError { SpeechError(.notAuthorized, message) }
    public static func microphoneUnavailable(_ message: String) -> SpeechError {
        SpeechError(.microphoneUnavailable, message)
    }
    public static func backendUnavailable(_ message: String) -> SpeechError {
        SpeechError(.backendUnavailable, message)
    }
    public static func invalidConfiguration(_ message: String) -> SpeechError {
        SpeechError(.invalidConfiguration, message)
    }
    public static func busy(_ message: String) -> SpeechError { SpeechError(.busy, message) }
    public static func `internal`(_ message: String) -> SpeechError { SpeechError(.internal, message) }

    public var description: String { "\(code.rawValue): \(message)" }

    /// A session the recognizer ended although nobody stopped it.
    public static let endedByRecognizer = backendUnavailable(
        "The speech recognizer ended the session by itself (sttd's log says more); what was recognized is kept. Start dictation again to go on."
    )

    public init(_ error: CaptureError) {
        self.init(.microphoneUnavailable, error.message)
    }

    public init(_ error: RecognitionError) {
        switch error.kind {
        case .notAuthorized: self.init(.notAuthorized, error.message)
        case .backendUnavailable: self.init(.backendUnavailable, error.message)
        case .invalidConfiguration: self.init(.invalidConfiguration, error.message)
        case .busy: self.init(.busy, error.message)
        case .failed: self.init(.internal, error.message)
        }
    }
}
