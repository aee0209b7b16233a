import Foundation

/// Independent D-Bus clients written in Python (dbus-python), from `Tests/Clients`.
public enum PythonClient {
    /// Debian's interpreter, which has python3-dbus (a pyenv or venv python on PATH may not).
    static let interpreter = "/usr/bin/python3"

    /// Runs a client script and decodes the JSON object it prints last.
    public static func run(_ script: String, _ arguments: [String], timeout: TimeInterval) throws -> [String: Any] {
        let python = try requireFile(interpreter, package: "python3-dbus")
        let check = try TestSupport.run(python, ["-c", "import dbus, dbus.lowlevel"], timeout: 30)
        guard check.status == 0 else {
            throw MissingPrerequisite(
                description: "dbus-python is missing: run `sudo scripts/setup` (Debian package python3-dbus)")
        }
        let path = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("Clients/\(script)").path
        let result = try TestSupport.run(python, [path] + arguments, timeout: timeout)
        guard result.status == 0, let line = result.stdout.split(separator: "\n").last,
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        else {
            throw MissingPrerequisite(
                description: "\(script) failed (status \(result.status)): \(result.stderr.suffix(2000))")
        }
        return object
    }
}

/// Resident memory of a process in bytes, from /proc.
public func residentBytes(of pid: pid_t) -> Int? {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
        let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
    else { return nil }
    return kilobytes * 1024
}
