import SpeechAPI

/// What `sttd-ibus` does, decided without I/O: events from ibus-daemon (engines created,
/// focused, enabled, told their field's purpose), from sttd (preedit and commits) and from the
/// push-to-talk key come in; actions (IBus signals, reports to sttd, session calls) come out.
///
/// Rules:
/// - Text goes to the field that has the focus when it arrives: an interim as preedit, a final
///   committed. With no field focused (the desktop), or a password/PIN field, it is dropped
///   (sttd keeps it in the transcript and history and says so once).
/// - After a focus change the field's purpose is not known until ibus-daemon's messages sent with
///   the focus have been read: text waits (``Action/settle(_:)``) until then, so a password field
///   never gets a word meant for the field before it.
/// - The preedit follows the focus: it leaves with the field (IBus drops it, "clear" mode) and
///   shows again in the next field.
/// - A held push-to-talk key repeats presses: only the first starts a session. Its release goes
///   to whichever window has the focus: when the engine loses the focus and does not get it
///   back within ``focusGrace``, the release can no longer arrive here, so the session stops.
/// - A desktop may switch the input method off while a password field has the focus (GNOME Shell
///   switches to the keyboard layout): until a field has the focus again, sttd hears "a password
///   field, input method off", so that the typing tools do not type into it instead.
/// - "scratch that" deletes only the text this engine committed into the field that still has
///   the focus, newest first; a focus change, a reset (the cursor moved), a key the user typed or
///   a key sttd pressed makes the earlier text the field's own.
struct EngineMachine: Sendable {
    /// How long the engine may be without the focus while push-to-talk is held (a focus change
    /// between two fields takes a moment) before its session stops.
    static let focusGrace = Duration.milliseconds(400)

    /// An input from ibus-daemon, sttd or the key.
    enum Event: Sendable, Equatable {
        case created(path: String)
        case destroyed(path: String)
        case enabled(path: String)
        case disabled(path: String)
        /// `client` is nil when ibus-daemon did not say (`FocusIn` without an id).
        case focusIn(path: String, client: String?)
        /// ibus-daemon asked whether this engine takes focus ids (`FocusId`): it names the client
        /// of every focus once it has the answer, so an id-less `FocusIn` before that is unknown.
        case focusIdAsked(path: String)
        case focusOut(path: String)
        case contentType(path: String, purpose: UInt32)
        /// The purpose of the field KWin's input method (ibus-wayland, whose IBus client is
        /// "wayland") serves, from `sttd-ibus --wayland`; nil: a field is activated, its purpose
        /// not known yet (nothing is typed into it until it is).
        case waylandPurpose(UInt32?)
        /// The field reset its input method (a click moved the cursor): its preedit is gone.
        case reset(path: String)
        /// Everything ibus-daemon sent before the round trip numbered so has been read.
        case settled(UInt64)
        case preedit(String)
        /// A final's text, a deletion ("scratch that") or a key ("press enter") from sttd.
        case deliver(Delivery)
        /// sttd (re)appeared on the session bus: it must hear the state again.
        case sttdAppeared
        case pushToTalk(pressed: Bool)
        /// A key the engine passed on to the field at `path` (the user typed).
        case userKey(path: String)
        /// ``focusGrace`` has passed since the focus loss numbered so.
        case focusGraceOver(UInt64)
    }

    /// What sttd asks to put into the focused field, in order.
    enum Delivery: Sendable, Equatable {
        case commit(String)
        /// Delete this many Unicode characters before the cursor.
        case delete(Int)
        /// Press and release the key with this X keysym name.
        case key(String)
    }

    /// An output to carry out, in order.
    enum Action: Sendable, Equatable {
        /// `UpdatePreeditText` on the engine at `path` (empty text: hidden).
        case showPreedit(path: String, text: String)
        /// `CommitText` on the engine at `path`.
        case commit(path: String, text: String)
        /// `DeleteSurroundingText` before the cursor on the engine at `path`.
        case deleteBefore(path: String, characters: Int)
        /// `ForwardKeyEvent` (press, then release) on the engine at `path`.
        case forwardKey(path: String, keysym: String)
        /// Tell sttd with `SetInputMethodState`.
        case report(InputMethodState)
        /// Make a round trip to ibus-daemon, then feed ``Event/settled(_:)`` with this number.
        case settle(UInt64)
        /// Start a dictation session (push-to-talk pressed), and stop it (released).
        case startSession
        case stopSession
        /// Text dropped because no ordinary field had the focus (logged, never with the text).
        case dropped(characters: Int, secret: Bool)
        /// A deletion refused: the text before the cursor is not what this engine committed.
        case deleteRefused(characters: Int)
        /// Wait ``focusGrace``, then feed ``Event/focusGraceOver(_:)`` with this number.
        case watchFocus(UInt64)
    }

    private struct Engine {
        var enabled = false
        var purpose: UInt32 = 0
        /// ibus-daemon will name each focus's client (it asked `FocusId`).
        var idsComing = false
        /// The client of its latest focus, if ibus-daemon named it.
        var client: String?
    }

    /// At most this many finals wait for a focus change to settle; older ones are dropped first.
    static let pendingLimit = 256

    private var engines: [String: Engine] = [:]
    /// What `sttd-ibus --wayland` said of the field ibus-wayland serves (ordinary until it speaks).
    private var waylandPurpose: UInt32? = 0
    /// The engine whose field has the focus, if an ordinary field (not the desktop) has it.
    private var focused: String?
    /// The focus change being settled, if any; text waits meanwhile.
    private var settling: UInt64?
    private var rounds: UInt64 = 0
    private var pending: [Delivery] = []
    /// The current interim, and where it is shown.
    private var preedit = ""
    private var shownOn: String?
    private var reported: InputMethodState?
    private var keyDown = false
    /// The length (Unicode characters) of each text committed into the focused field since it
    /// got the focus, oldest first: what "scratch that" may delete.
    private var committed: [Int] = []
    /// Numbers the focus losses while push-to-talk is held; only the newest may stop the session.
    private var focusLosses: UInt64 = 0
    /// The engine whose password field lost the focus and heard of no focus since, if any.
    private var leftSecretField: String?
    /// The input method went off in a password field (``leftSecretField``'s engine was disabled).
    private var offInSecretField = false

    init() {}

    /// What sttd hears. While a focus change settles, "not focused": never the old field's
    /// purpose for the new field.
    var state: InputMethodState {
        let active = engines.values.contains { $0.enabled }
        if !active, offInSecretField {
            return InputMethodState(active: false, focused: true, secret: true, pushToTalk: keyDown)
        }
        guard !waiting, let focused, let engine = engines[focused], engine.enabled else {
            return InputMethodState(active: active, pushToTalk: keyDown)
        }
        return InputMethodState(active: active, focused: true, secret: isSecret(engine), pushToTalk: keyDown)
    }

    static func isSecret(_ purpose: UInt32) -> Bool { purpose == IBus.password || purpose == IBus.pin }

    /// A password or PIN field, as IBus says or, for ibus-wayland's fields, as KWin says.
    private func isSecret(_ engine: Engine) -> Bool {
        guard engine.client == IBus.waylandClient, let waylandPurpose else { return Self.isSecret(engine.purpose) }
        return Self.isSecret(engine.purpose) || Self.isSecret(waylandPurpose)
    }

    /// Text waits: the focused field's purpose is not known yet (a focus change settling, or
    /// ibus-wayland's field before KWin said what it is).
    private var waiting: Bool {
        settling != nil || (focused.flatMap { engines[$0] }?.client == IBus.waylandClient && waylandPurpose == nil)
    }

    mutating func handle(_ event: Event) -> [Action] {
        var actions: [Action] = []
        switch event {
        case .created(let path):
            engines[path] = Engine()
        case .destroyed(let path):
            noteSwitchedOff(path)
            engines[path] = nil
            actions += loseFocus(path)
        case .enabled(let path):
            // Only engines ibus-daemon created and has not destroyed: a late call cannot revive one.
            engines[path]?.enabled = true
            if engines[path] != nil { offInSecretField = false }
        case .disabled(let path):
            noteSwitchedOff(path)
            engines[path]?.enabled = false
            actions += loseFocus(path)
        case .focusIn(let path, let client):
            guard engines[path] != nil else { break }
            if focused != path { actions += loseFocus(focused) }
            guard client != IBus.fakeClient else { break }
            // IBus 1.5.27 sends a new engine's first focus before it has read `FocusId`, with no
            // client: usually its own fake context (the desktop). A field is named by the next
            // `FocusInId`; until then nothing is typed (older IBus never asks, and sends no ids).
            if client == nil, engines[path]?.idsComing == true { break }
            // A field has the focus: the password field the input method went off in has not.
            leftSecretField = nil
            offInSecretField = false
            focused = path
            engines[path]?.client = client
            committed.removeAll()
            rounds += 1
            settling = rounds
            actions.append(.settle(rounds))
        case .focusIdAsked(let path):
            engines[path]?.idsComing = true
        case .focusOut(let path):
            actions += loseFocus(path)
        case .contentType(let path, let purpose):
            engines[path]?.purpose = purpose
            guard path == focused, !waiting, let engine = engines[path] else { break }
            if !isSecret(engine) {
                actions += showPreedit()
            } else if shownOn == path {
                actions.append(.showPreedit(path: path, text: ""))
                shownOn = nil
            }
        case .waylandPurpose(let purpose):
            waylandPurpose = purpose
            guard let focused, let engine = engines[focused], engine.client == IBus.waylandClient, !waiting else {
                break
            }
            // Text that waited for the purpose goes (or is dropped, in a password field).
            actions += deliverPending()
            if !isSecret(engine) {
                actions += showPreedit()
            } else if shownOn == focused {
                actions.append(.showPreedit(path: focused, text: ""))
                shownOn = nil
            }
        case .reset(let path):
            if shownOn == path { shownOn = nil }
            if focused == path { committed.removeAll() }
        case .settled(let round):
            guard round == settling else { break }
            settling = nil
            guard !waiting else { break }
            actions += deliverPending()
            actions += showPreedit()
        case .preedit(let text):
            preedit = text
            actions += showPreedit()
        case .deliver(let delivery):
            if case .commit = delivery { preedit = "" }
            if waiting {
                pending.append(delivery)
                if pending.count > Self.pendingLimit { pending.removeFirst() }
            } else {
                actions += deliver(delivery)
            }
        case .sttdAppeared:
            reported = nil
        case .pushToTalk(let pressed):
            if pressed && !keyDown { actions.append(.startSession) }
            if !pressed && keyDown { actions.append(.stopSession) }
            keyDown = pressed
        case .userKey(let path):
            if focused == path { committed.removeAll() }
        case .focusGraceOver(let loss):
            // The release went to a window without this engine: it never comes.
            guard loss == focusLosses, keyDown, focused == nil else { break }
            keyDown = false
            actions.append(.stopSession)
        }
        if state != reported {
            reported = state
            actions.append(.report(state))
        }
        return actions
    }

    /// The engine at `path` is switched off: in a password field (focused, or left without a
    /// focus since), the desktop turned Dictation off there.
    private mutating func noteSwitchedOff(_ path: String) {
        // Waiting or not: GNOME switches off right after it hears the purpose, before the settling ends.
        let inSecretField = focused == path && engines[path].map(isSecret) == true
        if inSecretField || leftSecretField == path { offInSecretField = true }
    }

    /// The engine at `path` no longer has an ordinary field's focus.
    private mutating func loseFocus(_ path: String?) -> [Action] {
        guard let path, focused == path else { return [] }
        if engines[path].map(isSecret) == true { leftSecretField = path }
        focused = nil
        settling = nil
        committed.removeAll()
        // Finals that waited for the focus to settle had no field: dropped like any such text.
        pending.removeAll()
        // IBus drops a "clear"-mode preedit at focus-out; it shows again in the next field.
        if shownOn == path { shownOn = nil }
        guard keyDown else { return [] }
        focusLosses += 1
        return [.watchFocus(focusLosses)]
    }

    /// The focused ordinary field, if text may go there now.
    private var target: String? {
        guard !waiting, let focused, let engine = engines[focused], engine.enabled, !isSecret(engine)
        else { return nil }
        return focused
    }

    private mutating func deliver(_ delivery: Delivery) -> [Action] {
        guard let target else {
            switch delivery {
            case .commit(let text):
                let secret = focused.flatMap { engines[$0] }.map { isSecret($0) } ?? false
                return [.dropped(characters: text.count, secret: secret)]
            case .delete(let characters):
                return characters > 0 ? [.deleteRefused(characters: characters)] : []
            case .key:
                return []
            }
        }
        switch delivery {
        case .commit(let text):
            var actions: [Action] = []
            if shownOn == target {
                actions.append(.showPreedit(path: target, text: ""))
                shownOn = nil
            }
            actions.append(.commit(path: target, text: text))
            committed.append(text.unicodeScalars.count)
            return actions
        case .delete(let characters):
            guard characters > 0 else { return [] }
            guard committed.last == characters else {
                committed.removeAll()
                return [.deleteRefused(characters: characters)]
            }
            committed.removeLast()
            return [.deleteBefore(path: target, characters: characters)]
        case .key(let keysym):
            committed.removeAll()
            return [.forwardKey(path: target, keysym: keysym)]
        }
    }

    private mutating func deliverPending() -> [Action] {
        let queued = pending
        pending.removeAll()
        return queued.flatMap { deliver($0) }
    }

    private mutating func showPreedit() -> [Action] {
        guard let target else { return [] }
        if preedit.isEmpty {
            guard shownOn == target else { return [] }
            shownOn = nil
            return [.showPreedit(path: target, text: "")]
        }
        shownOn = target
        return [.showPreedit(path: target, text: preedit)]
    }
}
