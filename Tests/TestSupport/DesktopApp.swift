import Foundation

/// The apps whose fields the input method tests dictate into, on the test desktops
/// (``KdeDesktop``, ``GnomeDesktop``, ``IBusDesktop``, ``SwayDesktop``): each a window from
/// `Tests/Clients`.
public enum DesktopApp: String, CaseIterable, Sendable, CustomStringConvertible {
    case gtk3, gtk4, qt5, qt6
    /// A VTE terminal (GTK 3) whose app records what it receives.
    case vte
    /// foot (a Wayland-only terminal) running `tty_field.py`, which records what it receives.
    case foot

    public var description: String { rawValue }

    /// The Qt apps, which need QT_IM_MODULE=ibus where the desktop's own path does not reach them.
    public static let qt: [DesktopApp] = [.qt5, .qt6]

    /// Whether the test can see the preedit the app shows: terminals draw their own and tell no one.
    public var reportsPreedit: Bool { self != .vte && self != .foot }

    /// Opens this app's window with one field (a password field if `password`: GTK 3, GTK 4 and
    /// Qt; an invisible GtkEntry if `invisible`: GTK 3 and 4) in `environment`; the desktop then
    /// focuses it. `appID` names the window's Wayland app id (Qt and foot; foot needs one);
    /// `echo`: the terminal app writes back what it receives, moving the cursor (foot).
    func openField(
        environment: [String: String], password: Bool, invisible: Bool = false, appID: String? = nil,
        echo: Bool = false
    ) async throws -> IBusField {
        guard !invisible || [.gtk3, .gtk4].contains(self) else {
            throw MissingPrerequisite(description: "only the GTK test fields have an invisible entry, not \(self)")
        }
        let invisibleFlag = invisible ? ["--invisible"] : []
        switch self {
        case .gtk3: return try await IBusField(environment: environment, password: password, flags: invisibleFlag)
        case .gtk4:
            return try await IBusField(
                environment: environment, password: password, client: "gtk4_field.py", flags: invisibleFlag,
                needs: "python3-gi, gir1.2-gtk-4.0; on X11 ibus-gtk4")
        case .qt5, .qt6:
            let version = self == .qt5 ? "5" : "6"
            return try await IBusField(
                environment: environment, password: password, client: "qt_field.py", options: [version],
                flags: appID.map { ["--app-id", $0] } ?? [],
                needs: "python3-pyqt\(version), on Wayland \(version == "5" ? "qtwayland5" : "qt6-wayland")")
        case .vte:
            guard !password else { throw MissingPrerequisite(description: "a terminal has no password field") }
            return try await IBusField(
                environment: environment, password: false, client: "vte_field.py",
                needs: "python3-gi, gir1.2-vte-2.91")
        case .foot:
            guard !password else { throw MissingPrerequisite(description: "a terminal has no password field") }
            guard let appID else { throw MissingPrerequisite(description: "foot's test window needs an app id") }
            let foot = try requireTool("foot", package: "foot")
            return try await IBusField(
                environment: environment, password: false, client: "tty_field.py", flags: echo ? ["--echo"] : [],
                launcher: [foot, "--app-id", appID], needs: "foot")
        }
    }
}
