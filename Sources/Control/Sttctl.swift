import ArgumentParser
import DBus
import Foundation
import SpeechAPI

/// A failure that ends `sttctl` with one of the contract's exit codes.
struct ControlFailure: Error {
    /// 3: the service (or the bus) cannot be reached.
    static let unreachable: Int32 = 3
    /// 4: the service answered with an error.
    static let serviceError: Int32 = 4

    var exitCode: Int32
    var message: String
}

/// The `sttctl` command line: thin commands over ``SpeechClient``.
public struct Sttctl: AsyncParsableCommand {
    public static let configuration = CommandConfiguration(
        commandName: "sttctl",
        abstract: "Control sttd, the speech-to-text service: start and stop dictation, follow the transcript.",
        discussion: """
            Exit codes: 0 success, 1 the history cannot be read (doctor: dictation would not work), 2 usage error, 3 service not reachable, 4 the service returned an error.
            Bind `sttctl toggle` to a key to get a dictation button.
            """,
        version: SpeechAPI.version,
        subcommands: [
            Start.self, Stop.self, Toggle.self, Cancel.self, Reset.self, Status.self, TranscriptCommand.self,
            Watch.self, Sources.self, Authorize.self, HistoryCommand.self, Last.self, Apps.self, Allow.self,
            Deny.self, Forget.self, HandsFreeCommand.self, Doctor.self,
        ])

    public init() {}

    /// Runs `sttctl` with these arguments and returns the process exit status.
    public static func run(arguments: [String]) async -> Int32 {
        do {
            var command = try parseAsRoot(arguments)
            if var asyncCommand = command as? any AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            return 0
        } catch let failure as ControlFailure {
            printError(failure.message)
            return failure.exitCode
        } catch {
            let code = exitCode(for: error)
            let message = fullMessage(for: error)
            if code == .success {
                if !message.isEmpty { print(message) }
                return 0
            }
            if let exit = error as? ExitCode { return exit.rawValue }
            printError(message)
            return 2
        }
    }

    static func printError(_ message: String) {
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }
}

/// Options shared by `start` and `toggle`.
struct SessionFlags: ParsableArguments {
    @Option(help: "Recognizer: local (offline) or deepgram.")
    var backend: String?

    @Option(help: "BCP-47 language tag, e.g. en-US.")
    var language: String?

    @Option(help: "PulseAudio source name (see `sttctl sources`); empty for the default.")
    var source: String?

    @Flag(help: "Do not emit interim results.")
    var noInterim = false

    @Option(
        name: .customLong("auto-stop"),
        help: ArgumentHelp("Stop after this much trailing silence following speech; 0 = never.", valueName: "seconds"))
    var autoStop: Double?

    @Option(help: "Where finals go besides D-Bus: none, type (into the focused window) or clipboard.")
    var output: String?

    func validate() throws {
        if let autoStop, !(0...600).contains(autoStop) {
            throw ValidationError("--auto-stop takes 0 to 600 seconds")
        }
        if let output, !["none", "type", "clipboard"].contains(output) {
            throw ValidationError("--output takes none, type or clipboard, not '\(output)'")
        }
    }

    var request: StartRequest {
        StartRequest(
            backend: backend, language: language, source: source, interimResults: noInterim ? false : nil,
            autoStopMilliseconds: autoStop.map { UInt32(($0 * 1000).rounded()) }, output: output)
    }
}

struct Start: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Start dictation (does nothing if already listening).")
    @OptionGroup var flags: SessionFlags

    func run() async throws {
        try await SpeechClient.connect().call(Speech1.startTranscribing, flags.request)
    }
}

struct Stop: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Stop dictation and print the final transcript.")

    func run() async throws {
        print(try await SpeechClient.connect().call(Speech1.stopTranscribing))
    }
}

struct Toggle: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Start if idle, stop if listening (bind this to a key). Prints the transcript when it stops.")
    @OptionGroup var flags: SessionFlags

    func run() async throws {
        let client = try await SpeechClient.connect()
        let listening = try await client.call(Speech1.toggleTranscribing, flags.request)
        if !listening {
            print(try await client.property(.transcript) ?? "")
        }
    }
}

struct Cancel: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Stop at once, dropping text not yet final.")
    func run() async throws { try await SpeechClient.connect().call(Speech1.cancelTranscribing) }
}

struct Reset: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Clear the transcript (listening goes on).")
    func run() async throws { try await SpeechClient.connect().call(Speech1.resetTranscript) }
}

struct Status: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the service's state and settings.")
    @Flag(help: "Print every property as one JSON object.")
    var json = false

    func run() async throws {
        let properties = try await SpeechClient.connect().allProperties()
        if json {
            print(JSONOutput.object(properties.map { ($0.0, JSONOutput($0.1)) }).line)
        } else {
            for (name, value) in properties { print("\(name): \(JSONOutput.plain(value))") }
        }
    }
}

struct TranscriptCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transcript", abstract: "Print the current transcript.")
    func run() async throws {
        print(try await SpeechClient.connect().property(.transcript) ?? "")
    }
}

struct Watch: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract:
            "Follow the transcript: print each final as a line (and interim text on a terminal) until interrupted.")
    @Flag(
        help:
            "Print every update as a JSON object per line: transcript, segment, is_final; a retraction (\"scratch that\") as transcript, retracted."
    )
    var json = false

    func run() async throws {
        let client = try await SpeechClient.connect()
        let updates = try await client.transcriptUpdates()
        let interactive = isatty(STDOUT_FILENO) != 0
        for await update in updates {
            if let removed = update.retracted {
                if json {
                    print(
                        JSONOutput.object([("transcript", .string(update.transcript)), ("retracted", .string(removed))])
                            .line)
                } else {
                    if interactive { print("\r\u{1B}[K", terminator: "") }
                    print("[scratched] \(removed)")
                }
            } else if json {
                print(
                    JSONOutput.object([
                        ("transcript", .string(update.transcript)),
                        ("segment", .string(update.segment)),
                        ("is_final", .bool(update.isFinal)),
                    ]).line)
            } else if update.isFinal {
                if interactive { print("\r\u{1B}[K", terminator: "") }
                if !update.segment.isEmpty { print(update.segment) }
            } else if interactive {
                print("\r\u{1B}[K\(update.segment)", terminator: "")
            }
            fflush(nil)  // all output streams; `stdout` itself is not concurrency-safe to name
        }
        throw ControlFailure(exitCode: ControlFailure.unreachable, message: "sttctl: the bus connection closed")
    }
}

struct Sources: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List PulseAudio capture sources (* marks the default).")
    func run() async throws {
        for source in try await SpeechClient.connect().call(Speech1.listSources) {
            print("\(source.isDefault ? "*" : " ") \(source.name)\t\(source.description)")
        }
    }
}

struct Authorize: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check the microphone and the recognizer's credentials now and print the authorization status.")
    func run() async throws {
        let client = try await SpeechClient.connect()
        let recognizer = try await client.call(Speech1.requestAuthorization)
        let microphone = try await client.property(.microphoneStatus) ?? ""
        print("recognizer: \(recognizer)")
        print("microphone: \(microphone)")
    }
}
