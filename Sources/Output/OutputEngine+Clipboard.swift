import Foundation

/// The clipboard steps (worker thread).
extension OutputEngine {
    /// The CLIPBOARD content, or nil when it is empty or not text.
    func readClipboard(_ clipboard: ClipboardTool) -> [UInt8]? {
        let run: ToolRun
        do {
            switch clipboard {
            case .wlClipboard:
                run = try runner.run("wl-paste", ["--no-newline"], timeout: Self.clipboardTimeout)
            case .xclip:
                run = try runner.run("xclip", ["-o", "-selection", "clipboard"], timeout: Self.clipboardTimeout)
            }
        } catch {
            return nil
        }
        return run.succeeded ? run.stdout : nil
    }

    /// Puts `bytes` on CLIPBOARD. wl-copy and xclip leave a child that owns the selection until
    /// another program takes it; they return once it is owned.
    func setClipboard(_ bytes: [UInt8], clipboard: ClipboardTool) throws(OutputError) {
        let run: ToolRun
        switch clipboard {
        case .wlClipboard:
            run = try runner.run("wl-copy", [], stdin: bytes, timeout: Self.clipboardTimeout)
        case .xclip:
            run = try runner.run(
                "xclip", ["-i", "-selection", "clipboard"], stdin: bytes, timeout: Self.clipboardTimeout)
        }
        guard run.succeeded else {
            throw OutputError(.failed, "\(clipboard.executables[0]) failed: \(run.reason)")
        }
    }

    func clearClipboard(_ clipboard: ClipboardTool) throws(OutputError) {
        switch clipboard {
        case .wlClipboard:
            let run = try runner.run("wl-copy", ["--clear"], timeout: Self.clipboardTimeout)
            guard run.succeeded else { throw OutputError(.failed, "wl-copy --clear failed: \(run.reason)") }
        case .xclip:
            // X has no "empty" owner with xclip; an empty text is the nearest.
            try setClipboard([], clipboard: clipboard)
        }
    }

    /// wl-copy may return before the compositor has switched the selection, and xclip before its
    /// background child has claimed it (under load another owner could still answer): read it back.
    func waitUntilClipboard(holds bytes: [UInt8], _ clipboard: ClipboardTool) throws(OutputError) {
        let deadline = ContinuousClock.now + .seconds(2)
        while readClipboard(clipboard) != bytes {
            guard ContinuousClock.now < deadline else {
                throw OutputError(.failed, "the clipboard did not take the text to paste within 2 s")
            }
            usleep(5_000)
        }
    }
}
