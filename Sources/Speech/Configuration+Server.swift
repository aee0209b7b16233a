import ConfigFile
import Foundation
import Recognition

extension Configuration {
    /// The `[server]` table: the local Deepgram-compatible `/v1/listen` server.
    public struct Server: Sendable, Equatable {
        /// `HOST:PORT` (`[::1]:PORT` for IPv6; port 0 picks a free one); empty: no server.
        public var listen = ""
        /// The key clients must present; empty: none (allowed on loopback only).
        public var apiKeyFile = ""
        /// PEM certificate chain and private key for wss://; both or neither.
        public var tlsCert = ""
        public var tlsKey = ""
        /// Open streams at most; one more gets HTTP 429.
        public var maxStreams = 4
        /// The web pages that may use the server. A browser sends its page's origin with every
        /// handshake, so any other page (and every page, when this is empty) gets HTTP 403; local
        /// programs send none and are not affected.
        public var allowedOrigins: [WebOrigin] = []

        public var isEnabled: Bool { !listen.isEmpty }

        /// `listen` split into host and port, nil when it is not `HOST:PORT`.
        public var address: (host: String, port: Int)? { Self.parseListen(listen) }

        public static func parseListen(_ text: String) -> (host: String, port: Int)? {
            guard let colon = text.lastIndex(of: ":") else { return nil }
            var host = String(text[..<colon])
            guard let port = Int(text[text.index(after: colon)...]), (0...65_535).contains(port) else { return nil }
            if host.hasPrefix("[") && host.hasSuffix("]") {
                host = String(host.dropFirst().dropLast())
            } else if host.contains(":") {
                return nil  // an IPv6 address needs brackets: [::1]:8765
            }
            guard !host.isEmpty else { return nil }
            return (host, port)
        }
    }

    mutating func readServer(_ reader: inout TableReader) throws(ConfigurationError) {
        guard let serverTable = try reader.table("server") else { return }
        var serverReader = TableReader(table: serverTable, prefix: "server.")
        server.listen = try serverReader.string("listen", default: server.listen)
        server.apiKeyFile = try serverReader.string("api_key_file", default: server.apiKeyFile)
        server.tlsCert = try serverReader.string("tls_cert", default: server.tlsCert)
        server.tlsKey = try serverReader.string("tls_key", default: server.tlsKey)
        server.maxStreams = try serverReader.count(
            "max_streams", default: server.maxStreams, range: Self.maxStreamsRange)
        server.allowedOrigins = try Self.origins(serverReader.stringList("allowed_origins"))
        try serverReader.refuseUnknownKeys()
        try Self.checkServer(server)
    }

    /// `[server]`: a parseable `listen`, TLS files in pairs, and the loopback rule: plain ws:// and
    /// key-less access on loopback only; any other address needs TLS and an API key.
    static func checkServer(_ server: Server) throws(ConfigurationError) {
        guard server.isEnabled else { return }
        guard let (host, _) = server.address else {
            throw ConfigurationError(
                "server.listen = \"\(server.listen)\" is not HOST:PORT; use one like \"127.0.0.1:8765\" (or \"[::1]:8765\")."
            )
        }
        guard server.tlsCert.isEmpty == server.tlsKey.isEmpty else {
            throw ConfigurationError("server.tls_cert and server.tls_key go together: set both for wss://, or neither.")
        }
        if !isLoopback(host) && (server.tlsCert.isEmpty || server.apiKeyFile.isEmpty) {
            throw ConfigurationError(
                "server.listen = \"\(server.listen)\" is not a loopback address: the server speaks plain ws:// without a key on loopback only (127.0.0.0/8, ::1, localhost). To listen on \(host), set server.tls_cert, server.tls_key and server.api_key_file."
            )
        }
    }

    /// `allowed_origins`: each entry a web origin as browsers send it. `null` is refused: browsers
    /// send it for sandboxed frames and local files, so any page could present it.
    static func origins(_ entries: [String]) throws(ConfigurationError) -> [WebOrigin] {
        var origins: [WebOrigin] = []
        for entry in entries {
            if entry.trimmingCharacters(in: .whitespaces).lowercased() == "null" {
                throw ConfigurationError(
                    "server.allowed_origins has \"null\", which any web page can send (from a sandboxed frame or a local file), so it cannot be allowed; list the origins of the pages that should use the server, like \"https://example.org\"."
                )
            }
            guard let origin = WebOrigin(entry) else {
                throw ConfigurationError(
                    "server.allowed_origins has \"\(entry)\", which is not a web origin; write each as scheme://host[:port] with no path or trailing slash, like \"https://example.org\" or \"http://localhost:8080\"."
                )
            }
            origins.append(origin)
        }
        return origins
    }
}
