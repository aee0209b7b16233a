import Capture
import Dictation
import NIOCore
import Recognition
import Waiting

/// Hands-free dictation: while armed, one capture stays open and the offline engine decodes the
/// start of each utterance, locally, until one is the wake phrase; then a host session starts
/// with the audio from the phrase's end on, and sttd is armed again when it ends.
///
/// Nothing heard while waiting is published, stored or logged: the wake stream's finals reach
/// only ``wakeHeard(_:generation:)``, and the session (with its history) starts at the phrase.
extension SpeechCore {
    public static let handsFreeIsHostOnly =
        "Only programs outside a sandbox can turn hands-free dictation on or off: it keeps the microphone open for every app. Run `sttctl hands-free on` in a terminal."

    public var handsFreeState: HandsFreeState { handsFree.state }
    /// The configured phrase, as set (checked only when arming).
    public nonisolated var wakePhrase: String { configuration.handsFree.wakePhrase }

    /// Arms (`true`) or disarms hands-free dictation. Arming returns once sttd listens for the
    /// phrase (at once while a session runs: it listens when that ends); asking for the present
    /// state changes nothing.
    public func setHandsFree(_ enabled: Bool, by caller: Caller? = nil) async throws(SpeechError) {
        if caller?.isSandboxed == true { throw .notAuthorized(Self.handsFreeIsHostOnly) }
        guard enabled else { return disarmHandsFree() }
        guard handsFree.state == .off else { return }
        if let arming = handsFree.arming {
            // The latest call wins: an off asked for meanwhile no longer stands.
            handsFree.disarmWhileArming = false
            if let error = await arming.value { throw error }
            return
        }
        let arming = SetOnce<SpeechError?>()
        handsFree.arming = arming
        handsFree.disarmWhileArming = false
        let failure = await arm()
        handsFree.arming = nil
        _ = arming.resolve(failure)
        if let failure { throw failure }
    }

    private func arm() async -> SpeechError? {
        let phrase: WakePhrase
        do throws(WakePhraseRefusal) {
            phrase = try WakePhrase(configuration.handsFree.wakePhrase)
        } catch {
            return .invalidConfiguration(error.description)
        }
        let engine = recognizers.local
        guard engine.decodesWakeSegments else {
            return .backendUnavailable(
                "Hands-free dictation listens for the wake phrase with the offline Moonshine engine (sherpa-onnx), and `[local] engine` chooses another: set `[local] engine = \"moonshine\"` in config.toml (or remove the line) and run `systemctl --user restart sttd`."
            )
        }
        let (status, engineError) = await engine.authorize()
        guard status == .authorized else {
            return .backendUnavailable(
                "Hands-free dictation needs the offline engine: \(engineError?.message ?? "it is not ready.")")
        }
        if handsFree.disarmWhileArming { return nil }
        handsFree.phrase = phrase
        guard machine.state == .idle else {
            setHandsFreeState(.dictating)
            return nil
        }
        if let error = await openListener() {
            closeListener()
            return error
        }
        if handsFree.disarmWhileArming {
            closeListener()
        } else if machine.state != .idle {
            // A session opened meanwhile: the listener steps aside until it ends.
            stepAside()
            setHandsFreeState(.dictating)
        } else {
            setHandsFreeState(.armed)
            logger.info("hands-free armed", metadata: ["phrase": "\(phrase.phrase)"])
        }
        return nil
    }

    func disarmHandsFree() {
        if handsFree.arming != nil { handsFree.disarmWhileArming = true }
        guard handsFree.state != .off else { return }
        setHandsFreeState(.off)
        handsFree.retry?.cancel()
        handsFree.retry = nil
        handsFree.retryDelay = HandsFreeRecord.firstRetry
        // A session the phrase started still takes its audio from the listener's capture.
        if machine.state == .idle { closeListener() }
        logger.info("hands-free off")
    }

    /// Opens the capture and a wake stream; nil once both run.
    private func openListener() async -> SpeechError? {
        if handsFree.listener == nil {
            let relay = CaptureRelay(fallback: microphone)
            let source = settings.source
            let capture: any MicrophoneStream
            do throws(CaptureError) {
                capture = try await microphone.open(
                    source: source.isEmpty ? nil : source,
                    mediaName: "\(PulseAudio.defaultMediaName) (hands-free: waiting for the wake phrase)",
                    deliver: relay.deliver)
            } catch {
                setMicrophone(Self.microphoneStatus(for: error))
                return SpeechError(error)
            }
            setMicrophone(.authorized)
            // Another arming or re-arm opened one while this one waited: one capture is enough.
            if handsFree.listener != nil {
                capture.cancel()
                return await startWakeStream()
            }
            handsFree.captures += 1
            let id = handsFree.captures
            handsFree.listener = WakeListener(id: id, capture: capture, relay: relay)
            let watched = jobQueue.yield { [self] in
                let error = await capture.ended()
                await captureEnded(error, capture: id)
            }
            if case .terminated = watched {
                closeListener()
                return .internal(Self.shuttingDown)
            }
        }
        return await startWakeStream()
    }

    private func startWakeStream() async -> SpeechError? {
        guard let relay = handsFree.listener?.relay else { return .internal("the hands-free microphone is closed") }
        // One wake stream at a time: a stream left running would keep the core's run() waiting.
        stopWakeStream()
        let generation = handsFree.generation
        let options = StreamOptions(
            language: settings.language, interimResults: false, servedTo: "hands-free",
            wakeSegments: HandsFreeRecord.wakeSegment)
        let stream: any RecognitionStream
        do throws(RecognitionError) {
            stream = try await recognizers.local.startStream(
                options, events: WakeSink(core: self, generation: generation))
        } catch {
            return SpeechError(error)
        }
        // The capture was lost or closed while the stream started, or another stream took over.
        guard handsFree.listener != nil else {
            stream.cancel()
            return .microphoneUnavailable("The microphone closed while hands-free dictation started; sttd tries again.")
        }
        guard generation == handsFree.generation else {
            stream.cancel()
            return nil
        }
        handsFree.listener?.stream = stream
        relay.listen(to: stream)
        let running = jobQueue.yield { [self] in
            var failure: RecognitionError?
            do throws(RecognitionError) { try await stream.run() } catch { failure = error }
            await wakeStreamEnded(failure, generation: generation)
        }
        if case .terminated = running { stream.cancel() }
        return nil
    }

    /// Stops decoding: the relay drops audio until the next wake stream or a session.
    private func stopWakeStream() {
        handsFree.generation += 1
        handsFree.listener?.stream?.cancel()
        handsFree.listener?.stream = nil
    }

    func closeListener() {
        guard let listener = handsFree.listener else { return }
        stopWakeStream()
        handsFree.listener = nil
        listener.relay.park()
        listener.capture.cancel()
    }

    /// A final of the wake stream: the phrase starts a session; anything else is forgotten.
    func wakeHeard(_ result: RecognitionResult, generation: Int) {
        guard generation == handsFree.generation, handsFree.state == .armed, machine.state == .idle,
            let listener = handsFree.listener, let phrase = handsFree.phrase
        else { return }
        // Without its end, the cut would hand the session audio from before the phrase.
        guard let end = result.audioEnd else { return }
        let seconds = end - (result.audioStart ?? end)
        guard let match = phrase.match(result.text) else {
            logger.debug("wake segment: no match", metadata: ["seconds": "\(seconds)"])
            return
        }
        logger.info("wake phrase heard", metadata: ["distance": "\(match.distance)"])
        // The session's audio starts where the phrase's segment ended, to the sample.
        let cut = Int((end * Double(AudioFormat.sampleRate)).rounded())
        let microphone = listener.relay.handOver(fromSample: cut)
        stopWakeStream()
        handsFree.handOver = (microphone, Self.wordsAfter(match, of: phrase))
        setHandsFreeState(.dictating)
        let options = configuration.handsFree
        call({ .start($0, StartOptions(autoStopMilliseconds: options.autoStopMilliseconds, output: options.output)) }) {
            _, _ in
        }
        // Taken by `open()`; left over only when the start did not open a session.
        handsFree.handOver = nil
    }

    /// The words said after the phrase. Moonshine sometimes repeats a short phrase heard in
    /// noise ("Wake up computer wake up computer…"): the repeats are not dictation.
    static func wordsAfter(_ match: WakeMatch, of phrase: WakePhrase) -> String {
        var words = match.remainder
        for _ in 0..<16 {
            guard let again = phrase.match(words) else { break }
            words = again.remainder
        }
        // A repeat cut short ("… wake") is a repeat too.
        let bare = String(words.lowercased().filter { $0.isLetter || $0 == " " }).trimmingCharacters(in: .whitespaces)
        return !bare.isEmpty && phrase.phrase.lowercased().hasPrefix(bare) ? "" : words
    }

    /// The microphone for the session opening now, and the words said after the phrase: the
    /// phrase's hand-over, or else the listener steps aside (a call's session opens its own
    /// capture, so an app's session never gets audio from before its start).
    func handsFreeMicrophoneForSession() -> (microphone: any Microphone, firstWords: String?) {
        if let handOver = handsFree.handOver {
            handsFree.handOver = nil
            return (handOver.microphone, handOver.remainder)
        }
        if handsFree.state == .armed || handsFree.state == .paused {
            stepAside()
            setHandsFreeState(.dictating)
        }
        return (microphone, nil)
    }

    /// The machine is idle again: listen for the phrase again, or close the listener.
    func handsFreeSessionOver() {
        switch handsFree.state {
        // An arming in flight decides for itself once its microphone is open.
        case .off: if handsFree.arming == nil { closeListener() }
        // Paused while the session ran: its retry waited for idle.
        case .dictating, .paused: enqueueResume()
        case .armed: break
        }
    }

    private func enqueueResume() {
        _ = jobQueue.yield { [self] in await resumeListening() }
    }

    /// One at a time: a second one queued meanwhile finds sttd armed, or resumes itself later.
    private func resumeListening() async {
        guard !handsFree.resuming, machine.state == .idle,
            handsFree.state == .dictating || handsFree.state == .paused
        else { return }
        handsFree.resuming = true
        defer { handsFree.resuming = false }
        handsFree.retry?.cancel()
        handsFree.retry = nil
        if let error = await openListener() {
            return pause(because: error)
        }
        if handsFree.state == .off {
            closeListener()
        } else if machine.state != .idle {
            // A session opened while it reopened: it steps aside until that ends.
            stepAside()
            setHandsFreeState(.dictating)
        } else {
            handsFree.retryDelay = HandsFreeRecord.firstRetry
            setHandsFreeState(.armed)
        }
    }

    /// The listener stops decoding and drops audio while a call's session runs.
    private func stepAside() {
        handsFree.retry?.cancel()
        handsFree.retry = nil
        stopWakeStream()
        handsFree.listener?.relay.park()
    }

    private func pause(because error: SpeechError) {
        guard handsFree.state != .off else { return closeListener() }
        logger.warning("hands-free paused", metadata: ["reason": "\(error.message)"])
        closeListener()
        setHandsFreeState(.paused)
        let delay = handsFree.retryDelay
        handsFree.retryDelay = min(delay * 2, HandsFreeRecord.lastRetry)
        handsFree.retry?.cancel()
        handsFree.retry = loop.scheduleTask(in: delay) {
            self.assumeIsolated { core in
                guard core.handsFree.state == .paused, core.machine.state == .idle else { return }
                core.enqueueResume()
            }
        }
    }

    private func captureEnded(_ error: CaptureError?, capture: Int) {
        guard let error, let listener = handsFree.listener, listener.id == capture else { return }
        listener.relay.captureLost(error)
        setMicrophone(Self.microphoneStatus(for: error))
        guard handsFree.state == .armed else {
            // A session runs: its pipeline reopens its own microphone; the listener reopens at idle.
            stopWakeStream()
            handsFree.listener = nil
            return
        }
        pause(because: SpeechError(error))
    }

    private func wakeStreamEnded(_ error: RecognitionError?, generation: Int) {
        // Streams sttd cancelled end with a newer generation.
        guard generation == handsFree.generation, handsFree.state == .armed else { return }
        pause(
            because: error.map(SpeechError.init)
                ?? .backendUnavailable("the offline engine stopped listening for the wake phrase"))
    }

    func setHandsFreeState(_ state: HandsFreeState) {
        guard handsFree.state != state else { return }
        handsFree.state = state
        publish(.handsFree(state))
    }
}

extension SpeechCore {
    /// `[hands_free] arm_at_start`: a failure is logged (and shown by `HandsFree` staying off).
    func armAtStart() async {
        do throws(SpeechError) {
            try await setHandsFree(true)
        } catch {
            logger.warning("hands-free could not be armed at start", metadata: ["reason": "\(error.message)"])
            // At login the sound server may not be up yet: paused, retrying, as after a lost microphone.
            guard error.code == .microphoneUnavailable, handsFree.state == .off, handsFree.phrase != nil else { return }
            setHandsFreeState(.paused)
            pause(because: error)
        }
    }

    /// At shutdown, as a disarm: the listener closes now, or once the session it feeds has
    /// stopped, so the core's last jobs end.
    func closeListenerForGood() { disarmHandsFree() }
}
