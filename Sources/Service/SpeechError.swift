import Capture
import DBus
import Recognition

/// An error of the speech service, mapped once to an `io.github.sttd.Speech1.Error.*` name.
public struct SpeechError: Error, Sendable, Equatable, CustomStringConvertible, DBusErrorRepresentable {
    private enum Code: String, Sendable {
        case notAuthorized = "NotAuthorized"
        case microphoneUnavailable = "MicrophoneUnavailable"
        case backendUnavailable = "BackendUnavailable"
        case invalidConfiguration = "InvalidConfiguration"
        case busy = "Busy"
        case `internal` = "Internal"
    }

    public static let prefix = "io.github.sttd.Speech1.Error."

    private let code: Code
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

    /// The D-Bus error name, e.g. `io.github.sttd.Speech1.Error.MicrophoneUnavailable`.
    public var name: String { Self.prefix + code.rawValue }
    public var description: String { "\(name): \(message)" }
    public var dbusError: DBusError { DBusError(name: name, message: message) }

    public init(_ error: CaptureError) {
        self.init(.microphoneUnavailable, error.message)
    }

    public init(_ error: RecognitionError) {
        switch error.kind {
        case .notAuthorized: self.init(.notAuthorized, error.message)
        case .backendUnavailable: self.init(.backendUnavailable, error.message)
        case .invalidConfiguration: self.init(.invalidConfiguration, error.message)
        case .failed: self.init(.internal, error.message)
        }
    }
}
