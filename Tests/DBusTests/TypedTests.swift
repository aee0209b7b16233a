import Synchronization
import TestSupport
import Testing

@testable import DBus

/// An even number: odd ones are refused while decoding, before the method runs.
struct Even: DBusRepresentable {
    let value: UInt32
    static var dbusType: DBusType { .uint32 }
    var dbusValue: DBusValue { .uint32(value) }
    /// Unchecked: the server checks what it receives.
    init(_ value: UInt32) { self.value = value }
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
    static let half = DBusMethodSpec<UInt32, Even>("Half", inputs: "n", output: "half")
    static let sort = DBusMethodSpec<[String: UInt32], [String]>("Sort", inputs: "words", output: "counts")
    static let hold = DBusMethodSpec<DBusNoReply>("Hold")
    /// Answered on the connection's thread.
    static let repeated = DBusMethodSpec<String, String, Int32>(
        "Repeat", inputs: "text", "times", output: "repeated")
    static let forget = DBusMethodSpec<DBusNoReply, String>("Forget", inputs: "name")
    static let measured = DBusSignalSpec<String, Double>("Measured", "what", "value")

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
                        .serving(Self.half, tasks: tasks) { _, even in even.value / 2 },
                        .serving(Self.sort, tasks: tasks) { _, words in
                            [String: UInt32](words.map { ($0, 1) }, uniquingKeysWith: +)
                        },
                        .serving(Self.hold, tasks: tasks) { _ in await held.hold() },
                        .answering(Self.repeated) { _, text, times throws(DBusError) in
                            guard times >= 0 else { throw .invalidArgs("\(times) is negative") }
                            return String(repeating: text, count: Int(times))
                        },
                        .answering(Self.forget) { _, name in kept.withLock { if $0 == name { $0 = "" } } },
                    ],
                    properties: [
                        DBusProperty(
                            "Kept", .string, getter: { .string(kept.withLock { $0 }) },
                            setter: { value in
                                kept.withLock { $0 = value.string ?? "" }
                                return value
                            })
                    ],
                    signals: [Self.measured.declaration])
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

    @Test func aSpecDeclaresTheSignatureFromItsTypes() {
        let signature = TypedFixture.repeated.signature
        #expect(signature.inputs.map(\.name) == ["text", "times"])
        #expect(signature.inputs.map(\.type) == [.string, .int32])
        #expect(signature.outputs.map(\.type) == [.string])
        #expect(TypedFixture.hold.signature.inputs.isEmpty && TypedFixture.hold.signature.outputs.isEmpty)
        #expect(TypedFixture.measured.declaration.arguments.map(\.type) == [.string, .double])
    }

    @Test func typedCallsEncodeTheArgumentsAndDecodeTheReply() async throws {
        let fixture = try await TypedFixture()
        func call<Output: DBusDecodable, each Input: DBusEncodable>(
            _ spec: DBusMethodSpec<Output, repeat each Input>, _ arguments: repeat each Input
        ) async throws(DBusError) -> Output {
            try await fixture.client.call(
                spec, destination: "test.Typed", path: "/test/Typed", interface: "test.Typed", repeat each arguments)
        }
        #expect(try await call(TypedFixture.half, Even(42)) == 21)
        let odd = await #expect(throws: DBusError.self) { try await call(TypedFixture.half, Even(7)) }
        #expect(odd == DBusError.invalidArgs("7 is odd"))
        #expect(try await call(TypedFixture.sort, ["b", "a", "b"]) == ["a": 1, "b": 2])
        #expect(try await call(TypedFixture.repeated, "ab", 3) == "ababab")
        let negative = await #expect(throws: DBusError.self) { try await call(TypedFixture.repeated, "ab", -1) }
        #expect(negative == DBusError.invalidArgs("-1 is negative"))
        try await fixture.client.call(
            TypedFixture.forget, destination: "test.Typed", path: "/test/Typed", interface: "test.Typed", "first")
        #expect(fixture.kept.withLock { $0 } == "")
        // A reply of another type than the spec's is refused, not misread.
        let halfAsText = DBusMethodSpec<String, Even>("Half", inputs: "n", output: "half")
        let mistyped = await #expect(throws: DBusError.self) { try await call(halfAsText, Even(2)) }
        #expect(mistyped?.name == "org.freedesktop.DBus.Error.InvalidArgs")
    }

    @Test func aSignalSpecEncodesAndDecodesItsArguments() async throws {
        let fixture = try await TypedFixture()
        let signals = try await fixture.client.signals(path: "/test/Typed", interface: "test.Typed")
        let spec = TypedFixture.measured
        try fixture.server.emitSignal(
            path: "/test/Typed", interface: "test.Typed", member: "Other", arguments: spec.values("x", 1))
        try fixture.server.emitSignal(
            path: "/test/Typed", interface: "test.Typed", member: spec.name, arguments: [.string("x")])
        try fixture.server.emitSignal(
            path: "/test/Typed", interface: "test.Typed", member: spec.name, arguments: spec.values("level", -12.5))
        var iterator = signals.makeAsyncIterator()
        let other = try #require(await iterator.next())
        #expect(spec.decode(other) == nil, "another member")
        let short = try #require(await iterator.next())
        #expect(spec.decode(short) == nil, "arguments of other types")
        let measured = try #require(await iterator.next())
        let decoded = try #require(spec.decode(measured))
        #expect(decoded.0 == "level" && decoded.1 == -12.5)
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
