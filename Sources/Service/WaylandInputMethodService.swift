import Foundation
import Synchronization
import Logging
import ServiceLifecycle
import Speech
import SpeechAPI
import SpeechBus
import WaylandInputMethod

/// sttd as the input method of a wlroots compositor's seat (sway, Hyprland, river): the core's
/// `.inputMethodText(_, to: .wayland)` events go to the seat's connection, and the field's state
/// comes back as that input method's reports. In sttd's process, so the input method ends with it.
struct WaylandInputMethodService: Service {
    let core: SpeechCore
    let connection: WaylandSeatConnection
    let logger: Logger
    /// App ids whose windows get the typing tools when no text-input field is active.
    let typingToolsForApps: Set<String>
    /// Called with each status change, for the `WaylandInputMethod` property.
    let status: @Sendable (SeatStatus) -> Void

    /// The desktop `XDG_CURRENT_DESKTOP` names (a colon-separated list) brings its own input
    /// method framework.
    static func hasOwnInputMethod(_ environment: [String: String]) -> Bool {
        let desktops = (environment["XDG_CURRENT_DESKTOP"] ?? "").uppercased().split(separator: ":")
        return desktops.contains { ["GNOME", "KDE"].contains($0) }
    }

    /// The socket `environment` names (`WAYLAND_DISPLAY`, absolute or in `XDG_RUNTIME_DIR`), if any.
    static func socketPath(_ environment: [String: String]) -> String? {
        guard let display = environment["WAYLAND_DISPLAY"], !display.isEmpty else { return nil }
        if display.hasPrefix("/") { return display }
        guard let runtime = environment["XDG_RUNTIME_DIR"], !runtime.isEmpty else { return nil }
        return "\(runtime)/\(display)"
    }

    /// The service for the session `environment` names, or nil (no Wayland display, or the input
    /// method is turned off).
    static func make(
        _ configuration: Configuration.Wayland, environment: [String: String], core: SpeechCore,
        adapter: SpeechBusAdapter, logger: Logger
    ) -> WaylandInputMethodService? {
        let status: @Sendable (SeatStatus) -> Void = { adapter.setWaylandInputMethodStatus(property($0)) }
        guard configuration.inputMethod, let path = socketPath(environment) else { return nil }
        // GNOME and KDE offer no zwp_input_method_manager_v2 (their input method is IBus): not
        // even a connection (KWin, starting, kept sttd's first round trip waiting for seconds).
        if hasOwnInputMethod(environment) {
            status(.unsupported)
            return nil
        }
        do {
            let connection = try WaylandSeatConnection(socketPath: path, logger: logger)
            return WaylandInputMethodService(
                core: core, connection: connection, logger: logger,
                typingToolsForApps: Set(configuration.typingToolsForApps), status: status)
        } catch {
            logger.warning("cannot be the Wayland input method: \(error)")
            return nil
        }
    }

    /// Sends the core's text for this seat to it; called before the core runs. Inline on the
    /// core's executor: a queue append and a pipe write, never a wait.
    func attach() async {
        let connection = connection
        await core.observe { event, _ in
            guard case .inputMethodText(let text, to: .wayland) = event else { return }
            let delivery: Delivery
            switch text {
            case .preedit(let preedit): return connection.showPreedit(preedit)
            case .commit(let typed): delivery = .commit(typed)
            case .delete(let characters): delivery = .delete(characters: characters)
            case .key(let keysym): delivery = .key(keysym)
            }
            if !connection.deliver(delivery) {
                core.submit { core in
                    core.inputMethodCouldNotDeliver(
                        "sttd's Wayland input method fell behind; the text is kept in the transcript and history")
                }
            }
        }
    }

    func run() async throws {
        let (core, connection, status, toolsApps) = (core, connection, status, typingToolsForApps)
        await withGracefulShutdownHandler {
            var lost = false
            while !Task.isCancelled {
                // A socket that refused the last connection must be made anew first.
                guard await connection.waitForSocket(recreated: lost) else { return }
                let seat = SeatName()
                let ended = await connection.serve(
                    status: { now in
                        if case .held(let name) = now { seat.set(name) }
                        status(now)
                    },
                    report: { report in
                        guard let name = seat.get() else { return }
                        // A window without a text-input field, of an app the user opted in.
                        let toolsAllowed = !report.focused && report.app.map(toolsApps.contains) == true
                        let state = InputMethodReport(
                            active: report.active, focused: report.focused, secret: report.secret,
                            toolsAllowed: toolsAllowed)
                        core.submit { core in core.reportInputMethod(state, from: .wayland(seat: name)) }
                    })
                // At shutdown the core has stopped first: it needs to hear nothing more.
                if connection.isStopped { return }
                if let name = seat.get() { core.submit { core in core.inputMethodDeparted(.wayland(seat: name)) } }
                status(ended)
                // No input method protocol here (GNOME, KDE): nothing to wait for.
                if ended == .unsupported { return }
                lost = true
            }
        } onGracefulShutdown: {
            connection.stop()
        }
    }
}

extension WaylandInputMethodService {
    /// The `WaylandInputMethod` property's value for `status`.
    static func property(_ status: SeatStatus) -> WaylandInputMethodStatus {
        switch status {
        case .held(let seat): .held(seat: seat)
        case .unavailable(let seat): .unavailable(seat: seat)
        case .unsupported: .unsupported
        case .disconnected: .disconnected
        }
    }
}

/// The seat's name, set on the display thread once the seat is held.
private final class SeatName: Sendable {
    private let name = Mutex<String?>(nil)
    func set(_ value: String) { name.withLock { $0 = value } }
    func get() -> String? { name.withLock { $0 } }
}
