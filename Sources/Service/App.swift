import CSttdSystem
import Capture
import DBus
import Foundation
import History
import ListenServer
import Logging
import NIOCore
import NIOPosix
import Recognition
import ServiceLifecycle
import Speech
import SpeechAPI
import SpeechBus
import Synchronization
import UnixSignals

/// Why sttd could not start: a message for the person and the exit code.
struct StartupError: Error, Sendable, CustomStringConvertible {
    var exitCode: Int32
    var message: String
    var description: String { message }
}

/// A built sttd: the speech core, its bus adapter and the services that run them. `sttd`'s
/// `main` and the in-process tests build it the same way.
final class SttdApplication: Sendable {
    let core: SpeechCore
    let adapter: SpeechBusAdapter
    let consent: Consent
    let connection: DBusConnection
    private let group: ServiceGroup

    fileprivate init(
        core: SpeechCore, adapter: SpeechBusAdapter, consent: Consent, connection: DBusConnection, group: ServiceGroup
    ) {
        self.core = core
        self.adapter = adapter
        self.consent = consent
        self.connection = connection
        self.group = group
    }

    /// Serves until a shutdown signal, ``shutDown()`` or the loss of the bus.
    func run() async throws { try await group.run() }

    /// Shuts down as SIGTERM does: a listening session stops (its finals stored), then the bus closes.
    func shutDown() async { await group.triggerGracefulShutdown() }
}

/// What `sttd` does, callable from its thin `@main` and from tests.
public enum SttdApp {
    /// Exit codes (sysexits.h where one fits).
    public enum ExitCode {
        public static let success: Int32 = 0
        public static let failure: Int32 = 1
        public static let configuration: Int32 = 78  // EX_CONFIG
    }

    /// Loads the configuration, owns the bus name and serves until SIGTERM/SIGINT or the bus goes away.
    public static func run(configPath: String?, environment: [String: String] = ProcessInfo.processInfo.environment)
        async -> Int32
    {
        limitAllocatorRetention()
        var logger = Logger(label: "sttd")
        logger.logLevel = environment["STTD_LOG_LEVEL"].flatMap(Logger.Level.init(rawValue:)) ?? .info

        let location = Configuration.path(explicit: configPath, environment: environment)
        let configuration: Configuration
        do {
            configuration = try Configuration.load(path: location.path, isExplicit: location.isExplicit)
        } catch {
            printError("sttd: invalid configuration: \(error.message)")
            return ExitCode.configuration
        }
        let application: SttdApplication
        do throws(StartupError) {
            application = try await build(
                configuration: configuration, environment: environment, shutdownSignals: [.sigterm, .sigint],
                logger: logger)
        } catch {
            printError("sttd: \(error.message)")
            return error.exitCode
        }
        logger.info(
            "serving",
            metadata: ["name": "\(SpeechAPI.busName)", "version": "\(SpeechAPI.version)", "config": "\(location.path)"])
        do {
            try await application.run()
            return ExitCode.success
        } catch {
            logger.error("stopped", metadata: ["reason": "\(error)"])
            return ExitCode.failure
        }
    }

    /// Builds sttd: the engines, the core, the bus adapter; exports the object, then owns the name.
    ///
    /// - Parameters:
    ///   - bus: the bus to serve on.
    ///   - microphone: where audio comes from; PulseAudio by default.
    ///   - recognizers: the engines; by default pocketsphinx and the Deepgram-compatible client
    ///     as `configuration` says.
    ///   - shutdownSignals: the signals that shut the service down gracefully (none in tests).
    static func build(
        configuration: Configuration, environment: [String: String], bus: DBusConnection.Bus = .session,
        microphone: (any Microphone)? = nil, recognizers: Recognizers? = nil,
        shutdownSignals: [UnixSignal] = [], logger: Logger
    ) async throws(StartupError) -> SttdApplication {
        let connection: DBusConnection
        do {
            connection = try await DBusConnection.connect(to: bus)
        } catch {
            throw StartupError(exitCode: ExitCode.failure, message: error.message)
        }
        WritableFolders.check(configuration, environment: environment, logger: logger)
        let recognizers = recognizers ?? defaultRecognizers(configuration, environment: environment, logger: logger)
        let core = SpeechCore(
            configuration: configuration,
            microphone: microphone ?? PulseAudioMicrophone(logger: logger),
            recognizers: recognizers,
            history: openHistory(configuration, environment: environment, logger: logger),
            output: DesktopDictationOutput(configuration: configuration, environment: environment, logger: logger),
            logger: logger)
        let consent = Consent(
            connection: connection, policy: configuration.consent,
            store: await Consent.chooseStore(connection: connection, environment: environment, logger: logger),
            timeout: .milliseconds(Int(configuration.consentTimeoutMilliseconds)), logger: logger)
        let adapter: SpeechBusAdapter
        do {
            adapter = try SpeechBusAdapter(core: core, consent: consent, logger: logger)
        } catch {
            connection.close()
            throw StartupError(
                exitCode: ExitCode.failure, message: "internal error declaring the D-Bus object: \(error.message)")
        }
        await adapter.attach()
        let waylandInputMethod = WaylandInputMethodService.make(
            configuration.wayland, environment: environment, core: core, adapter: adapter, logger: logger)
        await waylandInputMethod?.attach()
        // Bound before the name is taken, so `ServerAddress` is right when clients first look.
        let listenServer: ListenServer?
        do throws(StartupError) {
            listenServer = try await startListenServer(
                configuration.server, local: recognizers.local, localSettings: configuration.local, logger: logger)
        } catch {
            connection.close()
            throw error
        }
        if let listenServer { adapter.object.set(.serverAddress, listenServer.address) }
        // Export first, then take the name, so the first activated call finds the object.
        connection.export(adapter.object)
        do {
            let reply = try await connection.requestName(SpeechAPI.busName)
            guard reply == 1 else {  // DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER
                connection.close()
                throw StartupError(
                    exitCode: ExitCode.failure,
                    message:
                        "\(SpeechAPI.busName) is already owned on this bus: another sttd is running (see `systemctl --user status sttd`)."
                )
            }
        } catch let error as StartupError {
            throw error
        } catch {
            connection.close()
            throw StartupError(exitCode: ExitCode.failure, message: "cannot own \(SpeechAPI.busName): \(error)")
        }

        let systemd = SystemdService(
            notifier: SystemdNotifier(environment: environment),
            watchdogInterval: SystemdNotifier.watchdogInterval(environment: environment), connection: connection,
            core: core, logger: logger)
        // Shut down in reverse order: systemd hears STOPPING=1, the session stops (its last final
        // stored), then the bus closes.
        var services: [ServiceGroupConfiguration.ServiceConfiguration] = [
            .init(
                service: BusService(connection: connection),
                successTerminationBehavior: .gracefullyShutdownGroup,
                failureTerminationBehavior: .gracefullyShutdownGroup),
            // Shut down after everything but the bus: the core and consent have answered, and the
            // replies still go out.
            .init(service: MethodCallsService(adapter: adapter)),
        ]
        if configuration.notify {
            // Before the core: it is shut down after it, so the last "stopped" still goes out.
            let notifier = DesktopNotifier(connection: connection, wakePhrase: core.wakePhrase, logger: logger)
            services.append(
                .init(
                    service: NotifierService(notifier: notifier, events: core.events(where: DesktopNotifier.wants)),
                    successTerminationBehavior: .ignore))
        }
        // Before the core, so it shuts down after it; a call waiting for a prompt is answered
        // by the closing bus.
        services.append(.init(service: ConsentService(consent: consent)))
        if let waylandInputMethod {
            // Before the core, so it shuts down after it: the last finals still reach the field.
            services.append(.init(service: waylandInputMethod, successTerminationBehavior: .ignore))
        }
        services.append(.init(service: CoreService(core: core)))
        // After the core, so it shuts down before it: streams flush while the engine still runs.
        if let listenServer { services.append(.init(service: listenServer)) }
        services.append(.init(service: systemd))
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: services,
                gracefulShutdownSignals: shutdownSignals, logger: logger))
        return SttdApplication(core: core, adapter: adapter, consent: consent, connection: connection, group: group)
    }

    /// Binds the local `/v1/listen` server over the local engine when `[server] listen` is set;
    /// nil (nothing runs) when it is empty.
    ///
    /// pocketsphinx decodes one session at a time and refuses another meanwhile, so with it the
    /// server takes one stream at a time (`max_streams` is lowered to 1, logged): a second client
    /// gets 429, a client during dictation 503, and a D-Bus Start during a stream `Busy`.
    static func startListenServer(
        _ server: Configuration.Server, local: any Recognizer, localSettings: Configuration.Local, logger: Logger
    ) async throws(StartupError) -> ListenServer? {
        guard server.isEnabled, let (host, port) = server.address else { return nil }
        var maxStreams = server.maxStreams
        let model: ServerMessages.ModelInfo
        if local is PocketSphinxRecognizer {
            model = .init(name: "pocketsphinx-en-us")
            if maxStreams > 1 {
                logger.notice(
                    "listen server: pocketsphinx serves one stream at a time; max_streams lowered to 1",
                    metadata: ["max_streams": "\(maxStreams)"])
                maxStreams = 1
            }
        } else if localSettings.sherpaModelDirectory.isEmpty {
            model = .init(name: "moonshine-base-en")
        } else {
            // The model `Metadata` names: its kind and folder, e.g. "whisper-tiny.en".
            let folder = URL(fileURLWithPath: localSettings.sherpaModelDirectory).lastPathComponent
            model = .init(name: "\(localSettings.sherpaModelKind.rawValue)-\(folder)")
        }
        var settings = ListenServerSettings(
            host: host, port: port, maxStreams: maxStreams, allowedOrigins: Set(server.allowedOrigins), model: model)
        do {
            // Only the file: the client's other key sources (credential, environment) are not the server's.
            if !server.apiKeyFile.isEmpty {
                settings.key = try APIKey.load(keyFile: server.apiKeyFile, environment: [:])
            }
            if !server.tlsCert.isEmpty { try settings.useTLS(certificateFile: server.tlsCert, keyFile: server.tlsKey) }
        } catch let error as RecognitionError {
            throw StartupError(exitCode: ExitCode.configuration, message: "invalid [server] settings: \(error.message)")
        } catch {
            throw StartupError(exitCode: ExitCode.configuration, message: "invalid [server] TLS files: \(error)")
        }
        do {
            return try await ListenServer.bind(settings: settings, recognizer: local, logger: logger)
        } catch {
            throw StartupError(
                exitCode: ExitCode.failure, message: "cannot listen on \(server.listen) ([server] listen): \(error)")
        }
    }

    /// The offline engine for `local` (sherpa-onnx with Moonshine when installed or chosen, else
    /// pocketsphinx), the streaming client for `deepgram`, as the configuration says; with
    /// `fallback = "local"` (the default when an offline engine is installed) the offline engine
    /// stands behind the streaming client.
    static func defaultRecognizers(
        _ configuration: Configuration, environment: [String: String], logger: Logger
    ) -> Recognizers {
        let install = SherpaInstall.locate()
        let local = localRecognizer(configuration.local, install: install, logger: logger)
        let deepgram = configuration.deepgram
        let fallback =
            deepgram.fallback ?? (offlineEngineInstalled(configuration.local, install: install) ? .local : .none)
        let fallbackAfter = Duration.milliseconds(Int(deepgram.fallbackAfterMilliseconds))
        let streaming = DeepgramRecognizer(
            settings: DeepgramSettings(
                url: deepgram.url, useSubprotocol: deepgram.auth == .subprotocol, apiKeyFile: deepgram.apiKeyFile,
                model: deepgram.model, caFile: deepgram.caFile, parameters: deepgram.params,
                backoff: Backoff(
                    maxAttempts: deepgram.reconnectAttempts,
                    maxTotal: .milliseconds(Int(deepgram.reconnectTimeoutMilliseconds))),
                // With a fallback, the server gets as long to answer at the start as a lost stream gets to come back.
                connectTimeout: fallback == .local ? min(.seconds(10), fallbackAfter) : .seconds(10)),
            environment: environment, logger: logger)
        guard fallback == .local else { return Recognizers(local: local, deepgram: streaming) }
        return Recognizers(
            local: local,
            deepgram: FallbackRecognizer(primary: streaming, fallback: local, after: fallbackAfter, logger: logger))
    }

    /// Whether the offline engine `[local]` chooses has what it needs on disk (the default of
    /// `[deepgram] fallback` depends on it).
    static func offlineEngineInstalled(_ local: Configuration.Local, install: SherpaInstall) -> Bool {
        let (engine, sherpaModel) = chosenEngine(local, install: install)
        switch engine {
        case .pocketsphinx: return FileManager.default.fileExists(atPath: local.modelDirectory)
        case .moonshine: return install.engineDirectory != nil && sherpaModel != nil
        }
    }

    /// The engine `[local]` asks for (without `engine`: sherpa-onnx when its library and model are
    /// installed), with the sherpa-onnx model folder.
    static func chosenEngine(_ local: Configuration.Local, install: SherpaInstall)
        -> (Configuration.Local.Engine, sherpaModel: String?)
    {
        let modelDirectory =
            local.sherpaModelDirectory.isEmpty ? install.defaultModelDirectory : local.sherpaModelDirectory
        return (
            local.engine ?? (install.engineDirectory != nil && modelDirectory != nil ? .moonshine : .pocketsphinx),
            modelDirectory
        )
    }

    /// The offline engine `[local]` asks for. Without `engine`, sherpa-onnx when its library and
    /// model are installed, else pocketsphinx; an explicit `moonshine` that is not installed
    /// still gets the sherpa-onnx recognizer, whose sessions then fail with how to install it.
    static func localRecognizer(_ local: Configuration.Local, install: SherpaInstall, logger: Logger)
        -> any Recognizer
    {
        let (engine, modelDirectory) = chosenEngine(local, install: install)
        switch engine {
        case .pocketsphinx:
            return PocketSphinxRecognizer(
                modelDirectory: local.modelDirectory, logger: logger, validator: ModelCheck.inChildProcess)
        case .moonshine:
            var settings = SherpaSettings(
                libraryPath: install.libraryPath,
                sessionConfigPath: install.engineDirectory.map { "\($0)/session.conf" },
                model: local.sherpaModelKind, modelDirectory: modelDirectory,
                unloadAfter: .seconds(local.unloadAfterSeconds))
            settings.workerExecutable = sttdExecutable
            return SherpaOnnxRecognizer(settings: settings, logger: logger)
        }
    }

    /// This process's executable when it is sttd, which runs the offline model in a child
    /// (`sttd --offline-engine-worker`); nil in a test runner, which keeps it in-process.
    static let sttdExecutable: String? = {
        guard let path = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe"),
            URL(fileURLWithPath: path).lastPathComponent == "sttd"
        else { return nil }
        // The running image itself, even if an upgrade replaced the file since.
        return "/proc/self/exe"
    }()

    /// The history store, or nil when `history = false` or it cannot be opened (logged: dictation
    /// still works, finals still go out on the bus).
    static func openHistory(_ configuration: Configuration, environment: [String: String], logger: Logger)
        -> HistoryStore?
    {
        guard configuration.history else { return nil }
        do {
            let store = try HistoryStore(path: HistoryStore.defaultPath(environment: environment))
            try store.closeUnfinishedSessions()
            if configuration.historyDays > 0 {
                let pruned = try store.prune(
                    startedBefore: Configuration.historyCutoff(days: configuration.historyDays))
                if pruned > 0 { logger.info("pruned history", metadata: ["sessions": "\(pruned)"]) }
            }
            return store
        } catch {
            logger.error("history is off for this run", metadata: ["reason": "\(error.description)"])
            return nil
        }
    }

    /// A service that runs for weeks should give freed memory back. glibc's defaults keep it: an
    /// arena per busy thread, and a mmap threshold that rises after each large free, after which
    /// large buffers (a 1 MB string in a D-Bus call) stay in the heap (docs/api.md → "Memory" has
    /// the measurement).
    static func limitAllocatorRetention() {
        sttd_limit_allocator_retention()
    }

    static func printError(_ message: String) {
        FileHandle.standardError.write(Data((message + "\n").utf8))
    }
}

extension SttdApp {
    /// Runs the service with Swift concurrency on NIO's event loops, blocking the calling main
    /// thread until it ends. Call before any other concurrency is used.
    ///
    /// On Linux the default executor is libdispatch's worker pool, which arms a once-a-second
    /// monitor timer when first used: an idle sttd would wake every second forever. On the event
    /// loops an idle sttd sleeps in epoll, and a task that reads or writes a socket usually runs on
    /// that socket's thread already. (Timers go through ``eventLoopSleep(for:)`` for the same reason.)
    public static func runOnEventLoops(configPath: String?) -> Int32 {
        // Before the loops' threads exist: a thread that allocated before the limit is set keeps
        // an arena of its own.
        limitAllocatorRetention()
        return blockOnEventLoops { await run(configPath: configPath) }
    }

    /// Runs `program` as the process's one root task on NIO's event loops (see above), the main
    /// thread waiting for its exit status: what `sttctl` and the long-running `sttd-ibus` run in
    /// too. Call before any other concurrency is used.
    public static func blockOnEventLoops(_ program: @escaping @Sendable () async -> Int32) -> Int32 {
        NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        let loop = MultiThreadedEventLoopGroup.singleton.any()
        return (try? loop.makeFutureWithTask(program).wait()) ?? ExitCode.failure
    }
}
