import Recognition
import Speech
import Testing

@Suite("Configuration: [server]")
struct ServerConfigurationTests {
    @Test func offByDefault() throws {
        let configuration = try Configuration(toml: "")
        #expect(!configuration.server.isEnabled)
        #expect(configuration.server.maxStreams == 4)
        #expect(configuration.server.allowedOrigins.isEmpty, "no web page may use the server")
    }

    @Test func readsEveryKey() throws {
        let configuration = try Configuration(
            toml: """
                [server]
                listen = "[::1]:0"
                api_key_file = "/run/key"
                tls_cert = "/etc/cert.pem"
                tls_key = "/etc/key.pem"
                max_streams = 2
                allowed_origins = ["https://example.org", "HTTP://LocalHost:8080"]
                """)
        #expect(configuration.server.listen == "[::1]:0")
        #expect(configuration.server.address?.host == "::1")
        #expect(configuration.server.address?.port == 0)
        #expect(configuration.server.apiKeyFile == "/run/key")
        #expect(configuration.server.tlsCert == "/etc/cert.pem")
        #expect(configuration.server.tlsKey == "/etc/key.pem")
        #expect(configuration.server.maxStreams == 2)
        #expect(
            configuration.server.allowedOrigins.map(\.description) == ["https://example.org", "http://localhost:8080"])
    }

    @Test(arguments: [
        ("https://example.org", "https://example.org"), ("http://localhost:8080", "http://localhost:8080"),
        (" http://127.0.0.1:5173 ", "http://127.0.0.1:5173"), ("http://[::1]:3000", "http://[::1]:3000"),
        ("https://Example.ORG:443", "https://example.org"), ("http://example.org:8443", "http://example.org:8443"),
        (
            "moz-extension://0b2e6f4e-5d1c-4f7a-9c3e-2a1b3c4d5e6f",
            "moz-extension://0b2e6f4e-5d1c-4f7a-9c3e-2a1b3c4d5e6f"
        ),
    ])
    func takesWebOrigins(_ entry: String, _ origin: String) throws {
        let list = try Configuration(toml: "[server]\nallowed_origins = [\"\(entry)\"]\n")
        #expect(list.server.allowedOrigins.map(\.description) == [origin])
        // A single string is a list of one.
        let single = try Configuration(toml: "[server]\nallowed_origins = \"\(entry)\"\n")
        #expect(single.server.allowedOrigins == list.server.allowedOrigins)
    }

    @Test(arguments: [
        "*", "example.org", "https://example.org/", "https://example.org/app", "https://user@example.org",
        "https://example.org?x=1", "https://example.org#top", "https://example.org:99999", "https://example.org:",
        "https://", "://example.org", "https://exa mple.org", "file:///home/you/page.html", "http://[::1",
        "http://::1:3000", "",
    ])
    func refusesWhatIsNotAWebOrigin(_ entry: String) {
        let error = #expect(throws: ConfigurationError.self) {
            try Configuration(toml: "[server]\nallowed_origins = [\"https://example.org\", \"\(entry)\"]\n")
        }
        let message = error?.message ?? ""
        #expect(message.contains("server.allowed_origins has \"\(entry)\""), "\(message)")
        #expect(message.contains("scheme://host[:port]") && message.contains("\"https://example.org\""), "\(message)")
    }

    /// Browsers send `Origin: null` from sandboxed frames and local files: any page can.
    @Test(arguments: ["null", "NULL", " null "])
    func refusesNull(_ entry: String) {
        let error = #expect(throws: ConfigurationError.self) {
            try Configuration(toml: "[server]\nallowed_origins = [\"\(entry)\"]\n")
        }
        let message = error?.message ?? ""
        #expect(
            message.contains("server.allowed_origins has \"null\"") && message.contains("any web page"), "\(message)")
    }

    @Test(arguments: ["allowed_origins = [1]", "allowed_origins = true", "allowed_origin = [\"https://example.org\"]"])
    func refusesOriginsOfTheWrongTypeOrKey(_ line: String) {
        let error = #expect(throws: ConfigurationError.self) { try Configuration(toml: "[server]\n\(line)\n") }
        #expect(error?.message.contains("server.allowed_origin") == true, "\(error?.message ?? "")")
    }

    @Test(arguments: ["127.0.0.1:8765", "localhost:0", "[::1]:8765", "127.1.2.3:9000"])
    func loopbackNeedsNeitherTLSNorKey(_ listen: String) throws {
        let configuration = try Configuration(toml: "[server]\nlisten = \"\(listen)\"\n")
        #expect(configuration.server.isEnabled)
    }

    @Test(arguments: ["0.0.0.0:8765", "192.168.1.5:8765", "[::]:8765", "example.org:80", "127.0.0.1.evil.example:1"])
    func otherAddressesNeedTLSAndAKey(_ listen: String) throws {
        let error = #expect(throws: ConfigurationError.self) {
            try Configuration(toml: "[server]\nlisten = \"\(listen)\"\n")
        }
        #expect(error?.message.contains("loopback") == true, "\(error?.message ?? "")")
        // With TLS only, still refused; with TLS and a key, allowed.
        #expect(throws: ConfigurationError.self) {
            try Configuration(toml: "[server]\nlisten = \"\(listen)\"\ntls_cert = \"c\"\ntls_key = \"k\"\n")
        }
        let allowed = try Configuration(
            toml: "[server]\nlisten = \"\(listen)\"\ntls_cert = \"c\"\ntls_key = \"k\"\napi_key_file = \"f\"\n")
        #expect(allowed.server.isEnabled)
    }

    @Test(arguments: [
        "[server]\nlisten = \"8765\"\n", "[server]\nlisten = \"::1:8765\"\n",
        "[server]\nlisten = \"127.0.0.1:70000\"\n",
        "[server]\nlisten = \"127.0.0.1:8765\"\ntls_cert = \"c\"\n", "[server]\nmax_streams = 0\n",
        "[server]\nlisten = 8765\n", "[server]\nport = 1\n",
    ])
    func refusesBadValues(_ toml: String) {
        #expect(throws: ConfigurationError.self) { try Configuration(toml: toml) }
    }
}
