import DBus
import Logging
import Speech

/// Desktop notifications through `org.freedesktop.Notifications` (config `notify`): one when
/// listening starts, replaced (not stacked) when it stops ("Dictation stopped — N words"), and
/// one when a session or the desktop output fails, or when the offline engine takes a session
/// over ("Dictation continues offline", and why). With no notification server on the bus,
/// nothing is shown and nothing fails. Dictated text never goes into a notification: servers
/// keep a history of them.
public struct DesktopNotifier: Sendable {
    static let destination = "org.freedesktop.Notifications"
    static let path = "/org/freedesktop/Notifications"

    private let connection: DBusConnection
    private let logger: Logger
    /// Named when hands-free dictation is armed.
    private let wakePhrase: String

    public init(connection: DBusConnection, wakePhrase: String = "", logger: Logger) {
        self.connection = connection
        self.wakePhrase = wakePhrase
        self.logger = logger
    }

    /// The events ``run(_:)`` looks at: not level readings, which would wake it ten times a
    /// second while listening (a third of sttd's own CPU in silence), nor the input method's.
    @Sendable public static func wants(_ event: SpeechEvent) -> Bool {
        switch event {
        case .audioLevel, .inputMethod, .inputMethodText: false
        default: true
        }
    }

    /// Follows `events` until they end (when the core does), one notification call at a time.
    public func run(_ events: AsyncStream<SpeechEvent>) async {
        var shown: UInt32 = 0
        var listening = false
        // A start in flight: an error before it listens means it could not start (a hotkey
        // user sees no D-Bus reply, so the notification is how they learn why).
        var starting = false
        var words = 0
        /// Why a starting session runs on the offline engine.
        var offline: SpeechError?
        var handsFree = (state: HandsFreeState.off, shown: UInt32(0))
        for await event in events {
            switch event {
            case .state(.starting):
                starting = true
                offline = nil
            case .lastError(let error?) where starting && offline == nil:
                starting = false
                shown = await notify(replacing: shown, "Dictation could not start", error.message, urgency: 2)
            case .state(.listening) where !listening:
                listening = true
                starting = false
                if let reason = offline {
                    shown = await notify(replacing: shown, "Dictation continues offline", reason.message, urgency: 1)
                } else {
                    shown = await notify(replacing: shown, "Dictation on", "Listening to the microphone.", urgency: 0)
                }
            case .state(.idle) where listening:
                listening = false
                shown = await notify(
                    replacing: shown, "Dictation stopped — \(words) \(words == 1 ? "word" : "words")", "", urgency: 0)
            case .transcript(let text, _), .retracted(let text, _):
                words = text.split(whereSeparator: \.isWhitespace).count
            case .sessionFailed(let error):
                listening = false
                shown = await notify(replacing: shown, "Dictation failed", error.message, urgency: 2)
            case .continuingOffline(let reason) where listening:
                shown = await notify(replacing: shown, "Dictation continues offline", reason.message, urgency: 1)
            case .continuingOffline(let reason):
                // At the start: said instead of "Dictation on".
                offline = reason
            case .handsFree(let state):
                // Arming and disarming, not each re-arm after a session.
                let before = handsFree.state
                handsFree.state = state
                guard let (title, body) = Self.handsFreeNotice(state, before: before, phrase: wakePhrase) else { break }
                handsFree.shown = await notify(
                    replacing: handsFree.shown, title, body, urgency: state == .paused ? 1 : 0)
            case .outputFailed(let error):
                _ = await notify(replacing: 0, "Dictated text was not typed", error.message, urgency: 2)
            default:
                break
            }
        }
    }

    /// What to say when hands-free dictation goes from `before` to `state`, if anything.
    static func handsFreeNotice(_ state: HandsFreeState, before: HandsFreeState, phrase: String) -> (String, String)? {
        switch state {
        case .off:
            return ("Hands-free off", "sttd no longer listens for the phrase.")
        case .armed where before == .off || before == .paused, .dictating where before == .off:
            return (
                "Hands-free on — say “\(phrase)”",
                "The microphone stays on. What it hears stays on this computer until you say the phrase."
            )
        case .paused:
            return ("Hands-free paused", "The microphone or the offline engine is out; sttd tries again.")
        case .armed, .dictating:
            return nil
        }
    }

    /// Shows a notification; returns its id (0 when none could be shown).
    private func notify(replacing id: UInt32, _ summary: String, _ body: String, urgency: UInt8) async -> UInt32 {
        do {
            let reply = try await connection.call(
                destination: Self.destination, path: Self.path, interface: Self.destination, member: "Notify",
                arguments: [
                    .string("sttd"), .uint32(id), .string("audio-input-microphone"), .string(summary), .string(body),
                    .array(.string, []), .vardict([("urgency", .byte(urgency))]), .int32(-1),
                ],
                timeout: .seconds(2))
            return reply.first?.uint32 ?? 0
        } catch {
            // No server (a headless session, a bare window manager): nothing to show.
            logger.debug("notification not shown", metadata: ["reason": "\(error.message)"])
            return 0
        }
    }
}
