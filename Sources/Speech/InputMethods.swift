/// An input method sttd types through: IBus's engine (`sttd-ibus`), known by its unique bus name,
/// or sttd's own Wayland input method on a wlroots compositor's seat.
public enum InputMethodID: Hashable, Sendable, CustomStringConvertible {
    case bus(String)
    case wayland(seat: String)

    public var description: String {
        switch self {
        case .bus(let name): name
        case .wayland(let seat): "wayland:\(seat)"
        }
    }

    /// Input methods of one kind stand for each other (the newest report counts); of two kinds,
    /// the focused field decides (see ``InputMethods/current``).
    enum Kind { case bus, wayland }

    var kind: Kind {
        switch self {
        case .bus: .bus
        case .wayland: .wayland
        }
    }
}

/// What an input method last said about the focused field (`SetInputMethodState`).
public struct InputMethodReport: Sendable, Equatable {
    /// The engine is the input method of some text field (the user chose "Dictation").
    public var active: Bool
    /// A text field using it has the keyboard focus.
    public var focused: Bool
    /// That field is for a password or PIN: it never receives dictated text.
    public var secret: Bool
    /// The push-to-talk key is held.
    public var pushToTalk: Bool
    /// No field has the focus, and the focused window's app is opted in to the typing tools
    /// (`[wayland] typing_tools_for_apps`: apps whose fields the input method never sees). Only
    /// sttd's Wayland input method says it; its sessions' text then goes through the tools.
    public var toolsAllowed: Bool

    public init(
        active: Bool = false, focused: Bool = false, secret: Bool = false, pushToTalk: Bool = false,
        toolsAllowed: Bool = false
    ) {
        self.active = active
        self.focused = focused
        self.secret = secret
        self.pushToTalk = pushToTalk
        self.toolsAllowed = toolsAllowed
    }
}

/// What the core asks an input method to do in the focused field.
public enum InputMethodText: Sendable, Equatable {
    /// Shows the pending interim (with its leading separator) as preedit; empty clears it.
    case preedit(String)
    /// Commits a final (with its leading separator).
    case commit(String)
    /// Deletes this many Unicode characters before the cursor, if they are the text the input
    /// method last committed into the field that still has the focus.
    case delete(characters: Int)
    /// Presses a key (an X keysym name).
    case key(String)
}

/// The input methods that reported, oldest report first. Of one kind, the newest is *the* input
/// method; when it leaves, the newest of those still there takes over at once (a program that
/// reports and exits cannot cut `sttd-ibus` off). Of two kinds (IBus for XWayland apps beside the
/// Wayland input method), the text goes to the one whose field has the focus.
struct InputMethods {
    /// At most this many of a kind are remembered; beyond it the one of that kind that reported
    /// longest ago is forgotten (a desktop runs one, perhaps two during an `ibus restart`; reports
    /// on the bus cannot push the Wayland input method out).
    static let limit = 8

    struct Engine: Equatable {
        var id: InputMethodID
        var report: InputMethodReport
    }
    private(set) var engines: [Engine] = []

    /// The input method now, if any: of the newest report of each kind, the newest that says a
    /// field has the focus, else the newest. With one kind, simply the newest report; with two,
    /// a focus-out that arrives after the other's focus-in does not take the text away.
    var current: Engine? {
        var newestOfEachKind: [Engine] = []  // newest first
        for engine in engines.reversed() where !newestOfEachKind.contains(where: { $0.id.kind == engine.id.kind }) {
            newestOfEachKind.append(engine)
        }
        return newestOfEachKind.first { $0.report.focused } ?? newestOfEachKind.first
    }

    /// The input method, when it says it is active.
    var active: Engine? { current.flatMap { $0.report.active ? $0 : nil } }

    /// Whether the input method says a password or PIN field has the focus, active or not (GNOME
    /// switches it off in such a field): nothing may be typed there, by any route.
    var secretFieldFocused: Bool { current.map { $0.report.focused && $0.report.secret } ?? false }

    /// `id` reported `report`. Returns the input method that was current before.
    @discardableResult
    mutating func update(from id: InputMethodID, _ report: InputMethodReport) -> Engine? {
        let previous = current
        engines.removeAll { $0.id == id }
        engines.append(Engine(id: id, report: report))
        if engines.count(where: { $0.id.kind == id.kind }) > Self.limit,
            let oldest = engines.firstIndex(where: { $0.id.kind == id.kind })
        {
            engines.remove(at: oldest)
        }
        return previous
    }

    /// `id` is gone. Returns its last report, if it had reported, and whether it was the current one.
    @discardableResult
    mutating func departed(_ id: InputMethodID) -> (report: InputMethodReport, wasCurrent: Bool)? {
        guard let left = engines.first(where: { $0.id == id }) else { return nil }
        let wasCurrent = current?.id == id
        engines.removeAll { $0.id == id }
        return (left.report, wasCurrent)
    }

    func contains(_ id: InputMethodID) -> Bool { engines.contains { $0.id == id } }
}
