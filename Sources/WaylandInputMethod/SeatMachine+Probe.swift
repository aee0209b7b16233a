/// Telling a field that hides its text from an ordinary one. GTK 3.24 and 4.8 on sway activate
/// the input method for an entry with visibility off (a password field) exactly as for any other
/// field, with no password purpose or hint; only the text it reports, each character shown as
/// its invisible character ("●"), gives it away. An empty field shows nothing, so before sttd's
/// first text or preedit goes into an empty field, a space is committed: the field reports " "
/// (ordinary) or "●" (hidden), and the probe is deleted again before anything else goes in.
extension SeatMachine {
    enum FieldKind: Sendable, Equatable {
        case unknown
        /// The probe space is on its way; text waits.
        case probing
        case ordinary
        /// It shows its text as invisible characters: a password field.
        case hidden
    }

    /// How long a field may take to report the probe (GTK answers within milliseconds). A field
    /// that stays silent gets nothing, as a hidden one: safer than typing into a password field.
    static let probeLimit = Duration.seconds(5)

    /// The characters toolkits show in place of a hidden text's (GTK's default is the first
    /// of these its font has).
    static let invisibleCharacters: Set<Character> = ["●", "•", "✱", "✺", "*", "∗", "⚫", "·"]

    static let probeText = " "

    /// Browsers declare a password input's purpose, and apply a commit and a key in no fixed
    /// order (Firefox 153 showed the probe seconds late and after a BackSpace meant to take it back).
    static let browserAppIDs = ["firefox", "chromium", "chrome", "brave", "librewolf", "vivaldi", "opera"]

    static func isBrowser(_ app: String?) -> Bool {
        guard let app = app?.lowercased() else { return false }
        return browserAppIDs.contains { app.contains($0) }
    }

    /// A field's text made only of one invisible character.
    static func looksHidden(_ text: String) -> Bool {
        guard let first = text.first, invisibleCharacters.contains(first) else { return false }
        return text.allSatisfy { $0 == first }
    }

    /// Text may go into the active field now (`ready`), or a probe goes out first.
    mutating func probeGate() -> (ready: Bool, actions: [Action]) {
        guard ordinaryFieldActive, fieldKind == .unknown else { return (fieldKind != .probing, []) }
        // A terminal, a field that does not report its text, or a browser: nothing to learn.
        guard !current.contentType.isTerminal, let shown = current.surrounding, !Self.isBrowser(app) else {
            fieldKind = .ordinary
            return (true, [])
        }
        if !shown.text.isEmpty {
            fieldKind = Self.looksHidden(shown.text) ? .hidden : .ordinary
            return (true, [])
        }
        fieldKind = .probing
        probeNudges = 0
        return (false, [.send(Commit(preedit: "", text: Self.probeText, serial: doneCount)), .probeSent])
    }

    /// At most this many empty commits ask a field that reported its text without the probe
    /// to report it again (Firefox reports a batch late).
    static let nudgeLimit = 3

    /// The field reported its text without the probe yet: an empty commit makes it report again.
    mutating func probeNudge() -> [Action] {
        guard probeNudges < Self.nudgeLimit else { return [] }
        probeNudges += 1
        return [.send(Commit(preedit: "", serial: doneCount))]
    }

    /// The field reported its text after the probe (`shown`), or did not in time (nil): the
    /// probe is taken back and the field's kind is known.
    mutating func probeAnswered(within shown: Surrounding?) -> [Action] {
        guard fieldKind == .probing else { return [] }
        guard let last = shown?.beforeCursor.last else {
            // A key takes the space back: a field that keeps its text to itself may not place a
            // deletion either.
            fieldKind = .hidden
            return [.probeUnanswered, .pressKey("BackSpace")]
        }
        fieldKind = last == Character(Self.probeText) ? .ordinary : .hidden
        // The probe's own length: GTK 4 counts the bytes in its real text (" "), not in the "●" it shows.
        return [.send(Commit(preedit: "", deleteBefore: UInt32(Self.probeText.utf8.count), serial: doneCount))]
    }

    var isProbing: Bool { fieldKind == .probing }
}
