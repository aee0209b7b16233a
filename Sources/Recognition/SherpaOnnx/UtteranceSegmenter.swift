import Foundation

/// Cuts a stream of audio into utterances by frame energy, for engines that decode whole
/// utterances (Moonshine, Whisper).
///
/// Energy, not a neural VAD: sherpa-onnx 2.0.1's Silero VAD refuses faster-whisper's
/// `silero_vad_v6.onnx` ("Unsupported silero vad model", and it exits the process), and no other
/// VAD model ships in a package here. A frame (20 ms) is voiced when its level is 12 dB above the
/// noise floor (the quietest frame of the last 3 s), clamped to -50…-35 dBFS so that digital
/// silence and a noisy room both work. Speech starts after 3 voiced frames in a row and keeps the
/// audio from before back to where the level rose 6 dB out of the noise floor, and 160 ms more
/// unless that is digital silence, at most 500 ms (soft onsets are detected late: a fixed 300 ms
/// lost "ill" of "ill-disposed" on a LibriVox clip; and the silence before them is decode time for
/// nothing); it ends after `hangover` without a voiced frame. At `pause` into that silence the
/// engine may decode speculatively: the utterance a final gets is cut at the same point, so a
/// speculative decode that nothing interrupted *is* the final.
///
/// Wake mode (``init(wakeSegments:)``) decodes only each utterance's first piece: a wake phrase
/// follows a pause, and the rest of what is said costs nothing to skip.
struct UtteranceSegmenter {
    /// An utterance: its samples (-1…1) and where it lies in the session, in samples.
    struct Utterance: Equatable {
        var samples: [Float]
        var start: Int
        /// False for the head of a split: the speaker went on (or may go on) without the
        /// hangover's pause, so voice commands that need an utterance of their own wait.
        var endsUtterance = true
        var end: Int { start + samples.count }
    }

    enum Event: Equatable {
        /// Speech began (`speechActivity(true)`).
        case started
        /// `pause` of silence after speech: the utterance so far may be decoded ahead of its end.
        case paused
        /// Speech came back before the hangover ran out.
        case resumed
        /// The utterance is too long: this first part of it is final; speech goes on.
        case split(Utterance)
        /// Speech ended; nil when it was too short to be words (a click, a cough).
        case ended(Utterance?)
    }

    static let frame = 320  // 20 ms at 16 kHz
    /// How far back from its end `currentAtWordBoundary` may cut the utterance.
    static let wordBoundaryWindow = 15 * frame
    let pauseFrames: Int
    let hangoverFrames: Int
    let maxFrames: Int
    /// An utterance at least this long ends at a `pause`, not after the whole hangover.
    let splitFrames: Int
    let startFrames = 3
    let prerollFrames = 25
    /// Kept before the frame where the level rose out of the noise floor.
    let leadFrames = 8
    /// A frame level (dBFS) below one step of 16-bit audio: zeros or dither, nothing to decode.
    static let digitalSilence: Float = -90
    let onsetRise: Float = 6
    let minVoicedFrames = 8
    let floorFrames = 150
    /// Wake mode: after an utterance's first piece, the rest of it is skipped.
    let onlyUtteranceStarts: Bool

    private(set) var inSpeech = false
    private(set) var isPaused = false
    /// Wake mode, past the utterance's first piece: waiting for its end, keeping no audio.
    private(set) var isSkipping = false
    /// The current utterance (in speech) or the pre-roll (not in speech).
    private(set) var samples: [Float] = []
    /// Session sample index of `samples[0]`.
    private(set) var start = 0
    private var energies: [Float] = []  // per frame of `samples` (of the pre-roll too)
    private var pending: [Float] = []
    private var processed = 0
    private var voicedRun = 0
    private var silenceRun = 0
    private var voicedFrames = 0
    private var recent: [Float] = []  // frame levels for the noise floor, a ring
    private var recentNext = 0

    init(
        pause: Duration = .milliseconds(240), hangover: Duration = .milliseconds(600),
        maxUtterance: Duration = .seconds(20), splitAtPauseAfter: Duration = .seconds(2),
        onlyUtteranceStarts: Bool = false
    ) {
        func frames(_ duration: Duration) -> Int {
            Int(duration / .milliseconds(20))
        }
        pauseFrames = max(1, frames(pause))
        hangoverFrames = max(pauseFrames + 1, frames(hangover))
        maxFrames = max(50, frames(maxUtterance))
        splitFrames = max(pauseFrames, frames(splitAtPauseAfter))
        self.onlyUtteranceStarts = onlyUtteranceStarts
    }

    /// Wake mode: each utterance's first piece only, at most `wakeSegments` long, cut at a pause
    /// after 1.5 s (a phrase said with no pause before what follows still ends its piece early;
    /// an earlier cut split slow phrases between their words in noise).
    init(wakeSegments: Duration) {
        self.init(
            maxUtterance: wakeSegments, splitAtPauseAfter: min(.milliseconds(1500), wakeSegments),
            onlyUtteranceStarts: true)
    }

    /// The utterance so far (for an interim or a speculative decode), cut after the last voiced
    /// frame plus `pause`, as a final would be.
    var current: Utterance {
        let keep = samples.count - max(0, silenceRun - pauseFrames) * Self.frame
        return Utterance(samples: Array(samples[..<max(0, keep)]), start: start)
    }

    /// The utterance so far cut at its quietest 20 ms of the last 300 ms, most likely between
    /// words: a prefix that ends inside a word makes Moonshine invent (and spend time on) more.
    var currentAtWordBoundary: Utterance {
        let utterance = current
        let frames = utterance.samples.count / Self.frame
        let window = min(Self.wordBoundaryWindow / Self.frame, frames, energies.count)
        guard window > 1 else { return utterance }
        var quietest = frames - 1
        for frame in (frames - window)..<frames where energies[frame] < energies[quietest] { quietest = frame }
        return Utterance(samples: Array(utterance.samples[..<((quietest + 1) * Self.frame)]), start: utterance.start)
    }

    /// Session samples taken so far.
    var position: Int { processed + pending.count }

    /// Samples in the current utterance.
    var length: Int { inSpeech ? samples.count : 0 }

    mutating func append(_ chunk: [Int16]) -> [Event] {
        var events: [Event] = []
        pending.reserveCapacity(pending.count + chunk.count)
        for sample in chunk { pending.append(Float(sample) / 32768) }
        var offset = 0
        while pending.count - offset >= Self.frame {
            let frame = pending[offset..<offset + Self.frame]
            offset += Self.frame
            step(frame, into: &events)
        }
        pending.removeFirst(offset)
        return events
    }

    /// No more audio: the pending utterance, cut as a final would be, if it holds speech.
    mutating func flush() -> Utterance? {
        defer {
            reset()
            pending = []
        }
        guard inSpeech, !isSkipping, voicedFrames >= minVoicedFrames else { return nil }
        var utterance = current
        // Stop in the middle of a word: the unframed tail belongs to it.
        if silenceRun == 0 { utterance.samples += pending }
        return utterance
    }

    private mutating func reset() {
        inSpeech = false
        isPaused = false
        isSkipping = false
        samples = []
        energies = []
        voicedRun = 0
        silenceRun = 0
        voicedFrames = 0
    }

    private mutating func step(_ frame: ArraySlice<Float>, into events: inout [Event]) {
        var sum: Float = 0
        for value in frame { sum += value * value }
        let level = 10 * log10(sum / Float(frame.count) + 1e-10)
        let voiced = level > threshold()
        remember(level)
        let frameStart = processed
        processed += frame.count
        if !inSpeech {
            if samples.isEmpty { start = frameStart }
            samples += frame
            energies.append(level)
            if energies.count > prerollFrames { dropFrames(energies.count - prerollFrames) }
            voicedRun = voiced ? voicedRun + 1 : 0
            guard voicedRun >= startFrames else { return }
            inSpeech = true
            let rising = (recent.min() ?? -100) + onsetRise
            var onset = energies.count - startFrames
            while onset > 0, energies[onset - 1] > rising { onset -= 1 }
            // The lead may hold a soft onset, but never in digital silence: that is decode time
            // for nothing.
            var lead = onset
            while lead > 0, onset - lead < leadFrames, energies[lead - 1] > Self.digitalSilence { lead -= 1 }
            dropFrames(lead)
            voicedFrames = startFrames
            silenceRun = 0
            events.append(.started)
            return
        }
        if isSkipping {
            silenceRun = voiced ? 0 : silenceRun + 1
            if silenceRun >= hangoverFrames {
                reset()
                events.append(.ended(nil))
            }
            return
        }
        samples += frame
        energies.append(level)
        if voiced {
            voicedFrames += 1
            silenceRun = 0
            if isPaused {
                isPaused = false
                events.append(.resumed)
            }
        } else {
            silenceRun += 1
            if silenceRun == pauseFrames, voicedFrames >= minVoicedFrames, energies.count >= splitFrames {
                // A long utterance ends at its first pause: its final need not wait for the
                // hangover, and the last one of a sentence is short, so it decodes fast. If
                // speech resumes, it goes on as a new utterance from here.
                events.append(.split(cutAtPause()))
                isPaused = true
                if onlyUtteranceStarts { skipToEnd() }
            } else if silenceRun == pauseFrames {
                isPaused = true
                events.append(.paused)
            }
            if silenceRun >= hangoverFrames {
                let utterance = voicedFrames >= minVoicedFrames ? current : nil
                reset()
                events.append(.ended(utterance))
                return
            }
        }
        if energies.count >= maxFrames {
            events.append(.split(split()))
            if onlyUtteranceStarts { skipToEnd() }
        }
    }

    /// Wake mode, after the utterance's first piece: nothing more of it is kept or decoded; the
    /// hangover still ends it (`.ended(nil)`), so the next utterance starts after a pause.
    private mutating func skipToEnd() {
        isSkipping = true
        isPaused = false
        samples = []
        energies = []
        voicedFrames = 0
    }

    /// Drops the first `count` frames of the pre-roll.
    private mutating func dropFrames(_ count: Int) {
        guard count > 0 else { return }
        samples.removeFirst(count * Self.frame)
        energies.removeFirst(count)
        start += count * Self.frame
    }

    /// Cuts the utterance where it is now (`pause` into silence); returns it. The segmenter
    /// stays in speech, paused, with nothing voiced yet: speech that resumes starts the next
    /// utterance, and the hangover running out ends it with nothing to decode.
    private mutating func cutAtPause() -> Utterance {
        let head = Utterance(samples: samples, start: start, endsUtterance: false)
        start += samples.count
        samples = []
        energies = []
        voicedFrames = 0
        return head
    }

    /// Splits the utterance at its quietest 100 ms in the second half; returns the first part.
    private mutating func split() -> Utterance {
        let window = 5
        var best = energies.count / 2
        var bestLevel = Float.infinity
        for index in (energies.count / 2)..<(energies.count - window) {
            let level = energies[index..<index + window].reduce(0, +)
            if level < bestLevel {
                bestLevel = level
                best = index + window / 2
            }
        }
        let cut = best * Self.frame
        let head = Utterance(samples: Array(samples[..<cut]), start: start, endsUtterance: false)
        samples.removeFirst(cut)
        energies.removeFirst(best)
        start += cut
        return head
    }

    private func threshold() -> Float {
        let floor = recent.min() ?? -100
        // Dictation caps the threshold at -35 dBFS so that speech in a noisy room still counts;
        // in wake mode that cap made noise at 15 dB under the phrase one long utterance, and the
        // phrase was never an utterance's start. -25 dBFS: espeak-ng's phrase in row 21's noise.
        return min(max(floor + 12, -50), onlyUtteranceStarts ? -25 : -35)
    }

    private mutating func remember(_ level: Float) {
        if recent.count < floorFrames {
            recent.append(level)
        } else {
            recent[recentNext] = level
            recentNext = (recentNext + 1) % floorFrames
        }
    }
}
