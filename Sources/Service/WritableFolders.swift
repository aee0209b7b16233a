import Foundation
import History
import Logging
import Speech

/// The folders sttd writes: its data folder and `debug.audio_dir`. sttd.service may write only
/// `~/.local/share/sttd`, so with XDG_DATA_HOME or audio_dir elsewhere history, remembered
/// consent or kept audio fail; this says so once at startup, with the drop-in that fixes it.
enum WritableFolders {
    /// Checked under systemd only (`INVOCATION_ID`): elsewhere nothing but file modes limits sttd.
    static func check(_ configuration: Configuration, environment: [String: String], logger: Logger) {
        guard environment["INVOCATION_ID"] != nil else { return }
        var folders = [DataDirectory.path(environment: environment)]
        if !configuration.debug.audioDirectory.isEmpty { folders.append(configuration.debug.audioDirectory) }
        for folder in unwritable(folders) {
            logger.error(
                "sttd cannot write this folder; under sttd.service, which may write only ~/.local/share/sttd, allow it with `systemctl --user edit sttd`: [Service] ExecStartPre=+/bin/mkdir -p -m 0700 \(folder) and ReadWritePaths=\(folder)",
                metadata: ["folder": "\(folder)"])
        }
    }

    /// The folders that cannot be created or written.
    static func unwritable(_ folders: [String]) -> [String] {
        folders.filter { folder in
            let created =
                (try? FileManager.default.createDirectory(
                    atPath: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])) != nil
            return !created || access(folder, W_OK) != 0
        }
    }
}
