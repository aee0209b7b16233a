import CWaylandClient
import CWaylandIM
import Foundation
import Logging

/// How sttd stands on the compositor's seat.
public enum SeatStatus: Sendable, Equatable {
    /// sttd is the seat's input method.
    case held(seat: String)
    /// Another input method (fcitx5, …) holds the seat.
    case unavailable(seat: String)
    /// The compositor offers no `zwp_input_method_manager_v2` (GNOME, KDE).
    case unsupported
    /// No connection: the compositor is gone or broke it (the reason is logged).
    case disconnected
}

/// sttd's Wayland input method on the compositor's first seat: one connection, served by a thread
/// of its own that blocks in `poll` on the display and on the queue from the core (no timers).
/// The connection closes with sttd, so the input method cannot outlive it.
public final class WaylandSeatConnection: Sendable {
    public let socketPath: String
    private let logger: Logger
    private let commands: SeatCommands

    /// `socketPath` is absolute (`$XDG_RUNTIME_DIR/$WAYLAND_DISPLAY`).
    public init(socketPath: String, logger: Logger) throws {
        self.socketPath = socketPath
        self.logger = logger
        commands = try SeatCommands()
    }

    /// Shows an interim as preedit in the active field (empty: none). Never blocks.
    public func showPreedit(_ text: String) { commands.showPreedit(text) }

    /// Queues text for the active field; false when the queue is full (the text is not sent).
    public func deliver(_ delivery: Delivery) -> Bool { commands.deliver(delivery) }

    /// Ends ``serve(status:report:)`` and ``waitForSocket()``, now and later.
    public func stop() { commands.stop() }

    /// ``stop()`` was called.
    public var isStopped: Bool { commands.isStopped }

    /// Connects and serves the seat until the compositor goes or ``stop()``; `status` and
    /// `report` are called on the display thread. Returns the last status.
    public func serve(
        status: @escaping @Sendable (SeatStatus) -> Void, report: @escaping @Sendable (FieldReport) -> Void
    ) async -> SeatStatus {
        let (path, logger, commands) = (socketPath, logger, commands)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let thread = Thread {
                    let seat = SeatSession(commands: commands, logger: logger, status: status, report: report)
                    continuation.resume(returning: seat.run(socketPath: path))
                }
                thread.name = "wayland-im"
                thread.start()
            }
        } onCancel: {
            commands.stop()
        }
    }

    /// Waits until the socket exists (`recreated`: until it is made anew, as by a compositor
    /// that started again); false after ``stop()``.
    public func waitForSocket(recreated: Bool = false) async -> Bool {
        let (path, commands) = (socketPath, commands)
        return await withTaskCancellationHandler {
            await withCheckedContinuation { continuation in
                let thread = Thread { continuation.resume(returning: SocketWatch.wait(for: path, recreated: recreated, commands: commands)) }
                thread.name = "wayland-im-wait"
                thread.start()
            }
        } onCancel: {
            commands.stop()
        }
    }
}

/// One connection's state, confined to the display thread (the C listeners call back into it
/// there, from `wl_display_dispatch_pending`).
final class SeatSession {
    let commands: SeatCommands
    let logger: Logger
    let status: @Sendable (SeatStatus) -> Void
    let report: @Sendable (FieldReport) -> Void

    var display: OpaquePointer?
    var globals = Globals()
    var seat: OpaquePointer?
    var seatName = "seat0"
    var inputMethod: OpaquePointer?
    var keyboard: VirtualKeyboard?
    var machine = SeatMachine()
    var focusedApp = FocusedApp()
    var unavailable = false
    var syncDone = false
    /// When the field's answer to the probe is overdue (see SeatMachine+Probe.swift).
    var probeDeadline: ContinuousClock.Instant?

    struct Global {
        var name: UInt32
        var version: UInt32
    }

    struct Globals {
        var seat: Global?
        var inputMethodManager: Global?
        var virtualKeyboardManager: Global?
        var toplevelManager: Global?
    }

    init(
        commands: SeatCommands, logger: Logger, status: @escaping @Sendable (SeatStatus) -> Void,
        report: @escaping @Sendable (FieldReport) -> Void
    ) {
        self.commands = commands
        self.logger = logger
        self.status = status
        self.report = report
    }

    enum LoopEnd: Error {
        case stopped
        case failed(String)
    }

    /// Serves until the end; returns the status it ended in.
    func run(socketPath: String) -> SeatStatus {
        // Text queued for an earlier connection was for a field that is gone.
        guard !commands.take().stop else { return .disconnected }
        guard let display = wl_display_connect(socketPath) else {
            logger.notice(
                "no Wayland compositor to be the input method of",
                metadata: ["socket": "\(socketPath)", "error": "\(String(cString: strerror(errno)))"])
            return .disconnected
        }
        self.display = display
        defer {
            keyboard?.destroy()
            if let inputMethod { zwp_input_method_v2_destroy(inputMethod) }
            wl_display_disconnect(display)
        }
        do {
            guard let held = try bind() else { return .unsupported }
            // Unavailable stays so until the compositor goes (the object is inert).
            if case .unavailable = held { status(held) }
            try loop(until: { false })
        } catch .failed(let reason) {
            logger.notice("the Wayland input method's connection ended: \(reason)")
        } catch {}
        return .disconnected
    }

    /// Binds the seat's input method; nil when the compositor offers none.
    private func bind() throws(LoopEnd) -> SeatStatus? {
        let registry = wl_display_get_registry(display)
        wl_registry_add_listener(registry, Listeners.registry, Unmanaged.passUnretained(self).toOpaque())
        try roundTrip()
        guard let seatGlobal = globals.seat, let manager = globals.inputMethodManager else {
            logger.info("the compositor offers no zwp_input_method_manager_v2: typing goes through the tools")
            return nil
        }
        let seat = sttd_wl_bind_seat(registry, seatGlobal.name, min(seatGlobal.version, 2))
        self.seat = seat
        wl_seat_add_listener(seat, Listeners.seat, Unmanaged.passUnretained(self).toOpaque())
        // The keyboard first: a new keyboard makes the compositor send the focused window its
        // keymap and focus again, and the window answers with a text-input commit. Before the
        // input method exists, that cannot cross sttd's first text (foot drops a commit whose
        // serial it has passed).
        if let manager = globals.virtualKeyboardManager, let seat {
            do {
                keyboard = try VirtualKeyboard(
                    manager: sttd_wl_bind_virtual_keyboard_manager(registry, manager.name), seat: seat)
            } catch {
                logger.warning("no virtual keyboard (\(error)): \"press enter\" and BackSpaces in terminals do nothing")
            }
        } else {
            logger.warning("the compositor offers no zwp_virtual_keyboard_manager_v1: \"press enter\" does nothing")
        }
        try roundTrip()
        let inputMethod = zwp_input_method_manager_v2_get_input_method(
            sttd_wl_bind_input_method_manager(registry, manager.name), seat)
        self.inputMethod = inputMethod
        zwp_input_method_v2_add_listener(inputMethod, Listeners.inputMethod, Unmanaged.passUnretained(self).toOpaque())
        // `unavailable` comes at once if another input method holds the seat.
        try roundTrip()
        if unavailable {
            keyboard?.destroy()
            keyboard = nil
            logger.notice(
                "another input method holds \(seatName) (zwp_input_method_v2 unavailable): typing goes through the tools")
            return .unavailable(seat: seatName)
        }
        if let manager = globals.toplevelManager {
            let toplevels = sttd_wl_bind_foreign_toplevel_manager(registry, manager.name)
            zwlr_foreign_toplevel_manager_v1_add_listener(
                toplevels, Listeners.toplevelManager, Unmanaged.passUnretained(self).toOpaque())
        }
        logger.info("sttd is the input method of \(seatName)")
        status(.held(seat: seatName))
        perform(machine.handle(.bound))
        return .held(seat: seatName)
    }
}
