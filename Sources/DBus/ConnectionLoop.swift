import CDBus
import Foundation
import Logging
import Synchronization

/// The owner thread's event loop around one libdbus connection.
///
/// Other threads hand the owner thread jobs through ``perform(_:droppable:)``; the queue is
/// bounded. Up to the soft bound (4096 jobs) every job is taken. Beyond it, droppable jobs
/// (high-rate signals such as meter levels, whose next value supersedes them) are refused and
/// counted, with one warning per overflow episode; an episode ends when the owner thread drains
/// the queue. Other jobs (replies, property changes, ordinary signals) are still taken up to the
/// hard bound (65 536): a queue that long means the owner thread is wedged, so the connection is
/// closed with an error logged. ``DBusConnection/waitUntilDisconnected()`` then returns at once,
/// the service shuts down and its supervisor restarts it.
///
/// `@unchecked Sendable`: the properties marked "owner thread" are read and written only on the
/// thread running ``run(bus:ready:)``; other threads reach them only through `perform`, which
/// queues a job under `shared`'s lock and wakes the thread through the self-pipe.
///
/// One exception, for high-rate signals (meter levels, ten a second while listening): when no
/// job is queued or running, ``sendDroppable(_:)`` hands the signal to libdbus on the calling
/// thread, because waking the owner thread for each was most of sttd's CPU while listening; the
/// single-owner rule guards against a thread blocked in `read_write_dispatch`, which this loop
/// never calls (it polls outside libdbus, and `dbus_connection_send` only writes what the
/// socket takes at once, leaving the rest to the owner thread).
final class ConnectionLoop: @unchecked Sendable {
    typealias Job = @Sendable (ConnectionLoop) -> Void

    /// How many jobs may wait for the owner thread.
    struct Bounds: Sendable {
        /// Beyond this many queued jobs, droppable jobs are refused.
        var soft: Int
        /// Beyond this many, the owner thread is taken to be wedged and the connection closes.
        var hard: Int
        static let standard = Bounds(soft: 4096, hard: 65_536)
    }

    struct CrossThreadState {
        var jobs: [Job] = []
        var ended = false
        var closeRequested = false
        var endWaiters: [CheckedContinuation<Void, Never>] = []
        /// The owner thread is running jobs it took from `jobs`.
        var running = false
        var droppedJobs = 0
        // Set from the first refused job until the owner thread drains the queue.
        var overflowing = false
        var droppedThisEpisode = 0

        /// Counts a refused droppable job; true if it is the first of an overflow episode.
        mutating func refuseDroppable() -> Bool {
            droppedJobs += 1
            droppedThisEpisode += 1
            defer { overflowing = true }
            return !overflowing
        }
    }
    let shared = Mutex(CrossThreadState())
    /// The connection while other threads may send on it: set once it is up, cleared (waiting
    /// for a send in progress) before it closes.
    let direct = Mutex(DirectConnection(raw: nil))
    /// Unsent bytes in libdbus past which a droppable signal is dropped, not sent directly.
    static let directBacklogLimit = 1 << 20
    let bounds: Bounds
    let logger: Logger
    // A self-pipe: other threads write a byte to wake the owner thread out of poll().
    let wakeFD: Int32
    let wakeWriteFD: Int32

    // Owner thread only.
    var raw: OpaquePointer?
    var watches: [OpaquePointer] = []
    var timeouts: [OpaquePointer: ContinuousClock.Instant] = [:]
    var objects: [String: DBusObject] = [:]
    var subscriptions: [UInt64: SignalSubscription] = [:]
    /// Well-known names whose owner subscribers follow, kept up to date from the bus's
    /// `NameOwnerChanged` in the order messages arrive.
    var owners: [String: NameOwner] = [:]
    var disconnected = false

    init(bounds: Bounds = .standard, logger: Logger) throws(DBusError) {
        self.bounds = bounds
        self.logger = logger
        dbus_threads_init_default()
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else { throw .failed("cannot create a pipe: \(String(cString: strerror(errno)))") }
        for fd in fds {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        }
        (wakeFD, wakeWriteFD) = (fds[0], fds[1])
    }

    deinit {
        close(wakeFD)
        close(wakeWriteFD)
    }

    var hasEnded: Bool { shared.withLock { $0.ended } }

    /// How many droppable jobs have been refused since the loop started.
    var droppedJobs: Int { shared.withLock { $0.droppedJobs } }

    /// How many droppable signals were sent on their emitter's thread.
    var directSends: Int { direct.withLock { $0.sent } }

    enum Admission {
        case queued(first: Bool)
        case ended
        case dropped(firstInEpisode: Bool)
        case wedged(queued: Int, waiters: [CheckedContinuation<Void, Never>])
    }

    /// Queues a job for the owner thread; false if the loop has ended or the job was refused
    /// under the queue's bounds (see the type's documentation).
    @discardableResult
    func perform(_ job: @escaping Job, droppable: Bool = false) -> Bool {
        let admission = shared.withLock { shared -> Admission in
            guard !shared.ended else { return .ended }
            let count = shared.jobs.count
            if droppable && count >= bounds.soft { return .dropped(firstInEpisode: shared.refuseDroppable()) }
            if count >= bounds.hard {
                // Refuse everything from now on; the owner thread closes the connection if it
                // ever comes back, and waiters learn now that the connection is gone.
                shared.ended = true
                shared.closeRequested = true
                defer { shared.endWaiters.removeAll() }
                return .wedged(queued: count, waiters: shared.endWaiters)
            }
            shared.jobs.append(job)
            return .queued(first: count == 0)
        }
        switch admission {
        case .queued(let first):
            // The thread takes every queued job per wake-up: one byte for the first is enough.
            if first { wake() }
            return true
        case .ended:
            return false
        case .dropped(let firstInEpisode):
            if firstInEpisode { warnDropping(["queued": "\(bounds.soft)"]) }
            return false
        case .wedged(let queued, let waiters):
            logger.error(
                "The D-Bus connection thread is not taking its work; closing the connection",
                metadata: ["queued": "\(queued)"])
            wake()
            for waiter in waiters { waiter.resume() }
            return false
        }
    }

    /// Sends a high-rate signal that may be dropped: on the calling thread when nothing is queued
    /// for the owner thread or running there (so it follows everything emitted before it), else
    /// as a droppable job. False if it was dropped.
    func sendDroppable(_ outgoing: OutgoingMessage) -> Bool {
        guard shared.withLock({ !$0.ended && $0.jobs.isEmpty && !$0.running }) else {
            return perform({ $0.send(outgoing) }, droppable: true)
        }
        let message: Message
        do {
            message = try outgoing.build()
        } catch {
            logger.error("Cannot build a D-Bus message", metadata: ["error": "\(error.message)"])
            return false
        }
        let sent = direct.withLock { direct -> Bool? in
            guard let raw = direct.raw else { return nil }
            // The bus is not reading: another reading would only wait behind the others.
            guard dbus_connection_get_outgoing_size(raw) < Self.directBacklogLimit else { return false }
            dbus_connection_send(raw, message.raw, nil)
            direct.sent += 1
            return true
        }
        switch sent {
        case true?: return true
        case false?:
            if shared.withLock({ $0.refuseDroppable() }) {
                warnDropping(["unsentBytes": "\(Self.directBacklogLimit)"])
            }
            return false
        case nil:
            // Not up yet, or closing.
            return perform({ $0.send(outgoing) }, droppable: true)
        }
    }

    func warnDropping(_ metadata: Logger.Metadata) {
        logger.warning(
            "The D-Bus connection is falling behind; dropping high-rate signals until it catches up",
            metadata: metadata)
    }

    func requestClose() {
        shared.withLock { $0.closeRequested = true }
        wake()
    }

    func waitUntilEnded() async {
        await withCheckedContinuation { continuation in
            let ended = shared.withLock { shared -> Bool in
                if !shared.ended { shared.endWaiters.append(continuation) }
                return shared.ended
            }
            if ended { continuation.resume() }
        }
    }

    func wake() {
        var byte: UInt8 = 1
        _ = write(wakeWriteFD, &byte, 1)
    }
}

/// The libdbus connection as other threads may use it, with a count of their sends.
struct DirectConnection: @unchecked Sendable {
    // @unchecked: used only under `ConnectionLoop.direct`'s lock; libdbus locks the connection.
    var raw: OpaquePointer?
    var sent = 0
}
