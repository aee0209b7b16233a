import ArgumentParser
import Control
import Dispatch
import Foundation
import InputMethod

/// The one executable of the package: `sttctl` and `sttd-ibus` are links to `sttd`, and the name
/// it was started by picks the command. Three binaries each carried a static Swift runtime.
@main
enum Multicall {
    static func main() {
        let arguments = CommandLine.arguments
        switch arguments.first?.split(separator: "/").last ?? "" {
        case "sttctl":
            runAsync { await Sttctl.run(arguments: Array(arguments.dropFirst())) }
        case "sttd-ibus":
            runAsync {
                await SttdIBus.main()
                return 0
            }
        default:
            // Synchronous: sttd makes NIO's event loops the concurrency executor before any task.
            Sttd.main()
        }
    }

    /// What an `async` main does: the command runs on the main actor while the main queue drains.
    static func runAsync(_ command: @escaping @MainActor @Sendable () async -> Int32) -> Never {
        Task { @MainActor in exit(await command()) }
        dispatchMain()
    }
}
