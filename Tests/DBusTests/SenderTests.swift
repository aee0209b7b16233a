import Foundation
import Synchronization
import TestSupport
import Testing

@testable import DBus

/// Collects a signal stream in arrival order.
final class Collected: Sendable {
    private let signals = Mutex<[DBusSignalMessage]>([])

    /// Collects until the stream ends (its connection closes).
    init(_ stream: AsyncStream<DBusSignalMessage>) {
        Task { [self] in
            for await signal in stream { signals.withLock { $0.append(signal) } }
        }
    }

    var all: [DBusSignalMessage] { signals.withLock { $0 } }

    /// Waits (bounded) until `count` signals have come; throws ``WaitTimedOut`` if they do not.
    func wait(for count: Int, fileID: String = #fileID, line: Int = #line) async throws {
        try await waitFor("\(count) signals (\(all.count) came)", timeout: .seconds(20), fileID: fileID, line: line) {
            all.count >= count
        }
    }
}

/// Sends a signal with `dbus-send`, a client of its own: to `destination` alone, or broadcast.
func sendSignal(
    bus: String, destination: String?, path: String, interface: String, member: String, _ arguments: [String]
) async throws {
    let dbusSend = try requireTool("dbus-send", package: "dbus-bin")
    let result = try await run(
        dbusSend,
        ["--bus=\(bus)", "--type=signal"] + (destination.map { ["--dest=\($0)"] } ?? []) + [
            path, "\(interface).\(member)",
        ] + arguments)
    guard result.status == 0 else { throw MissingPrerequisite(description: "dbus-send failed: \(result.stderr)") }
}

@Suite("Signals from their sender only; call timeouts", .serialized, .timeLimit(.minutes(1)))
struct SenderTests {
    @Test func subSecondCallTimeoutsAreKept() async throws {
        #expect(DBusConnection.milliseconds(.milliseconds(500)) == 500)
        #expect(DBusConnection.milliseconds(.milliseconds(1500)) == 1500)
        #expect(DBusConnection.milliseconds(.microseconds(1)) == 1, "rounded up, never 0 (at once)")
        #expect(DBusConnection.milliseconds(.microseconds(2500)) == 3)
        #expect(DBusConnection.milliseconds(.seconds(25)) == 25_000)
        #expect(DBusConnection.milliseconds(.seconds(Int64.max)) == Int32.max)
        // A call with half a second to answer in is answered (a timeout cut to 0 s fails at once).
        let fixture = try await EchoFixture()
        for _ in 0..<5 {
            let reply = try await fixture.client.call(
                destination: "test.Echo", path: "/test/Echo", interface: "test.Echo", member: "Echo",
                arguments: [.variant(.uint32(5))], timeout: .milliseconds(500))
            #expect(reply == [.variant(.uint32(5))])
        }
    }

    @Test func theBusSignalsOnlyTheBusCanSend() async throws {
        let fixture = try await EchoFixture()
        let bus = try Collected(
            await fixture.client.signals(
                sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged"))
        // A peer tells the client alone that a name changed owner.
        try await sendSignal(
            bus: fixture.bus.address, destination: fixture.client.uniqueName, path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
            ["string:\(fixture.server.uniqueName)", "string:\(fixture.server.uniqueName)", "string:"])
        // Then a connection really leaves: the bus says so after the forged signal arrived.
        let leaving = try await DBusConnection.connect(to: .address(fixture.bus.address))
        let name = leaving.uniqueName
        leaving.close()
        try await waitFor("the bus to say that \(name) left", timeout: .seconds(20)) {
            bus.all.contains { $0.arguments.first == .string(name) && $0.arguments.last == .string("") }
        }
        #expect(
            !bus.all.contains { $0.arguments.first == .string(fixture.server.uniqueName) },
            "a forged NameOwnerChanged was taken: \(bus.all.map(\.arguments))")
        #expect(bus.all.allSatisfy { $0.sender == "org.freedesktop.DBus" })
    }

    @Test func aServicesSignalsComeFromWhoeverOwnsItsName() async throws {
        let fixture = try await EchoFixture()
        let pings = try Collected(
            await fixture.client.signals(sender: "test.Echo", interface: "test.Echo", member: "Ping"))
        // Another peer sends the client a Ping of its own, to it alone, then the service one.
        try await sendSignal(
            bus: fixture.bus.address, destination: fixture.client.uniqueName, path: "/test/Echo",
            interface: "test.Echo",
            member: "Ping", ["uint32:666"])
        fixture.object.emit("Ping", [.uint32(1)])
        try await pings.wait(for: 1)
        // The service goes; another takes its name: its signals count, the old owner's would not.
        fixture.server.close()
        await fixture.server.waitUntilDisconnected()
        let successor = try await DBusConnection.connect(to: .address(fixture.bus.address))
        defer { successor.close() }
        let object = try DBusObject(
            path: "/test/Echo",
            interfaces: [
                DBusInterface(name: "test.Echo", signals: [DBusSignal("Ping", arguments: [DBusArgument("n", .uint32)])])
            ])
        successor.export(object)
        #expect(try await successor.requestName("test.Echo") == 1)
        object.emit("Ping", [.uint32(2)])
        try await pings.wait(for: 2)
        try await sendSignal(
            bus: fixture.bus.address, destination: fixture.client.uniqueName, path: "/test/Echo",
            interface: "test.Echo",
            member: "Ping", ["uint32:667"])
        object.emit("Ping", [.uint32(3)])
        try await pings.wait(for: 3)
        #expect(pings.all.map(\.arguments) == [[.uint32(1)], [.uint32(2)], [.uint32(3)]])
        #expect(pings.all.map(\.sender) == [fixture.server.uniqueName, successor.uniqueName, successor.uniqueName])
    }
}
