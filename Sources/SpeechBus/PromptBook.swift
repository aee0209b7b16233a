import DBus
import Foundation
import Logging
import Recognition
import Speech
import SpeechAPI
import Synchronization

/// Prompts waiting for the notification server's answer, by notification id.
final class PromptBook: Sendable {
    private struct Waiter {
        var server: String
        var continuation: CheckedContinuation<Consent.Answer, Never>
    }
    private struct State {
        var waiting: [UInt32: Waiter] = [:]
        // Answers that came before their waiter (bounded: the oldest are dropped).
        var early: [(id: UInt32, server: String, answer: Consent.Answer)] = []
    }
    private static let earlyLimit = 16
    private let state = Mutex(State())

    /// Takes `ActionInvoked` and `NotificationClosed` signals.
    func receive(_ signal: DBusSignalMessage) {
        guard let id = signal.arguments.first?.uint32 else { return }
        switch signal.member {
        case "ActionInvoked":
            let key = signal.arguments.count > 1 ? signal.arguments[1].string ?? "" : ""
            let answer: Consent.Answer =
                switch key {
                case "allow": .allow
                case "deny": .deny
                default: .unanswered("the prompt was clicked without choosing Allow or Deny")
                }
            resolve(id, from: signal.sender, answer)
        case "NotificationClosed":
            resolve(id, from: signal.sender, .unanswered("the prompt was dismissed"))
        default:
            break
        }
    }

    /// Answers the prompt `id`. `sender` nil is sttd's own timer, always believed.
    func resolve(_ id: UInt32, from sender: String?, _ answer: Consent.Answer) {
        let waiter = state.withLock { state -> Waiter? in
            guard let waiter = state.waiting[id] else {
                // "" (the timer) matches any server.
                state.early.append((id, sender ?? "", answer))
                if state.early.count > Self.earlyLimit { state.early.removeFirst() }
                return nil
            }
            guard sender == nil || sender == waiter.server else { return nil }
            state.waiting[id] = nil
            return waiter
        }
        waiter?.continuation.resume(returning: answer)
    }

    /// Waits for the answer to prompt `id` from the notification server `server`.
    func wait(for id: UInt32, from server: String) async -> Consent.Answer {
        await withCheckedContinuation { continuation in
            let early = state.withLock { state -> Consent.Answer? in
                if let index = state.early.firstIndex(where: {
                    $0.id == id && ($0.server == server || $0.server.isEmpty)
                }) {
                    return state.early.remove(at: index).answer
                }
                state.waiting[id] = Waiter(server: server, continuation: continuation)
                return nil
            }
            if let early { continuation.resume(returning: early) }
        }
    }
}
