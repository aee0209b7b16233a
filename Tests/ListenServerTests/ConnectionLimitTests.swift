import Foundation
import TestSupport
import Testing

@testable import ListenServer
@testable import Recognition

/// An engine that cannot take another session now (pocketsphinx while the user dictates), or
/// cannot start one at all.
final class RefusingRecognizer: Recognizer {
    let error: RecognitionError

    init(_ error: RecognitionError) { self.error = error }

    func authorize() async -> (RecognizerAuthorization, RecognitionError?) { (.authorized, nil) }

    func startStream(_ options: StreamOptions, events: any RecognitionEventSink) async throws(RecognitionError)
        -> any RecognitionStream
    {
        throw error
    }
}

/// What clients that hold sockets open, or an engine that is busy, can do to the server: never
/// more than a bounded number of descriptors, never a session ended or an upgrade it cannot serve.
@Suite("The local /v1/listen server's limits", .timeLimit(.minutes(2)))
struct ListenServerLimitTests {
    @Test func theDefaultsStayFarBelowTheDescriptorLimit() {
        let settings = ListenServerSettings(host: "127.0.0.1", port: 0)
        #expect(settings.handshakeTimeout == .seconds(5))
        #expect(settings.maxConnections <= 128)
        #expect(settings.maxConnections > 64, "room for max_streams' highest value and handshakes besides")
    }

    /// Connections that send nothing, half a request head, or a head announcing a body they never
    /// send are closed once the handshake timeout has passed; then a real client gets its stream.
    @Test func connectionsThatDoNotCompleteTheHandshakeAreClosed() async throws {
        let settings = ListenServerSettings(host: "127.0.0.1", port: 0, handshakeTimeout: .seconds(1))
        try await withServer(settings, recognizer: FakeRecognizer()) { server in
            let silent = try IdleSockets(port: server.port, count: 3)
            let partial = try IdleSockets(
                port: server.port, count: 2, request: "GET /v1/listen HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            let withBody = try IdleSockets(
                port: server.port, count: 2,
                request: upgradeRequest("/v1/listen", headers: ["Content-Length: 100"]) + "not all of it")
            #expect(await silent.waitUntilClosed() == 3)
            #expect(await partial.waitUntilClosed() == 2)
            #expect(await withBody.waitUntilClosed() == 2)
            try await waitFor { server.openConnections == 0 }

            try await expectAStreamIsServed(by: server)
        }
    }

    /// At `maxConnections` open, a new connection is accepted and closed at once (a WebSocket
    /// client too); once one closes, a client gets its stream again.
    @Test func atTheConnectionCapNewConnectionsAreClosedAtOnce() async throws {
        let settings = ListenServerSettings(
            host: "127.0.0.1", port: 0, maxConnections: 3, handshakeTimeout: .seconds(120))
        try await withServer(settings, recognizer: FakeRecognizer()) { server in
            let holders = try IdleSockets(port: server.port, count: 3)
            try await waitFor { server.openConnections == 3 }
            let extra = try IdleSockets(port: server.port, count: 5)
            #expect(await extra.waitUntilClosed() == 5)
            await #expect(throws: (any Error).self) { _ = try await ListenClient.connect(server) }
            #expect(server.openConnections == 3)
            #expect(await holders.waitUntilClosed(timeout: .milliseconds(200)) == 0, "the first three stay open")

            holders.closeAll()
            try await waitFor { server.openConnections == 0 }
            try await expectAStreamIsServed(by: server)
        }
    }

    /// An engine busy with a session it cannot share gets the handshake refused with 503 and
    /// `Retry-After`, saying why, instead of an upgrade; one that cannot start says so with 503.
    @Test func anEngineThatCannotTakeTheStreamIsAnswered503() async throws {
        let busy = RefusingRecognizer(
            RecognitionError(
                .busy, "The offline engine (pocketsphinx) decodes one session at a time, and dictation is using it now."
            ))
        try await withServer(recognizer: busy) { server in
            let refusal = await #expect(throws: HandshakeRefusal.self) { _ = try await ListenClient.connect(server) }
            #expect(refusal?.status == 503)
            #expect(refusal?.header("Retry-After") == "5")
            #expect(refusal?.header("dg-error")?.contains("dictation is using it") == true)
            #expect(refusal?.body.contains("dictation is using it") == true)
            try await waitFor { server.openConnections == 0 && server.openStreams == 0 }
        }
        let broken = RefusingRecognizer(RecognitionError(.backendUnavailable, "The offline model is not loaded."))
        try await withServer(recognizer: broken) { server in
            let refusal = await #expect(throws: HandshakeRefusal.self) { _ = try await ListenClient.connect(server) }
            #expect(refusal?.status == 503)
            #expect(refusal?.header("Retry-After") == nil)
            #expect(refusal?.header("dg-error")?.contains("not loaded") == true)
        }
    }
}
