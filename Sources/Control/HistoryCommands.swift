import ArgumentParser
import Foundation
import History

/// Reads the history file directly, so it works whether or not the service runs.
enum HistoryReader {
    static func open() throws -> HistoryStore? {
        let path = HistoryStore.defaultPath()
        do {
            guard let store = try HistoryStore(readingAt: path) else {
                Sttctl.printError(
                    "sttctl: no history at \(path) yet (nothing dictated, or history = false in config.toml).")
                return nil
            }
            return store
        } catch {
            throw ControlFailure(exitCode: 1, message: "sttctl: \(error.description)")
        }
    }

    static func sessions(limit: Int, search: String?) throws -> [HistoryEntry] {
        guard let store = try open() else { return [] }
        do {
            return try store.sessions(limit: limit, search: search)
        } catch {
            throw ControlFailure(exitCode: 1, message: "sttctl: \(error.description)")
        }
    }

    static func date(_ microseconds: Int64) -> Date { Date(timeIntervalSince1970: Double(microseconds) / 1e6) }
}

struct HistoryCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "history", abstract: "Print past dictation sessions, newest first.")

    @Option(help: "How many sessions to print (0: all).")
    var limit = 20

    @Option(help: "Only sessions with a final containing every one of these words (a trailing * matches prefixes).")
    var search: String?

    @Flag(help: "Print each session as a JSON object per line.")
    var json = false

    func validate() throws {
        guard limit >= 0 else { throw ValidationError("--limit must be 0 (all) or more, not \(limit).") }
    }

    func run() async throws {
        let local = DateFormatter()
        local.dateFormat = "yyyy-MM-dd HH:mm"
        let iso = ISO8601DateFormatter()
        for entry in try HistoryReader.sessions(limit: limit, search: search) {
            let started = HistoryReader.date(entry.started)
            if json {
                let end = entry.ended.map { JSONOutput.string(iso.string(from: HistoryReader.date($0))) }
                print(
                    JSONOutput.object([
                        ("id", .string(entry.id)),
                        ("start", .string(iso.string(from: started))),
                        ("start_us", .integer(entry.started)),
                        ("end", end ?? .null),
                        ("backend", .string(entry.backend)),
                        ("language", .string(entry.language)),
                        ("source", .string(entry.source)),
                        ("text", .string(entry.text)),
                    ]).line)
            } else {
                print("\(local.string(from: started))  \(entry.text)")
            }
        }
    }
}

struct Last: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the text of the last dictation session.")

    func run() async throws {
        if let last = try HistoryReader.sessions(limit: 1, search: nil).first { print(last.text) }
    }
}
