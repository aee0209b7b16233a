import Capture
import Recognition

/// The core's calls for callers on other threads (replies come on the core's loop), and the same
/// calls made at once for callers already on the core.
extension SpeechCore {
    // MARK: Methods (callback forms, for callers on other threads; replies come on the core's loop)

    /// Runs `body` on the core, after everything submitted before it.
    public nonisolated func submit(_ body: @escaping @Sendable (isolated SpeechCore) -> Void) {
        loop.execute { self.assumeIsolated { body($0) } }
    }

    public nonisolated func start(_ options: StartOptions, reply: @escaping @Sendable (SpeechError?) -> Void) {
        submit { core in
            core.call({ .start($0, options) }) { outcome, _ in
                if case .error(let error) = outcome { reply(error) } else { reply(nil) }
            }
        }
    }

    /// Replies with the session's final transcript once every final is in.
    public nonisolated func stop(reply: @escaping @Sendable (String) -> Void) {
        submit { core in core.call({ .stop($0) }) { _, text in reply(text) } }
    }

    /// Replies with whether it is now listening.
    public nonisolated func toggle(
        _ options: StartOptions, reply: @escaping @Sendable (Result<Bool, SpeechError>) -> Void
    ) {
        submit { core in
            core.call({ .toggle($0, options) }) { outcome, _ in
                switch outcome {
                case .error(let error): reply(.failure(error))
                case .toggled(let listening): reply(.success(listening))
                default: reply(.success(false))
                }
            }
        }
    }

    public nonisolated func cancel(reply: @escaping @Sendable () -> Void) {
        submit { core in core.call({ .cancel($0) }) { _, _ in reply() } }
    }

    /// Probes the microphone and the recognizer now; replies with the recognizer's status.
    public nonisolated func requestAuthorization(reply: @escaping @Sendable (RecognizerAuthorization) -> Void) {
        submit { core in
            core.authorizationWaiters.append(reply)
            guard core.authorizationWaiters.count == 1 else { return }
            core.jobQueue.yield { [core] in
                let status = await core.probeAuthorization()
                await core.answerAuthorization(status)
            }
        }
    }

    public nonisolated func sources(reply: @escaping @Sendable (Result<[AudioSource], SpeechError>) -> Void) {
        submit { core in
            core.sourceWaiters.append(reply)
            guard core.sourceWaiters.count == 1 else { return }
            core.jobQueue.yield { [core] in
                let result: Result<[AudioSource], SpeechError>
                do throws(CaptureError) {
                    result = .success(try await core.microphone.sources())
                } catch {
                    result = .failure(SpeechError(error))
                    await core.setMicrophone(Self.microphoneStatus(for: error))
                }
                await core.answerSources(result)
            }
        }
    }

    // MARK: Calls made at once, for callers already on the core

    /// ``start(_:reply:)`` made at once, inside ``submit(_:)``: the bus adapter checks there who
    /// owns the session, and the call it lets through must not queue behind later calls.
    public func startNow(_ options: StartOptions, reply: @escaping @Sendable (SpeechError?) -> Void) {
        call({ .start($0, options) }) { outcome, _ in
            if case .error(let error) = outcome { reply(error) } else { reply(nil) }
        }
    }

    /// ``stop(reply:)`` made at once (see ``startNow(_:reply:)``).
    public func stopNow(reply: @escaping @Sendable (String) -> Void) {
        call({ .stop($0) }) { _, text in reply(text) }
    }

    /// ``toggle(_:reply:)`` made at once (see ``startNow(_:reply:)``).
    public func toggleNow(_ options: StartOptions, reply: @escaping @Sendable (Result<Bool, SpeechError>) -> Void) {
        call({ .toggle($0, options) }) { outcome, _ in
            switch outcome {
            case .error(let error): reply(.failure(error))
            case .toggled(let listening): reply(.success(listening))
            default: reply(.success(false))
            }
        }
    }

    /// ``cancel(reply:)`` made at once (see ``startNow(_:reply:)``).
    public func cancelNow(reply: @escaping @Sendable () -> Void) {
        call({ .cancel($0) }) { _, _ in reply() }
    }
}
