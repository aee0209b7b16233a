import DBus
import Foundation

/// The parts of IBus's D-Bus protocol an engine speaks (ibus 1.5: `src/ibusengine.c`,
/// `src/ibusfactory.c`, `src/ibusshare.c`), on ibus-daemon's private bus.
enum IBus {
    /// The bus name this component owns; ibus-daemon waits for it after starting `<exec>`.
    static let componentName = "io.github.sttd.IBus"
    /// The engine name users pick ("Dictation").
    static let engineName = "sttd"
    static let factoryPath = "/org/freedesktop/IBus/Factory"
    static let factoryInterface = "org.freedesktop.IBus.Factory"
    static let engineInterface = "org.freedesktop.IBus.Engine"
    static let serviceInterface = "org.freedesktop.IBus.Service"
    static let enginePathPrefix = "/org/freedesktop/IBus/Engine/"

    /// The typed methods of the objects this component serves (the engine's others take
    /// arguments nobody reads).
    static let createEngine = DBusMethodSpec<DBusObjectPath, String>("CreateEngine", inputs: "name", output: "path")
    static let processKeyEvent = DBusMethodSpec<Bool, UInt32, UInt32, UInt32>(
        "ProcessKeyEvent", inputs: "keyval", "keycode", "state", output: "handled")
    static let focusInId = DBusMethodSpec<DBusNoReply, String, String>("FocusInId", inputs: "object_path", "client")
    static let setPurpose = DBusMethodSpec<DBusNoReply, UInt32, Bool>("SetPurpose", inputs: "purpose", "known")

    /// `IBUS_RELEASE_MASK`: the key event is a release.
    static let releaseMask: UInt32 = 1 << 30
    /// A forwarded key the client hands to the widget without asking the engine again.
    static let forwardMask: UInt32 = 1 << 25

    /// The keys voice commands press: X keyval and Linux evdev key code (IBus key codes are
    /// evdev codes, the X key code less 8).
    static func key(named keysym: String) -> (keyval: UInt32, keycode: UInt32)? {
        switch keysym {
        case "Return": (0xff0d, 28)
        case "Tab": (0xff09, 15)
        case "Escape": (0xff1b, 1)
        case "BackSpace": (0xff08, 14)
        case "Delete": (0xffff, 111)
        case "Up": (0xff52, 103)
        case "Down": (0xff54, 108)
        case "Left": (0xff51, 105)
        case "Right": (0xff53, 106)
        case "Home": (0xff50, 102)
        case "End": (0xff57, 107)
        case "Prior": (0xff55, 104)
        case "Next": (0xff56, 109)
        default: nil
        }
    }
    /// `IBUS_ENGINE_PREEDIT_CLEAR`: a preedit left at focus-out is dropped, not committed (it is
    /// an interim; its final comes later).
    static let preeditClear: UInt32 = 0

    /// `IBusInputPurpose` values (same as GTK's) of fields that must never receive dictation.
    static let password: UInt32 = 8
    static let pin: UInt32 = 9

    /// The focus-in "client" ibus-daemon gives when no field has the focus (the desktop).
    static let fakeClient = "fake"
    /// The client name ibus-wayland creates its input contexts with (KWin's fields).
    static let waylandClient = "wayland"

    /// `sttd-ibus --wayland` (the proxy in front of ibus-wayland) owns this name on ibus-daemon's
    /// bus and tells the engine the purpose of KWin's focused field through this object.
    static let waylandProxyName = "io.github.sttd.IBus.Wayland"
    static let waylandPath = "/io/github/sttd/IBus/Wayland"
    static let waylandInterface = "io.github.sttd.IBus.Wayland"

    /// An `IBusText` as IBus serializes it, in a variant: `(sa{sv}sv)` with an empty
    /// `IBusAttrList` `(sa{sv}av)`.
    static func text(_ string: String) -> DBusValue {
        let noAttachments = DBusValue.dictionary(key: .string, value: .variant, [])
        let attributes = DBusValue.structure([.string("IBusAttrList"), noAttachments, .array(.variant, [])])
        return .variant(.structure([.string("IBusText"), noAttachments, .string(string), .variant(attributes)]))
    }

    /// The length of `string` in Unicode characters (IBus counts cursor positions in them).
    static func characterCount(_ string: String) -> UInt32 { UInt32(string.unicodeScalars.count) }

    /// ibus-daemon's address, found as libibus finds it (`ibus_get_address`): `IBUS_ADDRESS`, else
    /// the address file (`IBUS_ADDRESS_FILE`, else `$XDG_CONFIG_HOME/ibus/bus/MACHINE-HOST-DISPLAY`)
    /// whose daemon is still alive. Throws what is missing, for a person.
    static func address(environment: [String: String], root: String = "") throws(IBusError) -> String {
        if let address = environment["IBUS_ADDRESS"], !address.isEmpty { return address }
        let file = try addressFile(environment: environment, root: root)
        guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
            throw IBusError(
                "no ibus-daemon runs for this display (\(file) is missing): start it with `ibus-daemon -drx`")
        }
        var address: String?
        var pid: Int32?
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            if line.hasPrefix("IBUS_ADDRESS=") { address = String(line.dropFirst("IBUS_ADDRESS=".count)) }
            if line.hasPrefix("IBUS_DAEMON_PID=") { pid = Int32(line.dropFirst("IBUS_DAEMON_PID=".count)) }
        }
        guard let address, !address.isEmpty else { throw IBusError("\(file) holds no IBUS_ADDRESS") }
        guard let pid, pid > 0, kill(pid, 0) == 0 || errno == EPERM else {
            throw IBusError("the ibus-daemon that wrote \(file) is gone: start it with `ibus-daemon -drx`")
        }
        return address
    }

    static func addressFile(environment: [String: String], root: String) throws(IBusError) -> String {
        if let file = environment["IBUS_ADDRESS_FILE"], !file.isEmpty { return file }
        var host = "unix"
        var display = "0"
        if let wayland = environment["WAYLAND_DISPLAY"], !wayland.isEmpty {
            display = wayland
        } else if let x11 = environment["DISPLAY"], !x11.isEmpty {
            // "host:number.screen": the screen is not part of the name.
            let parts = x11.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            if parts.count == 2 {
                if !parts[0].isEmpty { host = String(parts[0]) }
                display = String(parts[1].split(separator: ".", omittingEmptySubsequences: false).first ?? "0")
            } else {
                host = x11
            }
        } else {
            throw IBusError("neither WAYLAND_DISPLAY nor DISPLAY is set, so no ibus-daemon can be found")
        }
        let machineID =
            ["\(root)/var/lib/dbus/machine-id", "\(root)/etc/machine-id"].lazy
            .compactMap { try? String(contentsOfFile: $0, encoding: .utf8) }
            .map { $0.trimmingCharacters(in: .whitespacesAndNewlines) }
            .first { !$0.isEmpty } ?? "machine-id"
        let configHome =
            environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "\(environment["HOME"] ?? NSHomeDirectory())/.config"
        return "\(configHome)/ibus/bus/\(machineID)-\(host)-\(display)"
    }
}

/// Why the input method cannot run, for a person.
struct IBusError: Error, Sendable, CustomStringConvertible {
    let message: String
    init(_ message: String) { self.message = message }
    var description: String { message }
}
