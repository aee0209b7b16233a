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
///   Terminals ignore `delete_surrounding_text`, and GTK 3 reads its byte count as characters:
///   there, and for text that is not ASCII, the deletion is BackSpaces.
/// - Keys are pressed only while an ordinary field is active.
/// - A GTK entry that hides its text (most apps' password field) activates the input method as an
///   ordinary field: only its text, shown as "●●●", gives it away. Before the first text or
///   preedit goes into a field whose text is empty, a space is committed and taken back once the
///   field shows how it displays it (see SeatMachine+Probe.swift).
struct SeatMachine: Sendable {
    enum Event: Sendable, Equatable {
        /// The input method object exists and no other holds the seat (no `unavailable` came).
        case bound
        case unavailable
        case activate
        case deactivate
        case surroundingText(String, cursor: UInt32)
        case contentType(ContentType)
        case done
        case preedit(String)
        case deliver(Delivery)
        /// The active window's app id (foreign-toplevel), or nil.
        case focusedApp(String?)
        /// The field did not show the probe within ``probeLimit``.
        case probeOverdue
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
        /// A probe went out: wait at most ``probeLimit`` for the field's answer.
        case probeSent
        /// The field did not answer the probe (logged; it gets nothing).
        case probeUnanswered
    }

    struct FieldState: Equatable {
        var active = false
        var contentType = ContentType()
        /// Nil when the field did not send it in its latest batch (it may not support it).
        var surrounding: Surrounding?
    }

    /// At most this many deliveries wait for a `done`; the oldest is dropped first.
    static let pendingLimit = 256

    private var holding = false
    var current = FieldState()
    private var pending = FieldState()
    /// An `activate` or `deactivate` came and its `done` has not.
    private var changing = false
    /// An `activate` came since the last `done`: the next `done` starts a new field.
    private var activating = false
    var doneCount: UInt32 = 0
    private var waiting: [Delivery] = []
    private var preedit = ""
    /// The field shows a non-empty preedit.
    private var preeditShown = false
    /// Whether the active field hides its text, as far as known.
    var fieldKind = FieldKind.unknown
    /// Empty commits sent to make a field report the probe.
    var probeNudges = 0
    /// The texts committed into the active field, oldest first, and whether the field's text has
    /// since been seen ending with the newest one.
    private var committed: [String] = []
    private var newestSeen = false
    private var reported: FieldReport?
    var app: String?

    init() {}

    var report: FieldReport {
        FieldReport(
            active: holding, focused: current.active, secret: current.active && isSecretField,
            app: holding ? app : nil)
    }

    private var isSecretField: Bool { current.contentType.isSecret || fieldKind == .hidden }

    /// The active ordinary field, if text may go there now.
    var ordinaryFieldActive: Bool { holding && current.active && !isSecretField }

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
        case .contentType(let contentType):
            pending.contentType = contentType
        case .done:
            actions += applyDone()
        case .preedit(let text):
            preedit = text
            guard !changing, fieldKind != .probing else { break }
            // Clearing needs no probe.
            if text.isEmpty {
                actions += showPreedit()
                break
            }
            let gate = probeGate()
            actions += gate.actions
            if gate.ready { actions += showPreedit() }
        case .focusedApp(let app):
            self.app = app
        case .deliver(let delivery):
            if case .commit = delivery { preedit = "" }
            var ready = !changing && fieldKind != .probing
            if ready {
                let gate = probeGate()
                actions += gate.actions
                ready = gate.ready
            }
            if ready {
                actions += deliver(delivery)
            } else {
                waiting.append(delivery)
                if waiting.count > Self.pendingLimit { waiting.removeFirst() }
            }
        case .probeOverdue:
            actions += probeAnswered(within: nil)
            actions += deliverWaiting()
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
        // Surrounding text is per batch; the content type stays.
        pending.surrounding = nil
        changing = false
        activating = false
        var actions: [Action] = []
        if newField || !current.active {
            committed.removeAll()
            preeditShown = false
            fieldKind = .unknown
        } else if fieldKind == .probing {
            guard let shown = current.surrounding, !shown.beforeCursor.isEmpty else { return probeNudge() }
            actions += probeAnswered(within: shown)
        } else {
            followFieldText()
        }
        let wasProbing = fieldKind == .probing
        actions += deliverWaiting()
        if current.active, isSecretField, preeditShown {
            actions.append(.send(Commit(preedit: "", serial: doneCount)))
            preeditShown = false
        } else if newField || wasProbing, !preedit.isEmpty {
            let gate = probeGate()
            actions += gate.actions
            if gate.ready { actions += showPreedit() }
        }
        return actions
    }

    /// The field's text no longer ends with what sttd committed last, after it was seen to: the
    /// user typed, deleted or moved the cursor. A report that does not show it yet is older than
    /// the commit and changes nothing (Firefox's lags a batch). The change cause cannot say who
    /// changed the text: GTK reports "input method" after a typed key, Firefox "other" after sttd's commit.
    private mutating func followFieldText() {
        guard let newest = committed.last, let surrounding = current.surrounding else { return }
        if surrounding.beforeCursor.hasSuffix(newest) {
            newestSeen = true
        } else if newestSeen {
            committed.removeAll()
        }
    }

    /// The deliveries that waited for a `done` or the probe, in order.
    private mutating func deliverWaiting() -> [Action] {
        var actions: [Action] = []
        if !waiting.isEmpty {
            let gate = probeGate()
            actions += gate.actions
            guard gate.ready else { return actions }
        }
        let queued = waiting
        waiting.removeAll()
        return actions + queued.flatMap { deliver($0) }
    }

    private mutating func deliver(_ delivery: Delivery) -> [Action] {
        guard ordinaryFieldActive else {
            switch delivery {
            case .commit(let text):
                return [.dropped(characters: text.count, secret: current.active && isSecretField)]
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
            // Terminals ignore delete_surrounding_text, and GTK 3 takes its byte count for characters:
            // text that is not ASCII goes with BackSpaces, one per character.
            if current.contentType.isTerminal || !newest.allSatisfy(\.isASCII) {
                var actions: [Action] = []
                if preeditShown {
                    actions.append(.send(Commit(preedit: "", serial: doneCount)))
                    preeditShown = false
                }
                let presses = current.contentType.isTerminal ? characters : newest.count
                return actions + Array(repeating: .pressKey("BackSpace"), count: presses)
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
