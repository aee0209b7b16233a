import Logging

/// The desktop's input methods and the connections sessions depend on. Each program that reports
/// as an input method (`SetInputMethodState`), and sttd's own Wayland input method, is kept with its
/// last report; the newest is *the* input method (of two kinds, the one whose field has the focus),
/// and `output = type` text goes to it as ``SpeechEvent/inputMethodText(_:to:)`` events while it is
/// active (see SpeechCore+Output.swift).
extension SpeechCore {
    /// `id` reported the state of the focused field: it is the input method from now on, unless
    /// it is of another kind than the one whose field has the focus (see ``InputMethods/current``).
    public func reportInputMethod(_ report: InputMethodReport, from id: InputMethodID) {
        let known = inputMethods.contains(id)
        let previous = inputMethods.update(from: id, report)
        let now = inputMethods.current
        if now != previous { publish(.inputMethod(now?.report)) }
        if previous?.id != id, now?.id == id || !known {
            logger.info("input method attached", metadata: ["sender": "\(id)", "active": "\(report.active)"])
        } else if let now, now.id != previous?.id {
            logger.info(
                "the input method of the focused field takes over", metadata: ["sender": "\(id)", "now": "\(now.id)"])
        } else if let now, now != previous {
            logger.debug(
                "input method state",
                metadata: [
                    "active": "\(now.report.active)", "focused": "\(now.report.focused)",
                    "secret": "\(now.report.secret)", "push_to_talk": "\(now.report.pushToTalk)",
                    "tools_allowed": "\(now.report.toolsAllowed)",
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

    /// sttd's own input method `id`, which is not on the bus, is gone (its compositor went away or
    /// it let go of the seat): it is no input method any more, and if it was the current one, the
    /// newest still there takes over. A session it started is its own to stop.
    public func inputMethodDeparted(_ id: InputMethodID) {
        inputMethodLeft(id)
    }

    /// Forgets `id`; returns whether it had reported.
    @discardableResult
    private func inputMethodLeft(_ id: InputMethodID) -> Bool {
        let previous = inputMethods.current
        guard inputMethods.departed(id) != nil else { return false }
        let now = inputMethods.current
        guard now != previous else { return true }
        let left = if case .bus = id { "input method left the bus" } else { "input method left" }
        if let now {
            logger.info("\(left); the one before it takes over", metadata: ["sender": "\(id)", "now": "\(now.id)"])
        } else {
            logger.info("\(left)", metadata: ["sender": "\(id)"])
        }
        publish(.inputMethod(now?.report))
        return true
    }
}

extension SpeechCore {
    /// sttd's own input method could not take text (its queue is full): the session goes on and
    /// the text stays in the transcript and history.
    public func inputMethodCouldNotDeliver(_ message: String) { outputFailed(message) }
}
