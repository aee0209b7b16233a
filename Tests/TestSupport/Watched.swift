import NIOCore
import NIOPosix
import Synchronization

/// A value that changes on other threads, and tasks waiting for it to satisfy a condition
/// (instead of sleeping and looking again).
public final class Watched<Value: Sendable>: Sendable {
    private struct Waiter {
        let id: Int
        let condition: @Sendable (Value) -> Bool
        let continuation: CheckedContinuation<Bool, Never>
    }
    private struct State {
        var value: Value
        var waiters: [Waiter] = []
        var nextID = 0
    }
    private let state: Mutex<State>

    public init(_ value: Value) { state = Mutex(State(value: value)) }

    public var value: Value { state.withLock { $0.value } }

    /// Changes the value and wakes the waiters whose condition now holds.
    @discardableResult
    public func update<Result: Sendable>(_ change: (inout Value) -> Result) -> Result {
        let (result, satisfied) = state.withLock { state in
            let result = change(&state.value)
            let value = state.value
            let satisfied = state.waiters.filter { $0.condition(value) }
            state.waiters.removeAll { waiter in satisfied.contains { $0.id == waiter.id } }
            return (result, satisfied)
        }
        for waiter in satisfied { waiter.continuation.resume(returning: true) }
        return result
    }

    /// Waits until `condition` holds; throws ``WaitTimedOut`` (naming `what` and the value then)
    /// if it does not within `timeout`.
    public func wait(
        _ what: @autoclosure () -> String = "the awaited value", timeout: Duration = .seconds(30),
        fileID: String = #fileID, line: Int = #line, until condition: @escaping @Sendable (Value) -> Bool
    ) async throws {
        guard await happens(within: timeout, condition) else {
            let seen = String(describing: value).prefix(2000)
            throw WaitTimedOut("\(what()); the value then: \(seen)", after: timeout, fileID: fileID, line: line)
        }
    }

    /// Whether `condition` comes to hold within `timeout`: for checking that it does *not*, or
    /// acting on whether it did (use the answer); to expect it, ``wait(_:timeout:fileID:line:until:)``.
    public func happens(within timeout: Duration, _ condition: @escaping @Sendable (Value) -> Bool) async -> Bool {
        await withCheckedContinuation { continuation in
            let id = state.withLock { state -> Int? in
                guard !condition(state.value) else { return nil }
                state.nextID += 1
                state.waiters.append(Waiter(id: state.nextID, condition: condition, continuation: continuation))
                return state.nextID
            }
            guard let id else {
                continuation.resume(returning: true)
                return
            }
            MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: TimeAmount(timeout)) {
                let expired = self.state.withLock { state -> Waiter? in
                    guard let index = state.waiters.firstIndex(where: { $0.id == id }) else { return nil }
                    return state.waiters.remove(at: index)
                }
                expired?.continuation.resume(returning: false)
            }
        }
    }
}
