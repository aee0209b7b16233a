/// A typing tool.
public enum TypingTool: String, Sendable, CaseIterable {
    /// wlroots compositors (sway, Hyprland, river): the virtual-keyboard protocol.
    case wtype
    /// Any Wayland or X11 session through the kernel's /dev/uinput (GNOME and KDE on Wayland).
    case ydotool
    /// X11.
    case xdotool

    /// The Debian package that provides it (the same name for all three).
    public var package: String { rawValue }
}

/// A clipboard tool pair.
enum ClipboardTool: Sendable, Equatable {
    /// wl-copy / wl-paste (Debian wl-clipboard).
    case wlClipboard
    /// xclip (Debian xclip).
    case xclip

    var package: String {
        switch self {
        case .wlClipboard: "wl-clipboard"
        case .xclip: "xclip"
        }
    }

    var executables: [String] {
        switch self {
        case .wlClipboard: ["wl-copy", "wl-paste"]
        case .xclip: ["xclip"]
        }
    }
}
