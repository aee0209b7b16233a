import DBus
import Foundation
import TestSupport
import Testing

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

/// A server and a client on one private bus, with an object that echoes what it gets.
final class EchoFixture: Sendable {
    let bus: PrivateBus
    let server: DBusConnection
    let client: DBusConnection
    let object: DBusObject

    init() async throws {
        bus = try PrivateBus()
        server = try await DBusConnection.connect(to: .address(bus.address))
        client = try await DBusConnection.connect(to: .address(bus.address))
        object = try DBusObject(
            path: "/test/Echo",
            interfaces: [
                DBusInterface(
                    name: "test.Echo",
                    methods: [
                        DBusMethod(
                            "Echo", inputs: [DBusArgument("value", .variant)],
                            outputs: [DBusArgument("value", .variant)]
                        ) { call in
                            call.arguments
                        },
                        DBusMethod("Fail") { _ in
                            throw DBusError(name: "test.Echo.Error.Nope", message: "no, because")
                        },
                        DBusMethod("Slow", outputs: [DBusArgument("done", .boolean)]) { _ in
                            try await Task.sleep(for: .milliseconds(200))
                            return [.boolean(true)]
                        },
                    ],
                    properties: [
                        DBusProperty("Name", .string("initial")) { value in
                            guard value.string != "bad" else { throw DBusError.invalidArgs("Name must not be 'bad'") }
                            return value
                        },
                        DBusProperty("Fixed", .uint32(7), changeSignal: .const),
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

@Suite("D-Bus binding on a private bus", .serialized)
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
        #expect(all == [.vardict([("Name", .string("new")), ("Fixed", .uint32(7))])])

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
                    let reply = try await fixture.call(
                        n % 10 == 0 ? "Slow" : "Echo", n % 10 == 0 ? [] : [.variant(.uint32(UInt32(n)))])
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
}
