import CSttdSystem
import CWaylandClient
import CWaylandIM
import Foundation
import Synchronization

/// A Wayland connection of the tests' own (libwayland-client), for the test keyboard and the
/// stand-in input method: connects by absolute socket path, lists the globals, and once
/// ``startDispatching()`` is called reads and dispatches events on a thread of its own until
/// ``close()``. Requests may be sent from any thread (libwayland locks its marshalling); each is
/// flushed with ``flush()``. Objects with listeners are made before dispatching starts, so no event
/// can reach an object before its listener is set.
final class WaylandTestClient: @unchecked Sendable {
    // Safety: `display` is libwayland's (thread-safe requests); the thread is started once, before
    // any other thread sees this object, and `closed`/`finished` are atomic.
    let display: OpaquePointer
    let registry: OpaquePointer
    /// The globals the compositor announced before the first round trip (set once, in init).
    private(set) var globals: [Global]
    private let wake: (read: Int32, write: Int32)
    private let closed = Atomic<Bool>(false)
    private let finished = Atomic<Bool>(false)
    private let dispatching = Atomic<Bool>(false)
    /// Objects the listeners point into: alive as long as the connection is.
    private let retained: Mutex<[any AnyObject & Sendable]> = Mutex([])

    struct Global: Sendable {
        var name: UInt32
        var interface: String
        var version: UInt32
    }

    /// Connects to the socket at `path` and collects the globals (one bounded round trip).
    init(socket path: String) throws {
        guard let display = wl_display_connect(path) else {
            throw MissingPrerequisite(
                description: "cannot connect to the Wayland socket \(path): \(String(cString: strerror(errno)))")
        }
        self.display = display
        var pair: [Int32] = [0, 0]
        guard sttd_socketpair(&pair) == 0 else {
            wl_display_disconnect(display)
            throw MissingPrerequisite(description: "socketpair: \(String(cString: strerror(errno)))")
        }
        wake = (pair[0], pair[1])
        let collected = GlobalList()
        registry = wl_display_get_registry(display)
        wl_registry_add_listener(registry, Self.registryListener, Unmanaged.passUnretained(collected).toOpaque())
        globals = []
        do { try roundtrip() } catch {
            close()
            throw error
        }
        // The registry's listener keeps pointing at the list; later globals land there unread.
        retain(collected)
        globals = collected.globals.withLock { $0 }
    }

    /// The global named `interface`, or a failure naming the compositor's missing protocol.
    func global(_ interface: String) throws -> Global {
        guard let global = globals.first(where: { $0.interface == interface }) else {
            throw MissingPrerequisite(
                description: "the compositor offers no \(interface) (globals: \(globals.map(\.interface)))")
        }
        return global
    }

    /// Binds the first `wl_seat` (version 1: the objects made on it need no more).
    func bindSeat() throws -> OpaquePointer {
        try bind("wl_seat") { sttd_wl_bind_seat($0, $1, 1) }
    }

    /// Binds the global `interface` with `bind`, one of CWaylandIM's shims (Swift cannot pass an
    /// interface's address to `wl_registry_bind`).
    func bind(_ interface: String, with bind: (OpaquePointer, UInt32) -> OpaquePointer?) throws -> OpaquePointer {
        guard let proxy = bind(registry, try global(interface).name) else { throw failure("binding \(interface)") }
        return proxy
    }

    /// Keeps `object` (a listener's data) alive as long as this connection.
    func retain(_ object: any AnyObject & Sendable) { retained.withLock { $0.append(object) } }

    /// Sends what the requests so far queued; fails when the compositor closed the connection or
    /// raised a protocol error (both fatal to it).
    func flush() throws {
        while wl_display_flush(display) < 0 {
            guard errno == EAGAIN else { throw failure("flush") }
            var pending = pollfd(fd: wl_display_get_fd(display), events: Int16(POLLOUT), revents: 0)
            _ = poll(&pending, 1, 1000)
        }
        if wl_display_get_error(display) != 0 { throw failure("flush") }
    }

    /// The connection's error, with the protocol error's interface and code when it is one.
    var error: String? {
        let code = wl_display_get_error(display)
        guard code != 0 else { return nil }
        var interface: UnsafePointer<wl_interface>?
        var id: UInt32 = 0
        let protocolCode = wl_display_get_protocol_error(display, &interface, &id)
        if code == EPROTO, let interface {
            return "protocol error \(protocolCode) on \(String(cString: interface.pointee.name))@\(id)"
        }
        return String(cString: strerror(code))
    }

    private func failure(_ what: String) -> MissingPrerequisite {
        MissingPrerequisite(description: "Wayland \(what) failed: \(error ?? String(cString: strerror(errno)))")
    }

    /// Sends a `wl_display.sync` and dispatches events on this thread until its answer, so every
    /// event the compositor sent before has been handled. Only before ``startDispatching()``.
    func roundtrip(timeout: Duration = .seconds(10)) throws {
        precondition(!dispatching.load(ordering: .acquiring), "roundtrip after dispatching started")
        let answered = Flag()
        guard let callback = wl_display_sync(display) else { throw failure("sync") }
        defer { wl_callback_destroy(callback) }
        wl_callback_add_listener(callback, Self.callbackListener, Unmanaged.passUnretained(answered).toOpaque())
        let deadline = ContinuousClock.now + timeout
        while !answered.value {
            while wl_display_prepare_read(display) != 0 {
                guard wl_display_dispatch_pending(display) >= 0 else { throw failure("dispatch") }
            }
            guard wl_display_flush(display) >= 0 || errno == EAGAIN else {
                wl_display_cancel_read(display)
                throw failure("flush")
            }
            let left = deadline - ContinuousClock.now
            var readable = pollfd(fd: wl_display_get_fd(display), events: Int16(POLLIN), revents: 0)
            if poll(&readable, 1, Int32(max(0, (left / .milliseconds(1)).rounded(.up)))) > 0 {
                guard wl_display_read_events(display) >= 0 else { throw failure("read") }
            } else {
                wl_display_cancel_read(display)
                guard ContinuousClock.now < deadline else {
                    throw MissingPrerequisite(
                        description: "the compositor did not answer a round trip within \(timeout)")
                }
            }
            guard wl_display_dispatch_pending(display) >= 0 else { throw failure("dispatch") }
        }
    }

    /// Starts the thread that reads and dispatches events until ``close()`` or the connection's end.
    func startDispatching(name: String) {
        guard !dispatching.exchange(true, ordering: .acquiringAndReleasing) else { return }
        let thread = Thread { [self] in
            dispatchLoop()
            finished.store(true, ordering: .releasing)
        }
        thread.name = name
        thread.start()
    }

    private func dispatchLoop() {
        let fd = wl_display_get_fd(display)
        while !closed.load(ordering: .acquiring) {
            while wl_display_prepare_read(display) != 0 {
                guard wl_display_dispatch_pending(display) >= 0 else { return }
            }
            if wl_display_flush(display) < 0 && errno != EAGAIN {
                wl_display_cancel_read(display)
                return
            }
            var fds = [
                pollfd(fd: fd, events: Int16(POLLIN), revents: 0),
                pollfd(fd: wake.read, events: Int16(POLLIN), revents: 0),
            ]
            let ready = poll(&fds, 2, -1)
            if ready > 0 && fds[0].revents != 0 {
                guard wl_display_read_events(display) >= 0 else { return }
            } else {
                wl_display_cancel_read(display)
            }
            guard wl_display_dispatch_pending(display) >= 0 else { return }
        }
    }

    /// Stops the thread (waiting for it) and disconnects; the compositor then destroys this
    /// client's objects.
    func close() {
        guard !closed.exchange(true, ordering: .acquiringAndReleasing) else { return }
        if dispatching.load(ordering: .acquiring) {
            var byte: UInt8 = 1
            _ = write(wake.write, &byte, 1)
            let deadline = ContinuousClock.now + .seconds(10)
            while !finished.load(ordering: .acquiring) && ContinuousClock.now < deadline { usleep(1000) }
        }
        wl_display_disconnect(display)
        Foundation.close(wake.read)
        Foundation.close(wake.write)
    }

    deinit { close() }

    /// A one-way flag set on the dispatching thread.
    final class Flag: Sendable {
        private let state = Atomic<Bool>(false)
        var value: Bool { state.load(ordering: .acquiring) }
        func set() { state.store(true, ordering: .releasing) }
    }

    private final class GlobalList: Sendable {
        let globals = Mutex<[Global]>([])
    }

    nonisolated(unsafe) private static let registryListener: UnsafeMutablePointer<wl_registry_listener> = {
        let listener = UnsafeMutablePointer<wl_registry_listener>.allocate(capacity: 1)
        listener.initialize(
            to: wl_registry_listener(
                global: { data, _, name, interface, version in
                    guard let data, let interface else { return }
                    let list = Unmanaged<GlobalList>.fromOpaque(data).takeUnretainedValue()
                    let global = Global(name: name, interface: String(cString: interface), version: version)
                    list.globals.withLock { $0.append(global) }
                },
                global_remove: { _, _, _ in }))
        return listener
    }()

    nonisolated(unsafe) private static let callbackListener: UnsafeMutablePointer<wl_callback_listener> = {
        let listener = UnsafeMutablePointer<wl_callback_listener>.allocate(capacity: 1)
        listener.initialize(
            to: wl_callback_listener(done: { data, _, _ in
                guard let data else { return }
                Unmanaged<Flag>.fromOpaque(data).takeUnretainedValue().set()
            }))
        return listener
    }()
}
