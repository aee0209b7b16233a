/// sttd as the input method of a wlroots compositor (zwp_input_method_v2), as the property
/// `WaylandInputMethod` shows it, for `sttctl doctor` and the curious.
public enum WaylandInputMethodStatus: Sendable, Equatable, RawRepresentable {
    /// `[wayland] input_method = false`, or sttd has no Wayland display: "".
    case off
    /// sttd holds the seat's input method: text goes live into its focused field. "seat0".
    case held(seat: String)
    /// Another input method (fcitx5, ...) holds the seat; sttd types with the tools. "unavailable:seat0".
    case unavailable(seat: String)
    /// The compositor offers no `zwp_input_method_manager_v2` (GNOME, KDE): "unsupported".
    case unsupported
    /// The compositor went away; sttd waits for it to come back: "disconnected".
    case disconnected

    static let unavailablePrefix = "unavailable:"

    public var rawValue: String {
        switch self {
        case .off: ""
        case .held(let seat): seat
        case .unavailable(let seat): Self.unavailablePrefix + seat
        case .unsupported: "unsupported"
        case .disconnected: "disconnected"
        }
    }

    /// Every value sttd writes reads back; a seat name is what is left.
    public init(rawValue: String) {
        switch rawValue {
        case "": self = .off
        case "unsupported": self = .unsupported
        case "disconnected": self = .disconnected
        case let text where text.hasPrefix(Self.unavailablePrefix):
            self = .unavailable(seat: String(text.dropFirst(Self.unavailablePrefix.count)))
        default: self = .held(seat: rawValue)
        }
    }
}
