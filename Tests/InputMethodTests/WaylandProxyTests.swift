import CSttdSystem
import Foundation
import Logging
import Synchronization
import Testing

@testable import InputMethod

/// The proxy's I/O over real socket pairs: whole messages both ways, descriptors with them, the
/// purpose announced before its event goes on, a password field's text dropped, garbage ends it.
@Suite struct WaylandProxyTests {
    /// The two ends the test plays (KWin, ibus-wayland) and the proxy running between them.
    final class Harness: Sendable {
        /// What the proxy did: shared with its thread, which outlives no harness.
        final class Record: Sendable {
            let announced = Mutex<[UInt32?]>([])
            let ended = Mutex<String?>(nil)
        }
        let kwin: Int32
        let inputMethod: Int32
        let record = Record()

        init() throws {
            var compositorPair: [Int32] = [-1, -1]
            var inputMethodPair: [Int32] = [-1, -1]
            try #require(sttd_socketpair(&compositorPair) == 0 && sttd_socketpair(&inputMethodPair) == 0)
            kwin = compositorPair[0]
            inputMethod = inputMethodPair[0]
            // A wait that runs out fails the test instead of hanging it.
            for fd in [kwin, inputMethod] { _ = sttd_set_receive_timeout(fd, 30_000) }
            let (compositor, inputMethodEnd) = (compositorPair[1], inputMethodPair[1])
            let record = record
            let proxy = WaylandProxy(
                compositor: compositor, inputMethod: inputMethodEnd, logger: Logger(label: "test"),
                announce: { purpose in record.announced.withLock { $0.append(purpose) } })
            let thread = Thread {
                let reason = proxy.run()
                record.ended.withLock { $0 = reason }
                close(compositor)
                close(inputMethodEnd)
            }
            thread.start()
        }

        func send(_ messages: [WaylandMessage], from fd: Int32, with descriptors: [Int32] = []) {
            let bytes = messages.flatMap(\.bytes)
            let sent = bytes.withUnsafeBytes {
                sttd_send_with_fds(fd, $0.baseAddress, $0.count, descriptors, Int32(descriptors.count))
            }
            #expect(sent == 0)
        }

        /// Reads `count` bytes of messages at `fd`, with the descriptors that came along.
        func receive(_ count: Int, at fd: Int32) throws -> ([WaylandMessage], [Int32]) {
            var reader = WaylandReader()
            var messages: [WaylandMessage] = []
            var descriptors: [Int32] = []
            var total = 0
            var buffer = [UInt8](repeating: 0, count: count - total)
            while total < count {
                var fds = [Int32](repeating: -1, count: 32)
                var fdCount: Int32 = 0
                let read = buffer.withUnsafeMutableBytes {
                    sttd_receive_with_fds(fd, $0.baseAddress, count - total, &fds, 32, &fdCount)
                }
                try #require(read > 0, "the proxy sent \(total) of \(count) bytes")
                total += read
                descriptors += fds.prefix(Int(fdCount))
                messages += try reader.messages(after: buffer[0..<read])
            }
            return (messages, descriptors)
        }

        deinit {
            close(kwin)
            close(inputMethod)
        }
    }

    static let registry = WaylandMessage(object: 1, opcode: 1, arguments: [.uint(2)])
    static let bind = WaylandMessage(
        object: 2, opcode: 0, arguments: [.uint(7), .string("zwp_input_method_v1"), .uint(1), .uint(5)])
    static let activate = WaylandMessage(object: 5, opcode: 0, arguments: [.uint(0xff00_0001)])
    /// wl_keyboard.keymap(format, fd, size): the fd travels beside the bytes.
    static let keymap = WaylandMessage(object: 0xff00_0002, opcode: 0, arguments: [.uint(1), .uint(4)])
    static let password = WaylandMessage(object: 0xff00_0001, opcode: 2, arguments: [.uint(0), .uint(8)])
    static let commit = WaylandMessage(object: 0xff00_0001, opcode: 1, arguments: [.uint(0), .string("hunter2")])
    static let sync = WaylandMessage(object: 1, opcode: 0, arguments: [.uint(9)])

    @Test func messagesAndDescriptorsPassAndAPasswordFieldsTextDoesNot() throws {
        let harness = try Harness()
        harness.send([Self.registry, Self.bind], from: harness.inputMethod)
        let (bound, _) = try harness.receive(Self.registry.bytes.count + Self.bind.bytes.count, at: harness.kwin)
        #expect(bound == [Self.registry, Self.bind])

        let keymap = sttd_memfd("keymap")
        try #require(keymap >= 0)
        defer { close(keymap) }
        #expect(write(keymap, "xkb!", 4) == 4)
        let events = [Self.activate, Self.keymap, Self.password]
        harness.send(events, from: harness.kwin, with: [keymap])
        let (received, descriptors) = try harness.receive(events.flatMap(\.bytes).count, at: harness.inputMethod)
        defer { descriptors.forEach { close($0) } }
        #expect(received == events)
        try #require(descriptors.count == 1)
        var text = [UInt8](repeating: 0, count: 4)
        #expect(pread(descriptors[0], &text, 4, 0) == 4 && text == Array("xkb!".utf8), "the keymap came along")
        #expect(harness.record.announced.withLock { $0 } == [nil, 8], "each purpose told before its event went on")

        // The commit to the password field is dropped; what follows it still goes.
        harness.send([Self.commit, Self.sync], from: harness.inputMethod)
        let (after, _) = try harness.receive(Self.sync.bytes.count, at: harness.kwin)
        #expect(after == [Self.sync])
    }

    @Test func garbageEndsTheProxyWithAReason() async throws {
        let harness = try Harness()
        // A header claiming 4 bytes: shorter than a header.
        let garbage = WaylandMessage.encode(1) + WaylandMessage.encode(4 << 16)
        _ = garbage.withUnsafeBytes { sttd_send_with_fds(harness.kwin, $0.baseAddress, $0.count, nil, 0) }
        var byte: UInt8 = 0
        #expect(read(harness.inputMethod, &byte, 1) == 0, "the proxy closed ibus-wayland's side")
        let reason = harness.record.ended.withLock { $0 } ?? ""
        #expect(reason.contains("KWin sent what is not Wayland"), "\(reason)")
    }
}
