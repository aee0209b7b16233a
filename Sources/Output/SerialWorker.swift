import Foundation

/// One thread that runs jobs in order, with a bounded queue of waiting jobs.
///
/// The thread starts with the first job and ends when the owner closes the worker and the queue
/// is empty, so an idle, closed worker holds no thread. Not `NIOThreadPool`: its threads live as
/// long as the pool and its queue has no bound.
final class SerialWorker: @unchecked Sendable {
    // Safety: `jobs`, `threadRunning` and `closed` are only touched with `condition` locked.
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var threadRunning = false
    private var closed = false
    private let name: String
    /// How many jobs may wait behind the running one.
    let capacity: Int

    init(name: String, capacity: Int) {
        self.name = name
        self.capacity = capacity
    }

    /// Queues `job`; false (and `job` dropped) when `capacity` jobs are already waiting.
    func submit(_ job: @escaping @Sendable () -> Void) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard jobs.count < capacity, !closed else { return false }
        jobs.append(job)
        if threadRunning {
            condition.signal()
        } else {
            threadRunning = true
            let thread = Thread { [self] in runJobs() }
            thread.name = name
            thread.start()
        }
        return true
    }

    /// Lets the thread end once the queued jobs have run.
    func close() {
        condition.lock()
        closed = true
        condition.signal()
        condition.unlock()
    }

    private func runJobs() {
        while true {
            condition.lock()
            while jobs.isEmpty && !closed { condition.wait() }
            if jobs.isEmpty {
                threadRunning = false
                condition.unlock()
                return
            }
            let job = jobs.removeFirst()
            condition.unlock()
            job()
        }
    }
}
