import Testing

@testable import Speech

@Suite("Configuration")
struct ConfigurationTests {
    @Test func defaultsMatchTheContract() throws {
        let config = try Configuration(toml: "")
        #expect(config == Configuration())
        #expect(config.backend == .local)
        #expect(config.language == "en-US")
        #expect(config.stopTimeoutMilliseconds == 5000)
        #expect(config.local.modelDirectory == "/usr/share/pocketsphinx/model/en-us")
        #expect(config.deepgram.url == "wss://api.deepgram.com/v1/listen")
        #expect(config.deepgram.model == "nova-3")
    }

    @Test func readsEveryKey() throws {
        let config = try Configuration(
            toml: """
                backend = "deepgram"
                language = "de-DE"
                source = "alsa_input.usb"
                interim_results = false
                auto_stop_ms = 1500
                auto_stop_no_speech_ms = 4000
                output = "type"
                output_tool = "wtype"
                paste = true
                notify = false
                stop_timeout_ms = 2500
                history = false

                [local]
                model_dir = "/opt/model"

                [debug]
                audio_dir = "/tmp/sttd-audio"

                [ibus]
                push_to_talk = "F9"

                [deepgram]
                url = "wss://api.subquadratic.ai/v1/listen"
                auth = "subprotocol"
                api_key_file = "/home/me/.config/sttd/key"
                model = "nova-2"
                ca_file = "/etc/ssl/my-ca.pem"
                params = { smart_format = "true", endpointing = 300, punctuate = true }
                """)
        #expect(config.backend == .deepgram)
        #expect(config.language == "de-DE")
        #expect(config.source == "alsa_input.usb")
        #expect(!config.interimResults)
        #expect(config.stopTimeoutMilliseconds == 2500)
        #expect(config.autoStopMilliseconds == 1500)
        #expect(config.autoStopNoSpeechMilliseconds == 4000)
        #expect(config.output == .type)
        #expect(config.outputTool == .wtype)
        #expect(config.paste)
        #expect(!config.notify)
        #expect(!config.history)
        #expect(config.local.modelDirectory == "/opt/model")
        #expect(config.deepgram.auth == .subprotocol)
        #expect(config.deepgram.params == ["smart_format": "true", "endpointing": "300", "punctuate": "true"])
        #expect(config.debug.audioDirectory == "/tmp/sttd-audio")
        #expect(config.ibus.pushToTalk == "F9")
    }

    @Test(arguments: [
        ("backend = 3", "backend = 3 is a integer, but it must be one of \"local\", \"deepgram\""),
        ("backend = \"cloud\"", "backend = \"cloud\" is not allowed; use one of \"local\", \"deepgram\""),
        ("interim_results = \"yes\"", "interim_results"),
        ("stop_timeout_ms = 0", "stop_timeout_ms = 0 is out of range"),
        ("language = \"english\"", "not a BCP-47 language tag"),
        ("colour = \"blue\"", "colour is not a known setting"),
        ("[local]\nmodel = \"x\"", "local.model is not a known setting"),
        ("[deepgram]\nauth = \"cookie\"", "deepgram.auth = \"cookie\" is not allowed"),
        ("[deepgram]\nurl = \"http://example.com\"", "must start with wss://"),
        ("[deepgram]\nurl = \"ws://example.com/v1/listen\"", "non-loopback"),
        ("output = \"keyboard\"", "output = \"keyboard\" is not allowed; use one of \"none\", \"type\", \"clipboard\""),
        ("output_tool = \"xte\"", "use one of \"\", \"wtype\", \"ydotool\", \"xdotool\""),
        ("auto_stop_ms = 700000", "auto_stop_ms = 700000 is out of range"),
        ("auto_stop_no_speech_ms = 0", "auto_stop_no_speech_ms = 0 is out of range"),
        ("notify = 1", "notify = 1 is a integer, but it must be true or false"),
        ("local = 3", "local = 3 is a integer, but it must be a table"),
        ("backend = ", "line 1"),
        ("[debug]\naudio_dir = \"captures\"", "debug.audio_dir = \"captures\" is not an absolute path"),
        ("[debug]\nlevel = 1", "debug.level is not a known setting"),
        ("[ibus]\npush_to_talk = \"ctrl+F9\"", "ibus.push_to_talk = \"ctrl+F9\" is not a key name"),
        ("[ibus]\nhotkey = \"F9\"", "ibus.hotkey is not a known setting"),
        ("[text]\ncommands = \"yes\"", "text.commands = \"yes\" is a string, but it must be true or false"),
        ("[text]\nreplacements = { gonna = 3 }", "text.replacements.\"gonna\" must be a string"),
        ("[text]\nreplacements = { \" \" = \"x\" }", "text.replacements has an entry \" \" without words"),
        (
            "[text]\nvocabulary = [\"ok\", 3]",
            "text.vocabulary = [ 'ok', 3 ] is a array, but it must be a list of strings"
        ),
        ("[text]\nvocabulary = [\"\"]", "text.vocabulary takes up to 100 non-empty terms"),
        (
            "[text.phrases.en]\nnewline = [\"next line\"]",
            "text.phrases.en.newline is not an action; use one of new_line"
        ),
        ("[text.phrases]\nen = 3", "text.phrases.en must be a table of phrases"),
        ("[text]\nmacros = {}", "text.macros is not a known setting"),
    ])
    func refusesWithAMessageNamingTheKey(_ toml: String, _ expected: String) {
        let error = #expect(throws: ConfigurationError.self) { try Configuration(toml: toml) }
        #expect(error?.message.contains(expected) == true, "\(error?.message ?? "")")
    }

    @Test func streamingFallbackKeys() throws {
        let defaults = Configuration()
        #expect(defaults.deepgram.fallback == nil, "nil: local when an offline engine is installed")
        #expect(defaults.deepgram.fallbackAfterMilliseconds == 3000)
        let config = try Configuration(toml: "[deepgram]\nfallback = \"none\"\nfallback_after_ms = 1500\n")
        #expect(config.deepgram.fallback == StreamingFallback.none)
        #expect(config.deepgram.fallbackAfterMilliseconds == 1500)
        #expect(try Configuration(toml: "[deepgram]\nfallback = \"local\"").deepgram.fallback == .local)
        #expect(throws: ConfigurationError.self) { try Configuration(toml: "[deepgram]\nfallback = \"cloud\"") }
        #expect(throws: ConfigurationError.self) { try Configuration(toml: "[deepgram]\nfallback_after_ms = 0") }
    }

    @Test func plainWebSocketOnlyToLoopback() throws {
        for url in [
            "ws://127.0.0.1:8080/v1/listen", "ws://127.45.6.7/v1/listen", "ws://localhost/v1/listen",
            "ws://LOCALHOST:80/v1/listen", "ws://[::1]:9000/v1/listen",
        ] {
            #expect(try Configuration(toml: "[deepgram]\nurl = \"\(url)\"").deepgram.url == url)
        }
    }

    /// A prefix test on the host name let `127.evil.example` through: the key would travel in clear text.
    @Test func plainWebSocketToLookalikeHostsIsRefused() {
        for url in [
            "ws://127.evil.example/v1/listen", "ws://127.0.0.1.example.com/v1/listen", "ws://localhost.example/v1",
            "ws://[::2]/v1/listen", "ws://128.0.0.1/v1/listen", "ws://127/v1/listen",
        ] {
            let error = #expect(throws: ConfigurationError.self) {
                try Configuration(toml: "[deepgram]\nurl = \"\(url)\"")
            }
            #expect(error?.message.contains("non-loopback") == true, "\(url): \(error?.message ?? "")")
        }
        #expect(!Configuration.isLoopback("127.evil.example"))
        #expect(Configuration.isLoopback("127.0.0.53"))
    }

    @Test func pathPrecedence() {
        #expect(Configuration.path(explicit: "/a.toml", environment: ["STTD_CONFIG": "/b.toml"]).path == "/a.toml")
        #expect(Configuration.path(explicit: nil, environment: ["STTD_CONFIG": "/b.toml"]).path == "/b.toml")
        #expect(Configuration.path(explicit: nil, environment: ["XDG_CONFIG_HOME": "/x"]).path == "/x/sttd/config.toml")
        #expect(
            Configuration.path(explicit: nil, environment: ["HOME": "/home/u"]).path
                == "/home/u/.config/sttd/config.toml")
    }

    @Test func languageTags() {
        for good in ["en", "en-US", "de-CH-1996", "zh-Hant-TW", "sr-Latn"] {
            #expect(Configuration.isLanguageTag(good), "\(good)")
        }
        for bad in ["", "e", "english-language", "en_US", "en--US", "en-", "ünï"] {
            #expect(!Configuration.isLanguageTag(bad), "\(bad)")
        }
    }
}

@Suite("[text] configuration")
struct TextConfigurationTests {
    @Test func readsTheTextTable() throws {
        let config = try Configuration(
            toml: """
                [text]
                commands = true
                spoken_punctuation = false
                replacements = { "gonna" = "going to", "um" = "" }
                vocabulary = ["PipeWire", "sttd"]
                [text.phrases.en]
                press_enter = ["send it now"]
                [text.phrases.de]
                new_line = ["neue Zeile", "Zeilenumbruch"]
                scratch_that = "streich das"
                """)
        #expect(config.text.spokenPunctuation == false)
        #expect(config.text.replacements.map(\.written) == ["going to", ""])
        #expect(config.text.vocabulary == ["PipeWire", "sttd"])
        #expect(config.text.phrases["de"]?[.scratchThat] == ["streich das"])
        let english = config.text.rules(language: "en-GB", enginePunctuates: true, offline: false)
        #expect(english.phrases.phrases(of: .press(.enter)) == ["send it now"])
        #expect(english.phrases.phrases(of: .newLine) == ["new line", "newline"], "the others stay built in")
        #expect(english.vocabulary.isEmpty, "a streaming engine gets the vocabulary as keyterms instead")
        let german = config.text.rules(language: "de-DE", enginePunctuates: false, offline: true)
        #expect(german.phrases.phrases(of: .newLine) == ["neue zeile", "zeilenumbruch"])
        #expect(german.phrases.phrases(of: .press(.enter)).isEmpty, "no English phrases for another language")
        #expect(german.spokenPunctuation == false, "set in the file")
        #expect(german.vocabulary == ["PipeWire", "sttd"])
    }

    @Test func spokenPunctuationDefaultsToTheEngine() throws {
        let text = try Configuration(toml: "").text
        #expect(text.commands)
        #expect(text.rules(language: "en-US", enginePunctuates: false, offline: true).spokenPunctuation)
        #expect(!text.rules(language: "en-US", enginePunctuates: true, offline: false).spokenPunctuation)
    }
}
