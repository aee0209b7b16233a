import ArgumentParser
import DBus
import SpeechAPI

/// `sttctl apps`: the remembered per-app decisions.
struct Apps: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List which sandboxed apps (Flatpak, Snap) may use dictation and which may not.")

    func run() async throws {
        let client = try await SpeechClient.connect()
        let decisions = try await client.call(Speech1.listAppConsent)
        guard !decisions.isEmpty else {
            print("No app has been allowed or denied yet.")
            return
        }
        for (app, decision) in decisions.sorted(by: { $0.key < $1.key }) { print("\(app)\t\(decision)") }
    }
}

/// `sttctl allow|deny|forget APP_ID`: changes one app's decision.
struct ConsentChange: ParsableArguments {
    @Argument(help: "The app id: a Flatpak id such as org.example.Notes, or snap.NAME.")
    var app: String

    func apply(_ choice: ConsentChoice) async throws {
        try await SpeechClient.connect().call(Speech1.setAppConsent, AppID(app), choice)
    }
}

struct Allow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Let a sandboxed app use dictation without asking.")
    @OptionGroup var change: ConsentChange
    func run() async throws { try await change.apply(.allow) }
}

struct Deny: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Refuse a sandboxed app without asking.")
    @OptionGroup var change: ConsentChange
    func run() async throws { try await change.apply(.deny) }
}

struct Forget: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Forget the decision about a sandboxed app: it is asked again next time.")
    @OptionGroup var change: ConsentChange
    func run() async throws { try await change.apply(.ask) }
}
