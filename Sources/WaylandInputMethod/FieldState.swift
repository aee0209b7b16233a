/// The focused field's content type, as text-input-v3 names it (`zwp_text_input_v3`'s
/// `content_purpose` and `content_hint`, relayed by the compositor).
public struct ContentType: Sendable, Equatable {
    public var hint: UInt32
    public var purpose: UInt32

    public init(hint: UInt32 = 0, purpose: UInt32 = 0) {
        self.hint = hint
        self.purpose = purpose
    }

    static let passwordPurpose: UInt32 = 8
    static let pinPurpose: UInt32 = 9
    static let terminalPurpose: UInt32 = 13
    /// `hidden_text` | `sensitive_data`: a field that hides or protects what is typed.
    static let secretHints: UInt32 = 0x40 | 0x80

    /// A password or PIN field: it never receives dictated text.
    public var isSecret: Bool {
        purpose == Self.passwordPurpose || purpose == Self.pinPurpose || hint & Self.secretHints != 0
    }

    /// A terminal: it ignores `delete_surrounding_text` (foot, VTE), so deletions are BackSpaces.
    public var isTerminal: Bool { purpose == Self.terminalPurpose }
}

/// The text around the cursor, as the field reported it (byte offsets into `text`).
struct Surrounding: Sendable, Equatable {
    var text: String
    var cursor: UInt32

    /// The text before the cursor (what a deletion before the cursor would remove from).
    var beforeCursor: String {
        let bytes = Array(text.utf8)
        return String(decoding: bytes.prefix(Int(min(cursor, UInt32(bytes.count)))), as: UTF8.self)
    }
}

/// What sttd asks to put into the focused field, in order.
public enum Delivery: Sendable, Equatable {
    case commit(String)
    /// Delete this many Unicode scalars before the cursor (the last text sttd committed there).
    case delete(characters: Int)
    /// Press and release the key with this X keysym name.
    case key(String)
}

/// What the seat's input method tells the core (only when it changes).
public struct FieldReport: Sendable, Equatable {
    /// sttd holds the seat's input method.
    public var active: Bool
    /// A text field (text-input-v3) is active: it has the focus and asked for the input method.
    public var focused: Bool
    /// That field is for a password or PIN.
    public var secret: Bool
    /// The active window's app id (Wayland `app_id`), when the compositor says.
    public var app: String?

    public init(active: Bool = false, focused: Bool = false, secret: Bool = false, app: String? = nil) {
        self.active = active
        self.focused = focused
        self.secret = secret
        self.app = app
    }
}

/// One `zwp_input_method_v2.commit` and the requests it applies.
struct Commit: Sendable, Equatable {
    /// `set_preedit_string`; sent with every commit, since the field drops its preedit at each one.
    var preedit: String
    var text: String?
    /// `delete_surrounding_text` before the cursor, in bytes.
    var deleteBefore: UInt32 = 0
    /// The number of `done` events received, as the protocol asks.
    var serial: UInt32

    /// The protocol's limit for one string, in bytes (libwayland's message buffer is 4096).
    static let stringLimit = 4000

    /// `text` in pieces of at most ``stringLimit`` UTF-8 bytes, never splitting a character.
    static func pieces(of text: String, limit: Int = stringLimit) -> [String] {
        var pieces: [String] = []
        var piece = ""
        var bytes = 0
        for character in text {
            let size = character.utf8.count
            if bytes + size > limit, !piece.isEmpty {
                pieces.append(piece)
                piece = ""
                bytes = 0
            }
            // A single character over the limit (thousands of combining marks) is cut by scalars.
            if size > limit {
                pieces += String(character).unicodeScalars.map(String.init)
                continue
            }
            piece.append(character)
            bytes += size
        }
        if !piece.isEmpty { pieces.append(piece) }
        return pieces
    }

    /// The last at most ``stringLimit`` bytes of a preedit (the newest words show).
    static func shownPreedit(_ text: String) -> String {
        guard text.utf8.count > stringLimit else { return text }
        var shown = Substring(text)
        while shown.utf8.count > stringLimit { shown = shown.dropFirst() }
        return String(shown)
    }
}
