import Testing

@testable import InputMethod

/// The Wayland proxy's reading of KWin ⇄ ibus-wayland traffic, in-process: bytes in, verdicts out.
@Suite struct WaylandWatchTests {
    static let registry: UInt32 = 2
    static let inputMethod: UInt32 = 5
    static let context: UInt32 = 0xff00_0001

    /// ibus-wayland got the registry and bound zwp_input_method_v1 from it.
    static func boundWatch() throws -> WaylandWatch {
        var watch = WaylandWatch()
        #expect(
            try watch.fromInputMethod(WaylandMessage(object: 1, opcode: 1, arguments: [.uint(registry)])) == .forward)
        let bind = WaylandMessage(
            object: registry, opcode: 0,
            arguments: [.uint(7), .string("zwp_input_method_v1"), .uint(1), .uint(inputMethod)])
        #expect(try watch.fromInputMethod(bind) == .forward)
        return watch
    }

    static func contentType(hint: UInt32 = 0, purpose: UInt32) -> WaylandMessage {
        WaylandMessage(object: context, opcode: 2, arguments: [.uint(hint), .uint(purpose)])
    }

    static let activate = WaylandMessage(object: inputMethod, opcode: 0, arguments: [.uint(context)])
    static let commit = WaylandMessage(object: context, opcode: 1, arguments: [.uint(0), .string("hunter2")])

    @Test func aFieldIsUnknownFromItsActivationUntilItsContentType() throws {
        var watch = try Self.boundWatch()
        #expect(try watch.fromCompositor(Self.activate) == .announce(nil))
        #expect(watch.awaitingContentType)
        #expect(try watch.fromCompositor(Self.contentType(hint: 7, purpose: 1)) == .announce(0))
        #expect(!watch.awaitingContentType)
        #expect(try watch.fromInputMethod(Self.commit) == .forward)
    }

    /// text-input-v1's password purpose is 8 (9 is a date); a PIN comes as hidden text.
    @Test(arguments: [(UInt32(0), UInt32(8), UInt32(8)), (0x40, 1, 9), (0x80, 0, 9), (0, 9, 0)])
    func passwordAndHiddenFieldsAreSecretAndTheirTextIsDropped(hint: UInt32, purpose: UInt32, ibus: UInt32) throws {
        var watch = try Self.boundWatch()
        _ = try watch.fromCompositor(Self.activate)
        #expect(try watch.fromCompositor(Self.contentType(hint: hint, purpose: purpose)) == .announce(ibus))
        let secret = ibus != 0
        #expect(watch.secret == secret)
        #expect(try watch.fromInputMethod(Self.commit) == (secret ? .drop : .forward))
        let preedit = WaylandMessage(
            object: Self.context, opcode: 2, arguments: [.uint(0), .string("pa"), .string("pa")])
        #expect(try watch.fromInputMethod(preedit) == (secret ? .drop : .forward))
        let hide = WaylandMessage(object: Self.context, opcode: 2, arguments: [.uint(0), .string(""), .string("")])
        #expect(try watch.fromInputMethod(hide) == .forward, "hiding a preedit puts no text anywhere")
    }

    @Test func deactivationEndsTheField() throws {
        var watch = try Self.boundWatch()
        _ = try watch.fromCompositor(Self.activate)
        _ = try watch.fromCompositor(Self.contentType(purpose: 8))
        let deactivate = WaylandMessage(object: Self.inputMethod, opcode: 1, arguments: [.uint(Self.context)])
        #expect(try watch.fromCompositor(deactivate) == .forward)
        #expect(watch.context == nil && !watch.secret)
        #expect(try watch.fromCompositor(Self.contentType(purpose: 8)) == .forward, "no active field: not followed")
    }

    @Test func otherObjectsAndMessagesPassUntouched() throws {
        var watch = WaylandWatch()
        // Before the bind, opcode 0 of object 5 is somebody else's.
        #expect(try watch.fromCompositor(Self.activate) == .forward)
        let otherBind = WaylandMessage(
            object: 1, opcode: 0, arguments: [.uint(3), .string("wl_seat"), .uint(7), .uint(9)])
        #expect(try watch.fromInputMethod(otherBind) == .forward)
    }

    @Test func anOverdueContentTypeMakesAnOrdinaryField() throws {
        var watch = try Self.boundWatch()
        _ = try watch.fromCompositor(Self.activate)
        #expect(watch.contentTypeOverdue() == 0)
        #expect(!watch.awaitingContentType && !watch.secret)
    }

    /// Messages split anywhere across reads come out whole, in order.
    @Test func theReaderReassemblesMessagesAcrossReads() throws {
        let messages = [Self.activate, Self.contentType(purpose: 8), Self.commit]
        let bytes = messages.flatMap(\.bytes)
        for cut in 1..<bytes.count {
            var reader = WaylandReader()
            let first = try reader.messages(after: bytes[0..<cut])
            let rest = try reader.messages(after: bytes[cut...])
            #expect(first + rest == messages)
        }
    }

    @Test func garbageIsAnErrorNotACrash() throws {
        var reader = WaylandReader()
        #expect(throws: WaylandWireError.badSize(object: 1, size: 4)) {
            try reader.messages(after: WaylandMessage.encode(1) + WaylandMessage.encode(4 << 16))
        }
        // A string whose length runs past its message.
        var watch = try Self.boundWatch()
        let bind = WaylandMessage(object: Self.registry, opcode: 0, arguments: [.uint(7), .uint(200)])
        #expect(throws: WaylandWireError.truncated(object: Self.registry, opcode: 0)) {
            try watch.fromInputMethod(bind)
        }
    }
}
