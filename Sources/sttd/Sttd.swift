import ArgumentParser
import Foundation
import Recognition
import Service
import SpeechAPI

/// The sttd service executable; all logic lives in the Service library.
@main
struct Sttd: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "sttd",
        abstract: "Speech-to-text for the Linux desktop, as a D-Bus service (io.github.sttd.Speech1).",
        version: SpeechAPI.version)

    @Option(
        help: "Read the configuration from this file (default: $STTD_CONFIG, then $XDG_CONFIG_HOME/sttd/config.toml).")
    var config: String?

    @Flag(help: "Print the D-Bus interface XML and exit.")
    var printIntrospection = false

    @Option(name: .customLong("check-model"), help: .hidden)
    var checkModel: String?

    @Option(name: .customLong("offline-engine-worker"), parsing: .upToNextOption, help: .hidden)
    var offlineEngineWorker: [String] = []

    func run() throws {
        if printIntrospection {
            print(SpeechAPI.document, terminator: "")
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
