import Foundation

/// The apps whose fields the input method tests dictate into, on any of the three desktops
/// (``KdeDesktop``, ``GnomeDesktop``, ``IBusDesktop``): each a window from `Tests/Clients`.
public enum DesktopApp: String, CaseIterable, Sendable, CustomStringConvertible {
    case gtk3, gtk4, qt5, qt6
    /// A VTE terminal (GTK 3) whose app records what it receives.
    case vte

    public var description: String { rawValue }

    /// The Qt apps, which need QT_IM_MODULE=ibus where the desktop's own path does not reach them.
    public static let qt: [DesktopApp] = [.qt5, .qt6]

    /// Whether the test can see the preedit the app shows: VTE draws its own and tells no one.
    public var reportsPreedit: Bool { self != .vte }

    /// Opens this app's window with one field (a password field if `password`: GTK 3, GTK 4 and
    /// Qt) in `environment`; the desktop then focuses it.
    func openField(environment: [String: String], password: Bool) async throws -> IBusField {
        switch self {
        case .gtk3: return try await IBusField(environment: environment, password: password)
        case .gtk4:
            return try await IBusField(
                environment: environment, password: password, client: "gtk4_field.py",
                needs: "python3-gi, gir1.2-gtk-4.0; on X11 ibus-gtk4")
        case .qt5, .qt6:
            let version = self == .qt5 ? "5" : "6"
            return try await IBusField(
                environment: environment, password: password, client: "qt_field.py", options: [version],
                needs: "python3-pyqt\(version), on Wayland \(version == "5" ? "qtwayland5" : "qt6-wayland")")
        case .vte:
            guard !password else { throw MissingPrerequisite(description: "a terminal has no password field") }
            return try await IBusField(
                environment: environment, password: false, client: "vte_field.py",
                needs: "python3-gi, gir1.2-vte-2.91")
        }
    }
}
