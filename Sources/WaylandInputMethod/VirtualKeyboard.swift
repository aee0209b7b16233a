import CSttdSystem
import CWaylandClient
import CWaylandIM
import CXKBCommon
import Foundation

/// sttd's `zwp_virtual_keyboard_v1` on the seat: "press enter" and a terminal's BackSpaces.
/// Its keymap goes out with its creation, before any key: a key without one is a protocol error
/// that would end the whole connection.
struct VirtualKeyboard {
    enum Problem: Error, CustomStringConvertible {
        case noKeymap
        case noMemoryFile(Int32)

        var description: String {
            switch self {
            case .noKeymap: "xkbcommon could not compile a keymap from the default layout (XKB_DEFAULT_*)"
            case .noMemoryFile(let code): "could not create the keymap's memory file: \(String(cString: strerror(code)))"
            }
        }
    }

    private let proxy: OpaquePointer
    /// Evdev key codes by keysym, from the keymap sent (the same codes in every layout for the
    /// keys sttd presses: Return, Tab, BackSpace, …).
    private let codes: [xkb_keysym_t: UInt32]

    /// Creates the keyboard and sends its keymap (compiled from the default rules, layout and
    /// options: `XKB_DEFAULT_*`, else evdev/pc105/us).
    init(manager: OpaquePointer, seat: OpaquePointer) throws {
        let context = xkb_context_new(XKB_CONTEXT_NO_FLAGS)
        defer { xkb_context_unref(context) }
        guard let keymap = xkb_keymap_new_from_names(context, nil, XKB_KEYMAP_COMPILE_NO_FLAGS) else {
            throw Problem.noKeymap
        }
        defer { xkb_keymap_unref(keymap) }
        guard let text = xkb_keymap_get_as_string(keymap, XKB_KEYMAP_FORMAT_TEXT_V1) else { throw Problem.noKeymap }
        defer { free(text) }
        let fd = sttd_memfd("sttd-keymap")
        guard fd >= 0 else { throw Problem.noMemoryFile(errno) }
        defer { close(fd) }
        let size = strlen(text) + 1  // the NUL too, as compositors expect
        guard write(fd, text, size) == size else { throw Problem.noMemoryFile(errno) }
        proxy = zwp_virtual_keyboard_manager_v1_create_virtual_keyboard(manager, seat)
        // libwayland duplicates the descriptor while sending, so it is closed here after.
        zwp_virtual_keyboard_v1_keymap(proxy, 1 /* WL_KEYBOARD_KEYMAP_FORMAT_XKB_V1 */, fd, UInt32(size))
        codes = Self.levelZeroCodes(keymap)
    }

    /// The evdev code of each keysym on some key's first level (the first such key wins).
    private static func levelZeroCodes(_ keymap: OpaquePointer) -> [xkb_keysym_t: UInt32] {
        var codes: [xkb_keysym_t: UInt32] = [:]
        let minimum = xkb_keymap_min_keycode(keymap)
        let maximum = xkb_keymap_max_keycode(keymap)
        guard minimum >= 8, minimum <= maximum else { return codes }
        for keycode in minimum...maximum {
            var symbols: UnsafePointer<xkb_keysym_t>?
            let count = xkb_keymap_key_get_syms_by_level(keymap, keycode, 0, 0, &symbols)
            for index in 0..<Int(max(count, 0)) where codes[symbols![index]] == nil {
                codes[symbols![index]] = keycode - 8
            }
        }
        return codes
    }

    /// Presses and releases the key with this keysym name; false if the keymap has no such key.
    func press(_ keysymName: String) -> Bool {
        var keysym = xkb_keysym_from_name(keysymName, XKB_KEYSYM_NO_FLAGS)
        if keysym == 0 { keysym = xkb_keysym_from_name(keysymName, XKB_KEYSYM_CASE_INSENSITIVE) }
        guard keysym != 0, let code = codes[keysym] else { return false }
        let time = Self.milliseconds()
        zwp_virtual_keyboard_v1_key(proxy, time, code, 1)
        zwp_virtual_keyboard_v1_key(proxy, time, code, 0)
        return true
    }

    func destroy() { zwp_virtual_keyboard_v1_destroy(proxy) }

    private static func milliseconds() -> UInt32 {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        return UInt32(truncatingIfNeeded: Int(now.tv_sec) * 1000 + Int(now.tv_nsec) / 1_000_000)
    }
}
