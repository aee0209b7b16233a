import NIOCore

/// When a session stops by itself (`auto_stop_ms`): after `silence` of quiet following speech,
/// or after `noSpeech` if nobody speaks at all. Plain value: the core feeds it voice activity
/// and arms one timer at ``deadline``.
///
/// Two sources report voice activity, the capture's own detector and the recognizer (the
/// engine's VAD, or the server's `SpeechStarted` / `speech_final` / `UtteranceEnd`); silence
/// counts from whichever reports it first, and speech from either cancels the countdown.
struct AutoStop: Sendable, Equatable {
    let silence: TimeAmount
    let noSpeech: TimeAmount
    private(set) var heardSpeech = false
    /// When the session should stop, if nothing changes.
    private(set) var deadline: NIODeadline?

    init(silence: TimeAmount, noSpeech: TimeAmount, opened: NIODeadline) {
        self.silence = silence
        self.noSpeech = noSpeech
        deadline = opened + noSpeech
    }

    mutating func speechStarted() {
        heardSpeech = true
        deadline = nil
    }

    /// Silence began at `instant`. Before any speech this changes nothing: the no-speech bound runs.
    mutating func silenceBegan(at instant: NIODeadline) {
        guard heardSpeech else { return }
        let stopAt = instant + silence
        deadline = min(deadline ?? stopAt, stopAt)
    }
}
