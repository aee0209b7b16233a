import ArgumentParser
import Control
import Foundation
import InputMethod
import Service

/// The one executable of the package: `sttctl` and `sttd-ibus` are links to `sttd`, and the name
/// it was started by picks the command. Three binaries each carried a static Swift runtime.
@main
enum Multicall {
    static func main() {
        let arguments = CommandLine.arguments
        switch arguments.first?.split(separator: "/").last ?? "" {
        case "sttctl":
            exit(SttdApp.blockOnEventLoops { await Sttctl.run(arguments: Array(arguments.dropFirst())) })
        case "sttd-ibus":
            exit(
                SttdApp.blockOnEventLoops {
                    await SttdIBus.main()
                    return 0
                })
        default:
            // Synchronous: sttd makes NIO's event loops the concurrency executor before any task.
            Sttd.main()
        }
    }
}
