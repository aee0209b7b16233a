import Recognition
import Speech
import Testing

@Suite("Configuration of the offline engines ([local])")
struct LocalEngineConfigurationTests {
    @Test func defaultsChooseByWhatIsInstalled() throws {
        let local = try Configuration(toml: "").local
        #expect(local.engine == nil, "no engine key: sherpa-onnx when installed, else pocketsphinx")
        #expect(local.sherpaModelDirectory == "")
        #expect(local.sherpaModelKind == .moonshine)
        #expect(local.unloadAfterSeconds == 300)
        #expect(local.modelDirectory == "/usr/share/pocketsphinx/model/en-us")
    }

    @Test func readsEveryLocalKey() throws {
        let local = try Configuration(
            toml: """
                [local]
                engine = "moonshine"
                model_dir = "/opt/pocketsphinx"
                sherpa_model_dir = "/opt/whisper-small"
                sherpa_model_kind = "whisper"
                unload_after_s = 60
                """
        ).local
        #expect(local.engine == .moonshine)
        #expect(local.modelDirectory == "/opt/pocketsphinx")
        #expect(local.sherpaModelDirectory == "/opt/whisper-small")
        #expect(local.sherpaModelKind == .whisper)
        #expect(local.unloadAfterSeconds == 60)
        #expect(try Configuration(toml: "[local]\nengine = \"pocketsphinx\"").local.engine == .pocketsphinx)
    }

    @Test(arguments: [
        (
            "[local]\nengine = \"vosk\"",
            "local.engine = \"vosk\" is not allowed; use one of \"moonshine\", \"pocketsphinx\""
        ),
        ("[local]\nsherpa_model_kind = \"kaldi\"", "local.sherpa_model_kind = \"kaldi\" is not allowed"),
        ("[local]\nunload_after_s = -1", "local.unload_after_s = -1 is out of range"),
        ("[local]\nunload_after_s = \"5m\"", "local.unload_after_s"),
        ("[local]\nsherpa_model = \"x\"", "local.sherpa_model is not a known setting"),
    ])
    func refusesBadValuesNamingTheKey(_ toml: String, _ message: String) {
        #expect {
            _ = try Configuration(toml: toml)
        } throws: { error in
            (error as? ConfigurationError)?.message.contains(message) == true
        }
    }
}
