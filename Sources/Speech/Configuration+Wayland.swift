import ConfigFile

extension Configuration {
    /// The `[wayland]` table: sttd as the input method of wlroots compositors (sway, Hyprland,
    /// river, Wayfire), which offer `zwp_input_method_manager_v2`.
    public struct Wayland: Sendable, Equatable {
        /// Be the seat's input method where the compositor offers one; false leaves the seat to
        /// another input method (fcitx5 and the like) and types with the typing tools.
        public var inputMethod = true
        /// The app ids (the focused window's Wayland `app_id`, or an XWayland window's class)
        /// whose windows get the typing tools while no text field is active: apps that never
        /// tell an input method about their fields (Qt 5/6 speak text-input-v2 only; XWayland).
        /// Their password fields are typed into too: no tool can tell them apart.
        public var typingToolsForApps: [String] = []

        /// At most this many app ids (the list is searched for every final).
        public static let appLimit = 100

        public init() {}
    }

    mutating func readWayland(_ reader: inout TableReader) throws(ConfigurationError) {
        guard let table = try reader.table("wayland") else { return }
        var waylandReader = TableReader(table: table, prefix: "wayland.")
        wayland.inputMethod = try waylandReader.bool("input_method", default: wayland.inputMethod)
        wayland.typingToolsForApps = try waylandReader.stringList("typing_tools_for_apps")
        try waylandReader.refuseUnknownKeys()
        guard wayland.typingToolsForApps.count <= Wayland.appLimit else {
            throw ConfigurationError(
                "wayland.typing_tools_for_apps names \(wayland.typingToolsForApps.count) apps; it takes at most \(Wayland.appLimit)."
            )
        }
        for app in wayland.typingToolsForApps where !Self.isAppID(app) {
            throw ConfigurationError(
                "wayland.typing_tools_for_apps has \"\(app)\", which is no app id; name each app exactly as its window's app_id (`swaymsg -t get_tree` shows it), e.g. \"org.qbittorrent.qBittorrent\" (no patterns)."
            )
        }
    }

    /// Whether `text` can be an app id: not empty, no control characters or spaces around it (an
    /// X11 class may have some inside), and no `*`: the list matches exactly, not as a pattern.
    static func isAppID(_ text: String) -> Bool {
        guard let first = text.unicodeScalars.first, let last = text.unicodeScalars.last else { return false }
        return !first.properties.isWhitespace && !last.properties.isWhitespace
            && !text.unicodeScalars.contains { $0.properties.generalCategory == .control || $0 == "*" }
    }
}
