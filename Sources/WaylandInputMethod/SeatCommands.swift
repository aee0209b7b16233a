import Foundation
import Synchronization

/// The queue from the core to the input method's display thread, and the pipe that wakes the
/// thread's `poll`. Bounded: a preedit replaces a preedit queued right before it (so at most one
/// waits between two deliveries); at most ``deliveryLimit`` deliveries wait, and one beyond is
/// refused (the caller says so; the text stays in the transcript). Never blocks the caller.
final class SeatCommands: Sendable {
    static let deliveryLimit = 256

    enum Command: Sendable, Equatable {
        case preedit(String)
        case deliver(Delivery)
    }

    private struct Queue {
        var commands: [Command] = []
        var deliveries = 0
        var stop = false
    }

    private let queue = Mutex(Queue())
    /// Read end (polled by the display thread) and write end; nonblocking, close-on-exec.
    let wakeFD: Int32
    private let wakeWriteFD: Int32

    init() throws {
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO) }
        for fd in fds {
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
            _ = fcntl(fd, F_SETFL, O_NONBLOCK)
        }
        wakeFD = fds[0]
        wakeWriteFD = fds[1]
    }

    deinit {
        close(wakeFD)
        close(wakeWriteFD)
    }

    func showPreedit(_ text: String) {
        queue.withLock { queue in
            if case .preedit = queue.commands.last { queue.commands.removeLast() }
            queue.commands.append(.preedit(text))
        }
        wake()
    }

    /// False when ``deliveryLimit`` deliveries already wait.
    func deliver(_ delivery: Delivery) -> Bool {
        let queued = queue.withLock { queue in
            guard queue.deliveries < Self.deliveryLimit else { return false }
            queue.commands.append(.deliver(delivery))
            queue.deliveries += 1
            return true
        }
        if queued { wake() }
        return queued
    }

    var isStopped: Bool { queue.withLock { $0.stop } }

    func stop() {
        queue.withLock { $0.stop = true }
        wake()
    }

    /// Everything queued, in order, and whether to stop; drains the wake pipe first so no
    /// wake-up is lost.
    func take() -> (commands: [Command], stop: Bool) {
        var buffer = [UInt8](repeating: 0, count: 64)
        while read(wakeFD, &buffer, buffer.count) > 0 {}
        return queue.withLock { queue in
            defer { queue = Queue(stop: queue.stop) }
            return (queue.commands, queue.stop)
        }
    }

    private func wake() {
        var byte: UInt8 = 1
        // A full pipe already holds a wake-up.
        _ = write(wakeWriteFD, &byte, 1)
    }
}
