import ArgumentParser
import Foundation
import SpeechAPI

/// `sttctl hands-free on|off|status`: arms and disarms the wake phrase.
struct HandsFreeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hands-free",
        abstract: "Dictate without a key: say the wake phrase (`[hands_free] wake_phrase`) and dictation starts.",
        discussion: """
            While armed, the microphone stays open and sttd listens on this computer for the phrase; \
            nothing it hears is kept or sent anywhere until you say it. A session the phrase starts ends \
            as any other (auto-stop, `sttctl stop`, "stop listening"); then sttd is armed again.
            """,
        subcommands: [On.self, Off.self, Show.self])

    struct On: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Arm hands-free dictation; returns once sttd listens for the phrase.")
        func run() async throws {
            let client = try await SpeechClient.connect()
            try await client.call(Speech1.setHandsFree, true)
            print(try await HandsFreeCommand.summary(client))
        }
    }

    struct Off: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Disarm hands-free dictation (a session it started goes on).")
        func run() async throws { try await SpeechClient.connect().call(Speech1.setHandsFree, false) }
    }

    struct Show: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            commandName: "status", abstract: "Print off, armed, dictating or paused, with the phrase.")
        @Flag(help: "Print {\"state\": …, \"wake_phrase\": …} as JSON.") var json = false

        func run() async throws {
            let client = try await SpeechClient.connect()
            if json {
                let state = try await client.property(.handsFree) ?? ""
                let phrase = try await client.property(.wakePhrase) ?? ""
                let data = try JSONSerialization.data(
                    withJSONObject: ["state": state, "wake_phrase": phrase], options: [.sortedKeys])
                print(String(decoding: data, as: UTF8.self))
            } else {
                print(try await HandsFreeCommand.summary(client))
            }
        }
    }

    static func summary(_ client: SpeechClient) async throws -> String {
        let state = try await client.property(.handsFree) ?? ""
        let phrase = try await client.property(.wakePhrase) ?? ""
        switch state {
        case "armed": return "armed — say “\(phrase)”"
        case "dictating": return "dictating — armed again when the session ends"
        case "paused": return "paused — the microphone or the offline engine is out; sttd retries"
        default: return state
        }
    }
}
