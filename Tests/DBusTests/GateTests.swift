import Synchronization
import TestSupport
import Testing

@testable import DBus

/// Decisions a test holds back and gives later, from its own task (not the connection thread).
final class HeldDecisions: Sendable {
    private let held = Mutex<[(DBusAccess, DBusDecision)]>([])

    var accesses: [DBusAccess] { held.withLock { $0.map(\.0) } }

    func hold(_ access: DBusAccess, _ decision: DBusDecision) {
        held.withLock { $0.append((access, decision)) }
    }

    /// Waits (up to 5 s) until `count` decisions are held; throws ``WaitTimedOut`` if they are not.
    func waitFor(_ count: Int, fileID: String = #fileID, line: Int = #line) async throws {
        for _ in 0..<500 {
            if held.withLock({ $0.count }) >= count { return }
            try? await Task.sleep(for: .milliseconds(10))
        }
        throw WaitTimedOut("\(count) held decisions", after: .seconds(5), fileID: fileID, line: line)
    }

    /// Gives every held decision, oldest first.
    func decideAll(_ error: DBusError?) {
        let all = held.withLock { held in
            defer { held.removeAll() }
            return held
        }
        for (_, decision) in all { decision.decide(error) }
    }
}

@Suite("Gate and unicast signals", .serialized, .timeLimit(.minutes(1)))
struct GateTests {
    static let refused = DBusError(name: "test.Echo.Error.NotAuthorized", message: "not you")
    static let props = "org.freedesktop.DBus.Properties"

    @Test func aRefusingGateGuardsMethodsAndPropertiesButNotIntrospectOrPeer() async throws {
        let fixture = try await EchoFixture()
        let seen = Mutex<[DBusAccess]>([])
        fixture.object.install { access, decision in
            seen.withLock { $0.append(access) }
            decision.refuse(Self.refused)
        }
        for (member, interface, arguments) in [
            ("Echo", "test.Echo", [DBusValue.variant(.uint32(1))]),
            ("Get", Self.props, [.string("test.Echo"), .string("Name")]),
            ("Get", Self.props, [.string(""), .string("Name")]),
            ("GetAll", Self.props, [.string("test.Echo")]),
            ("Set", Self.props, [.string("test.Echo"), .string("Name"), .variant(.string("x"))]),
        ] {
            await #expect(throws: Self.refused, "\(member)") {
                try await fixture.call(member, interface: interface, arguments)
            }
        }
        #expect(fixture.object.property("Name") == .string("initial"))
        let xml = try await fixture.call("Introspect", interface: "org.freedesktop.DBus.Introspectable")
        #expect(xml.first?.string?.contains("test.Echo") == true)
        #expect(try await fixture.call("Ping", interface: "org.freedesktop.DBus.Peer").isEmpty)
        // The standard interfaces' own properties are not the gate's business.
        #expect(try await fixture.call("GetAll", interface: Self.props, [.string(Self.props)]) == [.vardict([])])
        let sender = fixture.client.uniqueName
        #expect(
            seen.withLock { $0 } == [
                DBusAccess(sender: sender, interface: "test.Echo", member: "Echo", kind: .method),
                DBusAccess(sender: sender, interface: "test.Echo", member: "Name", kind: .getProperty),
                DBusAccess(sender: sender, interface: "", member: "Name", kind: .getProperty),
                DBusAccess(sender: sender, interface: "test.Echo", member: "", kind: .getAllProperties),
                DBusAccess(sender: sender, interface: "test.Echo", member: "Name", kind: .setProperty),
            ])
    }

    @Test func aDeferredDecisionHoldsTheSendersCallsInOrderWithoutBlockingOthers() async throws {
        let fixture = try await EchoFixture()
        let held = HeldDecisions()
        let firstClient = fixture.client.uniqueName
        fixture.object.install { access, decision in
            // Only the first client waits for a decision; everyone else is let through at once.
            if access.sender == firstClient { held.hold(access, decision) } else { decision.allow() }
        }
        let other = try await DBusConnection.connect(to: .address(fixture.bus.address))
        defer { other.close() }
        async let first = fixture.call("Echo", [.variant(.uint32(1))])
        try await held.waitFor(1)
        async let second = fixture.call("Get", interface: Self.props, [.string("test.Echo"), .string("Name")])
        // Another client is served while the first waits: the connection thread is free.
        let otherReply = try await other.call(
            destination: "test.Echo", path: "/test/Echo", interface: "test.Echo", member: "Echo",
            arguments: [.variant(.uint32(9))])
        #expect(otherReply == [.variant(.uint32(9))])
        // The second call of the waiting sender is not even asked about until the first is decided.
        #expect(held.accesses.map(\.member) == ["Echo"])
        held.decideAll(nil)
        try await held.waitFor(1)
        #expect(held.accesses.map(\.member) == ["Name"])
        held.decideAll(Self.refused)
        #expect(try await first == [.variant(.uint32(1))])
        do {
            _ = try await second
            Issue.record("a refused call succeeded")
        } catch {
            #expect(error as? DBusError == Self.refused)
        }
    }

    @Test func unicastSignalsReachOnlyTheirDestination() async throws {
        let fixture = try await EchoFixture()
        let other = try await DBusConnection.connect(to: .address(fixture.bus.address))
        defer { other.close() }
        let toClient = try await fixture.client.signals(interface: "test.Echo", member: "Ping")
        let toOther = try await other.signals(interface: "test.Echo", member: "Ping")
        fixture.object.emit("Ping", [.uint32(1)], destination: fixture.client.uniqueName)
        fixture.object.setProperty("Name", .string("private"), destination: fixture.client.uniqueName)
        fixture.object.emit("Ping", [.uint32(2)])  // broadcast, after the unicast one
        var clientPings: [DBusValue] = []
        for await signal in toClient {
            clientPings += signal.arguments
            if clientPings.count == 2 { break }
        }
        var otherPings: [DBusValue] = []
        for await signal in toOther {
            otherPings += signal.arguments
            break
        }
        #expect(clientPings == [.uint32(1), .uint32(2)])
        // The bus delivers in order, so had the unicast one reached `other`, it would come first.
        #expect(otherPings == [.uint32(2)])
    }

    @Test func aPropertyReaderShowsEachCallerItsOwnView() async throws {
        let fixture = try await EchoFixture()
        let other = try await DBusConnection.connect(to: .address(fixture.bus.address))
        defer { other.close() }
        let owner = fixture.client.uniqueName
        let hidden = DBusError(name: "test.Echo.Error.Busy", message: "not yours")
        fixture.object.setProperty("Name", .string("the owner's"))
        fixture.object.install { access, stored in
            guard access.member == "Name", access.sender != owner else { return .success(stored) }
            return access.kind == .getProperty ? .failure(hidden) : .success(.string(""))
        }
        let props = "org.freedesktop.DBus.Properties"
        func get(_ connection: DBusConnection, _ member: String, _ arguments: [DBusValue]) async throws -> [DBusValue] {
            try await connection.call(
                destination: "test.Echo", path: "/test/Echo", interface: props, member: member, arguments: arguments)
        }
        #expect(
            try await get(fixture.client, "Get", [.string("test.Echo"), .string("Name")]) == [
                .variant(.string("the owner's"))
            ])
        await #expect(throws: hidden) { try await get(other, "Get", [.string("test.Echo"), .string("Name")]) }
        await #expect(throws: hidden) { try await get(other, "Get", [.string(""), .string("Name")]) }
        let mine = try await get(fixture.client, "GetAll", [.string("test.Echo")]).first?.stringVariantDictionary ?? []
        let theirs = try await get(other, "GetAll", [.string("test.Echo")]).first?.stringVariantDictionary ?? []
        #expect(mine.first { $0.key == "Name" }?.value == .string("the owner's"))
        #expect(theirs.first { $0.key == "Name" }?.value == .string(""))
        #expect(theirs.first { $0.key == "Fixed" }?.value == .uint32(7), "the other properties as stored")
    }
}
