import Control
import Foundation

/// The sttctl executable; all logic lives in the Control library.
@main
enum SttctlMain {
    static func main() async {
        exit(await Sttctl.run(arguments: Array(CommandLine.arguments.dropFirst())))
    }
}
