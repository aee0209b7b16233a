import CSttdSystem
import Foundation
import Logging

/// Copies Wayland messages both ways between KWin and ibus-wayland, whole messages at a time,
/// with the file descriptors that came with them (a keymap, for one), letting ``WaylandWatch``
/// hold, drop or announce each. Blocking I/O on its own thread: input method traffic is a few
/// small messages per key or focus change, far below a socket's buffer.
///
/// Bounds: one partial message per side (under 64 KiB, its header says how long) and at most
/// ``descriptorLimit`` descriptors waiting for their bytes. A peer that breaks them, or sends
/// something that is not Wayland, ends the proxy (logged; both sides then close).
struct WaylandProxy: Sendable {
    /// As many as one send carries (libwayland sends at most 28 with a message batch).
    static let descriptorLimit = 32
    static let readSize = 16384
    /// How long an activated field may wait for its `content_type` (KWin sends it at once).
    static let contentTypeWait = Duration.seconds(1)

    let compositor: Int32
    let inputMethod: Int32
    let logger: Logger
    /// Tells the engine the focused field's purpose; returns once it has it (or cannot have it).
    let announce: @Sendable (UInt32?) -> Void

    private struct Side {
        let fd: Int32
        let name: String
        var reader = WaylandReader()
        var descriptors: [Int32] = []
    }

    /// Runs until a side closes or misbehaves; returns why, for the log.
    func run() -> String {
        var watch = WaylandWatch()
        var sides = [Side(fd: compositor, name: "KWin"), Side(fd: inputMethod, name: "ibus-wayland")]
        defer { for side in sides { side.descriptors.forEach { _ = close($0) } } }
        var contentTypeDeadline: ContinuousClock.Instant?
        var buffer = [UInt8](repeating: 0, count: Self.readSize)
        while true {
            var polls = sides.map { pollfd(fd: $0.fd, events: Int16(POLLIN), revents: 0) }
            let ready = poll(&polls, nfds_t(polls.count), Self.milliseconds(until: contentTypeDeadline))
            if ready < 0 {
                if errno == EINTR { continue }
                return "poll failed: \(String(cString: strerror(errno)))"
            }
            if ready == 0, contentTypeDeadline != nil {
                contentTypeDeadline = nil
                logger.notice("KWin sent no content type for the focused field; taking it as an ordinary field")
                announce(watch.contentTypeOverdue())
                continue
            }
            for index in sides.indices where polls[index].revents != 0 {
                let other = sides[1 - index]
                let read = receive(into: &buffer, from: &sides[index])
                guard case .success(let count) = read else {
                    if case .failure(let reason) = read { return reason }
                    return "\(sides[index].name) closed the connection"
                }
                let messages: [WaylandMessage]
                do {
                    messages = try sides[index].reader.messages(after: buffer[0..<count])
                } catch {
                    return "\(sides[index].name) sent what is not Wayland (\(error)); closing"
                }
                var out: [UInt8] = []
                for message in messages {
                    let verdict: WaylandWatch.Verdict
                    do {
                        verdict = try index == 0 ? watch.fromCompositor(message) : watch.fromInputMethod(message)
                    } catch {
                        return "\(sides[index].name) sent what is not Wayland (\(error)); closing"
                    }
                    switch verdict {
                    case .forward:
                        out += message.bytes
                    case .drop:
                        // Never the text: it is what the user typed or said.
                        logger.notice("text for a password field dropped", metadata: ["request": "\(message.opcode)"])
                    case .announce(let purpose):
                        // What came before goes first; this event waits until the engine knows.
                        guard send(&out, with: &sides[index].descriptors, to: other.fd) else {
                            return "\(other.name) closed the connection"
                        }
                        announce(purpose)
                        out = message.bytes
                    }
                }
                if !watch.awaitingContentType {
                    contentTypeDeadline = nil
                } else if contentTypeDeadline == nil {
                    contentTypeDeadline = .now + Self.contentTypeWait
                }
                guard send(&out, with: &sides[index].descriptors, to: other.fd) else {
                    return "\(other.name) closed the connection"
                }
            }
        }
    }

    private enum Received {
        case success(Int)
        case closed
        case failure(String)
    }

    private func receive(into buffer: inout [UInt8], from side: inout Side) -> Received {
        var fds = [Int32](repeating: -1, count: Self.descriptorLimit)
        var fdCount: Int32 = 0
        let count = buffer.withUnsafeMutableBytes { bytes in
            sttd_receive_with_fds(side.fd, bytes.baseAddress, bytes.count, &fds, Int32(fds.count), &fdCount)
        }
        if count == 0 { return .closed }
        if count < 0 {
            if errno == ECONNRESET { return .closed }
            return .failure("cannot read from \(side.name): \(String(cString: strerror(errno)))")
        }
        side.descriptors += fds.prefix(Int(fdCount))
        guard side.descriptors.count <= Self.descriptorLimit else {
            let error = WaylandWireError.tooManyDescriptors(side.descriptors.count)
            return .failure("\(side.name) sent what is not Wayland (\(error)); closing")
        }
        return .success(count)
    }

    /// Sends `bytes` with every descriptor waiting (libwayland matches descriptors to messages in
    /// order, so early is as good as with their message); false when the peer is gone.
    private func send(_ bytes: inout [UInt8], with descriptors: inout [Int32], to fd: Int32) -> Bool {
        guard !bytes.isEmpty else { return true }
        defer {
            descriptors.forEach { _ = close($0) }
            descriptors.removeAll()
            bytes.removeAll()
        }
        let sent = bytes.withUnsafeBytes {
            sttd_send_with_fds(fd, $0.baseAddress, $0.count, descriptors, Int32(descriptors.count))
        }
        return sent == 0
    }

    private static func milliseconds(until deadline: ContinuousClock.Instant?) -> Int32 {
        guard let deadline else { return -1 }
        let left = ContinuousClock.now.duration(to: deadline)
        return left <= .zero ? 0 : Int32(clamping: Int64((left / .milliseconds(1)).rounded(.up)))
    }
}
