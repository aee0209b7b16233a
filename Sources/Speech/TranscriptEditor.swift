import Dictation
import Recognition

/// The session's text as results arrive: each result goes through the session's `[text]` rules,
/// and its edits (text, keys, "scratch that", "stop listening") change the transcript in order.
/// A plain value that does nothing itself: every change returns the effects the core must then
/// carry out, in order (store, type, publish), each event worded as the transcript was then.
struct TranscriptEditor {
    /// What the core does for a change.
    enum Effect: Equatable, Sendable {
        /// Keeps a final's text in history, before anyone hears of it.
        case store(String, of: RecognitionResult)
        /// Types a final as the transcript joined it (with its separator).
        case type(String)
        /// Shows the pending interim, with its separator, where the next final will be typed
        /// ("": none).
        case showInterim(String)
        case press(Key)
        /// "scratch that": the last final leaves history, and what was typed for it is taken back.
        case retract(typed: String)
        /// "scratch that" with nothing to remove (none yet, or sent with a key): only logged.
        case nothingToRetract
        case publish(SpeechEvent)
        /// "stop listening": the session stops as a Stop would.
        case stopListening
    }

    private(set) var transcript = Transcript()
    /// The pending interim as the engine wrote it (the transcript holds it as shown).
    private(set) var rawInterim = ""
    /// A final of the current utterance came without its end: what follows is not an utterance
    /// of its own, so it presses no keys.
    private(set) var utteranceOpen = false
    /// A final of only key/delete/stop commands whose utterance may go on: carried out once the
    /// utterance ends there, text if it goes on.
    private(set) var heldCommand: RecognitionResult?

    /// A new session's empty text.
    mutating func reset() { self = TranscriptEditor() }

    /// Clears the transcript (and says so with an empty final update); the utterance in
    /// progress is left as it is.
    mutating func clearTranscript() -> [Effect] {
        transcript.reset()
        return [.showInterim(""), .publish(.transcript("", update: TranscriptUpdate(segment: "", isFinal: true)))]
    }

    /// A result through `dictation`: an interim shows its words; a final's edits apply in order.
    /// `ending`: the session is being concluded, so "stop listening" has nothing left to stop,
    /// and the utterance ends here.
    mutating func apply(_ result: RecognitionResult, dictation: Dictation, ending: Bool = false) -> [Effect] {
        var effects: [Effect] = []
        if let held = heldCommand, result.isFinal {
            if !result.text.isEmpty {
                // More words (a final: an interim's may vanish): the held command was part of a
                // longer utterance, so it is text.
                heldCommand = nil
                applyFinal(held, whole: false, dictation: dictation, ending: ending, into: &effects)
                utteranceOpen = true
            } else if result.endsUtterance || ending {
                effects += utteranceEnded(dictation: dictation, ending: ending)
            }
        }
        guard result.isFinal else {
            rawInterim = result.text
            let shown = dictation.preview(result.text, wholeUtterance: !utteranceOpen)
            guard transcript.setInterim(shown) else { return effects }
            return effects + [
                .showInterim(transcript.separator(before: shown) + shown),
                .publish(.transcript(transcript.text, update: TranscriptUpdate(segment: shown, isFinal: false))),
            ]
        }
        rawInterim = ""
        let endsUtterance = result.endsUtterance || ending
        if !utteranceOpen, !endsUtterance, dictation.isOnlyOwnUtteranceCommands(result.text) {
            heldCommand = result
            return effects
        }
        applyFinal(result, whole: !utteranceOpen && endsUtterance, dictation: dictation, ending: ending, into: &effects)
        utteranceOpen = !endsUtterance
        return effects
    }

    /// The session begins inside an utterance already under way (the wake phrase's): until it
    /// ends, a command in it is text, as at the end of a sentence.
    mutating func continueUtterance() { utteranceOpen = true }

    /// The utterance ended (a pause, or the session's end): a command held for it is carried out.
    mutating func utteranceEnded(dictation: Dictation, ending: Bool = false) -> [Effect] {
        utteranceOpen = false
        guard let held = heldCommand else { return [] }
        heldCommand = nil
        var effects: [Effect] = []
        applyFinal(held, whole: true, dictation: dictation, ending: ending, into: &effects)
        return effects
    }

    /// Keeps the pending interim as a final: stored, then reported as one.
    mutating func promoteInterim(dictation: Dictation) -> [Effect] {
        guard !rawInterim.isEmpty || heldCommand != nil else { return [] }
        return apply(RecognitionResult(text: rawInterim, isFinal: true), dictation: dictation, ending: true)
    }

    mutating func dropInterim() -> [Effect] {
        rawInterim = ""
        guard !transcript.interim.isEmpty else { return [] }
        transcript.dropInterim()
        return [.showInterim(""), .publish(.transcript(transcript.text, update: nil))]
    }

    private mutating func applyFinal(
        _ result: RecognitionResult, whole: Bool, dictation: Dictation, ending: Bool, into effects: inout [Effect]
    ) {
        let edits = dictation.edits(for: result.text, wholeUtterance: whole)
        if !edits.contains(where: { if case .text = $0 { true } else { false } }), !transcript.interim.isEmpty {
            // The words shown meanwhile were a command: they go, as an empty final says.
            transcript.dropInterim()
            effects += [
                .showInterim(""),
                .publish(.transcript(transcript.text, update: TranscriptUpdate(segment: "", isFinal: true))),
            ]
        }
        for edit in edits {
            switch edit {
            case .text(let text):
                let typed = transcript.append(text)
                effects += [
                    .store(text, of: result), .type(typed),
                    .publish(.transcript(transcript.text, update: TranscriptUpdate(segment: text, isFinal: true))),
                ]
            case .press(let key):
                transcript.seal()
                effects.append(.press(key))
            case .scratchThat:
                guard let (final, typed) = transcript.retractLast() else {
                    effects.append(.nothingToRetract)
                    continue
                }
                effects += [.retract(typed: typed), .publish(.retracted(transcript.text, removed: final))]
            case .stopListening where !ending:
                effects.append(.stopListening)
            case .stopListening:
                break
            }
        }
    }
}
