import CPocketSphinx
import Capture
import Foundation
import Logging
import Synchronization
import Waiting

/// The offline engine's stream of one session; its work runs on the decoder thread, which also delivers
/// its events and ends its `run()`.
final class PocketSphinxStream: RecognitionStream {
    let events: any RecognitionEventSink
    let interimResults: Bool
    private let decoder: PocketSphinxEngine
    private let state = Mutex(State())
    private let outcome = SetOnce<Result<Void, RecognitionError>>()

    private struct State {
        var phase = Phase.active
    }

    private enum Phase {
        case active
        /// finish() was called: the decoder works through the queued audio, then the last final.
        case finishing
        /// cancel() or a backlog overflow: the queued audio is gone, the decoder ends the session.
        case stopping
        case ended
    }

    init(decoder: PocketSphinxEngine, interimResults: Bool, events: any RecognitionEventSink) {
        self.decoder = decoder
        self.interimResults = interimResults
        self.events = events
    }

    func run() async throws(RecognitionError) {
        try await outcome.wait { [self] in cancel() }
    }

    func send(_ chunk: AudioChunk) {
        guard !chunk.samples.isEmpty else { return }
        let queue = decoder.queue
        let overflow = state.withLock { state -> RecognitionError? in
            guard case .active = state.phase else { return nil }
            if queue.push(.audio(self, chunk), weight: chunk.samples.count) { return nil }
            let error = RecognitionError(
                .backendUnavailable,
                "The offline engine fell \(Self.seconds(queue.capacity)) s behind real time (the computer is too busy), so the session stopped; what was recognized before is kept."
            )
            state.phase = .stopping
            // Its backlog goes; the stop reports the failure after the session's last event.
            queue.removeAll { $0.session === self }
            queue.push(.stop(self, error))
            return error
        }
        if overflow != nil {
            decoder.logger.warning(
                "offline engine fell behind, session stopped",
                metadata: ["queued_seconds": "\(Self.seconds(queue.capacity))"])
        }
    }

    func finish() {
        state.withLock { state in
            guard case .active = state.phase else { return }
            state.phase = .finishing
            decoder.queue.push(.finish(self))
        }
    }

    func finalize() {
        state.withLock { state in
            guard case .active = state.phase else { return }
            decoder.queue.push(.finalize(self))
        }
    }

    func cancel() {
        state.withLock { state in
            switch state.phase {
            case .active, .finishing:
                state.phase = .stopping
                // The stop comes up next instead of after the queued audio.
                decoder.queue.removeAll { $0.session === self }
                decoder.queue.push(.stop(self, nil))
            case .stopping, .ended:
                break
            }
        }
    }

    /// Called on the decoder thread after the session's last event; the first outcome counts.
    func complete(_ outcome: Result<Void, RecognitionError>) {
        decoder.release(self)
        state.withLock { $0.phase = .ended }
        self.outcome.resolve(outcome)
    }

    private static func seconds(_ samples: Int) -> String {
        let seconds = Double(samples) / Double(AudioFormat.sampleRate)
        return seconds == seconds.rounded() ? "\(Int(seconds))" : "\(seconds)"
    }
}
