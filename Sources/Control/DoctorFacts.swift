import SpeechAPI

/// What `sttctl doctor` found out, as plain values: the checks are worked out from these alone,
/// so tests give them any set-up.
struct DoctorFacts: Sendable {
    /// sttd's answers, or why it could not be reached.
    enum Service: Sendable {
        case reachable(ServiceState)
        case unreachable(String)
    }

    struct ServiceState: Sendable {
        var version: String
        var backend: String
        /// `AuthorizationStatus` after `RequestAuthorization`.
        var authorization: String
        var microphone: String
        /// The `InputMethod` property: empty, `active`, `focused` or `secret`.
        var inputMethod: String
        var lastError: String
        /// The `WaylandInputMethod` property: sttd as a wlroots compositor's input method.
        var waylandInputMethod: WaylandInputMethodStatus

        init(
            version: String = "", backend: String = "local", authorization: String = "authorized",
            microphone: String = "authorized", inputMethod: String = "", lastError: String = "",
            waylandInputMethod: WaylandInputMethodStatus = .off
        ) {
            self.version = version
            self.backend = backend
            self.authorization = authorization
            self.microphone = microphone
            self.inputMethod = inputMethod
            self.lastError = lastError
            self.waylandInputMethod = waylandInputMethod
        }
    }

    /// Whether IBus knows sttd's component `io.github.sttd.IBus`.
    enum Component: Sendable, Equatable {
        /// ibus-daemon lists the `sttd` engine.
        case listed
        /// A component file names it, but ibus-daemon (running) does not list it.
        case notLoaded(file: String)
        /// A component file names it; ibus-daemon could not be asked.
        case file(String)
        /// No component file in these folders names it.
        case missing(searched: [String])
    }

    /// The typing tool sttd would use, once it answered a request that types nothing.
    enum Typing: Sendable, Equatable {
        case works(String)
        /// Why not, naming the fix (the message of the output module).
        case fails(String)
    }

    var service: Service
    /// This shell's environment: the session apps run in.
    var session: [String: String]
    /// sttd's environment, and where it was read (nil: it could not be read).
    var serviceEnvironment: [String: String]?
    var serviceEnvironmentSource: String
    var component: Component
    /// `ibus engine`: the engine IBus has now; nil if ibus-daemon could not be asked.
    var currentEngine: String?
    /// `gsettings get org.gnome.desktop.input-sources sources`; nil if not read.
    var gnomeInputSources: String?
    /// kwinrc `[Wayland] InputMethod`; nil if not set.
    var kwinInputMethod: String?
    /// Whether GTK 4's IBus module (Debian ibus-gtk4) is installed.
    var gtk4IBusModule: Bool
    var typing: Typing

    init(
        service: Service, session: [String: String], serviceEnvironment: [String: String]?,
        serviceEnvironmentSource: String = "sttd's process", component: Component, currentEngine: String? = nil,
        gnomeInputSources: String? = nil, kwinInputMethod: String? = nil, gtk4IBusModule: Bool = true,
        typing: Typing
    ) {
        self.service = service
        self.session = session
        self.serviceEnvironment = serviceEnvironment
        self.serviceEnvironmentSource = serviceEnvironmentSource
        self.component = component
        self.currentEngine = currentEngine
        self.gnomeInputSources = gnomeInputSources
        self.kwinInputMethod = kwinInputMethod
        self.gtk4IBusModule = gtk4IBusModule
        self.typing = typing
    }

    /// sttd as the Wayland input method, as it said; off when it could not be asked.
    var waylandInputMethod: WaylandInputMethodStatus {
        if case .reachable(let state) = service { state.waylandInputMethod } else { .off }
    }

    /// The session's kind, from this shell's environment.
    enum Desktop: Sendable, Equatable {
        case gnome, kde, wlroots, otherWayland, x11, none
    }

    static func value(_ name: String, in environment: [String: String]) -> String? {
        environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }

    var isWayland: Bool {
        Self.value("WAYLAND_DISPLAY", in: session) != nil || session["XDG_SESSION_TYPE"] == "wayland"
    }

    var desktopNames: [String] {
        (session["XDG_CURRENT_DESKTOP"] ?? "").lowercased().split(separator: ":").map(String.init)
    }

    var desktop: Desktop {
        let names = desktopNames
        let wayland = isWayland
        if names.contains("gnome") || names.contains("ubuntu") { return .gnome }
        if names.contains("kde") || names.contains("plasma") { return .kde }
        if wayland {
            let wlroots = ["sway", "hyprland", "river", "wlroots", "labwc", "wayfire"]
            return names.contains(where: wlroots.contains) || names.isEmpty ? .wlroots : .otherWayland
        }
        return Self.value("DISPLAY", in: session) != nil ? .x11 : .none
    }
}
