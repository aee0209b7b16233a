import Foundation
import TestSupport
import Testing

@testable import ListenServer
@testable import Recognition

/// A web page the user visits can open a WebSocket to loopback; its browser always says which
/// page it is (`Origin`). Only pages listed in `allowed_origins` get the engine; local programs
/// send no Origin and are served as before.
@Suite("The local /v1/listen server and web pages", .timeLimit(.minutes(2)))
struct ListenServerOriginTests {
    static let listed = [WebOrigin("https://notes.example")!, WebOrigin("http://localhost:8080")!]

    /// Refused with 403 and Deepgram's error body, before a stream slot or a session: with the
    /// one slot taken, the answer is still 403 (not 429), and the engine started no other session.
    @Test func aPageWhoseOriginIsNotListedIsRefused403AndOpensNothing() async throws {
        let recognizer = FakeRecognizer()
        // The holder sends no audio: a busy machine must not reach the idle timeout before the end.
        let settings = ListenServerSettings(
            host: "127.0.0.1", port: 0, maxStreams: 1, allowedOrigins: Set(Self.listed), idleTimeout: .seconds(600))
        try await withServer(settings, recognizer: recognizer) { server in
            let holder = try await ListenClient.connect(server)
            for origin in [
                "http://evil.example", "null", "https://notes.example.evil.example", "http://notes.example",
                "https://notes.example:8443", "http://localhost:8081", "https://notes.example/",
            ] {
                let response = try await rawHTTP(
                    port: server.port, upgradeRequest("/v1/listen", headers: ["Origin: \(origin)"]))
                #expect(response.status == 403, "\(origin)")
                let error = response.headers["dg-error"] ?? ""
                #expect(
                    error.contains("\"\(origin)\"") && error.contains("add it to [server] allowed_origins"), "\(error)")
                let body = try #require(
                    try JSONSerialization.jsonObject(with: Data(response.body.utf8)) as? [String: Any], "\(origin)")
                #expect(body["err_code"] as? String == "INSUFFICIENT_PERMISSIONS")
                #expect(body["err_msg"] as? String == error)
                #expect(body["request_id"] as? String == response.headers["dg-request-id"])
            }
            // A WebSocket client gets the same answer.
            let refusal = await #expect(throws: HandshakeRefusal.self) {
                _ = try await ListenClient.connect(server, headers: [("Origin", "http://evil.example")])
            }
            #expect(refusal?.status == 403)
            #expect(recognizer.stats.value.started == 1, "only the holder's session")
            #expect(server.openStreams == 1)
            holder.connection.abort()
        }
    }

    /// The server's key does not stand in for the origin: a page holding it is refused too.
    @Test func aPageIsRefusedEvenWithTheServersKey() async throws {
        let key = "server-key-0123456789"
        let settings = ListenServerSettings(host: "127.0.0.1", port: 0, key: APIKey(key))
        try await withServer(settings, recognizer: FakeRecognizer()) { server in
            let response = try await rawHTTP(
                port: server.port,
                upgradeRequest(
                    "/v1/listen", headers: ["Origin: http://evil.example", "Sec-WebSocket-Protocol: token, \(key)"]))
            #expect(response.status == 403)
            #expect(!response.body.contains(key) && response.headers["dg-error"]?.contains(key) == false)
        }
    }

    /// A local program sends no Origin, and gets its whole stream.
    @Test func aClientWithoutOriginIsServed() async throws {
        try await withServer(recognizer: FakeRecognizer()) { server in
            try await expectAStreamIsServed(by: server, headers: [])
        }
    }

    /// A listed origin is served: scheme and host in any case, surrounding spaces, a default port
    /// written out.
    @Test(arguments: [
        "https://notes.example", "HTTPS://Notes.EXAMPLE", "https://notes.example:443", "http://localhost:8080",
    ])
    func aPageWhoseOriginIsListedIsServed(_ origin: String) async throws {
        let settings = ListenServerSettings(host: "127.0.0.1", port: 0, allowedOrigins: Set(Self.listed))
        try await withServer(settings, recognizer: FakeRecognizer()) { server in
            try await expectAStreamIsServed(by: server, headers: [("Origin", origin)])
        }
    }

    /// The rule itself: spaces around the value and the case of scheme and host do not matter,
    /// the port does, and every Origin a request carries must be listed.
    @Test func originsCompareWithoutCaseOrSpacesButWithTheirPort() {
        func refusal(_ origins: [String]) -> ListenRefusal? {
            let headers = origins.map { ("Origin", $0) }
            switch ListenHandshake.evaluate(
                uri: "/v1/listen", headers: headers, key: nil, allowedOrigins: Set(Self.listed))
            {
            case .success: return nil
            case .failure(let refusal): return refusal
            }
        }
        #expect(refusal([]) == nil)
        #expect(refusal([" HTTPS://Notes.Example\t"]) == nil)
        #expect(refusal(["http://LOCALHOST:8080"]) == nil)
        #expect(refusal(["http://localhost"])?.status == 403)
        #expect(refusal(["https://notes.example:444"])?.status == 403)
        #expect(refusal([""])?.status == 403)
        #expect(refusal(["https://notes.example", "http://evil.example"]) == .originNotAllowed("http://evil.example"))
        #expect(refusal([" http://evil.example "]) == .originNotAllowed("http://evil.example"))
    }
}
