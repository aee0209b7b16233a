/// What the proxy between KWin and ibus-wayland does with each message, decided without I/O.
///
/// It follows only the objects it needs: the registry (`wl_display.get_registry`), the
/// `zwp_input_method_v1` ibus-wayland binds from it, and the `zwp_input_method_context_v1` KWin
/// activates for the focused field. The field's purpose (`content_type`, which ibus-wayland 1.5.27
/// ignores) goes to the engine before the event goes on; until a field's first `content_type`
/// its purpose is unknown, so the engine types nothing into it meanwhile.
/// (input-method-unstable-v1.xml; the purpose and hint values are text-input-unstable-v1's.)
struct WaylandWatch: Sendable {
    /// What to do with one message.
    enum Verdict: Sendable, Equatable {
        case forward
        /// Drop it (text for a password field): logged without its text.
        case drop
        /// Tell the engine the field's IBus purpose (nil: not known yet), then forward it.
        case announce(UInt32?)
    }

    static let display: UInt32 = 1
    static let getRegistry: UInt16 = 1
    static let bind: UInt16 = 0
    static let inputMethodInterface = "zwp_input_method_v1"
    // zwp_input_method_v1 events
    static let activate: UInt16 = 0
    static let deactivate: UInt16 = 1
    // zwp_input_method_context_v1 event and requests
    static let contentType: UInt16 = 2
    static let commitString: UInt16 = 1
    static let preeditString: UInt16 = 2
    // text-input-unstable-v1
    static let purposePassword: UInt32 = 8
    static let hiddenOrSensitive: UInt32 = 0x40 | 0x80

    private var registry: UInt32?
    private var inputMethod: UInt32?
    /// The context KWin activated for the focused field, if any.
    private(set) var context: UInt32?
    /// The focused field is a password or PIN field: its text is dropped here too.
    private(set) var secret = false
    /// An activated field whose `content_type` has not come yet.
    private(set) var awaitingContentType = false

    init() {}

    /// A request from ibus-wayland to KWin.
    mutating func fromInputMethod(_ message: WaylandMessage) throws(WaylandWireError) -> Verdict {
        if message.object == Self.display, message.opcode == Self.getRegistry {
            registry = try message.uint(at: 0)
        } else if message.object == registry, message.opcode == Self.bind {
            // bind(name: uint, interface: string, version: uint, id: new_id)
            let (interface, next) = try message.string(at: 4)
            if interface == Self.inputMethodInterface { inputMethod = try message.uint(at: next + 4) }
        } else if message.object == context, secret, message.opcode == Self.commitString {
            return .drop
        } else if message.object == context, secret, message.opcode == Self.preeditString {
            // preedit_string(serial, text, commit): an empty one only hides a preedit.
            let (text, _) = try message.string(at: 4)
            return text.isEmpty ? .forward : .drop
        }
        return .forward
    }

    /// An event from KWin to ibus-wayland.
    mutating func fromCompositor(_ message: WaylandMessage) throws(WaylandWireError) -> Verdict {
        if message.object == inputMethod, message.opcode == Self.activate {
            context = try message.uint(at: 0)
            secret = false
            awaitingContentType = true
            return .announce(nil)
        } else if message.object == inputMethod, message.opcode == Self.deactivate {
            guard try message.uint(at: 0) == context else { return .forward }
            context = nil
            secret = false
            awaitingContentType = false
        } else if message.object == context, message.opcode == Self.contentType {
            // content_type(hint, purpose)
            let hint = try message.uint(at: 0)
            let purpose = try message.uint(at: 4)
            let hidden = hint & Self.hiddenOrSensitive != 0
            return .announce(settle(password: purpose == Self.purposePassword, hidden: hidden))
        }
        return .forward
    }

    /// KWin sends `content_type` with every activation; should one not come, the field is taken
    /// as an ordinary one after a while (the proxy's clock): the IBus purpose to announce.
    mutating func contentTypeOverdue() -> UInt32 { settle(password: false, hidden: false) }

    /// IBus's purposes (`IBusInputPurpose`): password 8, PIN 9 (text-input-v1 has no PIN; KWin
    /// sends a PIN field as alpha with hidden text), free form 0.
    private mutating func settle(password: Bool, hidden: Bool) -> UInt32 {
        awaitingContentType = false
        secret = password || hidden
        return password ? IBus.password : hidden ? IBus.pin : 0
    }
}
