/// The session as the core last published it, handed to observers with each event and readable
/// from any thread (``SpeechCore/snapshot``): whose session it is, where its signals go, and its
/// text, kept together so that a read never pairs one session's text with another's owner.
public struct SessionSnapshot: Sendable, Equatable {
    /// Who started the current session, or the last one (its transcript is still shown); nil
    /// before the first.
    public internal(set) var owner: Caller?
    /// Where the running session's events go: a sandboxed app's unique name, or nil for everyone.
    public internal(set) var destination: String?
    /// A session is running (`State` is not `idle`).
    public internal(set) var listening = false
    /// The transcript as last published.
    public internal(set) var transcript = ""

    /// Follows one event, as it goes out.
    mutating func note(_ event: SpeechEvent) {
        switch event {
        case .owner(let client, _):
            owner = client
            destination = client.privateDestination
        case .state(let now):
            listening = now != .idle
            if now == .idle { destination = nil }
        case .transcript(let text, _), .retracted(let text, _):
            transcript = text
        default:
            break
        }
    }

    /// The transcript a sandboxed app (its unique name `destination`) may read: its own
    /// session's text; while another session runs, `Busy` when it asks for this one value
    /// (`whole` false) and empty when it reads all of them at once; otherwise empty. An app never
    /// sees another's text (``SpeechCore/standing(of:)`` is the same rule for calls).
    public func transcript(shownTo destination: String, whole: Bool) -> Result<String, SpeechError> {
        if owner?.privateDestination == destination { return .success(transcript) }
        if listening && !whole { return .failure(SpeechCore.othersSession) }
        return .success("")
    }
}
