import Foundation

/// Waits for a Wayland socket to appear (a compositor started again under the same name), with
/// inotify on its folder: no polling, no timers.
enum SocketWatch {
    /// True once `path` exists (`recreated`: once it is created or replaced after this call);
    /// false after the commands' stop, or if its folder cannot be watched.
    static func wait(for path: String, recreated: Bool, commands: SeatCommands) -> Bool {
        let folder = (path as NSString).deletingLastPathComponent
        let watch = inotify_init1(Int32(IN_CLOEXEC | IN_NONBLOCK))
        guard watch >= 0 else { return false }
        defer { close(watch) }
        guard inotify_add_watch(watch, folder, UInt32(IN_CREATE | IN_MOVED_TO)) >= 0 else { return false }
        var buffer = [UInt8](repeating: 0, count: 4096)
        var changed = !recreated
        while true {
            // Checked after the watch exists, so a socket made in between is not missed.
            if changed, FileManager.default.fileExists(atPath: path) { return true }
            var fds = [pollfd(fd: watch, events: Int16(POLLIN), revents: 0), pollfd(fd: commands.wakeFD, events: Int16(POLLIN), revents: 0)]
            guard poll(&fds, 2, -1) >= 0 || errno == EINTR else { return false }
            if fds[1].revents != 0, commands.take().stop { return false }
            while read(watch, &buffer, buffer.count) > 0 { changed = true }
        }
    }
}
