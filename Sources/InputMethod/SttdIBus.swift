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
            ibus-daemon starts it from its component file, sttd.xml (`sttd-ibus --component-xml` \
            prints it). The Debian package puts that file in /usr/share/ibus/component, where \
            ibus-daemon looks. `make install` puts it in $PREFIX/share/ibus/component and, so that \
            ibus-daemon looks there too, writes ~/.config/environment.d/60-sttd-ibus.conf (which \
            adds that folder to IBUS_COMPONENT_PATH) and refreshes IBus's registry cache. Log out \
            and in again once, then add Dictation (GNOME: Settings > Keyboard > Input Sources > + \
            > English > Dictation). `make uninstall` removes both.
            """,
        version: SpeechAPI.version)

    @Flag(
        help: "Print the IBus component file (its <exec> is the path this program was started by, or --exec) and exit.")
    var componentXml = false

    @Option(help: "With --component-xml: the path ibus-daemon runs instead of this program's own.")
    var exec: String?

    @Flag(help: "Started by ibus-daemon (accepted for IBus's convention; nothing changes).")
    var ibus = false

    @Flag(
        help: """
            Run as KDE Plasma's input method (sttd's desktop entry): make sure ibus-daemon runs, then \
            run ibus-wayland, telling the engine which fields are password fields.
            """)
    var wayland = false

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
        let logger = Logger(label: wayland ? "sttd-ibus --wayland" : "sttd-ibus")
        let environment = ProcessInfo.processInfo.environment
        if wayland {
            let status: Int32
            do {
                status = try await WaylandFrontEnd(environment: environment, logger: logger).run()
            } catch {
                logger.critical("\(error.message)")
                throw ExitCode.failure
            }
            throw ExitCode(status)
        }
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
