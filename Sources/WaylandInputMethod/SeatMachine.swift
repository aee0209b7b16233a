/// What sttd's Wayland input method does on one seat, decided without I/O: the compositor's
/// `zwp_input_method_v2` events and sttd's text come in; requests and reports go out.
///
/// Rules (those of `sttd-ibus`'s engine, restated for input-method-v2):
/// - The field's state is double-buffered: `activate`, `deactivate`, `content_type` and
///   `surrounding_text` take effect at the next `done`. Text that arrives in between waits for
///   that `done`, so a password field never gets a word meant for the field before it.
/// - A final is committed only into an active field that is not for a password or PIN; else it
///   is dropped (the core keeps it in the transcript and says so once).
/// - The field drops its preedit at every commit, so each commit carries the preedit to keep.
/// - "scratch that" deletes only the text this input method committed into the field that is
///   still active, newest first; a new activation, a key sttd pressed, or the field's text no
///   longer ending with it (the user typed or moved the cursor) makes it the field's own.
///   Terminals ignore `delete_surrounding_text`: there the deletion is BackSpaces.
/// - Keys are pressed only while an ordinary field is active.
struct SeatMachine: Sendable {
    enum Event: Sendable, Equatable {
        /// The input method object exists and no other holds the seat (no `unavailable` came).
        case bound
        case unavailable
        case activate
        case deactivate
        case surroundingText(String, cursor: UInt32)
        case changeCause(UInt32)
        case contentType(ContentType)
        case done
        case preedit(String)
        case deliver(Delivery)
        /// The active window's app id (foreign-toplevel), or nil.
        case focusedApp(String?)
    }

    enum Action: Sendable, Equatable {
        case send(Commit)
        /// Press and release this key (an X keysym name) on the virtual keyboard.
        case pressKey(String)
        case report(FieldReport)
        /// Text dropped because no ordinary field was active (logged, never with the text).
        case dropped(characters: Int, secret: Bool)
        /// A deletion refused: the text before the cursor is not what sttd committed.
        case deleteRefused(characters: Int)
    }

    struct FieldState: Equatable {
        var active = false
        var contentType = ContentType()
        /// Nil when the field did not send it in its latest batch (it may not support it).
        var surrounding: Surrounding?
        var changeCause: UInt32 = 0
    }

    /// At most this many deliveries wait for a `done`; the oldest is dropped first.
    static let pendingLimit = 256
    static let changeCauseOther: UInt32 = 1

    private var holding = false
    private var current = FieldState()
    private var pending = FieldState()
    /// An `activate` or `deactivate` came and its `done` has not.
    private var changing = false
    /// An `activate` came since the last `done`: the next `done` starts a new field.
    private var activating = false
    private var doneCount: UInt32 = 0
    private var waiting: [Delivery] = []
    private var preedit = ""
    /// The field shows a non-empty preedit.
    private var preeditShown = false
    /// The texts committed into the active field, oldest first, and whether the field's text has
    /// since been seen ending with the newest one.
    private var committed: [String] = []
    private var newestSeen = false
    private var reported: FieldReport?
    private var app: String?

    init() {}

    var report: FieldReport {
        FieldReport(
            active: holding, focused: current.active, secret: current.active && current.contentType.isSecret,
            app: holding ? app : nil)
    }

    /// The active ordinary field, if text may go there now.
    private var ordinaryFieldActive: Bool { holding && current.active && !current.contentType.isSecret }

    mutating func handle(_ event: Event) -> [Action] {
        var actions: [Action] = []
        switch event {
        case .bound:
            holding = true
        case .unavailable:
            holding = false
            current = FieldState()
            waiting.removeAll()
        case .activate:
            // The protocol resets the field's state with each activation.
            pending = FieldState(active: true)
            changing = true
            activating = true
        case .deactivate:
            pending.active = false
            changing = true
        case .surroundingText(let text, let cursor):
            pending.surrounding = Surrounding(text: text, cursor: cursor)
        case .changeCause(let cause):
            pending.changeCause = cause
        case .contentType(let contentType):
            pending.contentType = contentType
        case .done:
            actions += applyDone()
        case .preedit(let text):
            preedit = text
            if !changing { actions += showPreedit() }
        case .focusedApp(let app):
            self.app = app
        case .deliver(let delivery):
            if case .commit = delivery { preedit = "" }
            if changing {
                waiting.append(delivery)
                if waiting.count > Self.pendingLimit { waiting.removeFirst() }
            } else {
                actions += deliver(delivery)
            }
        }
        if report != reported {
            reported = report
            actions.append(.report(report))
        }
        return actions
    }

    private mutating func applyDone() -> [Action] {
        doneCount &+= 1
        let newField = activating
        current = pending
        // Surrounding text and the change cause are per batch; the content type stays.
        pending.surrounding = nil
        pending.changeCause = 0
        changing = false
        activating = false
        if newField || !current.active {
            committed.removeAll()
            preeditShown = false
        } else {
            followFieldText()
        }
        var actions: [Action] = []
        let queued = waiting
        waiting.removeAll()
        actions += queued.flatMap { deliver($0) }
        if current.active, current.contentType.isSecret, preeditShown {
            actions.append(.send(Commit(preedit: "", serial: doneCount)))
            preeditShown = false
        } else if newField {
            actions += showPreedit()
        }
        return actions
    }

    /// The field's text no longer ends with what sttd committed last, after it was seen to: the
    /// user typed, deleted or moved the cursor. A report that does not show it yet is older than
    /// the commit and changes nothing.
    private mutating func followFieldText() {
        guard let newest = committed.last, let surrounding = current.surrounding else { return }
        if surrounding.beforeCursor.hasSuffix(newest) {
            newestSeen = true
        } else if newestSeen || current.changeCause == Self.changeCauseOther {
            committed.removeAll()
        }
    }

    private mutating func deliver(_ delivery: Delivery) -> [Action] {
        guard ordinaryFieldActive else {
            switch delivery {
            case .commit(let text):
                return [.dropped(characters: text.count, secret: current.active && current.contentType.isSecret)]
            case .delete(let characters):
                return characters > 0 ? [.deleteRefused(characters: characters)] : []
            case .key:
                return []
            }
        }
        switch delivery {
        case .commit(let text):
            guard !text.isEmpty else { return [] }
            committed.append(text)
            newestSeen = false
            preeditShown = !preedit.isEmpty
            let pieces = Commit.pieces(of: text)
            return pieces.enumerated().map { index, piece in
                .send(Commit(preedit: index == pieces.count - 1 ? preedit : "", text: piece, serial: doneCount))
            }
        case .delete(let characters):
            guard characters > 0 else { return [] }
            guard let newest = committed.last, newest.unicodeScalars.count == characters else {
                committed.removeAll()
                return [.deleteRefused(characters: characters)]
            }
            committed.removeLast()
            // The field's next report may predate the deletion: only a later one may judge.
            newestSeen = false
            if current.contentType.isTerminal {
                var actions: [Action] = []
                if preeditShown {
                    actions.append(.send(Commit(preedit: "", serial: doneCount)))
                    preeditShown = false
                }
                return actions + Array(repeating: .pressKey("BackSpace"), count: characters)
            }
            return [.send(Commit(preedit: preedit, deleteBefore: UInt32(newest.utf8.count), serial: doneCount))]
        case .key(let keysym):
            committed.removeAll()
            return [.pressKey(keysym)]
        }
    }

    private mutating func showPreedit() -> [Action] {
        guard ordinaryFieldActive else { return [] }
        if preedit.isEmpty {
            guard preeditShown else { return [] }
            preeditShown = false
            return [.send(Commit(preedit: "", serial: doneCount))]
        }
        preeditShown = true
        return [.send(Commit(preedit: Commit.shownPreedit(preedit), serial: doneCount))]
    }
}
