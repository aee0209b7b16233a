import CWaylandClient
import CWaylandIM

/// The listener tables libwayland calls into, each allocated once for the process (a proxy keeps
/// a pointer to its table). `data` is the ``SeatSession`` the proxy belongs to; every call comes
/// on its display thread.
enum Listeners {
    static func session(_ data: UnsafeMutableRawPointer?) -> SeatSession {
        Unmanaged<SeatSession>.fromOpaque(data!).takeUnretainedValue()
    }

    static func table<Table>(_ table: Table) -> UnsafeMutablePointer<Table> {
        let pointer = UnsafeMutablePointer<Table>.allocate(capacity: 1)
        pointer.initialize(to: table)
        return pointer
    }

    // libwayland only reads these tables.
    nonisolated(unsafe) static let registry = table(
        wl_registry_listener(
            global: { data, _, name, interface, version in
                let global = SeatSession.Global(name: name, version: version)
                let session = session(data)
                switch interface.map({ String(cString: $0) }) {
                case "wl_seat":
                    // sttd serves the first seat (sway's default configuration has one).
                    if session.globals.seat == nil { session.globals.seat = global }
                case "zwp_input_method_manager_v2": session.globals.inputMethodManager = global
                case "zwp_virtual_keyboard_manager_v1": session.globals.virtualKeyboardManager = global
                case "zwlr_foreign_toplevel_manager_v1": session.globals.toplevelManager = global
                default: break
                }
            },
            global_remove: { _, _, _ in }))

    nonisolated(unsafe) static let callback = table(
        wl_callback_listener(
            done: { data, callback, _ in
                session(data).syncDone = true
                wl_callback_destroy(callback)
            }))

    nonisolated(unsafe) static let seat = table(
        wl_seat_listener(
            capabilities: { _, _, _ in },
            name: { data, _, name in
                if let name { session(data).seatName = String(cString: name) }
            }))

    nonisolated(unsafe) static let inputMethod = table(
        zwp_input_method_v2_listener(
            activate: { data, _ in session(data).handle(.activate) },
            deactivate: { data, _ in session(data).handle(.deactivate) },
            surrounding_text: { data, _, text, cursor, _ in
                session(data).handle(.surroundingText(text.map { String(cString: $0) } ?? "", cursor: cursor))
            },
            // The cause cannot say who changed the text (see SeatMachine.followFieldText).
            text_change_cause: { _, _, _ in },
            content_type: { data, _, hint, purpose in
                session(data).handle(.contentType(ContentType(hint: hint, purpose: purpose)))
            },
            done: { data, _ in session(data).handle(.done) },
            unavailable: { data, _ in
                let session = session(data)
                session.unavailable = true
                session.handle(.unavailable)
            }))
}
