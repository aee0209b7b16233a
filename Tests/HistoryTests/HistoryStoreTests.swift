import Foundation
import Synchronization
import TestSupport
import Testing

@testable import History

@Suite("History store")
struct HistoryStoreTests {
    let directory: String
    let path: String

    init() throws {
        directory = try makeTemporaryDirectory("sttd-history")
        path = "\(directory)/data/sttd/history.sqlite"
    }

    func session(_ store: HistoryStore, _ id: String, daysAgo: Double = 0, finals: [String]) throws {
        let started = Date().addingTimeInterval(-daysAgo * 86_400)
        try store.beginSession(id: id, started: started, backend: "local", language: "en-US", source: "")
        for (index, text) in finals.enumerated() {
            try store.appendFinal(
                sessionID: id, text: text, audioStart: Double(index), audioEnd: Double(index) + 0.9,
                received: started.addingTimeInterval(Double(index)))
        }
        try store.endSession(id: id, ended: started.addingTimeInterval(Double(finals.count)))
    }

    @Test func newestFirstWithLimitAndJoinedFinals() throws {
        let store = try HistoryStore(path: path)
        try session(store, "a", daysAgo: 2, finals: ["first session"])
        try session(store, "b", daysAgo: 1, finals: ["second", "session here"])
        try session(store, "empty", finals: [])
        try session(store, "c", finals: ["third"])
        #expect(try store.sessions().map(\.id) == ["c", "b", "a"], "empty sessions are not listed")
        #expect(try store.sessions(limit: 2).map(\.id) == ["c", "b"])
        #expect(try store.sessions().first { $0.id == "b" }?.text == "second session here")
        let b = try #require(try store.sessions().first { $0.id == "b" })
        #expect(b.ended != nil && b.ended! > b.started)
    }

    /// GetHistory used to run one query per session.
    @Test func readsEverySessionInOneQuery() throws {
        let statements = Mutex<[String]>([])
        let store = try HistoryStore(path: path, trace: { sql in statements.withLock { $0.append(sql) } })
        for (index, id) in ["a", "b", "c", "d"].enumerated() {
            try session(store, id, daysAgo: Double(4 - index), finals: ["\(id) one", "\(id) two", "\(id) three"])
        }
        statements.withLock { $0 = [] }
        let entries = try store.sessions(limit: 3)
        #expect(entries.map(\.id) == ["d", "c", "b"])
        #expect(entries.map(\.text) == ["d one d two d three", "c one c two c three", "b one b two b three"])
        let selects = statements.withLock { $0 }.filter { $0.contains("FROM session") || $0.contains("FROM final") }
        #expect(selects.count == 1, "\(selects)")
    }

    @Test func fullTextSearch() throws {
        let store = try HistoryStore(path: path)
        try session(store, "a", finals: ["The quick brown fox"])
        try session(store, "b", finals: ["jumps over", "the lazy dog"])
        try session(store, "c", finals: ["a \"quoted\" (odd) query: OR NOT"])
        #expect(try store.sessions(search: "lazy").map(\.id) == ["b"])
        #expect(try store.sessions(search: "QUICK fox").map(\.id) == ["a"], "case-insensitive, every word")
        #expect(try store.sessions(search: "quick dog").isEmpty, "words must be in one final")
        #expect(try store.sessions(search: "jum*").map(\.id) == ["b"], "prefix")
        #expect(try store.sessions(search: "\"quoted\" (odd) OR").map(\.id) == ["c"], "punctuation is not syntax")
        #expect(try store.sessions(search: "   ").isEmpty)
    }

    @Test func pruneDeletesOldSessionsAndTheirFinals() throws {
        let store = try HistoryStore(path: path)
        try session(store, "old", daysAgo: 40, finals: ["ancient words"])
        try session(store, "new", daysAgo: 1, finals: ["fresh words"])
        #expect(try store.prune(startedBefore: Date().addingTimeInterval(-30 * 86_400)) == 1)
        #expect(try store.sessions().map(\.id) == ["new"])
        #expect(try store.sessions(search: "ancient").isEmpty, "the search index forgets pruned finals")
    }

    @Test func fileIsPrivateAndSurvivesReopening() throws {
        do {
            let store = try HistoryStore(path: path)
            try store.beginSession(id: "crashed", started: Date(), backend: "local", language: "en-US", source: "")
            try store.appendFinal(sessionID: "crashed", text: "kept", audioStart: nil, audioEnd: nil)
        }
        let attributes = try FileManager.default.attributesOfItem(atPath: path)
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
        let folder = try FileManager.default.attributesOfItem(atPath: (path as NSString).deletingLastPathComponent)
        #expect((folder[.posixPermissions] as? Int) == 0o700)
        for suffix in ["-wal", "-shm"] where FileManager.default.fileExists(atPath: path + suffix) {
            let mode = try FileManager.default.attributesOfItem(atPath: path + suffix)[.posixPermissions] as? Int
            #expect(mode == 0o600, "\(suffix)")
        }
        let reopened = try HistoryStore(path: path)
        #expect(try reopened.sessions().first?.ended == nil)
        #expect(try reopened.closeUnfinishedSessions() == 1)
        #expect(try reopened.sessions().first?.ended != nil)
        #expect(try reopened.sessions().first?.text == "kept")
    }

    @Test func readerSeesWritesAndNeedsAnExistingFile() throws {
        #expect(try HistoryStore(readingAt: path) == nil)
        let store = try HistoryStore(path: path)
        try session(store, "a", finals: ["hello"])
        let reader = try #require(try HistoryStore(readingAt: path))
        #expect(try reader.sessions().map(\.text) == ["hello"])
        try session(store, "b", finals: ["again"])
        #expect(try reader.sessions().map(\.text) == ["again", "hello"])
    }

    @Test func aCorruptFileIsReportedNotCrashed() throws {
        try FileManager.default.createDirectory(
            atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try String(repeating: "not a database ", count: 100).write(toFile: path, atomically: true, encoding: .utf8)
        let error = #expect(throws: HistoryError.self) { try HistoryStore(path: path) }
        #expect(error?.description.contains("history = false") == true, "\(error?.description ?? "")")
    }
}
