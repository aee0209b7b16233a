import NIOCore
import NIOPosix
import Synchronization

/// `Task.sleep(for:)` on a NIO timer.
///
/// On Linux, `Task.sleep` always goes to libdispatch (even when NIO runs the tasks), and the
/// first use arms libdispatch's once-a-second pool monitor for the rest of the process's life:
/// an idle sttd would never sleep through. Throws `CancellationError` when the task is cancelled.
public func eventLoopSleep(for duration: Duration) async throws {
    let sleeper = Sleeper()
    try await withTaskCancellationHandler {
        try await withCheckedThrowingContinuation { continuation in
            sleeper.start(continuation, after: duration)
        }
    } onCancel: {
        sleeper.wake(throwing: CancellationError())
    }
}

/// One sleep: resumed once, by its timer or by cancellation, whichever comes first.
private final class Sleeper: Sendable {
    private enum State {
        case notStarted
        case sleeping(CheckedContinuation<Void, any Error>, Scheduled<Void>)
        case cancelledEarly
        case done
    }
    private let state = Mutex<State>(.notStarted)

    func start(_ continuation: CheckedContinuation<Void, any Error>, after duration: Duration) {
        let cancelled = state.withLock { state -> Bool in
            guard case .notStarted = state else { return true }
            let timer = MultiThreadedEventLoopGroup.singleton.any().scheduleTask(in: TimeAmount(duration)) {
                self.wake(throwing: nil)
            }
            state = .sleeping(continuation, timer)
            return false
        }
        if cancelled { continuation.resume(throwing: CancellationError()) }
    }

    func wake(throwing error: (any Error)?) {
        let sleeping = state.withLock { state -> (CheckedContinuation<Void, any Error>, Scheduled<Void>)? in
            switch state {
            case .notStarted:
                state = .cancelledEarly
                return nil
            case .sleeping(let continuation, let timer):
                state = .done
                return (continuation, timer)
            case .cancelledEarly, .done:
                return nil
            }
        }
        guard let (continuation, timer) = sleeping else { return }
        if let error {
            timer.cancel()
            continuation.resume(throwing: error)
        } else {
            continuation.resume()
        }
    }
}
