// swift-tools-version: 6.2
import PackageDescription

let strictness: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny")]

let package = Package(
    name: "sttd",
    platforms: [.macOS(.v15)],
    // One binary: sttctl and sttd-ibus are links to sttd, which runs the command it was named by.
    products: [.executable(name: "sttd", targets: ["sttd"])],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
    ],
    targets: [
        // C libraries from Debian's -dev packages.
        .systemLibrary(
            name: "CDBus", pkgConfig: "dbus-1", providers: [.apt(["libdbus-1-dev"])]),
        .systemLibrary(
            name: "CPulse", pkgConfig: "libpulse", providers: [.apt(["libpulse-dev"])]),
        .systemLibrary(
            name: "CPocketSphinx", pkgConfig: "pocketsphinx",
            providers: [.apt(["libpocketsphinx-dev", "libsphinxbase-dev"])]),
        .systemLibrary(
            name: "CXKBCommon", pkgConfig: "xkbcommon", providers: [.apt(["libxkbcommon-dev"])]),
        .systemLibrary(
            name: "CWaylandClient", pkgConfig: "wayland-client", providers: [.apt(["libwayland-dev"])]),
        // The wlroots input-method-v2 and virtual-keyboard-v1 protocols: wayland-scanner's C, vendored
        // beside its XML (scripts/wayland-protocols regenerates it), and the binds Swift cannot make.
        .target(name: "CWaylandIM", dependencies: ["CWaylandClient"], exclude: ["protocol"]),
        // GNU extensions Swift cannot see: posix_spawn closing inherited descriptors, mallopt.
        .target(name: "CSttdSystem"),
        // sherpa-onnx's C API declarations (the pinned version's header); the library itself is
        // loaded with dlopen when the engine is first used, so it is not needed to build.
        .systemLibrary(name: "CSherpaOnnx"),

        .target(
            name: "DBus",
            dependencies: ["CDBus", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictness),
        // The error shape the lower modules share: a kind to map and a sentence for a person.
        .target(name: "Problems", swiftSettings: strictness),
        // Finding and reading sttd's config file; TOML only, so sttd-ibus reads it without the core.
        .target(
            name: "ConfigFile", dependencies: [.product(name: "TOMLKit", package: "TOMLKit")],
            swiftSettings: strictness),
        // Waiting across threads and tasks: a value set once, a wake-up call, a race of tasks.
        .target(name: "Waiting", swiftSettings: strictness),
        .target(
            name: "Capture",
            dependencies: ["CPulse", "Problems", "Waiting", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictness),
        .target(
            name: "Recognition",
            dependencies: [
                "CPocketSphinx", "CSherpaOnnx", "CSttdSystem", "Capture", "Waiting",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "NIOSOCKS", package: "swift-nio-extras"),
            ],
            swiftSettings: strictness),
        // The local Deepgram-compatible /v1/listen server over any Recognizer.
        .target(
            name: "ListenServer",
            dependencies: [
                "Capture", "Recognition",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            swiftSettings: strictness),
        // Voice commands, spoken punctuation, replacements and how dictated text is joined: pure.
        .target(name: "Dictation", swiftSettings: strictness),
        .target(
            name: "History",
            dependencies: ["Dictation", .product(name: "GRDB", package: "GRDB.swift")],
            swiftSettings: strictness),
        // The speech core: sessions, transcript, events. Knows no D-Bus.
        .target(
            name: "Speech",
            dependencies: [
                "Capture", "ConfigFile", "Recognition", "History", "Dictation", "Waiting",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "TOMLKit", package: "TOMLKit"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strictness),
        // The one typed declaration of io.github.sttd.Speech1: names, methods, properties, signals.
        .target(name: "SpeechAPI", dependencies: ["DBus"], swiftSettings: strictness),
        // The bus adapter: the only code that maps the core onto io.github.sttd.Speech1.
        .target(
            name: "SpeechBus",
            dependencies: ["Speech", "SpeechAPI", "DBus", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictness),
        // What sttd runs: the builder its main and the in-process tests call.
        .target(
            name: "Service",
            dependencies: [
                "DBus", "Capture", "Recognition", "History", "Speech", "SpeechAPI", "SpeechBus", "Output",
                "CSttdSystem", "ListenServer", "WaylandInputMethod",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOCore", package: "swift-nio"),
            ],
            swiftSettings: strictness),
        // sttd as the input method of a wlroots compositor's seat (input-method-v2); knows no speech.
        .target(
            name: "WaylandInputMethod",
            dependencies: [
                "CWaylandClient", "CWaylandIM", "CXKBCommon", "CSttdSystem",
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictness),
        // Typing and clipboard output through the desktop's tools; knows no D-Bus and no speech.
        .target(
            name: "Output",
            dependencies: ["CSttdSystem", "Problems", "Dictation", .product(name: "Logging", package: "swift-log")],
            swiftSettings: strictness),
        .target(
            name: "Control",
            dependencies: [
                // Speech for config.toml's output_tool and Output for the typing probe (`sttctl doctor`).
                "DBus", "History", "SpeechAPI", "Speech", "Output",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictness),
        // The input method: an IBus engine speaking IBus's D-Bus protocol through the DBus module.
        .target(
            name: "InputMethod",
            dependencies: [
                "ConfigFile", "DBus", "SpeechAPI", "CXKBCommon", "CSttdSystem", "Waiting",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            swiftSettings: strictness),
        // sttd, sttctl and sttd-ibus in one executable: each static Swift runtime cost 58-74 MB.
        .executableTarget(
            name: "sttd",
            dependencies: [
                "Service", "Control", "InputMethod",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: strictness),

        .target(
            name: "TestSupport",
            dependencies: [
                "Capture", "DBus", "Dictation", "Recognition", "SpeechAPI", "CSttdSystem",
                // The test keyboard and input method on a wlroots seat (SwayDesktop).
                "CWaylandClient", "CWaylandIM", "CXKBCommon",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOWebSocket", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
            ],
            path: "Tests/TestSupport",
            swiftSettings: strictness),
        .executableTarget(
            name: "sttd-bench", dependencies: ["CDBus", "Capture", "DBus", "Dictation", "Recognition", "SpeechAPI", "TestSupport"],
            path: "Benchmarks/sttd-bench",
            swiftSettings: strictness),

        .testTarget(name: "WaitingTests", dependencies: ["Waiting"], swiftSettings: strictness),
        .testTarget(name: "DBusTests", dependencies: ["DBus", "TestSupport"], swiftSettings: strictness),
        .testTarget(
            name: "CaptureTests", dependencies: ["Capture", "TestSupport"], swiftSettings: strictness),
        .testTarget(
            name: "RecognitionTests", dependencies: ["Recognition", "Dictation", "TestSupport"],
            swiftSettings: strictness),
        .testTarget(name: "DictationTests", dependencies: ["Dictation"], swiftSettings: strictness),
        .testTarget(
            name: "HistoryTests", dependencies: ["History", "TestSupport"], swiftSettings: strictness),
        .testTarget(
            name: "SpeechTests",
            dependencies: ["Speech", "Capture", "Dictation", "Recognition", "History", "TestSupport", "Waiting"],
            swiftSettings: strictness),
        .testTarget(
            name: "ServiceTests",
            dependencies: [
                "Service", "Speech", "SpeechAPI", "SpeechBus", "DBus", "History", "Recognition", "TestSupport",
            ],
            swiftSettings: strictness),
        .testTarget(
            name: "ListenServerTests",
            dependencies: [
                "ListenServer", "Recognition", "Capture", "TestSupport",
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ],
            swiftSettings: strictness),
        .testTarget(
            name: "InputMethodTests", dependencies: ["InputMethod", "SpeechAPI", "TestSupport", "CSttdSystem"],
            swiftSettings: strictness),
        .testTarget(name: "ControlTests", dependencies: ["Control"], swiftSettings: strictness),
        .testTarget(
            name: "WaylandInputMethodTests",
            dependencies: ["CWaylandClient", "CWaylandIM", "WaylandInputMethod", "TestSupport"],
            swiftSettings: strictness),
        .testTarget(
            name: "OutputTests", dependencies: ["Output", "TestSupport"], swiftSettings: strictness),
        .testTarget(
            name: "IntegrationTests",
            dependencies: ["Capture", "DBus", "History", "Recognition", "Service", "SpeechAPI", "TestSupport"],
            swiftSettings: strictness),
    ],
    swiftLanguageModes: [.v6]
)
