import CSttdSystem
import CWaylandClient
import CWaylandIM
import CXKBCommon
import Foundation
import Synchronization

/// The keyboard of a headless wlroots seat, as every real desktop has one: a Wayland client of
/// the tests' own holding a `zwp_virtual_keyboard_v1` with an xkb keymap (xkbcommon's default
/// names: evdev, pc105, us unless `XKB_DEFAULT_*` say otherwise). A seat without a keyboard gives
/// no window the keyboard focus, and so no text-input field is ever enabled. It also presses
/// keys, as a person would, into the focused window.
public final class TestKeyboard: @unchecked Sendable {
    // Safety: immutable after init; requests are sent under `sending`.
    private let client: WaylandTestClient
    private let keyboard: OpaquePointer
    private let layout: Layout
    private let sending = Mutex(())

    /// A key and the shift level that gives a symbol.
    struct Key {
        var evdev: UInt32
        var shifted: Bool
    }

    /// Connects to the compositor's socket at `path`, makes the virtual keyboard on its first
    /// seat and gives it the keymap before anything else (a key before it is a protocol error).
    /// `layout` and `variant` are xkb names ("us", "intl": dead keys); empty is xkbcommon's default.
    public init(socket path: String, layout name: String = "", variant: String = "") throws {
        let layout = try Layout(name: name, variant: variant)
        self.layout = layout
        let client = try WaylandTestClient(socket: path)
        self.client = client
        do {
            let seat = try client.bindSeat()
            let manager = try client.bind(
                "zwp_virtual_keyboard_manager_v1", with: sttd_wl_bind_virtual_keyboard_manager)
            guard let keyboard = zwp_virtual_keyboard_manager_v1_create_virtual_keyboard(manager, seat) else {
                throw MissingPrerequisite(description: "could not make a virtual keyboard: \(client.error ?? "")")
            }
            self.keyboard = keyboard
            let (fd, size) = try layout.keymapFile()
            zwp_virtual_keyboard_v1_keymap(keyboard, UInt32(WL_KEYBOARD_KEYMAP_FORMAT_XKB_V1.rawValue), fd, size)
            // libwayland sent a duplicate of the descriptor.
            Foundation.close(fd)
            try client.roundtrip()
            if let error = client.error {
                throw MissingPrerequisite(description: "the compositor refused the test keyboard: \(error)")
            }
        } catch {
            client.close()
            throw error
        }
        client.startDispatching(name: "test-keyboard")
    }

    /// Presses the key whose symbol is `keysym` (an X keysym: keypad + is 0xffab, Return 0xff0d)
    /// and holds it until the release.
    public func pressKey(keysym: UInt32) throws -> HeldKey {
        let key = try layout.key(for: keysym)
        try send(key, pressed: true)
        return HeldKey { [self] in try send(key, pressed: false) }
    }

    /// Presses and releases the key of each character of `text` (what the layout holds: ASCII on
    /// the default one; "\n" is Return, "\t" Tab, "\u{8}" BackSpace), with Shift where the
    /// symbol needs it.
    public func typeKeys(_ text: String) throws {
        let keys = try text.unicodeScalars.map { scalar -> Key in
            switch scalar {
            case "\n": return try layout.key(for: UInt32(XKB_KEY_Return))
            case "\t": return try layout.key(for: UInt32(XKB_KEY_Tab))
            default: return try layout.key(for: xkb_utf32_to_keysym(scalar.value))
            }
        }
        for key in keys {
            try send(key, pressed: true)
            try send(key, pressed: false)
        }
    }

    private func send(_ key: Key, pressed: Bool) throws {
        try sending.withLock { _ in
            let time = UInt32(truncatingIfNeeded: DispatchTime.now().uptimeNanoseconds / 1_000_000)
            if key.shifted && pressed { zwp_virtual_keyboard_v1_modifiers(keyboard, layout.shiftMask, 0, 0, 0) }
            zwp_virtual_keyboard_v1_key(keyboard, time, key.evdev, pressed ? 1 : 0)
            if key.shifted && !pressed { zwp_virtual_keyboard_v1_modifiers(keyboard, 0, 0, 0, 0) }
            try client.flush()
        }
    }

    /// Removes the keyboard from the seat (the connection closes).
    public func close() { client.close() }

    deinit { close() }

    /// The compiled keymap: its text for the compositor, and which key gives which symbol.
    final class Layout: @unchecked Sendable {
        // Safety: immutable after init.
        private let text: String
        private let keys: [UInt32: Key]
        let shiftMask: UInt32

        init(name: String, variant: String) throws {
            guard let context = xkb_context_new(XKB_CONTEXT_NO_FLAGS) else {
                throw MissingPrerequisite(description: "xkb_context_new failed (libxkbcommon0, xkb-data)")
            }
            defer { xkb_context_unref(context) }
            // Empty names are xkbcommon's defaults (XKB_DEFAULT_*, else evdev/pc105/us).
            let compiled = name.withCString { layout in
                variant.withCString { variant in
                    var names = xkb_rule_names(rules: nil, model: nil, layout: layout, variant: variant, options: nil)
                    return xkb_keymap_new_from_names(context, &names, XKB_KEYMAP_COMPILE_NO_FLAGS)
                }
            }
            guard let keymap = compiled else {
                throw MissingPrerequisite(
                    description: "xkbcommon compiled no keymap for \"\(name)(\(variant))\" (xkb-data)")
            }
            defer { xkb_keymap_unref(keymap) }
            guard let string = xkb_keymap_get_as_string(keymap, XKB_KEYMAP_FORMAT_TEXT_V1) else {
                throw MissingPrerequisite(description: "xkbcommon could not write the keymap")
            }
            text = String(cString: string)
            free(string)
            shiftMask = 1 << xkb_keymap_mod_get_index(keymap, XKB_MOD_NAME_SHIFT)
            var keys: [UInt32: Key] = [:]
            // Level 0 first, so a symbol on both levels is typed without Shift.
            for level in 0..<2 {
                for code in xkb_keymap_min_keycode(keymap)...xkb_keymap_max_keycode(keymap) where code >= 8 {
                    guard xkb_keymap_num_levels_for_key(keymap, code, 0) > level else { continue }
                    var symbols: UnsafePointer<xkb_keysym_t>?
                    let count = xkb_keymap_key_get_syms_by_level(keymap, code, 0, xkb_level_index_t(level), &symbols)
                    guard count == 1, let symbol = symbols?.pointee, keys[symbol] == nil else { continue }
                    // evdev codes are xkb keycodes less 8.
                    keys[symbol] = Key(evdev: code - 8, shifted: level == 1)
                }
            }
            self.keys = keys
        }

        func key(for keysym: UInt32) throws -> Key {
            guard let key = keys[keysym] else {
                throw MissingPrerequisite(
                    description: "the test keyboard's layout has no key for keysym 0x\(String(keysym, radix: 16))")
            }
            return key
        }

        /// The keymap text in a memory file, with its size (the terminating NUL included).
        func keymapFile() throws -> (fd: Int32, size: UInt32) {
            let fd = sttd_memfd("sttd-test-keymap")
            guard fd >= 0 else { throw MissingPrerequisite(description: "memfd: \(String(cString: strerror(errno)))") }
            let bytes = Array(text.utf8) + [0]
            let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            guard written == bytes.count else {
                Foundation.close(fd)
                throw MissingPrerequisite(
                    description: "could not write the keymap: \(String(cString: strerror(errno)))")
            }
            return (fd, UInt32(bytes.count))
        }
    }
}
