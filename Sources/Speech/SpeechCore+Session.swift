import Capture
import Dictation
import Foundation
import History
import Logging
import NIOCore
import Recognition

/// The running session's reports, its end, the transcript and the status properties.
extension SpeechCore {
    // MARK: Reports from the running session

    /// A report from session `token`; one from a session that is no longer the core's counts for nothing.
    func report(_ report: SessionReport, session token: Int) {
        guard let current = session, current.pipeline.token == token else { return }
        switch report {
        case .opened: opened(current.pipeline)
        case .recognition(let event): received(event, from: current.pipeline)
        case .voice(let change, let instant): voice(change, at: instant)
        case .microphone(let down): microphoneLink(down: down)
        case .overflowed: reportQueueOverflowed(current.pipeline)
        }
    }

    /// Session `token`'s pipeline returned: the session is over (unless the core ended it already).
    func finished(_ end: SessionEnd, session token: Int) {
        guard let ending = session, ending.pipeline.token == token else { return }
        switch end {
        case .openFailed(let failure): openFailed(ending.pipeline, failure)
        case .ended(let captureError, let recognitionError):
            ended(ending, captureError: captureError, recognitionError: recognitionError)
        }
    }

    private func opened(_ pipeline: SessionPipeline) {
        let fellBack = session?.fellBack
        recognizerDown = false
        microphoneDown = false
        // Started offline: a refused key still shows (denied, NotAuthorized) until the next session opens.
        if let status = fellBack == nil ? .authorized : fellBack?.authorization { setAuthorization(status) }
        setMicrophone(.authorized)
        setLastError(fellBack.flatMap(Self.fallbackError))
        let backend = fellBack == nil ? pipeline.backend : .local
        publish(.activeBackend(backend))
        beginHistory(pipeline, backend: backend)
        // The phrase's utterance goes on: a command that must be said alone ("press enter" from a
        // TV after a false wake) stays text in it. The words after the phrase are its first final.
        if let words = session?.firstWords {
            editor.continueUtterance()
            if !words.isEmpty {
                let first = RecognitionResult(text: words, isFinal: true, endsUtterance: false)
                perform(editor.apply(first, dictation: sessionDictation))
            }
        }
        if let after = session?.autoStopAfter {
            session?.autoStop = AutoStop(
                silence: after, noSpeech: .milliseconds(Int64(configuration.autoStopNoSpeechMilliseconds)),
                opened: .now())
            armAutoStop()
        }
        logger.info(
            "listening",
            metadata: ["source": "\(pipeline.source ?? "(default)")", "backend": "\(pipeline.backend.rawValue)"])
        handle(.opened)
    }

    private func openFailed(_ pipeline: SessionPipeline, _ failure: SessionPipeline.OpenFailure) {
        session = nil
        // Nothing was said: there is nothing to deliver, and the tools it started can go.
        endOutput(transcript: nil, then: nil)
        let error: SpeechError
        switch failure {
        case .recognizer(let recognitionError):
            // A refused key says "denied", a missing model or key "restricted"; a network failure says nothing.
            if let status = recognitionError.authorization ?? (pipeline.backend == .local ? .restricted : nil) {
                setAuthorization(status)
            }
            error = SpeechError(recognitionError)
        case .microphone(let captureError):
            setMicrophone(Self.microphoneStatus(for: captureError))
            error = SpeechError(captureError)
        }
        handle(.openFailed(error))
    }

    private func received(_ event: RecognitionEvent, from pipeline: SessionPipeline) {
        switch event {
        case .result(let result):
            perform(editor.apply(result, dictation: sessionDictation))
        case .reconnecting(let down):
            recognizerDown = down
            updateReconnecting()
        case .speechActivity(let now):
            if !now { perform(editor.utteranceEnded(dictation: sessionDictation)) }
            setSpeaking(now)
            if now { autoStopHeardSpeech() } else { autoStopHeardSilence(since: .now()) }
        case .fellBack(let reason):
            session?.fellBack = reason
            session?.dictation = dictation(for: .local, language: pipeline.options.language)
            // The streaming backend's interim will not become a final: the offline engine
            // recognizes that audio again.
            perform(editor.dropInterim())
            logger.notice("dictation continues offline", metadata: ["reason": "\(reason.message)"])
            publish(.continuingOffline(SpeechError(reason)))
            // At the start, `opened` shows it; mid-session, now.
            guard machine.state != .starting else { return }
            noteFallback(reason)
            publish(.activeBackend(.local))
        }
    }

    /// What a fallback says about the streaming backend: a refused key is `denied` and
    /// `NotAuthorized`, so the user learns the key is wrong although dictation goes on.
    func noteFallback(_ reason: RecognitionError) {
        if let status = reason.authorization { setAuthorization(status) }
        if let error = Self.fallbackError(reason) { setLastError(error) }
    }

    /// The `LastError` a fallback leaves: only a refused key (the network needs no fixing).
    static func fallbackError(_ reason: RecognitionError) -> SpeechError? {
        reason.kind == .notAuthorized ? SpeechError(reason) : nil
    }

    /// The capture's own voice detector changed its mind.
    private func voice(_ change: VoiceDetector.Change, at instant: NIODeadline) {
        switch change {
        case .speech: autoStopHeardSpeech()
        case .silence(let ago): autoStopHeardSilence(since: instant - TimeAmount(ago))
        }
    }

    private func microphoneLink(down: Bool) {
        microphoneDown = down
        setMicrophone(down ? .unavailable : .authorized)
        updateReconnecting()
    }

    /// A recognizer or capture thread got too far ahead of the core: end the session, keep the finals.
    private func reportQueueOverflowed(_ pipeline: SessionPipeline) {
        logger.error(
            "the core fell behind the recognizer; ending the session", metadata: ["bound": "\(Self.reportQueueBound)"])
        session?.failure = SpeechError.internal(
            "sttd fell more than \(Self.reportQueueBound) results behind the recognizer (the computer is too busy); the session stopped. What was recognized before is kept."
        )
        pipeline.close(flush: false)
    }

    private func ended(_ ending: SessionRecord, captureError: CaptureError?, recognitionError: RecognitionError?) {
        let outcome: Machine.Event
        if let failure = ending.failure {
            outcome = .failed(failure)
        } else if let captureError {
            setMicrophone(Self.microphoneStatus(for: captureError))
            outcome = .failed(SpeechError(captureError))
        } else if let recognitionError, !ending.cancelled {
            outcome = .failed(SpeechError(recognitionError))
        } else {
            outcome = .closed
        }
        conclude(ending, outcome: outcome)
    }

    /// Ends the core's side of a session: its text kept, history closed, desktop output done,
    /// then the machine hears `outcome`.
    func conclude(_ ending: SessionRecord, outcome: Machine.Event) {
        stopTimer?.cancel()
        stopTimer = nil
        cancelAutoStop()
        // Stop, timeout, failure: the pending interim is kept as the last final (and typed).
        // Cancel dropped it.
        if !ending.cancelled { perform(editor.promoteInterim(dictation: sessionDictation)) }
        session = nil
        setSpeaking(false)
        publish(.activeBackend(nil))
        endHistory()
        pruneHistoryDaily()
        // The session is over once its text is on the desktop too.
        endOutput(transcript: ending.cancelled ? nil : editor.transcript.finalText, then: outcome)
    }

    // MARK: Status

    func setSpeaking(_ now: Bool) {
        guard speaking != now else { return }
        speaking = now
        publish(.speechActivity(now))
    }

    func updateReconnecting() {
        let before = machine.state
        machine.setReconnecting(recognizerDown || microphoneDown)
        if machine.state != before { publish(.state(machine.state)) }
    }

    func setAuthorization(_ status: RecognizerAuthorization) {
        guard status != authorization else { return }
        authorization = status
        publish(.authorization(status))
    }

    func setMicrophone(_ status: MicrophoneStatus) {
        guard status != microphoneStatus else { return }
        microphoneStatus = status
        publish(.microphone(status))
    }

    func setLastError(_ error: SpeechError?) {
        guard error != lastError else { return }
        lastError = error
        publish(.lastError(error))
    }

    func probeAuthorization() async -> RecognizerAuthorization {
        let settings = settings
        do {
            try await microphone.probe(source: settings.source.isEmpty ? nil : settings.source)
            setMicrophone(.authorized)
        } catch {
            setMicrophone(Self.microphoneStatus(for: error))
        }
        let status = await recognizers[settings.backend].authorize().0
        setAuthorization(status)
        return status
    }

    /// The probe's answer, for everyone who asked; the next call probes again.
    func answerAuthorization(_ status: RecognizerAuthorization) {
        authorizationProbe?.resolve(status)
        authorizationProbe = nil
    }

    /// The listing's answer, for everyone who asked; the next call lists again.
    func answerSources(_ result: Result<[AudioSource], SpeechError>) {
        sourceListing?.resolve(result)
        sourceListing = nil
    }

    static func microphoneStatus(for error: CaptureError) -> MicrophoneStatus {
        error.kind == .accessDenied ? .denied : .unavailable
    }
}
