/// The checks of `sttctl doctor`, worked out from ``DoctorFacts`` alone.
extension DoctorFacts {
    /// What to do when another input method holds the seat sttd would serve.
    static func seatTaken(_ seat: String) -> String {
        "another input method (e.g. fcitx5) holds \(seat): quit it, or set `[wayland] input_method = false` to keep the typing tools"
    }

    static let importDisplay =
        "run `dbus-update-activation-environment --systemd WAYLAND_DISPLAY DISPLAY XDG_CURRENT_DESKTOP` in your session (e.g. at the end of ~/.xinitrc), then `systemctl --user restart sttd`"

    var report: DoctorReport {
        var checks = [serviceCheck]
        if case .reachable(let state) = service {
            checks += [engineCheck(state), microphoneCheck(state)]
        }
        checks += [sessionCheck, componentCheck, inputSourceCheck]
        if case .reachable(let state) = service { checks.append(inputMethodCheck(state)) }
        checks += [moduleCheck, typingCheck, serviceEnvironmentCheck]
        return DoctorReport(checks)
    }

    var serviceCheck: DoctorCheck {
        switch service {
        case .reachable(let state):
            return DoctorCheck("service", .core, .ok, "sttd \(state.version) answers on the session bus")
        case .unreachable(let reason):
            return DoctorCheck(
                "service", .core, .problem, reason,
                fix:
                    "`systemctl --user start sttd` (`journalctl --user -u sttd` says why it stopped); `make install` or the Debian package adds bus activation"
            )
        }
    }

    func engineCheck(_ state: ServiceState) -> DoctorCheck {
        let engine = "the \(state.backend) engine"
        let remote = state.backend == "deepgram"
        switch state.authorization {
        case "authorized":
            return DoctorCheck("engine", .core, .ok, "\(engine) and its model are ready")
        case "restricted":
            let fix =
                remote
                ? "set the server's `url` and an API key (`STTD_API_KEY` or `[deepgram] api_key_file`)"
                : "sherpa-onnx: run `scripts/setup` in the checkout, then `make install` (or set `[local] engine = \"pocketsphinx\"`); pocketsphinx: `sudo apt install pocketsphinx-en-us`, or fix `[local] model_dir`"
            return DoctorCheck(
                "engine", .core, .problem, "\(engine) cannot start (AuthorizationStatus restricted)", fix: fix)
        case "denied":
            return DoctorCheck(
                "engine", .core, .problem, "the streaming server refused the API key (AuthorizationStatus denied)",
                fix: "check the key in `STTD_API_KEY` or `[deepgram] api_key_file`, or use `backend = \"local\"`")
        default:
            return DoctorCheck(
                "engine", .core, .warning, "\(engine) was not checked (AuthorizationStatus \(state.authorization))",
                fix: "`sttctl authorize`")
        }
    }

    func microphoneCheck(_ state: ServiceState) -> DoctorCheck {
        switch state.microphone {
        case "authorized":
            return DoctorCheck("microphone", .core, .ok, "the microphone opens")
        case "unavailable":
            return DoctorCheck(
                "microphone", .core, .problem, "no sound server, or no such source (MicrophoneStatus unavailable)",
                fix:
                    "is the sound server up? `pactl info`; is the source there? `sttctl sources`; set `source = \"\"` for the default"
            )
        case "denied":
            return DoctorCheck(
                "microphone", .core, .problem, "the sound server refused access (MicrophoneStatus denied)",
                fix: "allow microphone access in your sandbox or privacy settings")
        default:
            return DoctorCheck(
                "microphone", .core, .warning, "the microphone was not opened (MicrophoneStatus \(state.microphone))",
                fix: "`sttctl authorize`")
        }
    }

    var desktopName: String {
        let kind = isWayland ? "Wayland" : "X11"
        switch desktop {
        case .gnome: return "GNOME on \(kind)"
        case .kde: return "KDE Plasma on \(kind)"
        case .wlroots:
            return "\(session["XDG_CURRENT_DESKTOP"].flatMap { $0.isEmpty ? nil : $0 } ?? "wlroots") on Wayland"
        case .otherWayland: return "\(session["XDG_CURRENT_DESKTOP"] ?? "") on Wayland"
        case .x11:
            return "X11 (\(session["XDG_CURRENT_DESKTOP"].flatMap { $0.isEmpty ? nil : $0 } ?? "no desktop named"))"
        case .none: return "no graphical session"
        }
    }

    var sessionCheck: DoctorCheck {
        guard desktop != .none else {
            return DoctorCheck(
                "session", .core, .warning,
                "this shell has neither WAYLAND_DISPLAY nor DISPLAY, so the desktop checks guess",
                fix: "run `sttctl doctor` in a terminal of your desktop session")
        }
        return DoctorCheck("session", .core, .ok, desktopName)
    }

    var componentCheck: DoctorCheck {
        let check = ibusComponentCheck
        // Where sttd is the Wayland input method itself, IBus could serve XWayland apps at most.
        guard check.status == .problem, case .held = waylandInputMethod else { return check }
        return DoctorCheck(
            check.id, check.route, .warning,
            check.finding + " (only XWayland apps would use it: sttd is the input method)",
            fix: check.fix)
    }

    var ibusComponentCheck: DoctorCheck {
        switch component {
        case .listed:
            return DoctorCheck(
                "ibus-component", .inputMethod, .ok, "ibus-daemon lists the sttd engine (component io.github.sttd.IBus)"
            )
        case .file(let file):
            return DoctorCheck("ibus-component", .inputMethod, .ok, "\(file) registers io.github.sttd.IBus")
        case .notLoaded(let file):
            return DoctorCheck(
                "ibus-component", .inputMethod, .problem,
                "\(file) registers io.github.sttd.IBus, but ibus-daemon does not list the sttd engine",
                fix: "log out and in again (ibus-daemon reads IBUS_COMPONENT_PATH when the session starts)")
        case .missing(let searched):
            return DoctorCheck(
                "ibus-component", .inputMethod, .problem,
                "no IBus component io.github.sttd.IBus in \(searched.joined(separator: ", "))",
                fix:
                    "`make install`, then log out and in again (it writes ~/.local/share/ibus/component/sttd.xml and ~/.config/environment.d/60-sttd-ibus.conf), or install the Debian package"
            )
        }
    }

    var inputSourceCheck: DoctorCheck {
        switch desktop {
        case .gnome:
            guard let sources = gnomeInputSources else {
                return DoctorCheck(
                    "input-source", .inputMethod, .problem, "GNOME's input sources could not be read (gsettings)",
                    fix: "install gsettings (`sudo apt install libglib2.0-bin`) and add Dictation as below")
            }
            if sources.contains("('ibus', 'sttd')") {
                return DoctorCheck("input-source", .inputMethod, .ok, "Dictation is among GNOME's input sources")
            }
            return DoctorCheck(
                "input-source", .inputMethod, .problem,
                "Dictation is not among GNOME's input sources (org.gnome.desktop.input-sources sources: \(sources))",
                fix: "Settings → Keyboard → Input Sources → + → English → Dictation")
        case .kde:
            if let method = kwinInputMethod, method.hasSuffix("io.github.sttd.IBusWayland.desktop") {
                return DoctorCheck(
                    "input-source", .inputMethod, .ok, "KWin's virtual keyboard is sttd's IBus Wayland (\(method))")
            }
            if let method = kwinInputMethod, method.lowercased().contains("ibus") {
                // ibus-wayland (every release so far) drops the field's purpose; sttd's entry reads it.
                return DoctorCheck(
                    "input-source", .inputMethod, .warning,
                    "KWin's virtual keyboard is IBus's own IBus Wayland (\(method)): password fields are not told apart",
                    fix: "System Settings → Keyboard → Virtual Keyboard → the IBus Wayland entry sttd installs "
                        + "(io.github.sttd.IBusWayland.desktop)")
            }
            return DoctorCheck(
                "input-source", .inputMethod, .problem,
                "KWin's virtual keyboard is \(kwinInputMethod ?? "not set") (kwinrc [Wayland] InputMethod), not IBus Wayland",
                fix:
                    "System Settings → Keyboard → Virtual Keyboard → IBus Wayland; then add Dictation in `ibus-setup`")
        case .wlroots, .otherWayland:
            switch waylandInputMethod {
            case .held(let seat):
                return DoctorCheck(
                    "input-source", .inputMethod, .ok,
                    "sttd is the input method on \(seat) (live text through zwp_input_method_v2)")
            case .unavailable(let seat):
                return DoctorCheck(
                    "input-source", .inputMethod, .problem,
                    "sttd is not the input method on \(seat): another one holds it (zwp_input_method_v2 unavailable)",
                    fix: Self.seatTaken(seat))
            case .off, .unsupported, .disconnected:
                return DoctorCheck(
                    "input-source", .inputMethod, .problem, "\(desktopName) does not hand text fields to IBus",
                    fix: "type with wtype: `sudo apt install wtype wl-clipboard`")
            }
        case .x11, .none:
            switch currentEngine {
            case "sttd":
                return DoctorCheck("input-source", .inputMethod, .ok, "IBus's engine is sttd (Dictation)")
            case nil:
                return DoctorCheck(
                    "input-source", .inputMethod, .problem, "ibus-daemon does not answer (`ibus engine`)",
                    fix:
                        "run `ibus-daemon -drx` at login with GTK_IM_MODULE=ibus QT_IM_MODULE=ibus XMODIFIERS=@im=ibus, then `ibus engine sttd`"
                )
            case let engine?:
                return DoctorCheck(
                    "input-source", .inputMethod, .problem, "IBus's engine is \(engine), not sttd (Dictation)",
                    fix: "`ibus engine sttd`, or add Dictation in `ibus-setup` and switch to it")
            }
        }
    }

    func inputMethodCheck(_ state: ServiceState) -> DoctorCheck {
        switch state.inputMethod {
        case "active", "focused":
            return DoctorCheck(
                "input-method", .inputMethod, .ok,
                "Dictation is the input method (sttd's InputMethod: \(state.inputMethod))")
        case "secret":
            return DoctorCheck(
                "input-method", .inputMethod, .warning,
                "Dictation is the input method, and a password field has the focus: nothing is typed into it")
        default:
            let fix =
                switch (desktop, waylandInputMethod) {
                case (.wlroots, .unavailable(let seat)), (.otherWayland, .unavailable(let seat)): Self.seatTaken(seat)
                case (.gnome, _): "switch to Dictation with Super+Space (the top bar shows 🎤)"
                case (.kde, _): "switch to Dictation with IBus's shortcut (Super+Space)"
                default: "`ibus engine sttd`"
                }
            return DoctorCheck(
                "input-method", .inputMethod, .problem,
                "Dictation is not the input method now (sttd's InputMethod property is empty)", fix: fix)
        }
    }

    var moduleCheck: DoctorCheck {
        let qt = Self.value("QT_IM_MODULE", in: session)
        let gtk = Self.value("GTK_IM_MODULE", in: session)
        let shown = "QT_IM_MODULE=\(qt ?? "(unset)"), GTK_IM_MODULE=\(gtk ?? "(unset)")"
        var findings: [String] = []
        var fixes: [String] = []
        if desktop == .gnome, isWayland, qt != "ibus" {
            findings.append(
                "Qt 5/6 apps get no dictated text: mutter offers only text-input-v3 and Qt speaks v2, so Qt needs QT_IM_MODULE=ibus"
            )
            fixes.append("put `QT_IM_MODULE=ibus` in ~/.config/environment.d/60-qt-ibus.conf and log in again")
        }
        // Where sttd is the Wayland input method, GTK must speak text-input to the compositor.
        let sttdHoldsTheSeat = if case .held = waylandInputMethod { true } else { false }
        if isWayland, let gtk, gtk != "wayland", sttdHoldsTheSeat || gtk != "ibus" {
            findings.append("GTK apps use the \(gtk) input method module, not \(sttdHoldsTheSeat ? "sttd's" : "IBus")")
            fixes.append("remove GTK_IM_MODULE from your environment (GTK then uses the Wayland text-input protocol)")
        }
        if !isWayland, desktop != .none {
            if desktop != .gnome, gtk != "ibus" {
                findings.append("GTK apps on X11 use IBus only with GTK_IM_MODULE=ibus")
                fixes.append(
                    "set GTK_IM_MODULE=ibus QT_IM_MODULE=ibus XMODIFIERS=@im=ibus in your session's environment")
            } else if qt != "ibus" {
                findings.append("Qt apps on X11 use IBus only with QT_IM_MODULE=ibus")
                fixes.append("set QT_IM_MODULE=ibus in your session's environment")
            }
            if !gtk4IBusModule {
                findings.append("GTK 4 apps on X11 need GTK 4's IBus module")
                fixes.append("`sudo apt install ibus-gtk4`")
            }
        }
        guard desktop != .none else {
            return DoctorCheck("im-modules", .inputMethod, .ok, "\(shown): no desktop session to judge them by")
        }
        guard !findings.isEmpty else {
            let method = sttdHoldsTheSeat ? "sttd" : "IBus"
            return DoctorCheck("im-modules", .inputMethod, .ok, "\(shown): apps hand their text fields to \(method)")
        }
        // Other apps still get text: a warning, not a problem.
        return DoctorCheck(
            "im-modules", .inputMethod, .warning, "\(shown): " + findings.joined(separator: "; "),
            fix: fixes.joined(separator: "; "))
    }

    var typingCheck: DoctorCheck {
        switch typing {
        case .works(let tool):
            return DoctorCheck("typing-tool", .typing, .ok, "\(tool) answered without typing anything")
        case .fails(let message):
            if !hasDisplay(serviceEnvironment ?? session) {
                return DoctorCheck(
                    "typing-tool", .typing, .problem,
                    "sttd has no display to type into (neither WAYLAND_DISPLAY nor DISPLAY)", fix: Self.importDisplay)
            }
            // The output module's messages end with their fix after the last ": ".
            if let split = message.range(of: ": ", options: .backwards) {
                return DoctorCheck(
                    "typing-tool", .typing, .problem, String(message[..<split.lowerBound]),
                    fix: String(message[split.upperBound...]))
            }
            return DoctorCheck(
                "typing-tool", .typing, .problem, message, fix: "set `output_tool` in config.toml to a tool that works")
        }
    }

    func hasDisplay(_ environment: [String: String]) -> Bool {
        Self.value("WAYLAND_DISPLAY", in: environment) != nil || Self.value("DISPLAY", in: environment) != nil
    }

    var serviceEnvironmentCheck: DoctorCheck {
        guard let environment = serviceEnvironment else {
            return DoctorCheck(
                "service-environment", .typing, .warning,
                "sttd's environment could not be read (\(serviceEnvironmentSource))",
                fix: "check DISPLAY and WAYLAND_DISPLAY in `systemctl --user show-environment`")
        }
        let names = ["WAYLAND_DISPLAY", "DISPLAY"]
        guard hasDisplay(environment) else {
            return DoctorCheck(
                "service-environment", .typing, .problem,
                "sttd sees neither WAYLAND_DISPLAY nor DISPLAY (\(serviceEnvironmentSource)), so it cannot type or copy",
                fix: Self.importDisplay)
        }
        let seen = names.compactMap { name in Self.value(name, in: environment).map { "\(name)=\($0)" } }
        let differing = names.filter { name in
            Self.value(name, in: session).map { $0 != Self.value(name, in: environment) } ?? false
        }
        if !differing.isEmpty {
            let ours = differing.map { "\($0)=\(Self.value($0, in: session) ?? "")" }
            return DoctorCheck(
                "service-environment", .typing, .warning,
                "sttd sees \(seen.joined(separator: ", ")) but this session has \(ours.joined(separator: ", ")) (\(serviceEnvironmentSource))",
                fix: Self.importDisplay)
        }
        return DoctorCheck(
            "service-environment", .typing, .ok,
            "sttd sees \(seen.joined(separator: ", ")) (\(serviceEnvironmentSource))")
    }
}
