import DBus

/// The `options` of `StartTranscribing` and `ToggleTranscribing` (`a{sv}`), each key optional.
/// Decoding checks the keys and their types; the service checks the values (see `StartOptions`).
public struct StartRequest: DBusRepresentable, Equatable {
    /// The option keys, in the one place they are spelled.
    public enum Key: String, CaseIterable, Sendable {
        case backend, language, source
        case interimResults = "interim_results"
        case keyterms
        case autoStopMilliseconds = "auto_stop_ms"
        case output
    }

    /// `local` or `deepgram`.
    public var backend: String?
    /// A BCP-47 tag.
    public var language: String?
    /// A source name; "" means the server's default.
    public var source: String?
    public var interimResults: Bool?
    public var keyterms: [String]?
    /// Trailing silence after which the session stops by itself; 0 = never.
    public var autoStopMilliseconds: UInt32?
    /// `none`, `type` or `clipboard`.
    public var output: String?

    public init(
        backend: String? = nil, language: String? = nil, source: String? = nil, interimResults: Bool? = nil,
        keyterms: [String]? = nil, autoStopMilliseconds: UInt32? = nil, output: String? = nil
    ) {
        self.backend = backend
        self.language = language
        self.source = source
        self.interimResults = interimResults
        self.keyterms = keyterms
        self.autoStopMilliseconds = autoStopMilliseconds
        self.output = output
    }

    public static var dbusType: DBusType { .dictionary(key: .string, value: .variant) }

    /// The options given, in the keys' order.
    public var dbusValue: DBusValue {
        .vardict(
            Key.allCases.compactMap { key in
                let value: DBusValue? =
                    switch key {
                    case .backend: backend.map(DBusValue.string)
                    case .language: language.map(DBusValue.string)
                    case .source: source.map(DBusValue.string)
                    case .interimResults: interimResults.map(DBusValue.boolean)
                    case .keyterms: keyterms.map(DBusValue.strings)
                    case .autoStopMilliseconds: autoStopMilliseconds.map(DBusValue.uint32)
                    case .output: output.map(DBusValue.string)
                    }
                return value.map { (key.rawValue, $0) }
            })
    }

    /// Parses the `a{sv}`; a key given twice, an unknown key or a value of the wrong type is
    /// `InvalidArgs` naming it.
    public init(dbusValue value: DBusValue) throws(DBusError) {
        guard let entries = value.stringVariantDictionary else {
            throw .invalidArgs("options must be a dictionary of type a{sv}")
        }
        var seen = Set<String>()
        for (name, value) in entries {
            guard seen.insert(name).inserted else { throw .invalidArgs("option '\(name)' is given twice") }
            guard let key = Key(rawValue: name) else {
                let known = Key.allCases.map(\.rawValue).joined(separator: ", ")
                throw .invalidArgs("unknown option '\(name)'; known options: \(known)")
            }
            switch key {
            case .backend: backend = try Self.typed(key, value, \.string, "s")
            case .language: language = try Self.typed(key, value, \.string, "s")
            case .source: source = try Self.typed(key, value, \.string, "s")
            case .interimResults: interimResults = try Self.typed(key, value, \.boolean, "b")
            case .keyterms: keyterms = try Self.typed(key, value, \.strings, "as")
            case .autoStopMilliseconds: autoStopMilliseconds = try Self.typed(key, value, \.uint32, "u")
            case .output: output = try Self.typed(key, value, \.string, "s")
            }
        }
    }

    private static func typed<Payload>(
        _ key: Key, _ value: DBusValue, _ read: (DBusValue) -> Payload?, _ expected: String
    ) throws(DBusError) -> Payload {
        guard let payload = read(value) else {
            throw .invalidArgs("option '\(key.rawValue)' must have type '\(expected)', not '\(value.type)'")
        }
        return payload
    }
}

/// A capture source as `ListSources` gives it: `(ssb)`.
public struct SourceInfo: DBusRepresentable, Equatable {
    public var name: String
    public var description: String
    public var isDefault: Bool

    public init(name: String, description: String, isDefault: Bool) {
        self.name = name
        self.description = description
        self.isDefault = isDefault
    }

    public static var dbusType: DBusType { .structure([.string, .string, .boolean]) }
    public var dbusValue: DBusValue { .structure([.string(name), .string(description), .boolean(isDefault)]) }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .structure(let fields) = dbusValue, fields.count == 3 else { throw .invalidArgs("expected (ssb)") }
        self.init(
            name: try String(dbusValue: fields[0]), description: try String(dbusValue: fields[1]),
            isDefault: try Bool(dbusValue: fields[2]))
    }
}

/// A past session as `GetHistory` gives it: `(sxs)`.
public struct HistoryItem: DBusRepresentable, Equatable {
    public var id: String
    /// When it started, in Unix microseconds.
    public var started: Int64
    public var text: String

    public init(id: String, started: Int64, text: String) {
        self.id = id
        self.started = started
        self.text = text
    }

    public static var dbusType: DBusType { .structure([.string, .int64, .string]) }
    public var dbusValue: DBusValue { .structure([.string(id), .int64(started), .string(text)]) }
    public init(dbusValue: DBusValue) throws(DBusError) {
        guard case .structure(let fields) = dbusValue, fields.count == 3 else { throw .invalidArgs("expected (sxs)") }
        self.init(
            id: try String(dbusValue: fields[0]), started: try Int64(dbusValue: fields[1]),
            text: try String(dbusValue: fields[2]))
    }
}

/// An app id a consent decision is kept for: a Flatpak id such as `org.example.Notes`, or
/// `snap.NAME`. The service checks it as it arrives; a client sends what it was given.
public struct AppID: DBusRepresentable, Hashable {
    public let id: String
    public init(_ id: String) { self.id = id }

    public static var dbusType: DBusType { .string }
    public var dbusValue: DBusValue { .string(id) }
    public init(dbusValue: DBusValue) throws(DBusError) {
        let id = try String(dbusValue: dbusValue)
        guard Self.isWellFormed(id) else {
            throw .invalidArgs("app_id '\(id)' is not an app id (a Flatpak id such as org.example.Notes, or snap.NAME)")
        }
        self.id = id
    }

    /// Whether `id` is a well-formed app id (reverse-DNS, as D-Bus names: at least two elements
    /// of letters, digits, `_` and `-`, none starting with a digit, at most 255 characters).
    public static func isWellFormed(_ id: String) -> Bool {
        guard !id.isEmpty, id.utf8.count <= 255 else { return false }
        let elements = id.split(separator: ".", omittingEmptySubsequences: false)
        guard elements.count >= 2 else { return false }
        let allowed = Set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
        return elements.allSatisfy { element in
            guard let first = element.first, !first.isNumber else { return false }
            return element.allSatisfy(allowed.contains)
        }
    }
}

/// What `SetAppConsent` sets: a decision, or `ask` (forget it: the app is asked again).
public enum ConsentChoice: String, DBusRepresentable, CaseIterable {
    case allow, deny, ask

    public static var dbusType: DBusType { .string }
    public var dbusValue: DBusValue { .string(rawValue) }
    public init(dbusValue: DBusValue) throws(DBusError) {
        let text = try String(dbusValue: dbusValue)
        guard let choice = Self(rawValue: text) else {
            throw .invalidArgs("decision must be 'allow', 'deny' or 'ask', not '\(text)'")
        }
        self = choice
    }
}

/// What the desktop's input method (`sttd-ibus`) tells sttd with `SetInputMethodState`.
public struct InputMethodState: DBusRepresentable, Equatable {
    /// The `sttd` engine is the input method of some text field (the user chose "Dictation").
    public var active = false
    /// A text field using the engine has the keyboard focus (not the desktop background).
    public var focused = false
    /// That field is for a password or PIN: it never receives dictated text.
    public var secret = false
    /// The push-to-talk key is held: if the input method leaves the bus now, its release can
    /// never arrive, so sttd stops the session it started.
    public var pushToTalk = false

    public init(active: Bool = false, focused: Bool = false, secret: Bool = false, pushToTalk: Bool = false) {
        self.active = active
        self.focused = focused
        self.secret = secret
        self.pushToTalk = pushToTalk
    }

    /// The keys of the `a{sv}` argument, each a boolean; a missing key is false.
    private static let fields: [(key: String, flag: any WritableKeyPath<InputMethodState, Bool> & Sendable)] = [
        ("active", \.active), ("focused", \.focused), ("secret", \.secret), ("push_to_talk", \.pushToTalk),
    ]
    public static var keys: [String] { fields.map(\.key) }

    /// The value of the `InputMethod` property for this state. A password field is `secret` also
    /// when the desktop switched the input method off for it (GNOME does).
    public var summary: String {
        if focused && secret { return "secret" }
        guard active else { return "" }
        guard focused else { return "active" }
        return secret ? "secret" : "focused"
    }

    public static var dbusType: DBusType { .dictionary(key: .string, value: .variant) }

    /// The `a{sv}` argument of `SetInputMethodState`.
    public var dbusValue: DBusValue {
        .vardict(Self.fields.map { ($0.key, .boolean(self[keyPath: $0.flag])) })
    }

    /// Parses the argument; an unknown key or a value that is not a boolean is `InvalidArgs`.
    public init(dbusValue value: DBusValue) throws(DBusError) {
        guard let entries = value.stringVariantDictionary else {
            throw .invalidArgs("state must be a dictionary of type a{sv}")
        }
        for (key, value) in entries {
            guard let flag = value.boolean else {
                throw .invalidArgs("state key '\(key)' must have type 'b', not '\(value.type)'")
            }
            guard let field = Self.fields.first(where: { $0.key == key }) else {
                throw .invalidArgs("unknown state key '\(key)'; known keys: \(Self.keys.joined(separator: ", "))")
            }
            self[keyPath: field.flag] = flag
        }
    }
}
