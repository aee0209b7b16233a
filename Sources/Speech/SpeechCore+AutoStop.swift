import NIOCore

/// Auto-stop: the session stops itself after trailing silence.
extension SpeechCore {
    func autoStopHeardSpeech() {
        guard session?.autoStop != nil else { return }
        session?.autoStop?.speechStarted()
        armAutoStop()
    }

    func autoStopHeardSilence(since instant: NIODeadline) {
        guard session?.autoStop != nil else { return }
        session?.autoStop?.silenceBegan(at: instant)
        armAutoStop()
    }

    func armAutoStop() {
        autoStopTimer?.cancel()
        autoStopTimer = nil
        guard let session, let deadline = session.autoStop?.deadline else { return }
        let token = session.pipeline.token
        autoStopTimer = loop.scheduleTask(deadline: deadline) {
            self.assumeIsolated { $0.autoStopDue(token: token) }
        }
    }

    func cancelAutoStop() {
        autoStopTimer?.cancel()
        autoStopTimer = nil
        session?.autoStop = nil
    }

    /// Stops exactly as `StopTranscribing` would: flushed, every word kept, no failure.
    func autoStopDue(token: Int) {
        guard let session, session.pipeline.token == token, let autoStop = session.autoStop,
            machine.state == .listening || machine.state == .reconnecting
        else { return }
        logger.info(
            autoStop.heardSpeech ? "auto-stop: silence after speech" : "auto-stop: nobody spoke",
            metadata: [
                "after_ms":
                    "\(autoStop.heardSpeech ? autoStop.silence.nanoseconds / 1_000_000 : autoStop.noSpeech.nanoseconds / 1_000_000)"
            ])
        call({ .stop($0) }) { _, _ in }
    }
}
