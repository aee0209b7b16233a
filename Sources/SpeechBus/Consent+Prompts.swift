import DBus
import Foundation
import Logging
import Recognition
import Speech
import SpeechAPI
import Synchronization

/// Asking the user: one notification per app, answered or timed out.
extension Consent {
    /// Asks the user about `app` (one prompt per app however many calls wait for it); a clear
    /// answer is remembered.
    func ask(_ app: String) async -> Answer {
        let first = asking.withLock { asking -> Bool in
            guard asking[app] == nil else { return false }
            asking[app] = []
            return true
        }
        guard first else {
            return await withCheckedContinuation { continuation in
                let joined = asking.withLock { asking -> Bool in
                    guard asking[app] != nil else { return false }
                    asking[app]!.append { continuation.resume(returning: $0) }
                    return true
                }
                // The prompt ended between the two looks: this call was not part of it.
                if !joined { continuation.resume(returning: .unanswered("the prompt had just ended")) }
            }
        }
        let answer = await prompt(app)
        if case .unanswered(let why) = answer {
            logger.notice("consent not given", metadata: ["app": "\(app)", "why": "\(why)"])
        } else {
            let decision: ConsentDecision = answer == .allow ? .allow : .deny
            do {
                try await store.set(decision, for: app)
                logger.notice("consent remembered", metadata: ["app": "\(app)", "decision": "\(decision)"])
            } catch {
                logger.error("cannot remember consent", metadata: ["app": "\(app)", "error": "\(error.message)"])
            }
        }
        let waiters = asking.withLock { $0.removeValue(forKey: app) } ?? []
        for waiter in waiters { waiter(answer) }
        return answer
    }

    func notifications(_ member: String, _ arguments: [DBusValue]) async throws(DBusError) -> [DBusValue] {
        try await connection.call(
            destination: DesktopNotifier.destination, path: DesktopNotifier.path,
            interface: DesktopNotifier.destination, member: member, arguments: arguments, timeout: .seconds(2))
    }

    /// What an allowed app can and cannot do, said where the user decides.
    static func promptBody(_ app: String) -> String {
        "\(app) wants to turn on your microphone and get the text of what you say. It gets only its own transcript: it cannot type into other windows, pick another microphone or send your voice elsewhere. Like any app allowed to talk to sttd, it can follow what you dictate in other apps."
    }

    /// Shows the Allow/Deny notification and waits for the answer, at most ``timeout``.
    func prompt(_ app: String) async -> Answer {
        let server: String
        do {
            let capabilities = try await notifications("GetCapabilities", []).first?.strings ?? []
            guard capabilities.contains("actions") else {
                return .unanswered("the desktop's notifications cannot show Allow and Deny buttons")
            }
            // Answers count only from the server that showed the prompt: anyone may send us signals.
            guard
                let owner = try await connection.call(
                    destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                    interface: "org.freedesktop.DBus", member: "GetNameOwner",
                    arguments: [.string(DesktopNotifier.destination)]
                ).first?.string
            else { return .unanswered("no notification server") }
            server = owner
        } catch {
            return .unanswered("no desktop notifications to ask you with (\(error.message))")
        }
        let milliseconds = Int32(clamping: Int64(timeout / .milliseconds(1)))
        let id: UInt32
        do {
            let reply = try await notifications(
                "Notify",
                [
                    .string("sttd"), .uint32(0), .string("audio-input-microphone"),
                    .string("Allow \(app) to use dictation?"),
                    .string(Self.promptBody(app)),
                    .strings(["allow", "Allow", "deny", "Deny"]),
                    .vardict([("urgency", .byte(2)), ("category", .string("device"))]), .int32(milliseconds),
                ])
            guard let shown = reply.first?.uint32, shown != 0 else {
                return .unanswered("the prompt could not be shown")
            }
            id = shown
        } catch {
            return .unanswered("the prompt could not be shown (\(error.message))")
        }
        logger.info("asking for consent", metadata: ["app": "\(app)", "notification": "\(id)"])
        let timeout = timeout
        let answer = await withTaskCancellationHandler {
            await withTaskGroup(of: Void.self) { [prompts] group in
                group.addTask {
                    // Cancelled when the answer comes first; otherwise the prompt times out.
                    guard (try? await eventLoopSleep(for: timeout)) != nil else { return }
                    prompts.resolve(id, from: nil, .unanswered("no answer within \(milliseconds) ms"))
                }
                let answer = await prompts.wait(for: id, from: server)
                group.cancelAll()
                return answer
            }
        } onCancel: { [prompts] in
            // Shutting down: the waiting call is answered, and run() can end.
            prompts.resolve(id, from: nil, .unanswered("sttd is shutting down"))
        }
        if case .unanswered = answer {
            _ = try? await notifications("CloseNotification", [.uint32(id)])
        }
        return answer
    }
}
