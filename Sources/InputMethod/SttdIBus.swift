import ArgumentParser
import Foundation
import Logging
import SpeechAPI

/// The IBus engine ibus-daemon starts from `sttd.xml`: the multicall `sttd` run as `sttd-ibus`.
public struct SttdIBus: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: ComponentFile.commandName,
        abstract: "sttd's input method: an IBus engine (\"Dictation\") that puts dictated text into the focused field.",
        discussion: """
            ibus-daemon starts it from its component file; install that with
            `sttd-ibus --component-xml > /usr/share/ibus/component/sttd.xml` (make install does it).
            """,
        version: SpeechAPI.version)

    @Flag(
        help: "Print the IBus component file (its <exec> is the path this program was started by, or --exec) and exit.")
    var componentXml = false

    @Option(help: "With --component-xml: the path ibus-daemon runs instead of this program's own.")
    var exec: String?

    @Flag(help: "Started by ibus-daemon (accepted for IBus's convention; nothing changes).")
    var ibus = false

    @Flag(help: "Log each engine event.")
    var verbose = false

    public init() {}

    public func run() async throws {
        if componentXml {
            print(ComponentFile.xml(exec: exec ?? ComponentFile.ownPath()), terminator: "")
            return
        }
        let verbose = verbose
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = verbose ? .debug : .info
            return handler
        }
        let logger = Logger(label: "sttd-ibus")
        let environment = ProcessInfo.processInfo.environment
        let configPath = EngineConfiguration.path(environment: environment)
        let configuration: EngineConfiguration
        do {
            configuration = try EngineConfiguration.load(path: configPath)
        } catch {
            // Dictation into fields still works; only the key is off.
            logger.error("push-to-talk is off: \(error.message)")
            configuration = try EngineConfiguration()
        }
        do {
            try await InputMethodEngine(configuration: configuration, environment: environment, logger: logger).run()
        } catch {
            logger.critical("\(error.message)")
            throw ExitCode.failure
        }
    }
}
