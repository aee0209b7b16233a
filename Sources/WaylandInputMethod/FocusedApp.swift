import CWaylandClient
import CWaylandIM

/// Which app's window is active, from `zwlr_foreign_toplevel_manager_v1` (sway, Hyprland, river):
/// its `app_id` decides whether the typing tools may type for a window that has no text-input
/// field (`[wayland] typing_tools_for_apps`). Each window's state is double-buffered until its `done`.
struct FocusedApp {
    struct Toplevel {
        var appID = ""
        var activated = false
        var pendingAppID: String?
        var pendingActivated: Bool?
    }

    /// `zwlr_foreign_toplevel_handle_v1.state`'s `activated`.
    static let activatedState: UInt32 = 2

    private var toplevels: [OpaquePointer: Toplevel] = [:]
    /// The active window's app id, if a window is active.
    private(set) var appID: String?

    mutating func appeared(_ handle: OpaquePointer) { toplevels[handle] = Toplevel() }

    mutating func appID(_ handle: OpaquePointer, _ appID: String) { toplevels[handle]?.pendingAppID = appID }

    mutating func states(_ handle: OpaquePointer, _ states: [UInt32]) {
        toplevels[handle]?.pendingActivated = states.contains(Self.activatedState)
    }

    /// Applies `handle`'s pending state; true when the active app changed.
    mutating func done(_ handle: OpaquePointer) -> Bool {
        guard var toplevel = toplevels[handle] else { return false }
        toplevel.appID = toplevel.pendingAppID ?? toplevel.appID
        toplevel.activated = toplevel.pendingActivated ?? toplevel.activated
        toplevel.pendingAppID = nil
        toplevel.pendingActivated = nil
        toplevels[handle] = toplevel
        return settle()
    }

    /// `handle` is gone; true when the active app changed.
    mutating func closed(_ handle: OpaquePointer) -> Bool {
        toplevels[handle] = nil
        return settle()
    }

    private mutating func settle() -> Bool {
        let now = toplevels.values.first { $0.activated }?.appID
        defer { appID = now }
        return now != appID
    }
}

extension Listeners {
    nonisolated(unsafe) static let toplevelManager = table(
        zwlr_foreign_toplevel_manager_v1_listener(
            toplevel: { data, _, handle in
                guard let handle else { return }
                session(data).focusedApp.appeared(handle)
                zwlr_foreign_toplevel_handle_v1_add_listener(handle, toplevel, data)
            },
            finished: { _, manager in zwlr_foreign_toplevel_manager_v1_destroy(manager) }))

    nonisolated(unsafe) static let toplevel = table(
        zwlr_foreign_toplevel_handle_v1_listener(
            title: { _, _, _ in },
            app_id: { data, handle, appID in
                guard let handle else { return }
                session(data).focusedApp.appID(handle, appID.map { String(cString: $0) } ?? "")
            },
            output_enter: { _, _, _ in },
            output_leave: { _, _, _ in },
            state: { data, handle, array in
                guard let handle, let array else { return }
                let count = array.pointee.size / MemoryLayout<UInt32>.size
                let states = array.pointee.data.map {
                    Array(UnsafeBufferPointer(start: $0.bindMemory(to: UInt32.self, capacity: count), count: count))
                }
                session(data).focusedApp.states(handle, states ?? [])
            },
            done: { data, handle in
                guard let handle else { return }
                let session = session(data)
                if session.focusedApp.done(handle) { session.handle(.focusedApp(session.focusedApp.appID)) }
            },
            closed: { data, handle in
                guard let handle else { return }
                let session = session(data)
                if session.focusedApp.closed(handle) { session.handle(.focusedApp(session.focusedApp.appID)) }
                zwlr_foreign_toplevel_handle_v1_destroy(handle)
            },
            parent: { _, _, _ in }))
}
