import DBus
import Logging
import SpeechAPI

extension InputMethodEngine {
    /// One engine object: every method ibus-daemon calls is answered; those that matter queue an event.
    func engine(at path: String, on ibus: DBusConnection, queue: EventQueue) throws(DBusError) -> DBusObject {
        let pushToTalk = configuration.pushToTalk
        func method(_ name: String, _ inputs: [DBusType] = [], event: EngineMachine.Event? = nil) -> DBusMethod {
            DBusMethod(name, inputs: inputs.enumerated().map { DBusArgument("arg\($0.offset)", $0.element) }) {
                _, reply in
                if let event { queue.yield(event) }
                reply.send([])
            }
        }
        let processKey = DBusMethod.answering(IBus.processKeyEvent) { _, keyval, _, state in
            // Every key but push-to-talk goes to the application as it is (the user's layout applies).
            let released = state & IBus.releaseMask != 0
            guard let pushToTalk, keyval == pushToTalk else {
                // The user typed: what the engine committed before is the field's own now.
                if !released { queue.yield(.userKey(path: path)) }
                return false
            }
            queue.yield(.pushToTalk(pressed: !released))
            return true
        }
        let focusInID = DBusMethod.answering(IBus.focusInId) { _, _, client in
            queue.yield(.focusIn(path: path, client: client))
        }
        let destroy = DBusMethod("Destroy") { [logger] _, reply in
            reply.send([])
            ibus.unexport(path: path)
            queue.yield(.destroyed(path: path))
            logger.debug("engine destroyed", metadata: ["path": "\(path)"])
        }
        let contentType = DBusProperty(
            "ContentType", .structure([.uint32(0), .uint32(0)]), changeSignal: .none,
            setter: { value in
                guard case .structure(let fields) = value, fields.count == 2, let purpose = fields[0].uint32 else {
                    throw DBusError.invalidArgs("ContentType must be (uu)")
                }
                queue.yield(.contentType(path: path, purpose: purpose))
                return value
            })
        // True: ibus-daemon then says which client has the focus, so the desktop ("fake") is no field.
        // Read on ibus-daemon's connection in order with its calls: a FocusIn after it has no id yet.
        let focusID = DBusProperty(
            "FocusId", .boolean, changeSignal: .const,
            getter: {
                queue.yield(.focusIdAsked(path: path))
                return .boolean(true)
            })
        let engineInterface = DBusInterface(
            name: IBus.engineInterface,
            methods: [
                processKey,
                method("SetCursorLocation", [.int32, .int32, .int32, .int32]),
                method("ProcessHandWritingEvent", [.array(.double)]),
                method("CancelHandWriting", [.uint32]),
                method("SetCapabilities", [.uint32]),
                method("PropertyActivate", [.string, .uint32]),
                method("PropertyShow", [.string]),
                method("PropertyHide", [.string]),
                method("CandidateClicked", [.uint32, .uint32, .uint32]),
                method("FocusIn", event: .focusIn(path: path, client: nil)),
                focusInID,
                method("FocusOut", event: .focusOut(path: path)),
                method("FocusOutId", [.string], event: .focusOut(path: path)),
                method("Reset", event: .reset(path: path)),
                method("Enable", event: .enabled(path: path)),
                method("Disable", event: .disabled(path: path)),
                method("PageUp"), method("PageDown"), method("CursorUp"), method("CursorDown"),
                method("SetSurroundingText", [.variant, .uint32, .uint32]),
                method("PanelExtensionReceived", [.variant]),
                method("PanelExtensionRegisterKeys", [.variant]),
            ],
            properties: [contentType, focusID],
            signals: [
                DBusSignal("CommitText", arguments: [DBusArgument("text", .variant)]),
                DBusSignal(
                    "DeleteSurroundingText",
                    arguments: [DBusArgument("offset_from_cursor", .int32), DBusArgument("nchars", .uint32)]),
                DBusSignal(
                    "ForwardKeyEvent",
                    arguments: [
                        DBusArgument("keyval", .uint32), DBusArgument("keycode", .uint32),
                        DBusArgument("state", .uint32),
                    ]),
                DBusSignal(
                    "UpdatePreeditText",
                    arguments: [
                        DBusArgument("text", .variant), DBusArgument("cursor_pos", .uint32),
                        DBusArgument("visible", .boolean), DBusArgument("mode", .uint32),
                    ]),
            ])
        let serviceInterface = DBusInterface(name: IBus.serviceInterface, methods: [destroy])
        return try DBusObject(path: path, interfaces: [engineInterface, serviceInterface], logger: logger)
    }

    /// Where `sttd-ibus --wayland` tells the purpose of KWin's focused field (ibus-wayland 1.5.27
    /// does not pass it on). The reply goes after the event is queued, ahead of the focus
    /// ibus-wayland gives once the proxy lets KWin's event through: no race. Only the same user
    /// reaches ibus-daemon's bus.
    func waylandPurpose(queue: EventQueue) -> DBusObject {
        let setPurpose = DBusMethod.answering(IBus.setPurpose) { _, purpose, known in
            queue.yield(.waylandPurpose(known ? purpose : nil))
        }
        // A fixed, valid declaration: it cannot fail.
        return try! DBusObject(
            path: IBus.waylandPath, interfaces: [DBusInterface(name: IBus.waylandInterface, methods: [setPurpose])],
            logger: logger)
    }
}
