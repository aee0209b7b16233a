import Logging
import Recognition
import Speech
import Testing

@testable import Service

@Suite("Choosing the offline engine")
struct LocalEngineChoiceTests {
    let logger = Logger(label: "test")
    let installed = SherpaInstall(engineDirectory: "/opt/sttd/engine", defaultModelDirectory: "/opt/sttd/moonshine")

    @Test func sherpaOnnxWhenInstalledElsePocketsphinx() {
        let local = Configuration().local
        #expect(SttdApp.localRecognizer(local, install: installed, logger: logger) is SherpaOnnxRecognizer)
        #expect(SttdApp.localRecognizer(local, install: SherpaInstall(), logger: logger) is PocketSphinxRecognizer)
    }

    @Test func anExplicitEngineIsKept() async {
        var local = Configuration().local
        local.engine = .pocketsphinx
        #expect(SttdApp.localRecognizer(local, install: installed, logger: logger) is PocketSphinxRecognizer)
        // Chosen but not installed: sessions fail with how to install it, rather than silently
        // falling back to another engine.
        local.engine = .moonshine
        let recognizer = SttdApp.localRecognizer(local, install: SherpaInstall(), logger: logger)
        #expect(recognizer is SherpaOnnxRecognizer)
        let (status, error) = await recognizer.authorize()
        #expect(status == .restricted)
        #expect(error?.kind == .backendUnavailable)
        #expect(error?.message.contains("scripts/setup") == true)
    }

    /// `[deepgram] fallback` defaults to the offline engine when one is installed.
    @Test func theFallbackDefaultsToAnInstalledOfflineEngine() throws {
        var local = Configuration().local
        local.engine = .pocketsphinx
        local.modelDirectory = "/nonexistent/model"
        #expect(!SttdApp.offlineEngineInstalled(local, install: installed))
        local.engine = nil
        #expect(SttdApp.offlineEngineInstalled(local, install: installed), "moonshine installed")
        #expect(!SttdApp.offlineEngineInstalled(local, install: SherpaInstall()), "pocketsphinx without its model")

        var configuration = Configuration()
        configuration.local.engine = .pocketsphinx
        configuration.deepgram.fallback = StreamingFallback.none
        #expect(
            SttdApp.defaultRecognizers(configuration, environment: [:], logger: logger).deepgram is DeepgramRecognizer)
        configuration.deepgram.fallback = .local
        #expect(
            SttdApp.defaultRecognizers(configuration, environment: [:], logger: logger).deepgram is FallbackRecognizer)
    }
}
