import Synchronization
import TestSupport
import Testing

@testable import DBus

/// An even number: odd ones are refused while decoding, before the method runs.
struct Even: DBusDecodable {
    let value: UInt32
    static var dbusType: DBusType { .uint32 }
    init(dbusValue: DBusValue) throws(DBusError) {
        value = try UInt32(dbusValue: dbusValue)
        guard value.isMultiple(of: 2) else { throw .invalidArgs("\(value) is odd") }
    }
}

/// Calls held until released, to fill ``DBusCallTasks``.
final class HeldCalls: Sendable {
    private let held = Mutex<[CheckedContinuation<Void, Never>]>([])
    private let count = Atomic<Int>(0)

    var waiting: Int { count.load(ordering: .acquiring) }

    func hold() async {
        await withCheckedContinuation { continuation in
            held.withLock { $0.append(continuation) }
            count.add(1, ordering: .releasing)
        }
    }

    func releaseAll() {
        for continuation in held.withLock({ held in
            defer { held = [] }; return held
        }) { continuation.resume() }
    }
}

/// What the service keeps for the `Kept` property.
final class KeptValue: Sendable {
    let value = Mutex("first")
    func withLock<Result>(_ body: (inout String) -> Result) -> Result { value.withLock { body(&$0) } }
}

/// An object served by typed methods and a property the service keeps.
final class TypedFixture: Sendable {
    let bus: PrivateBus
    let server: DBusConnection
    let client: DBusConnection
    let tasks = DBusCallTasks(limit: 2)
    let held = HeldCalls()
    let kept = KeptValue()

    init() async throws {
        bus = try PrivateBus()
        server = try await DBusConnection.connect(to: .address(bus.address))
        client = try await DBusConnection.connect(to: .address(bus.address))
        let (tasks, held, kept) = (tasks, held, kept)
        let object = try DBusObject(
            path: "/test/Typed",
            interfaces: [
                DBusInterface(
                    name: "test.Typed",
                    methods: [
                        .typed(
                            "Half", inputs: [DBusArgument("n", .uint32)], output: DBusArgument("half", .uint32),
                            tasks: tasks
                        ) { (_, even: Even) in even.value / 2 },
                        .typed(
                            "Sort", inputs: [DBusArgument("words", .array(.string))],
                            output: DBusArgument("counts", .dictionary(key: .string, value: .uint32)), tasks: tasks
                        ) { (_, words: [String]) in
                            [String: UInt32](words.map { ($0, 1) }, uniquingKeysWith: +)
                        },
                        .typed("Hold", inputs: [], tasks: tasks) { _ in await held.hold() },
                    ],
                    properties: [
                        DBusProperty(
                            "Kept", .string, getter: { .string(kept.withLock { $0 }) },
                            setter: { value in
                                kept.withLock { $0 = value.string ?? "" }
                                return value
                            })
                    ])
            ])
        server.export(object)
        _ = try await server.requestName("test.Typed")
    }

    func call(_ member: String, _ arguments: [DBusValue] = [], interface: String = "test.Typed") async throws
        -> [DBusValue]
    {
        try await client.call(
            destination: "test.Typed", path: "/test/Typed", interface: interface, member: member, arguments: arguments)
    }

    deinit {
        server.close()
        client.close()
        bus.stop()
    }
}

@Suite("Typed methods and kept properties", .serialized, .timeLimit(.minutes(1)))
struct TypedTests {
    @Test func argumentsDecodeAndRepliesEncode() async throws {
        let fixture = try await TypedFixture()
        #expect(try await fixture.call("Half", [.uint32(42)]) == [.uint32(21)])
        let odd = await #expect(throws: DBusError.self) { try await fixture.call("Half", [.uint32(7)]) }
        #expect(odd == DBusError.invalidArgs("7 is odd"))
        let counts = try await fixture.call("Sort", [.strings(["b", "a", "b"])])
        #expect(
            counts == [
                .dictionary(
                    key: .string, value: .uint32, [.init(.string("a"), .uint32(1)), .init(.string("b"), .uint32(2))])
            ])
    }

    @Test func callsPastTheLimitAreRefusedAndFinishWaitsForTheRest() async throws {
        let fixture = try await TypedFixture()
        try await withThrowingTaskGroup { group in
            for _ in 0..<2 { group.addTask { _ = try await fixture.call("Hold") } }
            try await waitFor { fixture.held.waiting == 2 }
            let refused = await #expect(throws: DBusError.self) { try await fixture.call("Hold") }
            #expect(refused?.name == "org.freedesktop.DBus.Error.LimitsExceeded")
            async let finished: Void = fixture.tasks.finish()
            fixture.held.releaseAll()
            await finished
            try await group.waitForAll()
        }
        let late = await #expect(throws: DBusError.self) { try await fixture.call("Half", [.uint32(2)]) }
        #expect(late?.name == "org.freedesktop.DBus.Error.LimitsExceeded")
    }

    @Test func aKeptPropertyIsReadFromTheServiceAndAnnouncedWhenItChanges() async throws {
        let fixture = try await TypedFixture()
        let props = "org.freedesktop.DBus.Properties"
        let changes = try await fixture.client.signals(
            path: "/test/Typed", interface: props, member: "PropertiesChanged")
        fixture.kept.withLock { $0 = "changed by the service" }
        #expect(
            try await fixture.call("Get", [.string("test.Typed"), .string("Kept")], interface: props) == [
                .variant(.string("changed by the service"))
            ])
        for value in ["changed by the service", "second", "second", "third"] {
            _ = try await fixture.call(
                "Set", [.string("test.Typed"), .string("Kept"), .variant(.string(value))], interface: props)
        }
        #expect(fixture.kept.withLock { $0 } == "third")
        var iterator = changes.makeAsyncIterator()
        // Only real changes are announced: the same value again is not.
        #expect(await iterator.next()?.arguments[1] == .vardict([("Kept", .string("second"))]))
        #expect(await iterator.next()?.arguments[1] == .vardict([("Kept", .string("third"))]))
    }
}
