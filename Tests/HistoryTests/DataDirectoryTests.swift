import History
import Testing

@Suite("Data directory")
struct DataDirectoryTests {
    @Test func absoluteDataHomeIsUsed() {
        #expect(DataDirectory.path(environment: ["HOME": "/home/u", "XDG_DATA_HOME": "/data"]) == "/data/sttd")
    }

    @Test(arguments: ["relative/data", "./data", "~/data", ""])
    func relativeOrEmptyDataHomeIsIgnored(_ dataHome: String) {
        let path = DataDirectory.path(environment: ["HOME": "/home/u", "XDG_DATA_HOME": dataHome])
        #expect(path == "/home/u/.local/share/sttd")
    }

    @Test func unsetDataHomeMeansLocalShare() {
        #expect(DataDirectory.path(environment: ["HOME": "/home/u"]) == "/home/u/.local/share/sttd")
    }

    @Test func historyLivesInTheDataDirectory() {
        let environment = ["HOME": "/home/u", "XDG_DATA_HOME": "/data"]
        #expect(HistoryStore.defaultPath(environment: environment) == "/data/sttd/history.sqlite")
    }
}
