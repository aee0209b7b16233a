import Foundation

/// A secret API key. It never prints: `description` is redacted, so it cannot reach a log line,
/// an error message or a D-Bus reply by accident.
public struct APIKey: Sendable, Equatable, CustomStringConvertible, CustomDebugStringConvertible {
    fileprivate let value: String

    public init(_ value: String) { self.value = value }

    public var description: String { "<redacted>" }
    public var debugDescription: String { "<redacted>" }

    /// The `Authorization` header value.
    var authorizationHeader: String { "Token \(value)" }
    /// The `Sec-WebSocket-Protocol` header value (SubQ's way).
    var subprotocolHeader: String { "token, \(value)" }

    /// Whether `candidate` is this key, compared in time independent of where they differ (a
    /// server checking clients' keys must not leak how much of a guess was right).
    public func matches(_ candidate: String) -> Bool {
        let expected = Array(value.utf8)
        let given = Array(candidate.utf8)
        var difference = UInt8(expected.count == given.count ? 0 : 1)
        for index in expected.indices {
            difference |= expected[index] ^ (index < given.count ? given[index] : 0)
        }
        return difference == 0 && !expected.isEmpty
    }

    /// Removes every occurrence of the key from a text (for server-supplied error bodies).
    func redact(_ text: String) -> String {
        value.isEmpty ? text : text.replacingOccurrences(of: value, with: "<redacted>")
    }

    /// Where a key comes from, in order: `api_key_file`, the systemd credential `api-key`,
    /// the environment variable `STTD_API_KEY`. Nil if none is set.
    public static func load(keyFile: String, environment: [String: String]) throws(RecognitionError) -> APIKey? {
        if !keyFile.isEmpty { return try read(keyFile, what: "api_key_file") }
        if let directory = environment["CREDENTIALS_DIRECTORY"], !directory.isEmpty,
            FileManager.default.fileExists(atPath: "\(directory)/api-key")
        {
            // systemd makes credentials readable by the service only; no mode check needed.
            return try read("\(directory)/api-key", what: "the systemd credential api-key", checkMode: false)
        }
        if let value = environment["STTD_API_KEY"]?.trimmingCharacters(in: .whitespacesAndNewlines), !value.isEmpty {
            return APIKey(value)
        }
        return nil
    }

    private static func read(_ path: String, what: String, checkMode: Bool = true) throws(RecognitionError) -> APIKey {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw RecognitionError(
                .invalidConfiguration, "Cannot read \(what) \(path): \(String(cString: strerror(errno))).")
        }
        if checkMode && info.st_mode & 0o077 != 0 {
            throw RecognitionError(
                .invalidConfiguration,
                "The key file \(path) is readable by other users; refusing to use it. Run `chmod 600 \(path)`.")
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw RecognitionError(.invalidConfiguration, "Cannot read \(what) \(path) as text.")
        }
        let value = text.trimmingCharacters(in: .whitespacesAndNewlines)
        guard !value.isEmpty else { throw RecognitionError(.notAuthorized, "The key file \(path) is empty.") }
        return APIKey(value)
    }
}
