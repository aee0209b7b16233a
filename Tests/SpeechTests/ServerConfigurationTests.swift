import Speech
import Testing

@Suite("Configuration: [server]")
struct ServerConfigurationTests {
    @Test func offByDefault() throws {
        let configuration = try Configuration(toml: "")
        #expect(!configuration.server.isEnabled)
        #expect(configuration.server.maxStreams == 4)
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
                """)
        #expect(configuration.server.listen == "[::1]:0")
        #expect(configuration.server.address?.host == "::1")
        #expect(configuration.server.address?.port == 0)
        #expect(configuration.server.apiKeyFile == "/run/key")
        #expect(configuration.server.tlsCert == "/etc/cert.pem")
        #expect(configuration.server.tlsKey == "/etc/key.pem")
        #expect(configuration.server.maxStreams == 2)
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
