import Dictation
import Foundation
import GRDB

/// One dictation session as kept in history.
public struct HistoryEntry: Sendable, Equatable {
    public var id: String
    /// Unix time in microseconds.
    public var started: Int64
    /// Unix time in microseconds; nil while the session runs (or if the service died in it).
    public var ended: Int64?
    public var backend: String
    public var language: String
    public var source: String
    /// The session's finals joined by single spaces.
    public var text: String

    public init(
        id: String, started: Int64, ended: Int64?, backend: String, language: String, source: String, text: String
    ) {
        self.id = id
        self.started = started
        self.ended = ended
        self.backend = backend
        self.language = language
        self.source = source
        self.text = text
    }
}

/// Why history could not be opened or written.
public struct HistoryError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

/// Transcript history in SQLite (WAL, mode 0600): a row per session and per final, each final
/// committed on its own so that a crash loses none already received.
public final class HistoryStore: Sendable {
    public let path: String
    private let database: DatabaseQueue

    /// `history.sqlite` in ``DataDirectory``.
    public static func defaultPath(environment: [String: String] = ProcessInfo.processInfo.environment) -> String {
        "\(DataDirectory.path(environment: environment))/history.sqlite"
    }

    /// Opens (creating if needed) the history for writing and brings its schema up to date.
    public convenience init(path: String) throws(HistoryError) {
        try self.init(path: path, trace: nil)
    }

    /// `trace` sees every SQL statement run (tests count queries with it).
    init(path: String, trace: (@Sendable (String) -> Void)?) throws(HistoryError) {
        self.path = path
        let directory = (path as NSString).deletingLastPathComponent
        do {
            try FileManager.default.createDirectory(
                atPath: directory, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        } catch {
            throw HistoryError("Cannot create \(directory) for the history: \(error.localizedDescription)")
        }
        // Created 0600 before SQLite sees it; SQLite gives the -wal and -shm files the same mode.
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw HistoryError("Cannot open the history \(path): \(String(cString: strerror(errno))).")
        }
        fchmod(fd, 0o600)
        close(fd)
        var configuration = Configuration()
        configuration.label = "history"
        configuration.prepareDatabase { db in
            if let trace { db.trace { trace($0.expandedDescription) } }
            // WAL with synchronous=NORMAL: a commit survives the process being killed; only an
            // OS crash or power loss can take the last commits, and never corrupts the file.
            _ = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            try db.execute(sql: "PRAGMA synchronous = NORMAL")
        }
        do {
            database = try DatabaseQueue(path: path, configuration: configuration)
            try Self.migrator.migrate(database)
        } catch {
            throw HistoryError(
                "The history \(path) cannot be used (\(error)). Move it aside to start a new one, or set history = false."
            )
        }
    }

    /// Opens an existing history for reading (sttctl); nil if there is none yet.
    public init?(readingAt path: String) throws(HistoryError) {
        guard FileManager.default.fileExists(atPath: path) else { return nil }
        self.path = path
        var configuration = Configuration()
        configuration.readonly = true
        configuration.label = "history"
        do {
            database = try DatabaseQueue(path: path, configuration: configuration)
            _ = try database.read { db in try db.tableExists("session") }
        } catch {
            throw HistoryError("Cannot read the history \(path): \(error).")
        }
    }

    private static var migrator: DatabaseMigrator {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1") { db in
            try db.execute(
                sql: """
                    CREATE TABLE session (
                        id TEXT PRIMARY KEY NOT NULL,
                        started INTEGER NOT NULL,
                        ended INTEGER,
                        backend TEXT NOT NULL,
                        language TEXT NOT NULL,
                        source TEXT NOT NULL
                    );
                    CREATE INDEX session_started ON session(started);
                    CREATE TABLE final (
                        id INTEGER PRIMARY KEY,
                        session_id TEXT NOT NULL REFERENCES session(id) ON DELETE CASCADE,
                        text TEXT NOT NULL,
                        audio_start REAL,
                        audio_end REAL,
                        received INTEGER NOT NULL
                    );
                    CREATE INDEX final_session ON final(session_id);
                    CREATE VIRTUAL TABLE final_search USING fts5(text, content='final', content_rowid='id');
                    CREATE TRIGGER final_search_insert AFTER INSERT ON final BEGIN
                        INSERT INTO final_search(rowid, text) VALUES (new.id, new.text);
                    END;
                    CREATE TRIGGER final_search_delete AFTER DELETE ON final BEGIN
                        INSERT INTO final_search(final_search, rowid, text) VALUES ('delete', old.id, old.text);
                    END;
                    """)
        }
        return migrator
    }

    // MARK: Writing

    public func beginSession(id: String, started: Date, backend: String, language: String, source: String)
        throws(HistoryError)
    {
        try write("start a session") { db in
            try db.execute(
                sql: "INSERT INTO session (id, started, backend, language, source) VALUES (?, ?, ?, ?, ?)",
                arguments: [id, started.microseconds, backend, language, source])
        }
    }

    /// Commits one final; `audioStart`/`audioEnd` are seconds from the session's start.
    public func appendFinal(
        sessionID: String, text: String, audioStart: Double?, audioEnd: Double?, received: Date = Date()
    ) throws(HistoryError) {
        try write("store a final") { db in
            try db.execute(
                sql: "INSERT INTO final (session_id, text, audio_start, audio_end, received) VALUES (?, ?, ?, ?, ?)",
                arguments: [sessionID, text, audioStart, audioEnd, received.microseconds])
        }
    }

    /// Deletes the session's last final ("scratch that"); returns whether there was one.
    @discardableResult
    public func removeLastFinal(sessionID: String) throws(HistoryError) -> Bool {
        try write("remove a retracted final") { db in
            try db.execute(
                sql: "DELETE FROM final WHERE id = (SELECT max(id) FROM final WHERE session_id = ?)",
                arguments: [sessionID])
            return db.changesCount > 0
        }
    }

    public func endSession(id: String, ended: Date = Date()) throws(HistoryError) {
        try write("end a session") { db in
            try db.execute(sql: "UPDATE session SET ended = ? WHERE id = ?", arguments: [ended.microseconds, id])
        }
    }

    /// Ends sessions a killed service left open, at their last final (or their start).
    @discardableResult
    public func closeUnfinishedSessions() throws(HistoryError) -> Int {
        try write("close unfinished sessions") { db in
            try db.execute(
                sql: """
                    UPDATE session SET ended = coalesce(
                        (SELECT max(received) FROM final WHERE final.session_id = session.id), started)
                    WHERE ended IS NULL
                    """)
            return db.changesCount
        }
    }

    /// Deletes sessions that started before `date`; returns how many.
    @discardableResult
    public func prune(startedBefore date: Date) throws(HistoryError) -> Int {
        try write("prune old sessions") { db in
            try db.execute(sql: "DELETE FROM session WHERE started < ?", arguments: [date.microseconds])
            return db.changesCount
        }
    }

    private func write<T>(_ what: String, _ body: (Database) throws -> T) throws(HistoryError) -> T {
        do {
            return try database.write(body)
        } catch {
            throw HistoryError("Could not \(what) in the history \(path): \(error).")
        }
    }

    // MARK: Reading

    /// Sessions with any text, newest first. `limit` 0 means all; `search` keeps sessions with a
    /// final containing every word of it (full-text, prefix matches with a trailing `*`).
    ///
    /// One query: the chosen sessions joined with their finals, in order; rows of one session
    /// are consecutive and joined here (SQLite 3.40's group_concat cannot be ordered).
    public func sessions(limit: Int = 0, search: String? = nil) throws(HistoryError) -> [HistoryEntry] {
        let query = search.map(Self.ftsQuery) ?? nil
        if search != nil, query == nil { return [] }
        var chosen = """
            SELECT id, started, ended, backend, language, source, rowid AS position FROM session
            WHERE EXISTS (SELECT 1 FROM final WHERE final.session_id = session.id AND final.text != '')
            """
        var arguments: StatementArguments = []
        if let query {
            chosen += """
                 AND id IN (SELECT final.session_id FROM final_search
                            JOIN final ON final.id = final_search.rowid WHERE final_search MATCH ?)
                """
            arguments += [query]
        }
        chosen += " ORDER BY started DESC, rowid DESC"
        if limit > 0 {
            chosen += " LIMIT ?"
            arguments += [limit]
        }
        let sql = """
            WITH chosen AS (\(chosen))
            SELECT chosen.*, final.text FROM chosen JOIN final ON final.session_id = chosen.id AND final.text != ''
            ORDER BY chosen.started DESC, chosen.position DESC, final.id
            """
        do {
            return try database.read { db in
                var entries: [HistoryEntry] = []
                let rows = try Row.fetchCursor(db, sql: sql, arguments: arguments)
                while let row = try rows.next() {
                    let id: String = row["id"]
                    let text: String = row["text"]
                    if entries.last?.id == id {
                        let before = entries[entries.count - 1].text
                        entries[entries.count - 1].text += Spacing.separator(after: before, before: text) + text
                    } else {
                        entries.append(
                            HistoryEntry(
                                id: id, started: row["started"], ended: row["ended"], backend: row["backend"],
                                language: row["language"], source: row["source"], text: text))
                    }
                }
                return entries
            }
        } catch {
            throw HistoryError("Could not read the history \(path): \(error).")
        }
    }

    /// Every word of `search` as a quoted FTS5 string (so punctuation is not syntax), all required.
    static func ftsQuery(_ search: String) -> String? {
        let words = search.split(whereSeparator: \.isWhitespace).map { word -> String in
            let prefix = word.hasSuffix("*") && word.count > 1
            let bare = prefix ? word.dropLast() : word[...]
            return "\"" + bare.replacingOccurrences(of: "\"", with: "\"\"") + "\"" + (prefix ? "*" : "")
        }
        return words.isEmpty ? nil : words.joined(separator: " ")
    }
}

extension Date {
    /// Unix time in microseconds, as the contract's `x` timestamps.
    public var microseconds: Int64 { Int64((timeIntervalSince1970 * 1_000_000).rounded()) }
}
