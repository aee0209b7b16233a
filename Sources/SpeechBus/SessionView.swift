import DBus
import Speech
import Synchronization

/// Whose session is running, as the core's events tell it, and what a sandboxed caller may see of
/// it: the session it started is its own; any other session (another app's or the host's) it may
/// neither see nor control, and the text such a session left behind it never sees.
///
/// Updated from the core's events, in their order on the core's executor; read on the bus thread
/// (property reads). The core itself decides which calls an app may make (see ``Caller``).
final class SessionView: Sendable {
    private struct State {
        /// Who started the current session, or the last one (its transcript is still shown); nil
        /// before the first.
        var client: Caller?
        /// Where the running session's signals go: a sandboxed app's unique name, or nil to broadcast.
        var destination: String?
        /// A session is running (`State` is not `idle`).
        var listening = false
        /// The transcript as the core last published it, kept with its owner so that a read
        /// never pairs one session's text with another's owner.
        var transcript = ""
    }
    private let state = Mutex(State())

    func note(_ event: SpeechEvent) {
        switch event {
        case .owner(let client):
            state.withLock {
                $0.client = client
                $0.destination = client.privateDestination
            }
        case .state(let now):
            state.withLock {
                $0.listening = now != .idle
                if now == .idle { $0.destination = nil }
            }
        case .transcript(let text, _), .retracted(let text, _):
            state.withLock { $0.transcript = text }
        default:
            break
        }
    }

    /// Where the running session's signals go (nil: broadcast).
    var destination: String? { state.withLock { $0.destination } }

    /// Whether the current (or last) session is `sender`'s, a sandboxed app's.
    func isOwner(_ sender: String) -> Bool { state.withLock { $0.client?.privateDestination == sender } }

    /// The `Transcript` a sandboxed caller reads: its own session's text; while another session
    /// runs, `Busy` (an empty string in `GetAll`, which must still show the other properties);
    /// otherwise empty.
    func transcript(shownTo sender: String, reading kind: DBusAccess.Kind) -> Result<DBusValue, DBusError> {
        state.withLock { state in
            if state.client?.privateDestination == sender { return .success(.string(state.transcript)) }
            if state.listening && kind == .getProperty { return .failure(SpeechCore.othersSession.dbusError) }
            return .success(.string(""))
        }
    }
}
