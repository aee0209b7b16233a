import Foundation

/// A Flatpak-like sandbox made with `bwrap`: a tmpfs root, `/usr` and `/etc` read-only, a
/// `/.flatpak-info` naming the app, and the test bus's socket bound in. Commands run in it are
/// what a Flatpak app would be to sttd: a process whose root holds `.flatpak-info`.
public struct FlatpakSandbox: Sendable {
    public let appID: String
    public let busAddress: String
    private let busSocket: String
    private let infoFile: String
    private let bwrap: String
    private let gdbus: String

    /// `busAddress` must be a `unix:path=…` address (the private test bus).
    public init(appID: String, busAddress: String) throws {
        bwrap = try requireTool("bwrap", package: "bubblewrap")
        gdbus = try requireTool("gdbus", package: "libglib2.0-bin")
        guard busAddress.hasPrefix("unix:path=") else {
            throw MissingPrerequisite(description: "the sandbox needs a unix:path= bus address, not \(busAddress)")
        }
        self.appID = appID
        self.busAddress = busAddress
        busSocket = String(busAddress.dropFirst("unix:path=".count))
        let directory = try makeTemporaryDirectory("sttd-flatpak")
        infoFile = "\(directory)/flatpak-info"
        try "[Application]\nname=\(appID)\nruntime=runtime/org.freedesktop.Platform/x86_64/23.08\n".write(
            toFile: infoFile, atomically: true, encoding: .utf8)
    }

    /// The `bwrap` command line that runs `command` inside the sandbox.
    public func commandLine(_ command: [String]) -> [String] {
        [
            "--tmpfs", "/", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc",
            "--symlink", "usr/bin", "/bin", "--symlink", "usr/lib", "/lib", "--symlink", "usr/lib64", "/lib64",
            "--proc", "/proc", "--dev", "/dev", "--ro-bind", infoFile, "/.flatpak-info",
            "--bind", busSocket, busSocket, "--setenv", "DBUS_SESSION_BUS_ADDRESS", busAddress,
            "--die-with-parent", "--",
        ] + command
    }

    /// Calls a method of sttd with `gdbus` from inside the sandbox, on a thread of its own (the
    /// call may wait for a consent prompt). `arguments` are in GVariant text, e.g. `{}`.
    public func callSttd(
        _ method: String, _ arguments: [String] = [], interface: String = "io.github.sttd.Speech1",
        timeout: TimeInterval = 40
    ) async throws -> CommandResult {
        let command = commandLine(
            [
                gdbus, "call", "--address", busAddress, "--dest", "io.github.sttd.Speech1", "--object-path",
                "/io/github/sttd/Speech1", "--timeout", "30", "--method", "\(interface).\(method)",
            ] + arguments)
        let bwrap = bwrap
        return try await withCheckedThrowingContinuation { continuation in
            // `run` blocks until the process exits: not on a pool thread.
            let thread = Thread {
                continuation.resume(with: Result { try run(bwrap, command, timeout: timeout) })
            }
            thread.name = "sandboxed-call"
            thread.start()
        }
    }

    /// Reads a property of sttd from inside the sandbox.
    public func getSttdProperty(_ name: String) async throws -> CommandResult {
        try await callSttd(
            "Get", ["io.github.sttd.Speech1", name], interface: "org.freedesktop.DBus.Properties")
    }
}
