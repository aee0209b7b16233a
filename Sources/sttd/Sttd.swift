import ArgumentParser
import Foundation
import Recognition
import Service
import Speech
import SpeechAPI

/// The sttd service command; all logic lives in the Service library.
struct Sttd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sttd",
        abstract: "Speech-to-text for the Linux desktop, as a D-Bus service (io.github.sttd.Speech1).",
        discussion: """
            sttd owns io.github.sttd.Speech1 on the session bus: apps and sttctl start and stop \
            dictation and follow the transcript through its methods, properties and signals. It \
            captures the microphone through PulseAudio (or PipeWire's pulse server) and recognizes \
            speech offline, or streams it to a Deepgram-compatible server. It normally runs as the \
            systemd user service sttd.service, started by D-Bus activation on first use.

            Files: $XDG_CONFIG_HOME/sttd/config.toml, else ~/.config/sttd/config.toml (the \
            configuration, see sttd.conf(5)); $XDG_DATA_HOME/sttd/history.sqlite when XDG_DATA_HOME \
            is absolute, else ~/.local/share/sttd/history.sqlite (finals, as they arrive).
            Environment: STTD_CONFIG (the configuration file), STTD_LOG_LEVEL (trace ... error), \
            STTD_API_KEY (a streaming backend's key, after api_key_file and the api-key credential).
            Exit status 78: the configuration cannot be used (the message names the key).
            See also: sttctl(1), sttd-ibus(1), sttd.conf(5).
            """,
        version: SpeechAPI.version)

    @Option(
        help: "Read the configuration from this file (default: $STTD_CONFIG, then $XDG_CONFIG_HOME/sttd/config.toml).")
    var config: String?

    @Flag(help: "Print the D-Bus interface XML and exit.")
    var printIntrospection = false

    @Option(help: "Print every config key with its default, as sttd.conf(5) (man) or Markdown (markdown), and exit.")
    var configReference: ReferenceFormat?

    @Option(name: .customLong("check-model"), help: .hidden)
    var checkModel: String?

    @Option(name: .customLong("offline-engine-worker"), parsing: .upToNextOption, help: .hidden)
    var offlineEngineWorker: [String] = []

    func run() throws {
        if printIntrospection {
            print(Speech1.document, terminator: "")
            return
        }
        if let configReference {
            let text =
                switch configReference {
                case .man: Configuration.referenceManPage()
                case .markdown: Configuration.referenceMarkdown()
                }
            print(text, terminator: "")
            return
        }
        if !offlineEngineWorker.isEmpty {
            throw ExitCode(SherpaOnnxRecognizer.serveWorker(offlineEngineWorker))
        }
        if let checkModel {
            throw ExitCode(PocketSphinxRecognizer.checkModel(directory: checkModel) ? 0 : 1)
        }
        let status = SttdApp.runOnEventLoops(configPath: config)
        if status != 0 { throw ExitCode(status) }
    }
}

/// The formats of `--config-reference`.
enum ReferenceFormat: String, ExpressibleByArgument, CaseIterable {
    case man, markdown
}
