import ArgumentParser

/// `sttctl doctor`: checks this desktop's set-up for dictation and names the fix for each problem.
struct Doctor: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check this desktop's set-up for dictation and print what to do about each problem.",
        discussion: """
            Checks sttd, the engine, the microphone, the session, the input method (IBus component, \
            input source, InputMethod, QT_IM_MODULE and GTK_IM_MODULE), the typing tool (asked to \
            type nothing) and the display in sttd's environment. Exit status 0 only if dictation \
            into the focused app should work; 1 if it should not; 3 if sttd cannot be reached.
            """)

    @Flag(help: "Print one JSON object: ok, route, and checks (id, route, status, finding, fix).")
    var json = false

    func run() async throws {
        let facts = await DoctorProbe().facts()
        let report = facts.report
        print(json ? report.jsonLine : report.text)
        if case .unreachable = facts.service { throw ExitCode(ControlFailure.unreachable) }
        if !report.ok { throw ExitCode(1) }
    }
}
