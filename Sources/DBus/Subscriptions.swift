import CDBus
import Foundation
import Logging
import Synchronization

/// Who owns a followed well-known name, as far as the owner thread has heard (nil: nobody).
struct NameOwner {
    var owner: String?
}

/// One subscriber to signals.
struct SignalSubscription: Sendable {
    /// Whose signals a subscriber takes.
    enum Sender: Sendable, Equatable {
        case anyone
        /// A unique name, or the bus itself (`org.freedesktop.DBus`, the sender of its own signals).
        case exactly(String)
        /// Whoever owns this well-known name at the time.
        case ownerOf(String)

        init(name: String) {
            self = name.hasPrefix(":") || name == ConnectionLoop.busDriver ? .exactly(name) : .ownerOf(name)
        }
    }

    static let nextID = Atomic<UInt64>(0)
    let id = SignalSubscription.nextID.add(1, ordering: .relaxed).newValue
    let sender: Sender
    let path: String?
    let interface: String?
    let member: String?
    let continuation: AsyncStream<DBusSignalMessage>.Continuation

    /// `owner` tells who owns a followed well-known name now.
    func matches(_ message: Message, owner: (String) -> String?) -> Bool {
        guard
            (path == nil || path == message.path) && (interface == nil || interface == message.interface)
                && (member == nil || member == message.member)
        else { return false }
        switch sender {
        case .anyone: return true
        case .exactly(let name): return message.sender == name
        case .ownerOf(let name): return message.sender != nil && message.sender == owner(name)
        }
    }
}

/// A reply not yet received; completes exactly once.
final class PendingReply: Sendable {
    let handler: Mutex<(@Sendable (Result<[DBusValue], DBusError>) -> Void)?>
    init(_ handler: @escaping @Sendable (Result<[DBusValue], DBusError>) -> Void) {
        self.handler = Mutex(handler)
    }
    func complete(_ result: Result<[DBusValue], DBusError>) {
        let handler = self.handler.withLock { handler in
            defer { handler = nil }
            return handler
        }
        handler?(result)
    }
}
