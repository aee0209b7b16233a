import Synchronization

/// A value that arrives once, later: the first `resolve` wins, and every waiter (earlier or
/// later) gets it. For "how did this end" answers handed from a thread to async code.
public final class SetOnce<Value: Sendable>: Sendable {
    private let state = Mutex<(value: Value?, waiters: [CheckedContinuation<Value, Never>])>((nil, []))

    public init() {}

    /// Sets the value if none was set; returns whether this call set it.
    @discardableResult
    public func resolve(_ value: Value) -> Bool {
        let waiters = state.withLock { state -> [CheckedContinuation<Value, Never>]? in
            guard state.value == nil else { return nil }
            state.value = value
            defer { state.waiters = [] }
            return state.waiters
        }
        guard let waiters else { return false }
        for waiter in waiters { waiter.resume(returning: value) }
        return true
    }

    public var isResolved: Bool { state.withLock { $0.value != nil } }

    /// Waits for the value.
    public var value: Value {
        get async {
            await withCheckedContinuation { continuation in
                let value = state.withLock { state -> Value? in
                    if state.value == nil { state.waiters.append(continuation) }
                    return state.value
                }
                if let value { continuation.resume(returning: value) }
            }
        }
    }
}
