import Foundation
import TOMLKit

/// Where sttd's config file is and how it is read; sttd, sttctl and sttd-ibus all find it here.
public enum ConfigPath {
    /// `--config`, else `STTD_CONFIG`, else `$XDG_CONFIG_HOME/sttd/config.toml`. Explicit means a
    /// person named it, so it must exist.
    public static func resolve(explicit: String?, environment: [String: String]) -> (path: String, isExplicit: Bool) {
        if let explicit { return (explicit, true) }
        if let fromEnvironment = environment["STTD_CONFIG"], !fromEnvironment.isEmpty { return (fromEnvironment, true) }
        let configHome =
            environment["XDG_CONFIG_HOME"].flatMap { $0.isEmpty ? nil : $0 }
            ?? "\(environment["HOME"] ?? NSHomeDirectory())/.config"
        return ("\(configHome)/sttd/config.toml", false)
    }

    /// The file's text; nil for a missing file that was not named explicitly (the defaults apply).
    public static func text(at path: String, isExplicit: Bool) throws(ConfigurationError) -> String? {
        guard FileManager.default.fileExists(atPath: path) else {
            if isExplicit { throw ConfigurationError("\(path): the config file does not exist.") }
            return nil
        }
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw ConfigurationError("\(path): cannot read the config file (is it UTF-8 text and readable?).")
        }
        return text
    }

    /// Parses TOML text; the error says where it is not TOML.
    public static func table(parsing text: String) throws(ConfigurationError) -> TOMLTable {
        do {
            return try TOMLTable(string: text)
        } catch let error as TOMLParseError {
            throw ConfigurationError(
                "line \(error.source.begin.line), column \(error.source.begin.column): not valid TOML: \(error.description)"
            )
        } catch {
            throw ConfigurationError("not valid TOML: \(error)")
        }
    }
}
