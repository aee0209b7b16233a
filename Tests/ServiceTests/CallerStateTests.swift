import DBus
import Foundation
import SpeechAPI
import TestSupport
import Testing

@testable import DBus
@testable import Service
@testable import SpeechBus

/// What sttd keeps about its callers, with real short-lived callers and a forging peer.
@Suite("Per-caller state", .serialized, .timeLimit(.minutes(3)))
struct CallerStateTests {
    @Test func callersThatLeaveLeaveNothingBehind() async throws {
        let sttd = try await InProcessSttd()
        defer { sttd.cleanUp() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            let summary = try PythonClient.run("peers.py", [sttd.bus.address, "300"], timeout: 300)
            #expect(summary["peers"] as? Int == 300)
            // Each caller was identified (or found gone) and has left: nothing about it is kept.
            let consent = sttd.application.consent
            let object = sttd.application.adapter.object
            try await waitFor(
                "nothing kept about the callers; kept: \(consent.identities.count) identities, \(consent.identities.readingCount) reads, \(object.sendersWaiting) waiting callers",
                timeout: .seconds(60)
            ) {
                consent.identities.count == 0 && consent.identities.readingCount == 0 && object.sendersWaiting == 0
            }
            await sttd.application.shutDown()
            try await group.waitForAll()
        }
    }

    @Test func onlyTheBusCanSayThatACallerLeft() async throws {
        let sttd = try await InProcessSttd()
        defer { sttd.cleanUp() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await sttd.application.run() }
            let identities = sttd.application.consent.identities
            let properties = "org.freedesktop.DBus.Properties"
            func readState(_ connection: DBusConnection) async throws {
                _ = try await connection.call(
                    destination: SpeechAPI.busName, path: SpeechAPI.objectPath, interface: properties, member: "Get",
                    arguments: [.string(SpeechAPI.interface), .string("State")])
            }
            try await readState(sttd.client)
            #expect(identities.identity(of: sttd.client.uniqueName) == .host)
            // Another peer tells sttd, to it alone, that the client has left the bus.
            let dbusSend = try requireTool("dbus-send", package: "dbus-bin")
            let client = sttd.client.uniqueName
            let forged = try await run(
                dbusSend,
                [
                    "--bus=\(sttd.bus.address)", "--type=signal", "--dest=\(sttd.application.connection.uniqueName)",
                    "/org/freedesktop/DBus", "org.freedesktop.DBus.NameOwnerChanged", "string:\(client)",
                    "string:\(client)", "string:",
                ])
            #expect(forged.status == 0, "\(forged.stderr)")
            // A caller that really leaves after: once sttd has forgotten it, it has had the forged signal too.
            let leaving = try await DBusConnection.connect(to: .address(sttd.bus.address))
            try await readState(leaving)
            let leavingName = leaving.uniqueName
            #expect(identities.identity(of: leavingName) == .host)
            leaving.close()
            try await waitFor("sttd to forget the caller that left", timeout: .seconds(20)) {
                identities.identity(of: leavingName) == nil
            }
            #expect(identities.identity(of: client) == .host, "sttd believed a peer that said the client had left")
            await sttd.application.shutDown()
            try await group.waitForAll()
        }
    }
}
