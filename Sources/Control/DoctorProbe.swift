import DBus
import Foundation
import Output
import Speech
import SpeechAPI

/// Gathers ``DoctorFacts`` from this desktop: sttd over D-Bus, the environment, IBus, GSettings,
/// kwinrc and a typing probe. Every command has a time limit, and a probe that fails is a
/// finding, never a crash.
struct DoctorProbe {
    let session: [String: String]
    let runner: ToolRunner

    init(session: [String: String] = ProcessInfo.processInfo.environment) {
        self.session = session
        runner = ToolRunner(environment: session)
    }

    static let componentName = "io.github.sttd.IBus"
    static let engineName = "sttd"

    func facts() async -> DoctorFacts {
        var sttdPID: UInt32?
        let service: DoctorFacts.Service
        do {
            let client = try await SpeechClient.connect()
            service = .reachable(try await Self.state(of: client))
            sttdPID = try? await client.ownerPID()
        } catch let failure as ControlFailure {
            // Its first line; the fix is the check's own.
            service = .unreachable(Self.withoutPrefix(String(failure.message.prefix { $0 != "\n" })))
        } catch {
            service = .unreachable("sttd could not be asked: \(error)")
        }
        let (serviceEnvironment, source) = serviceEnvironment(pid: sttdPID)
        var facts = DoctorFacts(
            service: service, session: session, serviceEnvironment: serviceEnvironment,
            serviceEnvironmentSource: source, component: .missing(searched: []),
            currentEngine: output("ibus", ["engine"]), gtk4IBusModule: Self.hasGTK4IBusModule(),
            typing: typing(serviceEnvironment ?? session))
        facts.component = component()
        switch facts.desktop {
        case .gnome:
            facts.gnomeInputSources = output("gsettings", ["get", "org.gnome.desktop.input-sources", "sources"])
        case .kde: facts.kwinInputMethod = kwinInputMethod()
        default: break
        }
        return facts
    }

    static func state(of client: SpeechClient) async throws -> DoctorFacts.ServiceState {
        // Probes the engine and the microphone now, as `sttctl authorize` does.
        let authorization = try await client.call(Speech1.requestAuthorization)
        return DoctorFacts.ServiceState(
            version: try await client.property(.version) ?? "", backend: try await client.property(.backend) ?? "",
            authorization: authorization, microphone: try await client.property(.microphoneStatus) ?? "",
            inputMethod: try await client.property(.inputMethod) ?? "",
            lastError: try await client.property(.lastError) ?? "",
            waylandInputMethod: WaylandInputMethodStatus(rawValue: try await client.property(.waylandInputMethod) ?? "")
        )
    }

    static func withoutPrefix(_ message: String) -> String {
        message.hasPrefix("sttctl: ") ? String(message.dropFirst(8)) : message
    }

    /// What sttd itself sees (its process's environment), else what systemd gives the unit.
    func serviceEnvironment(pid: UInt32?) -> ([String: String]?, String) {
        if let pid, let data = FileManager.default.contents(atPath: "/proc/\(pid)/environ") {
            return (
                Self.environment(data.split(separator: 0).map { String(decoding: $0, as: UTF8.self) }),
                "sttd's process \(pid)"
            )
        }
        if let shown = output("systemctl", ["--user", "show-environment"]) {
            return (
                Self.environment(shown.split(separator: "\n").map(String.init)), "systemctl --user show-environment"
            )
        }
        return (nil, pid.map { "/proc/\($0)/environ is not readable" } ?? "sttd is not running")
    }

    static func environment(_ lines: [String]) -> [String: String] {
        var result: [String: String] = [:]
        for line in lines {
            guard let equals = line.firstIndex(of: "=") else { continue }
            result[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return result
    }

    /// Standard output of a command that succeeded within its time limit, trimmed; else nil.
    func output(_ name: String, _ arguments: [String], runner: ToolRunner? = nil) -> String? {
        guard let run = try? (runner ?? self.runner).run(name, arguments, timeout: .seconds(5)), run.succeeded else {
            return nil
        }
        return run.output.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func component() -> DoctorFacts.Component {
        let folders = (Self.value("IBUS_COMPONENT_PATH", session) ?? "/usr/share/ibus/component")
            .split(separator: ":").map(String.init)
        let file = folders.lazy.compactMap(Self.componentFile(in:)).first
        guard let listed = output("ibus", ["list-engine", "--name-only"]) else {
            return file.map { .file($0) } ?? .missing(searched: folders)
        }
        if listed.split(whereSeparator: \.isNewline).contains(where: { $0 == Self.engineName }) { return .listed }
        return file.map { .notLoaded(file: $0) } ?? .missing(searched: folders)
    }

    static func componentFile(in folder: String) -> String? {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? []
        return names.sorted().filter { $0.hasSuffix(".xml") }.map { "\(folder)/\($0)" }.first { path in
            let text = (try? String(contentsOfFile: path, encoding: .utf8)) ?? ""
            return text.contains("<name>\(componentName)</name>")
        }
    }

    static func value(_ name: String, _ environment: [String: String]) -> String? {
        environment[name].flatMap { $0.isEmpty ? nil : $0 }
    }

    /// kwinrc `[Wayland] InputMethod`: from kreadconfig, else read from the file.
    func kwinInputMethod() -> String? {
        for tool in ["kreadconfig6", "kreadconfig5"] where runner.find(tool) != nil {
            let value = output(tool, ["--file", "kwinrc", "--group", "Wayland", "--key", "InputMethod"])
            return value?.isEmpty == false ? value : nil
        }
        let config = Self.value("XDG_CONFIG_HOME", session) ?? "\(session["HOME"] ?? NSHomeDirectory())/.config"
        guard let text = try? String(contentsOfFile: "\(config)/kwinrc", encoding: .utf8) else { return nil }
        return Self.iniValue(text, group: "Wayland", key: "InputMethod")
    }

    static func iniValue(_ text: String, group: String, key: String) -> String? {
        var inGroup = false
        for line in text.split(whereSeparator: \.isNewline).map({ $0.trimmingCharacters(in: .whitespaces) }) {
            if line.hasPrefix("[") {
                inGroup = line == "[\(group)]"
            } else if inGroup, line.hasPrefix(key), let equals = line.firstIndex(of: "=") {
                // KConfig keys may carry flags: System Settings writes `InputMethod[$e]=`.
                let name = line[..<equals].trimmingCharacters(in: .whitespaces)
                guard name == key || (name.hasPrefix("\(key)[") && name.hasSuffix("]")) else { continue }
                return line[line.index(after: equals)...].trimmingCharacters(in: .whitespaces)
            }
        }
        return nil
    }

    static func hasGTK4IBusModule() -> Bool {
        let libraries = (try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib")) ?? []
        return libraries.contains {
            FileManager.default.fileExists(atPath: "/usr/lib/\($0)/gtk-4.0/4.0.0/immodules/libim-ibus.so")
        }
    }

    /// The tool sttd would type with, asked to do nothing, in sttd's environment and config.
    func typing(_ environment: [String: String]) -> DoctorFacts.Typing {
        let location = Configuration.path(explicit: nil, environment: environment)
        let configured = (try? Configuration.load(path: location.path, isExplicit: location.isExplicit))?.outputTool
        do throws(OutputError) {
            let tool = try TypingProbe(
                environment: environment, typingTool: configured.flatMap { TypingTool(rawValue: $0.rawValue) }
            ).probe()
            return .works(tool.rawValue)
        } catch {
            return .fails(error.message)
        }
    }
}

extension SpeechClient {
    static let processID = DBusMethodSpec<UInt32, String>(
        "GetConnectionUnixProcessID", inputs: "bus_name", output: "unix_process_id")

    /// The process id of sttd, as the bus knows it.
    func ownerPID() async throws -> UInt32? {
        try await connection.call(
            Self.processID, destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
            interface: "org.freedesktop.DBus", Self.name, timeout: .seconds(5))
    }
}
