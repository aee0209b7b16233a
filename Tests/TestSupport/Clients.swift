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
                description: "dbus-python is missing: run `sudo scripts/setup test` (Debian package python3-dbus)")
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

/// Deepgram's official Python SDK (`deepgram-sdk`, pinned in scripts/sdk-setup) running
/// `Tests/Clients/deepgram_sdk_stream.py` against a server.
public enum DeepgramSDKClient {
    static let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().path

    /// The venv's interpreter, checked to import the SDK; fails naming the setup step if not.
    public static func interpreter() throws -> String {
        let python = "\(packageRoot)/.build/bench-venv/bin/python"
        guard FileManager.default.isExecutableFile(atPath: python),
            (try? TestSupport.run(python, ["-c", "import deepgram"], timeout: 60))?.status == 0
        else {
            throw MissingPrerequisite(
                description:
                    "Deepgram's Python SDK is not installed in .build/bench-venv: run scripts/sdk-setup (make test does)"
            )
        }
        return python
    }

    /// The client script.
    public static var script: String { "\(packageRoot)/Tests/Clients/deepgram_sdk_stream.py" }

    /// Streams `wav` to `url` (ws://HOST:PORT) and returns the summary the script prints.
    public static func stream(url: String, wav: String, options: [String] = [], timeout: TimeInterval = 180) throws
        -> [String: Any]
    {
        let python = try interpreter()
        let result = try TestSupport.run(python, [script, url, wav] + options, timeout: timeout)
        guard result.status == 0, let line = result.stdout.split(separator: "\n").last,
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        else {
            throw MissingPrerequisite(
                description: "deepgram_sdk_stream.py failed (status \(result.status)): \(result.stderr.suffix(2000))")
        }
        return object
    }
}

extension DeepgramSDKClient {
    /// As ``stream(url:wav:options:timeout:)``, waiting without blocking a thread (for tests that
    /// do other things meanwhile).
    public static func streaming(url: String, wav: String, options: [String] = [], timeout: Duration = .seconds(180))
        async throws -> [String: Any]
    {
        let python = try interpreter()
        let directory = try makeTemporaryDirectory("sdk-client")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let child = try ChildProcess(
            python, [script, url, wav] + options, stdout: "\(directory)/out", stderr: "\(directory)/err")
        let deadline = ContinuousClock.now + timeout
        while child.isRunning {
            guard ContinuousClock.now < deadline else {
                child.stop(grace: 1)
                throw MissingPrerequisite(description: "deepgram_sdk_stream.py did not finish within \(timeout)")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        let output = (try? String(contentsOfFile: "\(directory)/out", encoding: .utf8)) ?? ""
        guard let line = output.split(separator: "\n").last,
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
        else {
            let errors = (try? String(contentsOfFile: "\(directory)/err", encoding: .utf8)) ?? ""
            throw MissingPrerequisite(description: "deepgram_sdk_stream.py failed: \(errors.suffix(2000))")
        }
        return object
    }
}

/// A loopback TCP port free right now (bound, read, released), for servers that must keep
/// their port across a restart.
public func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer in
            bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
        }
    }
    guard bound else { throw MissingPrerequisite(description: "cannot bind a loopback port") }
    return Int(UInt16(bigEndian: address.sin_port))
}
