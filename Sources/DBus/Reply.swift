import Logging
import Synchronization

/// Replies to one method call exactly once, from any thread.
///
/// A second ``send(_:)`` or ``fail(_:)`` is ignored. A reply released without either answers
/// `org.freedesktop.DBus.Error.Failed`, so every call gets exactly one reply. The reply holds no
/// libdbus message, only where the answer goes: the owner thread builds the message.
public final class DBusReply: Sendable {
    /// A checked answer, ready to marshal on the owner thread.
    enum Outcome: Sendable, Equatable {
        case values([DBusValue])
        case error(DBusError)
    }

    private let member: String
    private let outputs: [DBusType]
    private let logger: Logger
    private let deliver: @Sendable (Outcome) -> Void
    private let replied = Atomic<Bool>(false)

    /// A reply that hands its outcome to `deliver` (tests record it; the connection sends it).
    init(member: String, outputs: [DBusType], logger: Logger, deliver: @escaping @Sendable (Outcome) -> Void) {
        self.member = member
        self.outputs = outputs
        self.logger = logger
        self.deliver = deliver
    }

    /// A reply to the call at `address`, sent through `loop`.
    convenience init(to address: ReplyAddress, member: String, outputs: [DBusType], loop: ConnectionLoop) {
        self.init(member: member, outputs: outputs, logger: loop.logger) { outcome in
            // The checks still run for calls that want no reply: a wrong reply is a bug either way.
            guard address.expectsReply else { return }
            loop.perform { $0.sendReply(outcome, to: address) }
        }
    }

    deinit {
        guard !replied.load(ordering: .acquiring) else { return }
        logger.error("A method handler dropped its reply without answering", metadata: ["member": "\(member)"])
        deliver(.error(.failed("the service dropped this call")))
    }

    /// Answers with the method's output values. Values whose types differ from the declared
    /// outputs are a programming error: the caller gets `org.freedesktop.DBus.Error.Failed`, the
    /// error is logged, and debug builds stop.
    public func send(_ values: [DBusValue]) {
        guard claim() else { return }
        if let problem = Self.check(values, outputs: outputs, member: member) {
            logger.error("A method handler replied with the wrong types", metadata: ["problem": "\(problem)"])
            deliver(.error(.failed("the service produced an invalid reply to \(member)")))
            assertionFailure(problem)
            return
        }
        do {
            for value in values { try Marshal.check(value, depth: 0) }
        } catch {
            // Data, not a declaration, is at fault (e.g. a NUL in a string): no assertion.
            logger.error(
                "A method handler replied with a value D-Bus cannot carry",
                metadata: ["member": "\(member)", "error": "\(error.message)"])
            deliver(.error(.failed("the service produced an invalid reply to \(member): \(error.message)")))
            return
        }
        deliver(.values(values))
    }

    /// Answers with an error: a ``DBusErrorRepresentable`` error's name and message, otherwise
    /// `org.freedesktop.DBus.Error.Failed`.
    public func fail(_ error: any Error) {
        guard claim() else { return }
        deliver(.error(Self.wireError(for: error)))
    }

    /// What is wrong with replying `values` to a method declaring `outputs`, or nil.
    static func check(_ values: [DBusValue], outputs: [DBusType], member: String) -> String? {
        let types = values.map(\.type)
        guard types != outputs else { return nil }
        return "\(member) replies (\(signatureString(outputs))) but its handler sent (\(signatureString(types)))"
    }

    /// The error as it goes on the wire: a valid error name and a text without NULs, which
    /// libdbus would otherwise abort on or truncate.
    static func wireError(for error: any Error) -> DBusError {
        let error = (error as? any DBusErrorRepresentable)?.dbusError ?? .failed("\(error)")
        let name = Validate.isErrorName(error.name) ? error.name : DBusError.failed("").name
        return DBusError(name: name, message: Marshal.sanitized(error.message))
    }

    private func claim() -> Bool {
        let (exchanged, _) = replied.compareExchange(
            expected: false, desired: true, ordering: .acquiringAndReleasing)
        if !exchanged {
            logger.warning(
                "A method handler replied twice; the later reply is ignored", metadata: ["member": "\(member)"])
        }
        return exchanged
    }
}
