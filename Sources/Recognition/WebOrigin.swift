import Foundation

/// A web origin, `scheme://host[:port]`, as a browser sends it in `Origin`. Two are the same
/// when scheme and host match without regard to case and the port matches exactly; a scheme's
/// default port written out (`https://example.org:443`) is the origin without it, as browsers
/// never send it.
public struct WebOrigin: Sendable, Hashable, CustomStringConvertible {
    /// Lowercase.
    public let scheme: String
    /// Lowercase; an IPv6 address keeps its brackets.
    public let host: String
    /// Nil when it is the scheme's default (or none was given).
    public let port: Int?

    private static let defaultPorts = ["http": 80, "https": 443, "ws": 80, "wss": 443]

    /// Parses `text`, trimmed of surrounding whitespace. Nil for anything but
    /// `scheme://host[:port]`: a path (even a lone `/`), query, fragment or user part, and the
    /// opaque origin `null`.
    public init?(_ text: String) {
        let trimmed = text.trimmingCharacters(in: .whitespaces)
        guard let separator = trimmed.range(of: "://") else { return nil }
        let scheme = trimmed[..<separator.lowerBound].lowercased()
        let authority = trimmed[separator.upperBound...].lowercased()
        guard let first = scheme.first, first.isASCII, first.isLetter,
            scheme.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+-.".contains($0)) })
        else { return nil }

        let host: Substring
        let portText: Substring?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[...close]
            let rest = authority[authority.index(after: close)...]
            guard rest.isEmpty || rest.hasPrefix(":") else { return nil }
            portText = rest.isEmpty ? nil : rest.dropFirst()
            let address = host.dropFirst().dropLast()
            guard !address.isEmpty, address.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else {
                return nil
            }
        } else {
            let parts = authority.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else { return nil }
            host = parts[0]
            portText = parts.count == 2 ? parts[1] : nil
            guard !host.isEmpty,
                host.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-._".contains($0)) })
            else { return nil }
        }
        var port: Int?
        if let portText {
            guard (1...5).contains(portText.count), portText.allSatisfy({ $0.isASCII && $0.isNumber }),
                let number = Int(portText), number <= 65_535
            else { return nil }
            port = number == Self.defaultPorts[scheme] ? nil : number
        }
        self.scheme = scheme
        self.host = String(host)
        self.port = port
    }

    public var description: String { "\(scheme)://\(host)\(port.map { ":\($0)" } ?? "")" }
}
