import Foundation

/// An xterm on the X display of `environment` that holds the keyboard focus; stop it to close it.
/// Its window is looked for only once it is mapped: X refuses the focus to an unmapped window.
public func openFocusedXterm(environment: [String: String], title: String) async throws -> ChildProcess {
    let xterm = try requireTool("xterm", package: "xterm")
    let xdotool = try requireTool("xdotool", package: "xdotool")
    let terminal = try ChildProcess(xterm, ["-title", title, "-e", "sleep", "600"], environment: environment)
    do {
        let found = try await run(
            xdotool, ["search", "--sync", "--onlyvisible", "--name", title], environment: environment, timeout: 20)
        guard let window = found.stdout.split(whereSeparator: \.isNewline).first.map(String.init) else {
            throw MissingPrerequisite(description: "the xterm \(title) did not show: \(found.stderr)")
        }
        let focused = try await run(
            xdotool, ["windowfocus", "--sync", window], environment: environment, timeout: 10)
        guard focused.status == 0 else {
            throw MissingPrerequisite(description: "cannot focus the xterm \(title): \(focused.stderr)")
        }
        return terminal
    } catch {
        terminal.stop()
        throw error
    }
}
