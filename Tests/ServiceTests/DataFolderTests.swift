import Foundation
import Testing

@testable import Service
@testable import SpeechBus

@Suite("Data folders")
struct DataFolderTests {
    @Test(arguments: [
        (["HOME": "/home/u", "XDG_DATA_HOME": "/data"], "/data/sttd/consent"),
        (["HOME": "/home/u", "XDG_DATA_HOME": "relative"], "/home/u/.local/share/sttd/consent"),
        (["HOME": "/home/u"], "/home/u/.local/share/sttd/consent"),
    ])
    func consentIsRememberedWhereHistoryIs(environment: [String: String], path: String) {
        #expect(FileConsentStore.defaultPath(environment: environment) == path)
    }

    @Test func aFolderThatCannotBeCreatedIsReported() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("sttd-folders-\(UUID())").path
        try FileManager.default.createDirectory(atPath: base, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: base) }
        // Below a regular file no folder can be made, whoever runs the test (root included).
        FileManager.default.createFile(atPath: "\(base)/file", contents: Data())
        let writable = "\(base)/data/sttd"
        let blocked = "\(base)/file/sttd"
        #expect(WritableFolders.unwritable([writable, blocked]) == [blocked])
        #expect(FileManager.default.fileExists(atPath: writable))
    }
}
