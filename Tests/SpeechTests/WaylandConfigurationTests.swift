import Testing

@testable import Speech

/// `[wayland]`: sttd as the input method of wlroots compositors, and the apps opted in to the
/// typing tools (issue 41).
@Suite("The [wayland] table")
struct WaylandConfigurationTests {
    @Test func byDefaultSttdIsTheInputMethodAndNoAppGetsTheTools() throws {
        let wayland = try Configuration(toml: "").wayland
        #expect(wayland.inputMethod)
        #expect(wayland.typingToolsForApps.isEmpty)
        #expect(try Configuration(toml: "[wayland]").wayland == Configuration.Wayland())
    }

    @Test func readsBothKeys() throws {
        let wayland = try Configuration(
            toml: """
                [wayland]
                input_method = false
                typing_tools_for_apps = ["org.qbittorrent.qBittorrent", "Microsoft Teams - Preview", "xterm"]
                """
        ).wayland
        #expect(!wayland.inputMethod)
        #expect(wayland.typingToolsForApps == ["org.qbittorrent.qBittorrent", "Microsoft Teams - Preview", "xterm"])
    }

    @Test func oneAppMayBeWrittenAsAString() throws {
        let wayland = try Configuration(toml: "[wayland]\ntyping_tools_for_apps = \"kate\"").wayland
        #expect(wayland.typingToolsForApps == ["kate"])
    }

    @Test func theLongestListIsAccepted() throws {
        let apps = (1...Configuration.Wayland.appLimit).map { "\"app\($0)\"" }.joined(separator: ", ")
        let wayland = try Configuration(toml: "[wayland]\ntyping_tools_for_apps = [\(apps)]").wayland
        #expect(wayland.typingToolsForApps.count == Configuration.Wayland.appLimit)
    }

    @Test(arguments: [
        ("[wayland]\ninput_method = \"no\"", "wayland.input_method = \"no\" is a string, but it must be true or false"),
        ("[wayland]\ninput_method = 0", "wayland.input_method = 0 is a integer, but it must be true or false"),
        (
            "[wayland]\ntyping_tools_for_apps = 3",
            "wayland.typing_tools_for_apps = 3 is a integer, but it must be a list"
        ),
        (
            "[wayland]\ntyping_tools_for_apps = [\"kate\", 3]",
            "wayland.typing_tools_for_apps = [ 'kate', 3 ] is a array"
        ),
        ("[wayland]\ntyping_tools_for_apps = [\"\"]", "wayland.typing_tools_for_apps has \"\", which is no app id"),
        ("[wayland]\ntyping_tools_for_apps = [\"*\"]", "has \"*\", which is no app id; name each app exactly"),
        ("[wayland]\ntyping_tools_for_apps = [\"org.kde.*\"]", "(no patterns)"),
        ("[wayland]\ntyping_tools_for_apps = [\" kate\"]", "has \" kate\", which is no app id"),
        ("[wayland]\ntyping_tools_for_apps = [\"ka\\tte\"]", "which is no app id"),
        ("[wayland]\npush_to_talk_key = \"F9\"", "wayland.push_to_talk_key is not a known setting"),
        ("wayland = true", "wayland = true is a bool, but it must be a table ([wayland])"),
    ])
    func refusesWithAMessageNamingTheKeyAndTheFix(_ toml: String, _ expected: String) {
        let error = #expect(throws: ConfigurationError.self) { try Configuration(toml: toml) }
        #expect(error?.message.contains(expected) == true, "\(error?.message ?? "")")
    }

    @Test func tooManyAppsAreRefusedNamingTheLimit() {
        let apps = (0...Configuration.Wayland.appLimit).map { "\"app\($0)\"" }.joined(separator: ", ")
        let error = #expect(throws: ConfigurationError.self) {
            try Configuration(toml: "[wayland]\ntyping_tools_for_apps = [\(apps)]")
        }
        #expect(error?.message == "wayland.typing_tools_for_apps names 101 apps; it takes at most 100.")
    }

    /// The man page and docs/configuration.md name the risk of the opt-in.
    @Test func theReferenceNamesThePasswordFieldRisk() throws {
        let key = try #require(Configuration.reference.first { $0.path == "wayland.typing_tools_for_apps" })
        #expect(key.summary.contains("password fields are typed into"))
        #expect(Configuration.referenceSections.contains("wayland"))
    }
}
