/// One finding of `sttctl doctor`.
struct DoctorCheck: Sendable, Equatable {
    enum Status: String, Sendable, Equatable {
        case ok
        /// Dictation can still work, but something is off (some apps, or a route not used).
        case warning
        /// Dictation into the focused app cannot work until this is fixed.
        case problem
    }

    /// Which way of getting text into an app a check belongs to: dictation works if sttd, the
    /// engine and the microphone work and either route does.
    enum Route: String, Sendable, Equatable {
        /// Needed whatever the route.
        case core
        /// sttd's IBus engine puts text into the field.
        case inputMethod = "input-method"
        /// A typing tool (wtype, ydotool, xdotool) types into the focused window.
        case typing
    }

    /// A stable name for scripts: `service`, `engine`, `microphone`, `session`, `ibus-component`,
    /// `input-source`, `input-method`, `im-modules`, `typing-tool`, `service-environment`.
    var id: String
    var route: Route
    var status: Status
    /// What was found, for a person.
    var finding: String
    /// What to do; nil when there is nothing to do.
    var fix: String?

    init(_ id: String, _ route: Route, _ status: Status, _ finding: String, fix: String? = nil) {
        self.id = id
        self.route = route
        self.status = status
        self.finding = finding
        self.fix = fix
    }
}

/// Every check and the verdict: `ok` only if dictation into the focused app should work.
struct DoctorReport: Sendable, Equatable {
    private(set) var checks: [DoctorCheck]
    /// The route text takes, or nil when none works.
    let route: DoctorCheck.Route?

    /// Settles the checks: when one route works, the other route's problems cannot stop
    /// dictation, so they become warnings.
    init(_ checks: [DoctorCheck]) {
        func works(_ route: DoctorCheck.Route) -> Bool {
            let own = checks.filter { $0.route == route }
            return !own.isEmpty && !own.contains { $0.status == .problem }
        }
        let coreWorks = !checks.contains { $0.route == .core && $0.status == .problem }
        let working = [DoctorCheck.Route.inputMethod, .typing].first(where: works)
        route = coreWorks ? working : nil
        self.checks = checks.map { check in
            var settled = check
            if let working, check.route != .core, check.route != working, check.status == .problem {
                settled.status = .warning
            }
            return settled
        }
    }

    var ok: Bool { route != nil }

    func check(_ id: String) -> DoctorCheck? { checks.first { $0.id == id } }

    /// One line per check (✓, ! or ✗), an indented fix under each that has one, and the verdict.
    var text: String {
        var lines: [String] = []
        for check in checks {
            let mark =
                switch check.status {
                case .ok: "✓"
                case .warning: "!"
                case .problem: "✗"
                }
            lines.append("\(mark) \(check.id): \(check.finding)")
            if let fix = check.fix { lines.append("    fix: \(fix)") }
        }
        switch route {
        case .inputMethod: lines.append("Dictation should work: text goes through the input method (Dictation).")
        case .typing: lines.append("Dictation should work: a typing tool types into the focused window.")
        case .core, nil: lines.append("Dictation into the focused app will not work: fix the lines marked ✗.")
        }
        return lines.joined(separator: "\n")
    }

    /// `{"ok":…,"route":…,"checks":[{"id","route","status","finding","fix"}]}` on one line.
    var json: JSONOutput {
        .object([
            ("ok", .bool(ok)),
            ("route", route.map { .string($0.rawValue) } ?? .null),
            (
                "checks",
                .array(
                    checks.map { check in
                        .object([
                            ("id", .string(check.id)),
                            ("route", .string(check.route.rawValue)),
                            ("status", .string(check.status.rawValue)),
                            ("finding", .string(check.finding)),
                            ("fix", check.fix.map { .string($0) } ?? .null),
                        ])
                    })
            ),
        ])
    }

    var jsonLine: String { json.line }
}
