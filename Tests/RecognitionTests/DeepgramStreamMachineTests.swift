import Capture
import Testing

@testable import Recognition

/// Stands in for a WebSocket connection: the machine only tells connections apart.
private final class Socket: Sendable {}

private typealias Machine = DeepgramStreamMachine<Socket>

/// A quarter second of audio whose samples all read `value`, so replays can be told apart.
private func quarter(_ value: Int16) -> AudioChunk {
    AudioChunk(samples: [Int16](repeating: value, count: AudioFormat.sampleRate / 4))
}

private func results(
    _ text: String, start: Double, duration: Double, isFinal: Bool = true, speechFinal: Bool = false
) -> DeepgramProtocol.ServerMessage {
    .results(
        DeepgramProtocol.Results(
            start: start, duration: duration, isFinal: isFinal, speechFinal: speechFinal, fromFinalize: false,
            transcript: text, confidence: nil, wordCount: text.split(separator: " ").count))
}

@Suite("The streaming protocol (DeepgramStreamMachine)")
struct DeepgramStreamMachineTests {
    let t0 = ContinuousClock.now

    /// A machine streaming on `socket` that has sent quarter seconds of `values`, within the pacer's head start.
    private func streaming(
        on socket: Socket, sent values: [Int16] = [], interimResults: Bool = true
    ) -> Machine {
        var machine = Machine(replayCapacity: .seconds(60), interimResults: interimResults)
        _ = machine.handle(.connected(socket), now: t0)
        for value in values { _ = machine.handle(.audio(quarter(value)), now: t0) }
        return machine
    }

    @Test func audioFinalizeAndCloseStreamLeaveInTheOrderAskedAndNothingFollowsTheClose() {
        var machine = Machine(replayCapacity: .seconds(60), interimResults: true)
        let socket = Socket()
        #expect(machine.handle(.connected(socket), now: t0) == [])
        #expect(machine.handle(.audio(quarter(1)), now: t0) == [.sendAudio(quarter(1).samples)])
        #expect(machine.handle(.finalize, now: t0) == [.sendFinalize])
        #expect(machine.handle(.audio(quarter(2)), now: t0) == [.sendAudio(quarter(2).samples)])
        #expect(machine.handle(.keepAliveDue(socket), now: t0) == [.sendKeepAlive])
        #expect(machine.handle(.finish, now: t0) == [.sendFinalize, .sendCloseStream])
        // After CloseStream: no audio, no KeepAlive, no second close, no Finalize.
        #expect(machine.handle(.audio(quarter(3)), now: t0) == [])
        #expect(machine.handle(.keepAliveDue(socket), now: t0) == [])
        #expect(machine.handle(.finish, now: t0) == [])
        #expect(machine.handle(.finalize, now: t0) == [])
        #expect(
            machine.handle(.connectionEnded(socket, .closed(code: 1000, reason: "")), now: t0) == [
                .conclude(.finished)
            ])
    }

    @Test func audioThePacerHoldsBackGoesOutBeforeTheFinalizeAndCloseAskedAfterIt() {
        var machine = Machine(replayCapacity: .seconds(60), interimResults: true)
        _ = machine.handle(.connected(Socket()), now: t0)
        // Half a second of head start, then the pacer holds back: the drain is woken once.
        for value: Int16 in 1...3 {
            #expect(machine.handle(.audio(quarter(value)), now: t0) == [.sendAudio(quarter(value).samples)])
        }
        #expect(machine.handle(.audio(quarter(4)), now: t0) == [.wakeDrain])
        #expect(machine.handle(.audio(quarter(5)), now: t0) == [])
        #expect(machine.handle(.finalize, now: t0) == [])
        #expect(machine.handle(.finish, now: t0) == [])
        // Too early for the drain: it is told to come back, and nothing goes out.
        let early = machine.handle(.drain, now: t0)
        guard case .drainAgain(let wait) = early.first, early.count == 1 else {
            Issue.record("expected one drainAgain, got \(early)")
            return
        }
        #expect(wait > .zero)
        #expect(
            machine.handle(.drain, now: t0 + .seconds(1)) == [
                .sendAudio(quarter(4).samples), .sendAudio(quarter(5).samples), .sendFinalize, .sendFinalize,
                .sendCloseStream,
            ])
        #expect(machine.handle(.drain, now: t0 + .seconds(2)) == [])
    }

    @Test func aNewConnectionReplaysWhatTheServerHasNotAnsweredAndDropsRepeatedFinals() {
        let first = Socket()
        let second = Socket()
        var machine = streaming(on: first, sent: [1, 2])
        #expect(
            machine.handle(.received(results("one", start: 0, duration: 0.25)), now: t0) == [
                .deliver(.speechActivity(true)),
                .deliver(
                    .result(
                        RecognitionResult(
                            text: "one", isFinal: true, audioStart: 0, audioEnd: 0.25, endsUtterance: false))),
            ])
        #expect(machine.handle(.connectionEnded(first, .dropped("reset")), now: t0) == [.reconnect])
        // While down, audio waits, and the old connection gets no KeepAlive.
        #expect(machine.handle(.audio(quarter(3)), now: t0) == [])
        #expect(machine.handle(.keepAliveDue(first), now: t0) == [])
        #expect(
            machine.handle(.connected(second), now: t0 + .seconds(1)) == [
                .sendAudio(quarter(2).samples), .sendAudio(quarter(3).samples),
            ])
        // The new connection's time 0 is the first replayed sample.
        // Without `speech_final` a final does not end its utterance.
        let two = RecognitionResult(text: "two", isFinal: true, audioStart: 0.25, audioEnd: 0.5, endsUtterance: false)
        #expect(
            machine.handle(.received(results("two", start: 0, duration: 0.25)), now: t0) == [.deliver(.result(two))])
        #expect(machine.handle(.received(results("two", start: 0, duration: 0.25)), now: t0) == [])
        #expect(machine.unansweredAudio.start == AudioFormat.sampleRate / 2)
        #expect(machine.unansweredAudio.samples == quarter(3).samples)
        #expect(machine.handle(.keepAliveDue(second), now: t0) == [.sendKeepAlive])
    }

    @Test func finishWhileReconnectingClosesOnTheNextConnectionAfterTheReplay() {
        let first = Socket()
        var machine = streaming(on: first, sent: [1])
        #expect(machine.handle(.connectionEnded(first, .closed(code: 1011, reason: "")), now: t0) == [.reconnect])
        #expect(machine.handle(.finish, now: t0) == [])
        #expect(
            machine.handle(.connected(Socket()), now: t0) == [
                .sendAudio(quarter(1).samples), .sendFinalize, .sendCloseStream,
            ])
    }

    @Test func cancelDuringTheDrainSendsNothingMoreAndKeepsNoMoreAudio() {
        let socket = Socket()
        var machine = streaming(on: socket, sent: [1, 2, 3])
        #expect(machine.handle(.audio(quarter(4)), now: t0) == [.wakeDrain])
        #expect(machine.handle(.cancel, now: t0) == [.abortConnection, .stopRun])
        #expect(machine.handle(.drain, now: t0 + .seconds(5)) == [])
        #expect(machine.handle(.audio(quarter(5)), now: t0) == [])
        #expect(machine.handle(.finalize, now: t0) == [])
        #expect(machine.handle(.keepAliveDue(socket), now: t0) == [])
        #expect(machine.handle(.received(results("late", start: 0, duration: 0.25)), now: t0) == [])
        #expect(machine.handle(.received(.speechStarted(timestamp: nil)), now: t0) == [])
        #expect(machine.unansweredAudio.samples.count == AudioFormat.sampleRate)
        #expect(machine.handle(.connectionEnded(socket, .dropped("aborted")), now: t0) == [.conclude(.stopped)])
        #expect(machine.failure == nil)
    }

    @Test func stopWhileReconnectingAbortsTheConnectionThatArrivesLate() {
        let first = Socket()
        let late = Socket()
        var machine = streaming(on: first, sent: [1])
        #expect(machine.handle(.connectionEnded(first, .dropped("reset")), now: t0) == [.reconnect])
        // No connection to abort.
        #expect(machine.handle(.cancel, now: t0) == [.stopRun])
        // Adopted all the same, so the loop waits for its end, but nothing is replayed on it.
        #expect(machine.handle(.connected(late), now: t0) == [.abortConnection])
        #expect(machine.connection === late)
        #expect(machine.handle(.connectionEnded(late, .dropped("aborted")), now: t0) == [.conclude(.stopped)])
        #expect(machine.handle(.runReturned, now: t0) == [])
    }

    @Test func overflowWhileDownFailsTheSessionButKeepsTheAudioForTheOfflineEngine() {
        var machine = Machine(replayCapacity: .seconds(1), interimResults: true)
        let socket = Socket()
        _ = machine.handle(.connected(socket), now: t0)
        #expect(machine.handle(.connectionEnded(socket, .dropped("reset")), now: t0) == [.reconnect])
        for value: Int16 in 1...4 { #expect(machine.handle(.audio(quarter(value)), now: t0) == []) }
        let overflow = StreamLedger.Overflow(unsent: AudioFormat.sampleRate * 5 / 4, capacity: AudioFormat.sampleRate)
        #expect(machine.handle(.audio(quarter(5)), now: t0) == [.logOverflow(overflow), .stopRun])
        #expect(machine.failure?.kind == .backendUnavailable)
        // A later overflow is not reported again; the session stays failed after run() returns.
        #expect(machine.handle(.audio(quarter(6)), now: t0) == [])
        #expect(machine.handle(.runReturned, now: t0) == [])
        #expect(machine.failure?.kind == .backendUnavailable)
        #expect(machine.unansweredAudio.samples.count == AudioFormat.sampleRate)
    }

    @Test func audioAfterRunReturnedStillGoesToTheLedgerUnlessFinishing() {
        var running = Machine(replayCapacity: .seconds(60), interimResults: true)
        #expect(running.handle(.runReturned, now: t0) == [])
        #expect(running.handle(.audio(quarter(1)), now: t0) == [])
        #expect(running.unansweredAudio.samples == quarter(1).samples)

        var finishing = Machine(replayCapacity: .seconds(60), interimResults: true)
        _ = finishing.handle(.finish, now: t0)
        _ = finishing.handle(.runReturned, now: t0)
        _ = finishing.handle(.audio(quarter(1)), now: t0)
        #expect(finishing.unansweredAudio.samples.isEmpty)
    }

    @Test(arguments: [
        (false, WebSocketEnd.closed(code: 1000, reason: ""), "failed"),
        (true, .closed(code: 1000, reason: ""), "finished"),
        (true, .closed(code: 1008, reason: "bad audio"), "failed"),
        (false, .closed(code: 1011, reason: ""), "reconnect"),
        (true, .dropped("reset"), "reconnect"),
    ])
    func aConnectionsEndDecidesTheLoopsNextStep(finishing: Bool, end: WebSocketEnd, step: String) {
        let socket = Socket()
        var machine = streaming(on: socket)
        if finishing { _ = machine.handle(.finish, now: t0) }
        let actions = machine.handle(.connectionEnded(socket, end), now: t0)
        #expect(actions.count == 1)
        switch actions.first {
        case .conclude(.finished)?: #expect(step == "finished")
        case .conclude(.failed)?: #expect(step == "failed")
        case .reconnect?: #expect(step == "reconnect")
        default: Issue.record("unexpected \(actions)")
        }
        #expect(machine.connection == nil)
    }

    @Test func speechActivityFramesTheResultsAndInterimsFollowTheOption() {
        var machine = streaming(on: Socket(), sent: [1], interimResults: false)
        // No interim asked for: only the start of speech goes out.
        #expect(
            machine.handle(.received(results("hel", start: 0, duration: 0.1, isFinal: false)), now: t0) == [
                .deliver(.speechActivity(true))
            ])
        #expect(machine.handle(.received(.speechStarted(timestamp: nil)), now: t0) == [])
        #expect(
            machine.handle(.received(results("hello", start: 0, duration: 0.25, speechFinal: true)), now: t0) == [
                .deliver(.result(RecognitionResult(text: "hello", isFinal: true, audioStart: 0, audioEnd: 0.25))),
                .deliver(.speechActivity(false)),
            ])
        #expect(machine.handle(.received(.utteranceEnd(lastWordEnd: nil)), now: t0) == [])
        #expect(machine.handle(.received(.unknown(type: "Odd")), now: t0) == [.logUnknownType("Odd")])
        #expect(machine.handle(.received(.unknown(type: "Odd")), now: t0) == [])
    }
}
