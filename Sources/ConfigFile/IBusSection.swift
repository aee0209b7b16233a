import TOMLKit

/// The `[ibus]` table, read by the input method `sttd-ibus` (sttd checks it too).
public struct IBusSection: Sendable, Equatable {
    /// An X keysym name (`F9`, `Pause`, `Scroll_Lock`): while `sttd` is the input method,
    /// holding it down dictates into the focused field. Empty: off.
    public var pushToTalk = ""

    public init() {}

    /// Reads `[ibus]` from the file's top-level table, if it has one.
    public init(from root: inout TableReader) throws(ConfigurationError) {
        guard let table = try root.table("ibus") else { return }
        var reader = TableReader(table: table, prefix: "ibus.")
        pushToTalk = try reader.string("push_to_talk", default: pushToTalk)
        try reader.refuseUnknownKeys()
        guard pushToTalk.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_") }) else {
            throw ConfigurationError(
                "ibus.push_to_talk = \"\(pushToTalk)\" is not a key name; use an X keysym name like \"F9\", \"Pause\" or \"Scroll_Lock\" (`xev` shows a key's name), or leave it empty."
            )
        }
    }

    /// Reads only `[ibus]` from the config file at `path` (no file: the defaults), so that the
    /// input method does not stop over a mistake in a table sttd reports on its own.
    public static func load(path: String) throws(ConfigurationError) -> IBusSection {
        do {
            guard let text = try ConfigPath.text(at: path, isExplicit: false) else { return IBusSection() }
            var root = TableReader(table: try ConfigPath.table(parsing: text), prefix: "")
            return try IBusSection(from: &root)
        } catch {
            throw ConfigurationError("\(path): \(error.message)")
        }
    }
}
