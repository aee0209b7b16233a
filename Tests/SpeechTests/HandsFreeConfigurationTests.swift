import Dictation
import Testing

@testable import Speech

/// `[hands_free]`: the wake phrase and what the session it starts does (issue 42).
@Suite("The [hands_free] table")
struct HandsFreeConfigurationTests {
    @Test func handsFreeDefaults() throws {
        let handsFree = try Configuration(toml: "").handsFree
        #expect(handsFree.wakePhrase == "")
        #expect(handsFree.output == .type)
        #expect(handsFree.autoStopMilliseconds == 2000)
        #expect(!handsFree.armAtStart)
        #expect(try Configuration(toml: "[hands_free]").handsFree == Configuration.HandsFree())
    }

    @Test func handsFreeKeysParse() throws {
        let handsFree = try Configuration(
            toml: """
                [hands_free]
                wake_phrase = "Okay typewriter"
                output = "clipboard"
                auto_stop_ms = 0
                arm_at_start = true
                """
        ).handsFree
        #expect(handsFree.wakePhrase == "Okay typewriter")
        #expect(handsFree.output == .clipboard)
        #expect(handsFree.autoStopMilliseconds == 0)
        #expect(handsFree.armAtStart)
        let longest = try Configuration(toml: "[hands_free]\noutput = \"none\"\nauto_stop_ms = 600000").handsFree
        #expect(longest.output == .none)
        #expect(longest.autoStopMilliseconds == 600_000)
    }

    /// The top level's `output` and `auto_stop_ms` are the user's calls' settings; the phrase's
    /// session has its own.
    @Test func theTopLevelKeysDoNotChangeTheHandsFreeOnes() throws {
        let configuration = try Configuration(toml: "output = \"clipboard\"\nauto_stop_ms = 500")
        #expect(configuration.handsFree == Configuration.HandsFree())
    }

    /// A phrase `WakePhrase` refuses still loads: it is checked when hands-free is turned on,
    /// so a bad phrase cannot stop sttd.
    @Test(arguments: ["", "go", "stop listening", "one two three four five six"])
    func aPhraseIsNotCheckedAtLoad(_ phrase: String) throws {
        #expect(throws: WakePhraseRefusal.self) { try WakePhrase(phrase) }
        let toml = "[hands_free]\nwake_phrase = \(ConfigurationKey.tomlString(phrase))"
        #expect(try Configuration(toml: toml).handsFree.wakePhrase == phrase)
    }

    @Test(arguments: [
        (
            "[hands_free]\noutput = \"paste\"",
            "hands_free.output = \"paste\" is not allowed; use one of \"none\", \"type\", \"clipboard\"."
        ),
        (
            "[hands_free]\nauto_stop_ms = 600001",
            "hands_free.auto_stop_ms = 600001 is out of range; allowed: 0 to 600000 milliseconds."
        ),
        (
            "[hands_free]\nauto_stop_ms = -1",
            "hands_free.auto_stop_ms = -1 is out of range; allowed: 0 to 600000 milliseconds."
        ),
        (
            "[hands_free]\nauto_stop_ms = 2.5",
            "hands_free.auto_stop_ms = 2.5 is a floating-point number, but it must be a whole number of milliseconds."
        ),
        (
            "[hands_free]\narm_at_start = \"yes\"",
            "hands_free.arm_at_start = \"yes\" is a string, but it must be true or false."
        ),
        (
            "[hands_free]\nwake_phrase = [\"start\", \"dictation\"]",
            "hands_free.wake_phrase = [ 'start', 'dictation' ] is a array, but it must be a string."
        ),
        ("hands_free = true", "hands_free = true is a bool, but it must be a table ([hands_free])."),
    ])
    func handsFreeRejectsBadOutputAndRange(_ toml: String, _ expected: String) {
        let error = #expect(throws: ConfigurationError.self) { try Configuration(toml: toml) }
        #expect(error?.message == expected)
    }

    @Test func unknownHandsFreeKeyIsRefused() {
        let error = #expect(throws: ConfigurationError.self) {
            try Configuration(toml: "[hands_free]\nwake_word = \"computer\"")
        }
        #expect(
            error?.message
                == "hands_free.wake_word is not a known setting (known here: arm_at_start, auto_stop_ms, output, wake_phrase); check its spelling."
        )
    }

    @Test func theReferenceDocumentsTheTable() throws {
        #expect(Configuration.referenceSections.contains("hands_free"))
        let phrase = try #require(Configuration.reference.first { $0.path == "hands_free.wake_phrase" })
        #expect(phrase.summary.contains("checked when hands-free is turned on"))
    }
}
