import Dictation
import Recognition

/// One documented config key. sttd.conf(5) and docs/configuration.md are rendered from
/// ``Configuration/reference``, whose defaults come from `Configuration()` and whose ranges are
/// the constants the parser enforces, so the documentation cannot drift from the code.
struct ConfigurationKey: Sendable, Equatable {
    /// The table: "" for the top level, else e.g. "local".
    let section: String
    let name: String
    /// The default as TOML; nil: unset, which the summary explains.
    let defaultValue: String?
    /// What the parser accepts, in words.
    let allowed: String
    /// The bounds the parser enforces on a number (tests check both ends).
    let range: ClosedRange<Int>?
    let summary: String

    /// `section.name`, or `name` at the top level.
    var path: String { section.isEmpty ? name : "\(section).\(name)" }
}

extension ConfigurationKey {
    static func string(
        _ section: String, _ name: String, _ value: String, allowed: String = "a string", _ summary: String
    ) -> Self {
        Self(
            section: section, name: name, defaultValue: tomlString(value), allowed: allowed, range: nil,
            summary: summary)
    }

    static func flag(_ section: String, _ name: String, _ value: Bool?, _ summary: String) -> Self {
        Self(
            section: section, name: name, defaultValue: value.map { $0 ? "true" : "false" },
            allowed: "true or false", range: nil, summary: summary)
    }

    static func milliseconds(
        _ section: String, _ name: String, _ value: UInt32, range: ClosedRange<Int>, _ summary: String
    ) -> Self {
        Self(
            section: section, name: name, defaultValue: "\(value)",
            allowed: "\(range.lowerBound) to \(range.upperBound) (milliseconds)", range: range, summary: summary)
    }

    static func count(
        _ section: String, _ name: String, _ value: Int, range: ClosedRange<Int>, unit: String = "", _ summary: String
    ) -> Self {
        let suffix = unit.isEmpty ? "" : " (\(unit))"
        return Self(
            section: section, name: name, defaultValue: "\(value)",
            allowed: "\(range.lowerBound) to \(range.upperBound)\(suffix)", range: range, summary: summary)
    }

    static func choice<T: RawRepresentable & CaseIterable>(
        _ section: String, _ name: String, _ value: T?, _ summary: String
    ) -> Self where T.RawValue == String {
        Self(
            section: section, name: name, defaultValue: value.map { tomlString($0.rawValue) },
            allowed: T.allCases.map { tomlString($0.rawValue) }.joined(separator: ", "), range: nil,
            summary: summary)
    }

    static func other(_ section: String, _ name: String, _ value: String, allowed: String, _ summary: String) -> Self {
        Self(section: section, name: name, defaultValue: value, allowed: allowed, range: nil, summary: summary)
    }

    /// A TOML basic string.
    static func tomlString(_ text: String) -> String {
        "\"" + text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"") + "\""
    }
}

extension Configuration {
    /// The tables in the order the documentation shows them.
    static let referenceSections = [
        "", "local", "deepgram", "server", "text", "ibus", "wayland", "hands_free", "debug",
    ]

    /// Every key the parser accepts, with its default, what is allowed and what it does.
    static var reference: [ConfigurationKey] {
        let defaults = Configuration()
        let millisecondsOrZero = millisecondsRange(allowZero: true)
        let milliseconds = millisecondsRange(allowZero: false)
        return [
            .choice("", "backend", defaults.backend, "The recognizer: local (offline) or deepgram (streaming)."),
            .string("", "language", defaults.language, allowed: "a BCP-47 tag", "The language spoken."),
            .string(
                "", "source", defaults.source,
                "The PulseAudio source to record (see `sttctl sources`); empty: the default source."),
            .flag("", "interim_results", defaults.interimResults, "Send interim results as well as finals."),
            .milliseconds(
                "", "auto_stop_ms", defaults.autoStopMilliseconds, range: millisecondsOrZero,
                "Stop by itself after this much silence following speech; 0: never."),
            .milliseconds(
                "", "auto_stop_no_speech_ms", defaults.autoStopNoSpeechMilliseconds, range: milliseconds,
                "With auto-stop on: stop a session in which nobody speaks after this long."),
            .choice(
                "", "output", defaults.output,
                "Where finals go besides D-Bus: none, type (into the focused window as they arrive) or clipboard (the transcript, at stop)."
            ),
            .choice(
                "", "output_tool", defaults.outputTool,
                "The typing tool; empty: chosen from the session (wtype on wlroots Wayland, ydotool on GNOME/KDE Wayland, xdotool on X11)."
            ),
            .flag("", "paste", defaults.paste, "With output = \"clipboard\": also paste, then restore the clipboard."),
            .flag(
                "", "notify", defaults.notify, "Desktop notifications when listening starts and stops, and on failure."),
            .choice(
                "", "consent", defaults.consent,
                "Sandboxed apps: ask (once per app), allow or deny; host programs are never asked."),
            .milliseconds(
                "", "consent_timeout_ms", defaults.consentTimeoutMilliseconds,
                range: 1...Int(consentTimeoutMaximum),
                "How long a consent prompt waits; below D-Bus's 25 s call timeout."),
            .milliseconds(
                "", "stop_timeout_ms", defaults.stopTimeoutMilliseconds, range: milliseconds,
                "StopTranscribing waits at most this long for the last finals."),
            .flag("", "history", defaults.history, "Keep finals in the data folder's history.sqlite (see Files)."),
            .count(
                "", "history_days", defaults.historyDays, range: historyDaysRange, unit: "days",
                "Delete sessions older than this at startup and once a day; 0: keep all."),
            .milliseconds(
                "", "microphone_reconnect_ms", defaults.microphoneReconnectMilliseconds, range: millisecondsOrZero,
                "How long a session waits for a restarted sound server before it fails."),

            .choice(
                "local", "engine", defaults.local.engine,
                "The offline engine; unset: moonshine (sherpa-onnx) when installed, else pocketsphinx."),
            .string(
                "local", "sherpa_model_dir", defaults.local.sherpaModelDirectory,
                "A sherpa-onnx model folder; empty: the installed Moonshine base-en."),
            .choice(
                "local", "sherpa_model_kind", defaults.local.sherpaModelKind,
                "Which sherpa-onnx model family that folder holds."),
            .count(
                "local", "unload_after_s", defaults.local.unloadAfterSeconds, range: unloadAfterSecondsRange,
                unit: "seconds", "Free the sherpa-onnx model after this long without a session."),
            .string("local", "model_dir", defaults.local.modelDirectory, "pocketsphinx's model folder."),

            .string(
                "deepgram", "url", defaults.deepgram.url, allowed: "a wss:// URL (ws:// to loopback only)",
                "The streaming server."),
            .choice(
                "deepgram", "auth", defaults.deepgram.auth,
                "header: \"Authorization: Token KEY\"; subprotocol: \"Sec-WebSocket-Protocol: token, KEY\"."),
            .string(
                "deepgram", "api_key_file", defaults.deepgram.apiKeyFile,
                "The file holding the API key; it must not be readable by group or others (chmod 600)."),
            .string("deepgram", "model", defaults.deepgram.model, "The model the server uses."),
            .string(
                "deepgram", "ca_file", defaults.deepgram.caFile, "An extra trusted CA (PEM) for a self-hosted server."),
            .other(
                "deepgram", "params", "{}",
                allowed: "a table of strings, numbers and booleans; not the ones sttd sets itself",
                "Extra query parameters, e.g. { smart_format = \"true\", endpointing = 300 }."),
            .count(
                "deepgram", "reconnect_attempts", defaults.deepgram.reconnectAttempts,
                range: reconnectAttemptsRange, "Retries after a dropped stream before the session fails."),
            .milliseconds(
                "deepgram", "reconnect_timeout_ms", defaults.deepgram.reconnectTimeoutMilliseconds,
                range: millisecondsOrZero, "Total time spent retrying."),
            .choice(
                "deepgram", "fallback", defaults.deepgram.fallback,
                "Who takes over when the server is out of reach: local (the offline engine) or none (the session fails); unset: local when an offline engine is installed."
            ),
            .milliseconds(
                "deepgram", "fallback_after_ms", defaults.deepgram.fallbackAfterMilliseconds, range: milliseconds,
                "How long a lost stream (or, at the start, the server) gets before the offline engine takes over."),

            .string(
                "server", "listen", defaults.server.listen, allowed: "HOST:PORT ([::1]:PORT for IPv6), or empty",
                "Serve the offline engine over Deepgram's protocol here; empty: off. A non-loopback address needs tls_cert, tls_key and api_key_file."
            ),
            .string(
                "server", "api_key_file", defaults.server.apiKeyFile,
                "The key clients must present (chmod 600); empty: none, allowed on loopback only."),
            .string(
                "server", "tls_cert", defaults.server.tlsCert, "PEM certificate chain for wss://; goes with tls_key."),
            .string("server", "tls_key", defaults.server.tlsKey, "PEM private key for wss://; goes with tls_cert."),
            .count(
                "server", "max_streams", defaults.server.maxStreams, range: maxStreamsRange,
                "Open streams at most; one more gets HTTP 429."),
            .other(
                "server", "allowed_origins", "[]",
                allowed: "a list of web origins (scheme://host[:port]), not \"null\"",
                "The web pages that may use the server; any other page's browser handshake gets HTTP 403."),

            .flag(
                "text", "commands", defaults.text.commands,
                "Voice commands: \"new line\", \"scratch that\", \"press enter\", \"stop listening\"..."),
            .flag(
                "text", "spoken_punctuation", defaults.text.spokenPunctuation,
                "Spoken punctuation and case (\"comma\", \"period\", \"cap WORD\"...); unset: on for engines that write no punctuation (pocketsphinx), off for the others."
            ),
            .other(
                "text", "replacements", "{}", allowed: "a table of strings",
                "Spoken → written, e.g. { \"gonna\" = \"going to\", \"um\" = \"\" }."),
            .other(
                "text", "vocabulary", "[]",
                allowed: "up to \(Text.termLimit) non-empty terms of at most \(Text.termBytes) bytes",
                "Names and terms: keyterms for streaming, near-miss corrections offline."),
            .other(
                "text", "phrases", "{}",
                allowed: "[text.phrases.LANG] tables whose keys are actions: "
                    + SpokenAction.all.map(\.name).joined(separator: ", "),
                "Replace the built-in phrases of a language, or add a language."),

            .string(
                "ibus", "push_to_talk", defaults.ibus.pushToTalk, allowed: "an X keysym name, or empty",
                "Hold this key (e.g. \"F9\") to dictate while sttd is the input method; empty: off."),

            .flag(
                "wayland", "input_method", defaults.wayland.inputMethod,
                "Be the input method on compositors that offer zwp_input_method_manager_v2 (sway, Hyprland, river, Wayfire): text goes live into the focused field, never into a password field. false: leave the seat to another input method (fcitx5...) and type with the typing tools."
            ),
            .other(
                "wayland", "typing_tools_for_apps", "[]",
                allowed: "up to \(Wayland.appLimit) app ids, exactly as their windows' app_id",
                "Apps whose windows get the typing tools while no text field is active: Qt 5/6 apps and XWayland apps, whose fields the input method never sees (`swaymsg -t get_tree` shows a window's app_id; an XWayland window's is its class). Risk: such an app's password fields are typed into too."
            ),

            .string(
                "hands_free", "wake_phrase", defaults.handsFree.wakePhrase,
                "The phrase that starts a session while hands-free is on, like \"wake up computer\"; empty: hands-free cannot be turned on. It is checked when hands-free is turned on, not at startup: two words or more (or one of 10 letters or more), at most 5 words and 40 letters, not beginning with a voice command."
            ),
            .choice(
                "hands_free", "output", defaults.handsFree.output,
                "Where the finals of a session the phrase starts go besides D-Bus: none, type or clipboard."),
            .milliseconds(
                "hands_free", "auto_stop_ms", defaults.handsFree.autoStopMilliseconds, range: millisecondsOrZero,
                "A session the phrase starts stops after this much silence following speech; 0: only Stop or \"stop listening\" end it."
            ),
            .flag(
                "hands_free", "arm_at_start", defaults.handsFree.armAtStart,
                "Turn hands-free on when sttd starts; a failure is logged and notified."),

            .string(
                "debug", "audio_dir", defaults.debug.audioDirectory, allowed: "an absolute path, or empty",
                "Keep each session's captured audio here as WAV (16 kHz mono); empty: off. Under sttd.service it must be inside ~/.local/share/sttd, or allowed with a drop-in (see Files)."
            ),
        ]
    }
}
