import Synchronization

/// A wake-up call from any thread (capture thread, event loop) to one waiting task.
///
/// A call made while nobody waits is kept for the next ``wait()``: once, or for good when
/// `latching` (a stop signal every later wait must see).
public final class TaskWakeup: Sendable {
    private struct State {
        var pending = false
        var waiter: CheckedContinuation<Void, Never>?
    }
    private let state = Mutex(State())
    private let latching: Bool

    public init(latching: Bool = false) { self.latching = latching }

    public func signal() {
        let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
            defer { state.waiter = nil }
            if state.waiter == nil || latching { state.pending = true }
            return state.waiter
        }
        waiter?.resume()
    }

    /// Returns once signalled, or when the calling task is cancelled. One waiter at a time.
    public func wait() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    if state.pending {
                        if !latching { state.pending = false }
                        return true
                    }
                    // Checked under the lock: a cancellation handler that ran before this found no waiter.
                    if Task.isCancelled { return true }
                    state.waiter = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            let waiter = state.withLock { state -> CheckedContinuation<Void, Never>? in
                defer { state.waiter = nil }
                return state.waiter
            }
            waiter?.resume()
        }
    }
}
