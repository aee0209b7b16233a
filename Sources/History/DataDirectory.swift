import Foundation

/// sttd's data folder, shared by the service (history, consent) and sttctl (history).
public enum DataDirectory {
    /// `$XDG_DATA_HOME/sttd`; `~/.local/share/sttd` when XDG_DATA_HOME is unset, empty or
    /// relative (the XDG Base Directory spec says to ignore a relative one). sttd.service makes
    /// only `~/.local/share/sttd` writable, so another place needs a drop-in (docs/configuration.md).
    public static func path(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        let dataHome =
            environment["XDG_DATA_HOME"].flatMap { $0.hasPrefix("/") ? $0 : nil }
            ?? "\(environment["HOME"] ?? NSHomeDirectory())/.local/share"
        return "\(dataHome)/sttd"
    }
}
