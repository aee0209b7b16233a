import CSttdSystem
import Foundation

/// What a tool run produced.
public struct ToolRun: Sendable {
    public var status: Int32
    public var stdout: [UInt8]
    public var stderr: String

    public var succeeded: Bool { status == 0 }

    /// Standard output as text.
    public var output: String { String(decoding: stdout, as: UTF8.self) }

    /// The last line of stderr, for an error message (tools put their reason there).
    public var reason: String {
        let line = stderr.split(whereSeparator: \.isNewline).last.map(String.init) ?? ""
        return line.isEmpty ? "exit status \(status)" : "\(line) (exit status \(status))"
    }
}

/// Runs tools with `sttd_spawn_fds`: no shell, an argv vector, data only on stdin, output into
/// in-memory files (never pipes: wl-copy and xclip leave a child that holds them open for as long
/// as it owns the clipboard), bounded in time. Blocks the calling thread: only the worker calls it.
/// Not swift-subprocess: it collects output from pipes until EOF, which such a child holds open,
/// and its API is async while typing runs in order on the output thread.
public struct ToolRunner: Sendable {
    public let environment: [String: String]

    public init(environment: [String: String]) { self.environment = environment }

    /// The tool's path on the session's PATH, or nil.
    public func find(_ name: String) -> String? {
        let path = environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") where !directory.isEmpty {
            let candidate = "\(directory)/\(name)"
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: candidate, isDirectory: &isDirectory), !isDirectory.boolValue,
                access(candidate, X_OK) == 0
            {
                return candidate
            }
        }
        return nil
    }

    /// Runs `name` with `arguments`, `stdin` as its standard input, and waits at most `timeout`
    /// (then kills its process group).
    public func run(
        _ name: String, _ arguments: [String], stdin: [UInt8] = [], extraEnvironment: [String: String] = [:],
        timeout: Duration
    ) throws(OutputError) -> ToolRun {
        guard let executable = find(name) else {
            throw OutputError(.unavailable, "\(name) is not installed or not on PATH")
        }
        let input = try memoryFile("stdin", contents: stdin)
        defer { close(input) }
        let output = try memoryFile("stdout", contents: [])
        defer { close(output) }
        let errors = try memoryFile("stderr", contents: [])
        defer { close(errors) }

        let argv = ([name] + arguments).map { strdup($0) } + [nil]
        defer { argv.forEach { free($0) } }
        let envp = environment.merging(extraEnvironment) { $1 }.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        var pid: pid_t = 0
        let spawned = sttd_spawn_fds(&pid, executable, argv, envp, input, output, errors)
        guard spawned == 0 else {
            throw OutputError(.failed, "cannot start \(name): \(String(cString: strerror(spawned)))")
        }

        var raw: Int32 = 0
        let milliseconds = Int32(clamping: Int64(timeout / .milliseconds(1)))
        if sttd_wait_child(pid, milliseconds, &raw) != 1 {
            kill(-pid, SIGKILL)
            kill(pid, SIGKILL)
            while waitpid(pid, &raw, 0) < 0 && errno == EINTR {}
            throw OutputError(.failed, "\(name) did not finish within \(timeout) and was stopped")
        }
        let signal = raw & 0x7f
        let status = signal == 0 ? (raw >> 8) & 0xff : 128 + signal
        return ToolRun(
            status: status, stdout: readAll(output), stderr: String(decoding: readAll(errors), as: UTF8.self))
    }

    private func memoryFile(_ name: String, contents: [UInt8]) throws(OutputError) -> Int32 {
        let fd = sttd_memfd(name)
        guard fd >= 0 else {
            throw OutputError(.failed, "cannot create a memory file: \(String(cString: strerror(errno)))")
        }
        var offset = 0
        while offset < contents.count {
            let written = contents.withUnsafeBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                close(fd)
                throw OutputError(.failed, "cannot write a memory file: \(String(cString: strerror(errno)))")
            }
            offset += written
        }
        lseek(fd, 0, SEEK_SET)
        return fd
    }

    private func readAll(_ fd: Int32) -> [UInt8] {
        lseek(fd, 0, SEEK_SET)
        var result: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            if count <= 0 { break }
            result.append(contentsOf: buffer[0..<count])
        }
        return result
    }
}
