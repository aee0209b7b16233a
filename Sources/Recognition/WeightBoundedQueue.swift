import Dispatch
import NIOCore
import Synchronization

/// A FIFO of jobs for a thread that blocks until work arrives, bounded by the weight it holds.
///
/// Each job has a weight (for the decoder: samples of audio; 0 for control jobs). A push that
/// would take the queued weight past `capacity` is refused and queues nothing; a weightless push
/// is always taken, so control jobs get through however far behind the worker is.
final class WeightBoundedQueue<Job: Sendable>: Sendable {
    let capacity: Int
    // A counting semaphore: one signal per push or close; a spare signal only costs a spurious wake-up.
    private let wakeUp = DispatchSemaphore(value: 0)
    private let state = Mutex(State())

    private struct Entry {
        var job: Job
        var weight: Int
    }

    private struct State {
        var entries = CircularBuffer<Entry>()
        var weight = 0
        var closed = false
    }

    init(capacity: Int) {
        precondition(capacity > 0, "a queue that refuses all weighted jobs")
        self.capacity = capacity
    }

    /// Appends a job; returns false, and queues nothing, if its weight would exceed the capacity.
    @discardableResult
    func push(_ job: Job, weight: Int = 0) -> Bool {
        let accepted = state.withLock { state in
            guard weight == 0 || state.weight + weight <= capacity else { return false }
            state.entries.append(Entry(job: job, weight: weight))
            state.weight += weight
            return true
        }
        if accepted { wakeUp.signal() }
        return accepted
    }

    /// Removes every queued job that matches, giving back its weight.
    func removeAll(where matches: (Job) -> Bool) {
        state.withLock { state in
            var kept = CircularBuffer<Entry>(initialCapacity: state.entries.count)
            for entry in state.entries {
                if matches(entry.job) { state.weight -= entry.weight } else { kept.append(entry) }
            }
            state.entries = kept
        }
    }

    /// Lets ``pop()`` return nil once the queue is empty.
    func close() {
        state.withLock { $0.closed = true }
        wakeUp.signal()
    }

    /// The weight queued now (for the decoder: samples it is behind by).
    var weight: Int { state.withLock { $0.weight } }

    /// What ``pop(timeout:)`` got.
    enum Popped {
        case job(Job)
        case timedOut
        case closed
    }

    /// Blocks until a job arrives; nil once closed and empty.
    func pop() -> Job? {
        guard case .job(let job) = pop(timeout: nil) else { return nil }
        return job
    }

    /// Blocks until a job arrives, the queue is closed and empty, or `timeout` passes with nothing.
    func pop(timeout: Duration?) -> Popped {
        let deadline = timeout.map {
            DispatchTime.now() + .nanoseconds(Int(min($0, .seconds(1 << 30)) / .nanoseconds(1)))
        }
        while true {
            let next = state.withLock { state -> (job: Job?, closed: Bool) in
                guard let entry = state.entries.popFirst() else { return (nil, state.closed) }
                state.weight -= entry.weight
                return (entry.job, false)
            }
            if let job = next.job { return .job(job) }
            if next.closed { return .closed }
            if let deadline {
                if wakeUp.wait(timeout: deadline) == .timedOut { return .timedOut }
            } else {
                wakeUp.wait()
            }
        }
    }
}
