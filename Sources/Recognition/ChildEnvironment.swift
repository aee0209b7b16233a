import Foundation

/// The environment sttd's child processes get (the engine worker, the model check, typing
/// tools): sttd's own, less what carries a secret. A child needs no key, and a child's
/// `/proc/PID/environ` is readable by every process of the user.
public enum ChildEnvironment {
    /// Variables that hold or point at the streaming API key.
    public static let secretVariables: Set<String> = ["STTD_API_KEY", "CREDENTIALS_DIRECTORY"]

    /// `environment` without ``secretVariables``.
    public static func filtered(_ environment: [String: String]) -> [String: String] {
        environment.filter { !secretVariables.contains($0.key) }
    }

    /// This process's environment, filtered.
    public static var current: [String: String] { filtered(ProcessInfo.processInfo.environment) }

    /// Calls `body` with `environment` as a NULL-terminated `KEY=VALUE` array for exec.
    public static func withEnvp<Result>(
        _ environment: [String: String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> Result
    ) -> Result {
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { envp.forEach { free($0) } }
        return envp.withUnsafeBufferPointer { body($0.baseAddress!) }
    }
}
