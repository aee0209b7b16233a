import Logging

/// Checks that typing can work in a session without typing anything, for `sttctl doctor`: the
/// tool sttd would choose is installed with what it needs, and it reaches the display.
public struct TypingProbe: Sendable {
    let engine: OutputEngine

    /// environment: sttd's (the display, XDG_CURRENT_DESKTOP and PATH it types with);
    /// typingTool: the config's `output_tool` (nil = chosen from the session).
    public init(environment: [String: String], typingTool: TypingTool?) {
        engine = OutputEngine(
            environment: environment, override: typingTool,
            logger: Logger(label: "sttd.output.probe") { _ in SwiftLogNoOpLogHandler() })
    }

    /// The tool that would type, once it answered a request that types nothing; throws naming
    /// the problem and the fix.
    public func probe() throws(OutputError) -> TypingTool {
        try engine.checkTyping()
        let tool = try engine.typingTool()
        let noOp: [String]
        switch tool {
        // Connects and reads the screen's size (getwindowfocus fails while no window has the focus).
        case .xdotool: noOp = ["getdisplaygeometry"]
        // Connects and binds the virtual keyboard; an empty text has no key to press.
        case .wtype: noOp = [""]
        // Writes /dev/uinput itself, which checkTyping found writable: nothing to ask a display.
        case .ydotool: return tool
        }
        let run = try engine.runner.run(tool.rawValue, noOp, timeout: .seconds(3))
        guard run.succeeded else {
            throw OutputError(
                .failed,
                "\(tool.rawValue) cannot reach the display sttd has (\(run.reason)): check that the display in sttd's environment is the one you use"
            )
        }
        return tool
    }
}
