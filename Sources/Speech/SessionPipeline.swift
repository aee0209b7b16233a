import Capture
import Logging
import NIOCore
import Recognition
import Synchronization
import Waiting

/// How a session ended: what ``SessionPipeline/run()`` returns.
enum SessionEnd: Sendable {
    /// It never listened.
    case openFailed(SessionPipeline.OpenFailure)
    /// It listened, then ended: why capture or the recognizer failed, if either did.
    case ended(capture: CaptureError?, recognition: RecognitionError?)
}

/// One session from open to end, run as a child task of the core's `run()`: it opens the
/// recognizer and the microphone, then runs the recognizer and the capture pump as child tasks of
/// its own. It tells the core what happens through its report queue, and returns how it ended.
/// The microphone is closed before it returns, so it is never left open without a session.
final class SessionPipeline: Sendable {
    /// Why a session could not start.
    enum OpenFailure: Sendable {
        case recognizer(RecognitionError)
        case microphone(CaptureError)
    }

    let token: Int
    let backend: Backend
    /// The source name, or nil for the server's default.
    let source: String?
    /// The capture stream's name, naming the app the session is for.
    let mediaName: String
    let options: StreamOptions
    private let recognizer: any Recognizer
    private let microphone: any Microphone
    /// Where everything the session tells the core goes, in order.
    private let reports: SessionReportQueue
    private let reconnectLimit: Duration
    /// Where the captured audio is kept (config `[debug] audio_dir`), or nil.
    private let audioDirectory: String?
    private let logger: Logger

    private struct OpenStreams {
        var capture: (any MicrophoneStream)?
        var recognition: (any RecognitionStream)?
        /// Set by the first close; later capture reopenings are refused.
        var closing = false
        /// Closed without a flush: the recognizer is not asked for a last final.
        var cancelled = false
    }
    private let links = Mutex(OpenStreams())
    /// Open while this pipeline is the core's session: its level readings go out only then.
    let levels: LevelGate

    init(
        token: Int, backend: Backend, source: String?, options: StreamOptions, recognizer: any Recognizer,
        microphone: any Microphone, reportingTo core: SpeechCore, reconnectLimit: Duration, logger: Logger,
        mediaName: String = PulseAudio.defaultMediaName, audioDirectory: String? = nil
    ) {
        self.audioDirectory = audioDirectory
        self.mediaName = mediaName
        self.token = token
        self.backend = backend
        self.source = source
        self.options = options
        self.recognizer = recognizer
        self.microphone = microphone
        let levels = LevelGate()
        self.levels = levels
        reports = SessionReportQueue(core: core, session: token, levels: levels)
        self.reconnectLimit = reconnectLimit
        self.logger = logger
    }

    /// Stops capture: with `flush`, what was heard is still recognized; else everything ends now.
    func close(flush: Bool) {
        let (capture, recognition) = links.withLock { links in
            links.closing = true
            if !flush { links.cancelled = true }
            return (links.capture, links.recognition)
        }
        if flush {
            capture?.stop()
        } else {
            recognition?.cancel()
            capture?.cancel()
        }
    }

    /// A stop timed out: ends everything now, and the recognizer gives up work in progress.
    func abandon() {
        let (capture, recognition) = links.withLock { links in
            links.closing = true
            links.cancelled = true
            return (links.capture, links.recognition)
        }
        recognition?.abandon()
        capture?.cancel()
    }

    /// Runs the session to its end and returns how it ended.
    func run() async -> SessionEnd {
        let recognition: any RecognitionStream
        do {
            recognition = try await recognizer.startStream(options, events: reports)
        } catch {
            return .openFailed(.recognizer(error))
        }
        let recording = startRecording()
        defer { recording?.close() }
        let tap = AudioTap(recognition: recognition, reports: reports, recording: recording)
        let capture: any MicrophoneStream
        do {
            capture = try await microphone.open(source: source, mediaName: mediaName, deliver: tap.deliver)
        } catch {
            recognition.cancel()
            return .openFailed(.microphone(error))
        }
        links.withLock { links in
            links.capture = capture
            links.recognition = recognition
        }
        reports.send(.opened)

        // The recognizer's end wins the race: it stops the microphone (and any reconnection) at
        // once. The capture's own end steps aside, and is kept whichever came first.
        let captureEnd = SetOnce<CaptureError?>()
        let recognitionEnd =
            await firstResult(
                of: Result<Void, RecognitionError>.self,
                {
                    captureEnd.resolve(await self.pump(recognition: recognition, tap: tap))
                    return nil
                },
                {
                    do throws(RecognitionError) {
                        try await recognition.run()
                        return .success(())
                    } catch {
                        return .failure(error)
                    }
                }
            ) ?? .success(())
        let recognitionError: RecognitionError? = if case .failure(let error) = recognitionEnd { error } else { nil }
        // Complete on disk before anyone hears that the session ended.
        recording?.close()
        return .ended(capture: await captureEnd.value, recognition: recognitionError)
    }

    /// The file the session's audio is kept in, if `[debug] audio_dir` asks for one.
    private func startRecording() -> AudioRecording? {
        guard let audioDirectory else { return nil }
        do {
            let recording = try AudioRecording(directory: audioDirectory, name: "\(token)")
            logger.info("keeping the session's audio", metadata: ["file": "\(recording.path)"])
            return recording
        } catch {
            logger.warning("the session's audio is not kept", metadata: ["reason": "\(error.message)"])
            return nil
        }
    }

    /// Waits for capture to end, reopening it while the sound server restarts; then tells the
    /// recognizer that no more audio comes. Returns why capture failed for good, if it did.
    /// Whatever capture it opened is closed before it returns.
    private func pump(recognition: any RecognitionStream, tap: AudioTap) async -> CaptureError? {
        defer { links.withLock { $0.capture }?.cancel() }
        while true {
            let ended = await withTaskCancellationHandler {
                await links.withLock { $0.capture }?.ended()
            } onCancel: {
                links.withLock { $0.capture }?.cancel()
            }
            if Task.isCancelled { return nil }
            guard let error = ended, error.kind == .lost else {
                // Stopped, or the source went away for good: recognize what was heard, then end.
                if !links.withLock({ $0.cancelled }) { recognition.finish() }
                return ended
            }
            reports.send(.microphone(down: true))
            guard await reopen(tap: tap) else {
                // Closed while waiting is a normal stop; otherwise the server stayed away. Decided
                // before the finish: once it is asked for, the recognizer may end and cancel this
                // task, which must not turn the failure into an end nobody explains.
                let stopped = links.withLock({ $0.closing }) || Task.isCancelled
                recognition.finish()
                if stopped { return nil }
                logger.warning(
                    "the microphone did not come back; the session ends", metadata: ["waited": "\(reconnectLimit)"])
                return error
            }
            reports.send(.microphone(down: false))
        }
    }

    /// Reopens capture until the sound server is back, the limit passes, the session closes or
    /// the task is cancelled; true if capture runs again.
    private func reopen(tap: AudioTap) async -> Bool {
        let deadline = ContinuousClock.now + reconnectLimit
        while ContinuousClock.now < deadline {
            do {
                try await eventLoopSleep(for: .milliseconds(200))
            } catch {
                return false
            }
            if links.withLock({ $0.closing }) { return false }
            let capture: any MicrophoneStream
            do {
                capture = try await microphone.open(source: source, mediaName: mediaName, deliver: tap.deliver)
            } catch {
                logger.debug("microphone still unavailable", metadata: ["reason": "\(error.message)"])
                continue
            }
            let kept = links.withLock { links in
                guard !links.closing, !Task.isCancelled else { return false }
                links.capture = capture
                return true
            }
            guard kept else {
                // The session ended while this opened: close it, or the microphone stays on.
                capture.cancel()
                _ = await capture.ended()
                return false
            }
            logger.info("microphone is back", metadata: ["source": "\(source ?? "(default)")"])
            return true
        }
        return false
    }
}

/// Lets a pipeline publish events from another thread only until the core closes it; closing waits
/// for a publish in progress, so nothing gets out after what the core publishes next.
final class LevelGate: Sendable {
    private let open = Mutex(true)

    func publish(_ event: SpeechEvent, to hub: EventHub) {
        open.withLock { open in
            if open { hub.publish(event) }
        }
    }

    func close() { open.withLock { $0 = false } }
}

/// Where captured audio goes, on the capture thread: to the recognizer (which never blocks), the
/// level meter, the voice detector and the debug recording. Nothing here waits.
final class AudioTap: Sendable {
    private let recognition: any RecognitionStream
    private let reports: SessionReportQueue
    private let recording: AudioRecording?
    private let meter = Mutex(LevelMeter())
    private let voice = Mutex(VoiceDetector())

    init(recognition: any RecognitionStream, reports: SessionReportQueue, recording: AudioRecording?) {
        self.recognition = recognition
        self.reports = reports
        self.recording = recording
    }

    @Sendable func deliver(_ chunk: AudioChunk) {
        recording?.append(chunk)
        recognition.send(chunk)
        if let level = meter.withLock({ $0.add(chunk) }) { reports.deliverLevel(level) }
        if let change = voice.withLock({ $0.add(chunk) }) { reports.deliverVoice(change) }
    }
}
