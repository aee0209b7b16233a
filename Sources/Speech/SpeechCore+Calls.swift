import Capture
import History
import Recognition
import Waiting

/// The core's calls. Each runs its first step on the core at once, so calls take effect in the
/// order they reach the core; those that wait (for the finals, a probe) then suspend.
///
/// A caller is a ``Caller``: a host caller acts on any session; a sandboxed app only on a
/// session it started, and gets `Busy` while another's runs (it never sees another's text).
extension SpeechCore {
    /// Runs `body` on the core, after everything submitted before it: for callers on other
    /// threads that must not wait (a recognizer's report, an app leaving the bus).
    public nonisolated func submit(_ body: @escaping @Sendable (isolated SpeechCore) -> Void) {
        loop.execute { self.assumeIsolated { body($0) } }
    }

    /// `Busy` for an app whose call concerns another's running session.
    public static let othersSession = SpeechError.busy(
        "Another program's dictation session is running, and an app sees and controls only its own session. Try again once it has ended."
    )

    /// Starts a session for `options.caller` (nil: the host).
    public func start(_ options: StartOptions) async throws(SpeechError) {
        _ = try standing(of: options.caller)
        let reply = await call { .start($0, options) }
        if case .error(let error) = reply.outcome { throw error }
    }

    /// Stops and returns the transcript once every final is in.
    public func stop() async -> String {
        await call { .stop($0) }.transcript
    }

    /// ``stop()`` for `caller`: an app that started no session gets an empty transcript.
    public func stop(by caller: Caller) async throws(SpeechError) -> String {
        guard try standing(of: caller) == .owner else { return "" }
        return await stop()
    }

    /// Starts if idle, stops if listening; returns whether it is now listening.
    public func toggle(_ options: StartOptions) async throws(SpeechError) -> Bool {
        _ = try standing(of: options.caller)
        switch await call({ .toggle($0, options) }).outcome {
        case .error(let error): throw error
        case .toggled(let listening): return listening
        default: return false
        }
    }

    /// Ends the session without waiting for its last words.
    public func cancel() async {
        _ = await call { .cancel($0) }
    }

    /// ``cancel()`` for `caller`.
    public func cancel(by caller: Caller) async throws(SpeechError) {
        _ = try standing(of: caller)
        await cancel()
    }

    /// ``resetTranscript()`` for `caller`: an app's own transcript (as it sees it) is empty
    /// already when the last session was not its own.
    public func resetTranscript(by caller: Caller) throws(SpeechError) {
        guard try standing(of: caller) == .owner else { return }
        resetTranscript()
    }

    /// Clears the transcript (and says so with an empty final update); listening goes on.
    public func resetTranscript() {
        perform(editor.clearTranscript())
    }

    /// Probes the microphone and the recognizer now; returns the recognizer's status. Calls
    /// made while a probe runs share its answer.
    public func requestAuthorization() async -> RecognizerAuthorization {
        if let probe = authorizationProbe { return await probe.value }
        let probe = SetOnce<RecognizerAuthorization>()
        authorizationProbe = probe
        let queued = jobQueue.yield { [self] in
            let status = await probeAuthorization()
            await answerAuthorization(status)
        }
        if case .terminated = queued { answerAuthorization(authorization) }  // shutting down
        return await probe.value
    }

    /// The microphones; calls made while a listing runs share its answer.
    public func sources() async throws(SpeechError) -> [AudioSource] {
        if let listing = sourceListing { return try await listing.value.get() }
        let listing = SetOnce<Result<[AudioSource], SpeechError>>()
        sourceListing = listing
        let queued = jobQueue.yield { [self] in
            let result: Result<[AudioSource], SpeechError>
            do throws(CaptureError) {
                result = .success(try await microphone.sources())
            } catch {
                result = .failure(SpeechError(error))
                await setMicrophone(Self.microphoneStatus(for: error))
            }
            await answerSources(result)
        }
        if case .terminated = queued { answerSources(.failure(.internal(Self.shuttingDown))) }
        return try await listing.value.get()
    }

    /// Sessions with text, newest first (`limit` 0: all), in one query.
    public func history(limit: Int) throws(SpeechError) -> [HistoryEntry] {
        guard let history else { return [] }
        do {
            return try history.sessions(limit: limit)
        } catch {
            throw SpeechError.internal(error.description)
        }
    }

    // MARK: Who may act

    enum Standing { case owner, bystander }

    /// How `caller` stands to the current (or last) session: the host owns every session; an app
    /// owns the one it started, may start one while none runs (a bystander), and is `Busy` while
    /// another's runs.
    func standing(of caller: Caller?) throws(SpeechError) -> Standing {
        guard let destination = caller?.privateDestination else { return .owner }
        if snapshot.owner?.privateDestination == destination { return .owner }
        if machine.state != .idle { throw Self.othersSession }
        return .bystander
    }

    /// Makes a call of the machine and waits for its reply and the transcript at that moment.
    func call(
        _ makeEvent: (Machine.CallID) -> Machine.Event
    ) async -> (outcome: Machine.Reply, transcript: String) {
        await withCheckedContinuation { continuation in
            call(makeEvent) { continuation.resume(returning: ($0, $1)) }
        }
    }
}
