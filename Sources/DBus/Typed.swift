import Synchronization

/// A Swift type with one D-Bus type.
public protocol DBusTyped: Sendable {
    static var dbusType: DBusType { get }
}

/// A value a method call's argument decodes to.
public protocol DBusDecodable: DBusTyped {
    /// Decodes a value whose type is already checked against ``dbusType``; a value the type
    /// cannot hold (an unknown key, a name out of range) throws `InvalidArgs` naming it.
    init(dbusValue: DBusValue) throws(DBusError)
}

/// A value a reply, property or signal encodes.
public protocol DBusEncodable: DBusTyped {
    var dbusValue: DBusValue { get }
}

/// A value that goes both ways.
public typealias DBusRepresentable = DBusDecodable & DBusEncodable

extension String: DBusRepresentable {
    public static var dbusType: DBusType { .string }
    public var dbusValue: DBusValue { .string(self) }
    public init(dbusValue: DBusValue) throws(DBusError) { self = try dbusValue.decoded(\.string) }
}

extension Bool: DBusRepresentable {
    public static var dbusType: DBusType { .boolean }
    public var dbusValue: DBusValue { .boolean(self) }
    public init(dbusValue: DBusValue) throws(DBusError) { self = try dbusValue.decoded(\.boolean) }
}

extension UInt32: DBusRepresentable {
    public static var dbusType: DBusType { .uint32 }
    public var dbusValue: DBusValue { .uint32(self) }
    public init(dbusValue: DBusValue) throws(DBusError) { self = try dbusValue.decoded(\.uint32) }
}

extension Int64: DBusRepresentable {
    public static var dbusType: DBusType { .int64 }
    public var dbusValue: DBusValue { .int64(self) }
    public init(dbusValue: DBusValue) throws(DBusError) { self = try dbusValue.decoded(\.int64) }
}

extension Int32: DBusRepresentable {
    public static var dbusType: DBusType { .int32 }
    public var dbusValue: DBusValue { .int32(self) }
    public init(dbusValue: DBusValue) throws(DBusError) { self = try dbusValue.decoded(\.int32) }
}

extension Double: DBusRepresentable {
    public static var dbusType: DBusType { .double }
    public var dbusValue: DBusValue { .double(self) }
    public init(dbusValue: DBusValue) throws(DBusError) { self = try dbusValue.decoded(\.double) }
}

/// An object path (`o`).
public struct DBusObjectPath: DBusRepresentable, Hashable {
    public var path: String
    public init(_ path: String) { self.path = path }
    public static var dbusType: DBusType { .objectPath }
    public var dbusValue: DBusValue { .objectPath(path) }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .objectPath(let path) = dbusValue else { throw .invalidArgs("expected an object path") }
        self.path = path
    }
}

/// A value of any type in a variant (`v`).
public struct DBusVariant: DBusRepresentable, Equatable {
    public var value: DBusValue
    public init(_ value: DBusValue) { self.value = value }
    public static var dbusType: DBusType { .variant }
    public var dbusValue: DBusValue { .variant(value) }
    public init(dbusValue: DBusValue) throws(DBusError) { value = try dbusValue.decoded(\.variantValue) }
}

extension Array: DBusTyped where Element: DBusTyped {
    public static var dbusType: DBusType { .array(Element.dbusType) }
}

extension Array: DBusEncodable where Element: DBusEncodable {
    public var dbusValue: DBusValue { .array(Element.dbusType, map(\.dbusValue)) }
}

extension Array: DBusDecodable where Element: DBusDecodable {
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .array(_, let items) = dbusValue else { throw .invalidArgs("expected an array") }
        self = []
        for item in items { append(try Element(dbusValue: item)) }
    }
}

/// Dictionaries go out sorted by key, so a reply does not change with hashing.
extension Dictionary: DBusTyped where Key: DBusTyped, Value: DBusTyped {
    public static var dbusType: DBusType { .dictionary(key: Key.dbusType, value: Value.dbusType) }
}

extension Dictionary: DBusEncodable where Key: DBusEncodable & Comparable, Value: DBusEncodable {
    public var dbusValue: DBusValue {
        .dictionary(
            key: Key.dbusType, value: Value.dbusType,
            sorted { $0.key < $1.key }.map { .init($0.key.dbusValue, $0.value.dbusValue) })
    }
}

extension Dictionary: DBusDecodable where Key: DBusDecodable, Value: DBusDecodable {
    /// A key given twice keeps its last value.
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .dictionary(_, _, let entries) = dbusValue else { throw .invalidArgs("expected a dictionary") }
        self = [:]
        for entry in entries { self[try Key(dbusValue: entry.key)] = try Value(dbusValue: entry.value) }
    }
}

extension DBusValue {
    /// The payload `read` finds, or `InvalidArgs` (the caller checked the signature, so only a
    /// wrong declaration gets here).
    func decoded<Payload>(_ read: (DBusValue) -> Payload?) throws(DBusError) -> Payload {
        guard let payload = read(self) else { throw .invalidArgs("expected type '\(type)' to hold another value") }
        return payload
    }
}

extension DBusMethod {
    /// The values of arguments whose types were checked, decoded in order.
    static func decode<each Input: DBusDecodable>(
        _ values: [DBusValue], as types: (repeat (each Input).Type)
    ) throws(DBusError) -> (repeat each Input) {
        var index = 0
        func next<Value: DBusDecodable>(_ type: Value.Type) throws(DBusError) -> Value {
            defer { index += 1 }
            return try Value(dbusValue: values[index])
        }
        return (repeat try next((each Input).self))
    }
}

/// The tasks serving typed method calls, bounded, and stopped together at shutdown.
///
/// Each call's task starts at once on the thread that received it (`Task.immediate`), so calls
/// reach the actor they await first in the order they arrived — a task group cannot start work
/// synchronously from the connection's thread. Past ``limit`` calls in flight, a call is refused
/// with `LimitsExceeded` rather than queued. ``finish()`` cancels the calls in flight and waits
/// for them; calls after it are refused.
public final class DBusCallTasks: Sendable {
    private struct State {
        var running: [Int: Task<Void, Never>] = [:]
        /// Calls that replied before their task was recorded (a body that never suspended).
        var doneEarly: Set<Int> = []
        var nextID = 0
        var finished = false
    }
    private let state = Mutex(State())
    public let limit: Int

    public init(limit: Int = 1024) { self.limit = limit }

    /// Runs `body` for the call `reply` answers; an error it throws is the reply.
    func start(_ reply: DBusReply, _ body: @escaping @Sendable () async throws -> Void) {
        let id: Int? = state.withLock { state in
            guard !state.finished, state.running.count < limit else { return nil }
            state.nextID += 1
            return state.nextID
        }
        guard let id else {
            return reply.fail(DBusError.limitsExceeded("the service is shutting down or has too many calls in flight"))
        }
        let task = Task.immediate {
            do {
                try await body()
            } catch {
                reply.fail(error)
            }
            self.state.withLock { state in
                if state.running.removeValue(forKey: id) == nil { state.doneEarly.insert(id) }
            }
        }
        state.withLock { state in
            if state.doneEarly.remove(id) == nil { state.running[id] = task }
        }
    }

    /// Cancels the calls in flight and waits until each has replied.
    public func finish() async {
        let tasks = state.withLock { state in
            state.finished = true
            return Array(state.running.values)
        }
        for task in tasks { task.cancel() }
        for task in tasks { await task.value }
    }
}
