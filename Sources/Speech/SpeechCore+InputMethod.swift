import Logging

/// The desktop's input methods and the connections sessions depend on. Each program that reports
/// as an input method (`SetInputMethodState`) is kept with its last report; the newest is *the*
/// input method, and `output = type` text goes to it as ``SpeechEvent/inputMethodText(_:to:)``
/// events while it is active (see SpeechCore+Output.swift).
extension SpeechCore {
    /// `id` reported the state of the focused field: it is the input method from now on.
    public func reportInputMethod(_ report: InputMethodReport, from id: InputMethodID) {
        let previous = inputMethods.update(from: id, report)
        if previous?.report != report || previous?.id != id { publish(.inputMethod(report)) }
        if previous?.id != id {
            logger.info("input method attached", metadata: ["sender": "\(id)", "active": "\(report.active)"])
        } else if previous?.report != report {
            logger.debug(
                "input method state",
                metadata: [
                    "active": "\(report.active)", "focused": "\(report.focused)", "secret": "\(report.secret)",
                    "push_to_talk": "\(report.pushToTalk)",
                ])
        }
    }

    /// The connection `name` left the bus. It is no input method any more (if it was the current
    /// one, the newest still there takes over), and a session it started stops if it must: a
    /// sandboxed app's (nobody else may stop it, and the microphone must not stay on for nobody),
    /// or the input method's (it starts sessions only for its push-to-talk key, whose release can
    /// now never arrive). Its last words stay in the transcript and history.
    public func connectionLeft(_ name: String) {
        let wasInputMethod = inputMethodLeft(.bus(name))
        if wasInputMethod || snapshot.owner?.privateDestination == name {
            stopSession(startedFrom: name)
        }
    }

    /// Stops the session started from `connection`, if it runs, as a Stop would (its finals kept
    /// in history); its starter is gone. Returns whether one was running.
    @discardableResult
    public func stopSession(startedFrom connection: String) -> Bool {
        guard let owner = snapshot.owner, owner.connection == connection, machine.state != .idle else { return false }
        call({ .stop($0) }) { _, _ in }
        logger.notice(
            owner.isSandboxed
                ? "the app whose session is running left the bus; stopping the session"
                : "the input method left the bus; stopping the push-to-talk session it started",
            metadata: ["sender": "\(connection)"])
        return true
    }

    /// The connection a session opened by `client` cannot outlive (see ``SpeechEvent/owner(_:stopsWhenGone:)``).
    func mustStay(_ client: Caller) -> String? {
        if let app = client.privateDestination { return app }
        guard let connection = client.connection, inputMethods.contains(.bus(connection)) else { return nil }
        return connection
    }

    /// Forgets `id`; returns whether it had reported.
    private func inputMethodLeft(_ id: InputMethodID) -> Bool {
        guard let departure = inputMethods.departed(id) else { return false }
        guard departure.wasCurrent else { return true }
        if let next = inputMethods.current {
            logger.info(
                "input method left the bus; the one before it takes over",
                metadata: ["sender": "\(id)", "now": "\(next.id)"])
        } else {
            logger.info("input method left the bus", metadata: ["sender": "\(id)"])
        }
        publish(.inputMethod(inputMethods.current?.report))
        return true
    }
}
