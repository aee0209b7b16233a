import Foundation
import Logging
import Synchronization
import TestSupport
import Testing

@testable import DBus

@Suite("Signatures")
struct SignatureTests {
    @Test(arguments: ["s", "b", "u", "d", "x", "as", "a{sv}", "v", "a(ssb)", "a(sxs)", "a{sa{sv}}", "(yq(ni)t)", "aav"])
    func parsesAndRenders(_ signature: String) throws {
        #expect(try DBusType(signature: signature).signature == signature)
    }

    @Test(arguments: ["", "a", "a{vs}", "(", "()", "a{s}", "z", "ss", "a{ss"])
    func rejectsInvalid(_ signature: String) {
        #expect(throws: DBusError.self) { try DBusType(signature: signature) }
    }

    @Test func parsesLists() throws {
        #expect(try DBusType.parse(signature: "sa{sv}as").map(\.signature) == ["s", "a{sv}", "as"])
        #expect(try DBusType.parse(signature: "").isEmpty)
    }
}

/// A method handler's replies held back until enough calls wait, then sent together from a
/// thread of their own (not the connection's).
final class ParkedReplies: Sendable {
    private let waiting = Mutex<[DBusReply]>([])

    func park(_ reply: DBusReply, releaseAt count: Int) {
        let ready = waiting.withLock { waiting -> [DBusReply] in
            waiting.append(reply)
            guard waiting.count >= count else { return [] }
            defer { waiting.removeAll() }
            return waiting
        }
        guard !ready.isEmpty else { return }
        Thread.detachNewThread {
            let offConnectionThread = Thread.current.name != "dbus"
            for reply in ready { reply.send([.boolean(offConnectionThread)]) }
        }
    }
}

/// An error that is not a ``DBusErrorRepresentable``.
struct PlainError: Error {}

/// A server and a client on one private bus, with an object that echoes what it gets.
final class EchoFixture: Sendable {
    let bus: PrivateBus
    let server: DBusConnection
    let client: DBusConnection
    let object: DBusObject

    init(bounds: ConnectionLoop.Bounds = .standard) async throws {
        bus = try PrivateBus()
        server = try await DBusConnection.connect(to: .address(bus.address), bounds: bounds)
        client = try await DBusConnection.connect(to: .address(bus.address))
        let parked = ParkedReplies()
        object = try DBusObject(
            path: "/test/Echo",
            interfaces: [
                DBusInterface(
                    name: "test.Echo",
                    methods: [
                        DBusMethod(
                            "Echo", inputs: [DBusArgument("value", .variant)],
                            outputs: [DBusArgument("value", .variant)]
                        ) { call, reply in
                            reply.send(call.arguments)
                        },
                        DBusMethod("Fail") { _, reply in
                            reply.fail(DBusError(name: "test.Echo.Error.Nope", message: "no, because"))
                        },
                        DBusMethod("FailPlain") { _, reply in reply.fail(PlainError()) },
                        // Answers once `waitFor` calls to it are waiting, from another thread.
                        DBusMethod(
                            "Later", inputs: [DBusArgument("waitFor", .uint32)],
                            outputs: [DBusArgument("offConnectionThread", .boolean)]
                        ) { call, reply in
                            parked.park(reply, releaseAt: Int(call.arguments[0].uint32 ?? 1))
                        },
                        DBusMethod("Drop", outputs: [DBusArgument("never", .boolean)]) { _, _ in },
                        DBusMethod("Twice", outputs: [DBusArgument("n", .uint32)]) { _, reply in
                            reply.send([.uint32(1)])
                            reply.send([.uint32(2)])
                            reply.fail(DBusError.failed("too late"))
                        },
                    ],
                    properties: [
                        DBusProperty("Name", .string("initial")) { value in
                            guard value.string != "bad" else { throw DBusError.invalidArgs("Name must not be 'bad'") }
                            return value
                        },
                        DBusProperty("Fixed", .uint32(7), changeSignal: .const),
                        DBusProperty("Secret", .string(""), changeSignal: .invalidates),
                    ],
                    signals: [DBusSignal("Ping", arguments: [DBusArgument("n", .uint32)])])
            ])
        server.export(object)
        _ = try await server.requestName("test.Echo")
    }

    func call(
        _ member: String, interface: String? = "test.Echo", _ arguments: [DBusValue] = [], path: String = "/test/Echo"
    )
        async throws -> [DBusValue]
    {
        try await client.call(
            destination: "test.Echo", path: path, interface: interface, member: member, arguments: arguments)
    }

    deinit {
        server.close()
        client.close()
        bus.stop()
    }
}

/// Holds a connection's owner thread inside a job until released, so that jobs pile up in its
/// queue.
final class OwnerThreadBlocker: Sendable {
    private let gate = DispatchSemaphore(value: 0)

    /// Returns once the owner thread is inside the blocking job.
    init(_ connection: DBusConnection) async {
        await withCheckedContinuation { (entered: CheckedContinuation<Void, Never>) in
            let queued = connection.loop.perform { [gate] _ in
                entered.resume()
                gate.wait()
            }
            if !queued { entered.resume() }
        }
    }

    func release() { gate.signal() }
}

@Suite("D-Bus binding on a private bus", .serialized, .timeLimit(.minutes(1)))
struct BindingTests {
    static let samples: [DBusValue] = [
        .byte(255), .boolean(true), .boolean(false), .int16(-3), .uint16(65535), .int32(-70000), .uint32(4_000_000_000),
        .int64(Int64.min), .uint64(UInt64.max), .double(-0.25), .string(""), .string("grüße 🎙️"),
        .objectPath("/a/b"), .signature("a{sv}"),
        .strings([]), .strings(["one", "two"]),
        .vardict([
            ("backend", .string("local")), ("interim_results", .boolean(false)), ("keyterms", .strings(["sttd"])),
        ]),
        .variant(.variant(.variant(.uint32(1)))),
        .array(
            .structure([.string, .string, .boolean]),
            [.structure([.string("mic.monitor"), .string("Mic"), .boolean(true)])]),
        .array(.structure([.string, .int64, .string]), []),
        .array(
            .structure([.string, .int64, .string]),
            [.structure([.string("id"), .int64(1_700_000_000_000_000), .string("hello")])]),
        .dictionary(
            key: .string, value: .dictionary(key: .string, value: .variant),
            [
                .init(.string("outer"), .vardict([("inner", .double(1.5))]))
            ]),
        .array(.array(.variant), [.array(.variant, [.variant(.string("x"))])]),
    ]

    @Test func roundTripsEveryType() async throws {
        let fixture = try await EchoFixture()
        for sample in Self.samples {
            let reply = try await fixture.call("Echo", [.variant(sample)])
            #expect(reply == [.variant(sample)], "round trip of \(sample.type)")
        }
    }

    @Test func errorsCarryNameAndMessage() async throws {
        let fixture = try await EchoFixture()
        await #expect(throws: DBusError(name: "test.Echo.Error.Nope", message: "no, because")) {
            try await fixture.call("Fail")
        }
        let plain = await #expect(throws: DBusError.self) { try await fixture.call("FailPlain") }
        #expect(plain?.name == "org.freedesktop.DBus.Error.Failed")
    }

    @Test func wrongSignatureIsInvalidArgs() async throws {
        let fixture = try await EchoFixture()
        let error = await #expect(throws: DBusError.self) { try await fixture.call("Echo", [.string("not a variant")]) }
        #expect(error?.name == "org.freedesktop.DBus.Error.InvalidArgs")
        #expect(error?.message.contains("(v)") == true)
    }

    @Test func unknownMembersGetStandardErrors() async throws {
        let fixture = try await EchoFixture()
        let method = await #expect(throws: DBusError.self) { try await fixture.call("Nope") }
        #expect(method?.name == "org.freedesktop.DBus.Error.UnknownMethod")
        let interface = await #expect(throws: DBusError.self) { try await fixture.call("Echo", interface: "test.Nope") }
        #expect(interface?.name == "org.freedesktop.DBus.Error.UnknownInterface")
        let object = await #expect(throws: DBusError.self) { try await fixture.call("Echo", path: "/nowhere") }
        #expect(object?.name == "org.freedesktop.DBus.Error.UnknownObject")
    }

    @Test func peerIsServed() async throws {
        let fixture = try await EchoFixture()
        #expect(try await fixture.call("Ping", interface: "org.freedesktop.DBus.Peer").isEmpty)
    }

    @Test func introspectionListsEverything() async throws {
        let fixture = try await EchoFixture()
        let xml =
            try await fixture.call("Introspect", interface: "org.freedesktop.DBus.Introspectable").first?.string ?? ""
        for fragment in [
            "<method name=\"Echo\">", "<property name=\"Name\" type=\"s\" access=\"readwrite\"/>",
            "value=\"const\"", "<signal name=\"Ping\">", "org.freedesktop.DBus.Peer",
        ] {
            #expect(xml.contains(fragment), "\(fragment)")
        }
        let parent = try await fixture.call(
            "Introspect", interface: "org.freedesktop.DBus.Introspectable", path: "/test")
        #expect(parent.first?.string?.contains("<node name=\"Echo\"/>") == true)
    }

    @Test func propertiesGetSetAndChangeSignal() async throws {
        let fixture = try await EchoFixture()
        let changes = try await fixture.client.signals(
            path: "/test/Echo", interface: "org.freedesktop.DBus.Properties", member: "PropertiesChanged")
        let props = "org.freedesktop.DBus.Properties"
        #expect(
            try await fixture.call("Get", interface: props, [.string("test.Echo"), .string("Name")]) == [
                .variant(.string("initial"))
            ])
        _ = try await fixture.call(
            "Set", interface: props, [.string("test.Echo"), .string("Name"), .variant(.string("new"))])
        var iterator = changes.makeAsyncIterator()
        let signal = await iterator.next()
        #expect(signal?.arguments == [.string("test.Echo"), .vardict([("Name", .string("new"))]), .strings([])])
        let all = try await fixture.call("GetAll", interface: props, [.string("test.Echo")])
        #expect(all == [.vardict([("Name", .string("new")), ("Fixed", .uint32(7)), ("Secret", .string(""))])])

        let readOnly = await #expect(throws: DBusError.self) {
            try await fixture.call(
                "Set", interface: props, [.string("test.Echo"), .string("Fixed"), .variant(.uint32(1))])
        }
        #expect(readOnly?.name == "org.freedesktop.DBus.Error.PropertyReadOnly")
        let wrongType = await #expect(throws: DBusError.self) {
            try await fixture.call(
                "Set", interface: props, [.string("test.Echo"), .string("Name"), .variant(.uint32(1))])
        }
        #expect(wrongType?.name == "org.freedesktop.DBus.Error.InvalidArgs")
        let refused = await #expect(throws: DBusError.self) {
            try await fixture.call(
                "Set", interface: props, [.string("test.Echo"), .string("Name"), .variant(.string("bad"))])
        }
        #expect(refused?.message == "Name must not be 'bad'")
        let unknown = await #expect(throws: DBusError.self) {
            try await fixture.call("Get", interface: props, [.string("test.Echo"), .string("Nope")])
        }
        #expect(unknown?.name == "org.freedesktop.DBus.Error.UnknownProperty")
    }

    @Test func changeSignalsFollowEachPropertysAnnotation() async throws {
        let fixture = try await EchoFixture()
        let fromObject = try await fixture.client.signals(path: "/test/Echo")
        fixture.object.setProperties([("Secret", .string("s3")), ("Name", .string("n"))])
        fixture.object.setProperty("Name", .string("n"))  // unchanged: no signal
        fixture.object.setProperty("Fixed", .uint32(8))  // const: stored, no signal
        fixture.object.emit("Ping", [.uint32(0)])  // queued after the above, so it marks their end
        var received: [[DBusValue]] = []
        for await signal in fromObject {
            if signal.member == "Ping" { break }
            received.append(signal.arguments)
        }
        #expect(received == [[.string("test.Echo"), .vardict([("Name", .string("n"))]), .strings(["Secret"])]])
        #expect(fixture.object.property("Secret") == .string("s3"))
        #expect(fixture.object.property("Fixed") == .uint32(8))
    }

    @Test func signalsReachSubscribers() async throws {
        let fixture = try await EchoFixture()
        let pings = try await fixture.client.signals(interface: "test.Echo", member: "Ping")
        for n in 1...3 { fixture.object.emit("Ping", [.uint32(UInt32(n))]) }
        var received: [DBusValue] = []
        for await signal in pings {
            received += signal.arguments
            if received.count == 3 { break }
        }
        #expect(received == [.uint32(1), .uint32(2), .uint32(3)])
    }

    @Test func concurrentCallsAllGetAnswers() async throws {
        let fixture = try await EchoFixture()
        let count = try await withThrowingTaskGroup(of: Int.self) { group in
            for n in 0..<100 {  // dbus-daemon allows 128 pending replies per connection
                group.addTask {
                    // Every tenth call is held open until all ten of them are waiting.
                    let reply = try await fixture.call(
                        n % 10 == 0 ? "Later" : "Echo", [n % 10 == 0 ? .uint32(10) : .variant(.uint32(UInt32(n)))])
                    return reply.count
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(count == 100)
    }

    @Test func refusesInvalidNamesWithoutAborting() async throws {
        let fixture = try await EchoFixture()
        await #expect(throws: DBusError.self) {
            try await fixture.client.call(destination: "not a name", path: "/x", interface: nil, member: "M")
        }
        await #expect(throws: DBusError.self) {
            try await fixture.client.call(destination: "test.Echo", path: "no/slash", interface: nil, member: "M")
        }
        await #expect(throws: DBusError.self) {
            try await fixture.client.call(destination: "test.Echo", path: "/x", interface: "bad..iface", member: "M")
        }
    }

    @Test func survivesTheBusGoingAway() async throws {
        let fixture = try await EchoFixture()
        fixture.bus.stop()
        await fixture.client.waitUntilDisconnected()
        #expect(!fixture.client.isConnected)
        await #expect(throws: DBusError.self) { try await fixture.call("Echo", [.variant(.uint32(1))]) }
    }

    @Test func aReplySentFromAnotherThreadArrives() async throws {
        let fixture = try await EchoFixture()
        #expect(try await fixture.call("Later", [.uint32(1)]) == [.boolean(true)])
    }

    @Test func aDroppedReplyAnswersWithAnError() async throws {
        let fixture = try await EchoFixture()
        let error = await #expect(throws: DBusError.self) { try await fixture.call("Drop") }
        #expect(error == .failed("the service dropped this call"))
        // The connection still serves calls afterwards.
        #expect(try await fixture.call("Echo", [.variant(.uint32(1))]) == [.variant(.uint32(1))])
    }

    @Test func onlyTheFirstReplyCounts() async throws {
        let fixture = try await EchoFixture()
        #expect(try await fixture.call("Twice") == [.uint32(1)])
    }

    @Test func droppableSignalsAreRefusedOverTheSoftBound() async throws {
        let fixture = try await EchoFixture(bounds: .init(soft: 2, hard: 100))
        let pings = try await fixture.client.signals(interface: "test.Echo", member: "Ping")
        let blocker = await OwnerThreadBlocker(fixture.server)
        defer { blocker.release() }
        #expect(fixture.object.emit("Ping", [.uint32(1)], droppable: true))
        #expect(fixture.object.emit("Ping", [.uint32(2)], droppable: true))
        #expect(!fixture.object.emit("Ping", [.uint32(3)], droppable: true))
        #expect(fixture.object.emit("Ping", [.uint32(4)]))
        #expect(fixture.server.loop.droppedJobs == 1)
        #expect(fixture.server.loop.directSends == 0)
        blocker.release()
        var received: [DBusValue] = []
        for await signal in pings {
            received += signal.arguments
            if signal.arguments == [.uint32(4)] { break }
        }
        #expect(received == [.uint32(1), .uint32(2), .uint32(4)])
        #expect(fixture.server.isConnected)
    }

    @Test func aDroppableSignalGoesOutFromTheEmittersThreadInOrder() async throws {
        let fixture = try await EchoFixture()
        let pings = try await fixture.client.signals(interface: "test.Echo", member: "Ping")
        // After a round trip the server's owner thread has nothing queued or running.
        _ = try await fixture.server.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetId")
        #expect(fixture.object.emit("Ping", [.uint32(1)], droppable: true))
        #expect(fixture.server.loop.directSends == 1)
        // Queued for the owner thread, then one that must not overtake it.
        #expect(fixture.object.emit("Ping", [.uint32(2)]))
        #expect(fixture.object.emit("Ping", [.uint32(3)], droppable: true))
        var received: [DBusValue] = []
        for await signal in pings {
            received += signal.arguments
            if signal.arguments == [.uint32(3)] { break }
        }
        #expect(received == [.uint32(1), .uint32(2), .uint32(3)])
    }

    @Test func droppableSignalsAreDroppedWhileTheBusIsNotReading() async throws {
        let fixture = try await EchoFixture()
        fixture.bus.freeze()
        defer { fixture.bus.resume() }
        // 20 000 signals of ~120 bytes: the socket's buffer fills, then libdbus's queue passes
        // its 1 MB limit, and the rest is refused instead of piling up.
        var sent = 0
        for n in 0..<20_000 where fixture.object.emit("Ping", [.uint32(UInt32(n))], droppable: true) { sent += 1 }
        #expect(sent < 20_000)
        #expect(fixture.server.loop.droppedJobs == 20_000 - sent)
        fixture.bus.resume()
        // Once the bus reads again, the connection works as before.
        _ = try await fixture.server.call(
            destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
            member: "GetId")
        #expect(fixture.server.isConnected)
    }

    @Test func droppableSignalsRacingTheConnectionsCloseAreSafe() async throws {
        let fixture = try await EchoFixture()
        let object = fixture.object
        let done = DispatchSemaphore(value: 0)
        // Two threads sending while the owner thread closes and frees the connection: a send
        // on a freed connection would crash the test process.
        for _ in 0..<2 {
            Thread {
                for n in 0..<5_000 { object.emit("Ping", [.uint32(UInt32(n))], droppable: true) }
                done.signal()
            }.start()
        }
        try await Task.sleep(for: .milliseconds(5))
        fixture.server.close()
        await fixture.server.waitUntilDisconnected()
        done.wait()
        done.wait()
        #expect(!fixture.server.isConnected)
        #expect(!object.emit("Ping", [.uint32(0)], droppable: true))
    }

    @Test func aWedgedConnectionThreadClosesTheConnection() async throws {
        let fixture = try await EchoFixture(bounds: .init(soft: 2, hard: 4))
        let blocker = await OwnerThreadBlocker(fixture.server)
        defer { blocker.release() }
        for n in 1...4 { #expect(fixture.object.emit("Ping", [.uint32(UInt32(n))])) }
        #expect(!fixture.object.emit("Ping", [.uint32(5)]))
        // Returns although the owner thread is still blocked.
        await fixture.server.waitUntilDisconnected()
        #expect(!fixture.server.isConnected)
        await #expect(throws: DBusError.self) {
            try await fixture.server.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetId")
        }
    }
}

/// Checks against the declaration that would otherwise end in `assertionFailure`, and the
/// exactly-once rule of ``DBusReply``, without a bus.
@Suite("Declaration checks and replies")
struct CheckTests {
    let object: DBusObject

    init() throws {
        object = try DBusObject(
            path: "/test/Checked",
            interfaces: [
                DBusInterface(
                    name: "test.Checked",
                    properties: [DBusProperty("Count", .uint32(0)), DBusProperty("Label", .string(""))],
                    signals: [
                        DBusSignal("Level", arguments: [DBusArgument("level", .double)]),
                        DBusSignal("Pair", arguments: [DBusArgument("a", .string), DBusArgument("b", .boolean)]),
                    ]),
                DBusInterface(name: "test.Other", properties: [DBusProperty("Flag", .boolean(false))]),
            ])
    }

    @Test func signalsMustMatchTheirDeclaration() {
        #expect(object.check(signal: "Level", arguments: [.double(0.5)]) == nil)
        #expect(
            object.check(signal: "Pair", interface: "test.Checked", arguments: [.string("a"), .boolean(true)]) == nil)
        #expect(
            object.check(
                signal: "PropertiesChanged", interface: "org.freedesktop.DBus.Properties",
                arguments: [.string("test.Checked"), .vardict([]), .strings([])]) == nil)

        #expect(object.check(signal: "Level", arguments: [.uint32(1)])?.contains("takes (d)") == true)
        #expect(object.check(signal: "Level", arguments: []) != nil)
        #expect(object.check(signal: "Pair", arguments: [.string("a")]) != nil)
        #expect(object.check(signal: "Nope", arguments: []) != nil)
        #expect(object.check(signal: "Level", interface: "test.Other", arguments: [.double(1)]) != nil)
        #expect(object.check(signal: "Level", interface: "test.Missing", arguments: [.double(1)]) != nil)
        #expect(
            object.check(
                signal: "PropertiesChanged", interface: "org.freedesktop.DBus.Properties", arguments: [.string("x")])
                != nil)
    }

    @Test func propertiesMustMatchTheirDeclaration() {
        #expect(object.check(properties: [("Count", .uint32(3)), ("Label", .string("x"))]) == nil)
        #expect(object.check(properties: [("Flag", .boolean(true))]) == nil)
        #expect(object.check(properties: [("Count", .string("3"))])?.contains("type 'u'") == true)
        #expect(object.check(properties: [("Nope", .uint32(3))]) != nil)
        // One call sets properties of one interface only.
        #expect(object.check(properties: [("Count", .uint32(3)), ("Flag", .boolean(true))]) != nil)
        #expect(object.check(properties: [("Count", .uint32(3))], interface: "test.Other") != nil)
    }

    @Test func repliesMustMatchTheDeclaredOutputs() {
        #expect(DBusReply.check([.string("x"), .boolean(true)], outputs: [.string, .boolean], member: "M") == nil)
        #expect(DBusReply.check([], outputs: [], member: "M") == nil)
        #expect(DBusReply.check([.string("x")], outputs: [.string, .boolean], member: "M") != nil)
        #expect(DBusReply.check([.uint32(1)], outputs: [.variant], member: "M") != nil)
    }

    /// Outcomes of a reply, recorded instead of sent.
    final class Outcomes: Sendable {
        private let list = Mutex<[DBusReply.Outcome]>([])
        var recorded: [DBusReply.Outcome] { list.withLock { $0 } }

        func reply() -> DBusReply {
            DBusReply(member: "M", outputs: [.uint32], logger: Logger(label: "test")) { outcome in
                self.list.withLock { $0.append(outcome) }
            }
        }
    }

    @Test func aReplyDroppedUnansweredSendsExactlyOneError() {
        let outcomes = Outcomes()
        do { _ = outcomes.reply() }
        #expect(outcomes.recorded == [.error(.failed("the service dropped this call"))])
    }

    @Test func laterRepliesAreIgnored() {
        let outcomes = Outcomes()
        do {
            let reply = outcomes.reply()
            reply.send([.uint32(1)])
            reply.send([.uint32(2)])
            reply.fail(DBusError.failed("late"))
        }
        #expect(outcomes.recorded == [.values([.uint32(1)])])
    }

    @Test func errorsAreMadeSafeForTheWire() {
        #expect(DBusReply.wireError(for: DBusError(name: "not a name", message: "a\0b")) == .failed("ab"))
        #expect(DBusReply.wireError(for: PlainError()).name == "org.freedesktop.DBus.Error.Failed")
        #expect(DBusReply.wireError(for: DBusError.invalidArgs("x")) == .invalidArgs("x"))
    }
}
