import Foundation

/// A key held down on a headless Wayland desktop, as a keyboard would hold it, until
/// ``release()``: the push-to-talk tests press it in the focused field.
public struct HeldKey: Sendable {
    private let releasing: @Sendable () async throws -> Void

    init(release: @escaping @Sendable () async throws -> Void) { releasing = release }

    public func release() async throws { try await releasing() }
}

extension GnomeDesktop {
    /// Presses `keysym` (an X keysym: keypad + is 0xffab) on the seat's keyboard, the virtual
    /// device the fixture gave it (mutter's RemoteDesktop sessions press keys the same way).
    public func pressKey(keysym: UInt32) async throws -> HeldKey {
        try await notify(keysym: keysym, pressed: true)
        return HeldKey { try await self.notify(keysym: keysym, pressed: false) }
    }

    private func notify(keysym: UInt32, pressed: Bool) async throws {
        let result = try await eval(
            """
            const Clutter = imports.gi.Clutter;
            global.sttdTestKeyboard.notify_keyval(imports.gi.GLib.get_monotonic_time(), \(keysym),
                Clutter.KeyState.\(pressed ? "PRESSED" : "RELEASED"));
            "ok"
            """)
        guard result == "\"ok\"" else {
            throw MissingPrerequisite(description: "gnome-shell pressed no key: \(result)")
        }
    }
}

extension KdeDesktop {
    /// Presses the key with evdev code `code` (keypad + is 78) through KWin's
    /// `org_kde_kwin_fake_input` protocol (`Tests/Clients/kwin_fake_key.py`), which holds it
    /// until the release.
    public func pressKey(evdevCode code: UInt32) async throws -> HeldKey {
        let directory = try makeTemporaryDirectory("sttd-key")
        let (pressed, release, log) = ("\(directory)/pressed", "\(directory)/release", "\(directory)/log")
        let client = try ChildProcess(
            "/usr/bin/python3",
            ["\(DeepgramSDKClient.packageRoot)/Tests/Clients/kwin_fake_key.py", "\(code)", pressed, release],
            environment: clientEnvironment.merging(["PYTHONDONTWRITEBYTECODE": "1"]) { $1 }, stderr: log)
        @Sendable func failure(_ what: String) -> MissingPrerequisite {
            let text = (try? String(contentsOfFile: log, encoding: .utf8)) ?? ""
            client.stop(grace: 1)
            try? FileManager.default.removeItem(atPath: directory)
            return MissingPrerequisite(description: "kwin_fake_key.py \(what) (libkf5waylandclient5): \(text)")
        }
        guard await happens(within: .seconds(20), { FileManager.default.fileExists(atPath: pressed) }) else {
            throw failure("pressed no key")
        }
        return HeldKey {
            FileManager.default.createFile(atPath: release, contents: nil)
            guard await happens(within: .seconds(20), { client.exitStatus == 0 }) else {
                throw failure("did not release the key")
            }
            try? FileManager.default.removeItem(atPath: directory)
        }
    }
}
