import Capture
import Testing

@testable import Recognition

/// Stands in for a WebSocket connection: the machine only tells connections apart.
private final class Socket: Sendable {}

private typealias Machine = DeepgramStreamMachine<Socket>
private typealias Step = Machine.Step
private typealias Sends = Machine.Sends
private typealias Effects = Machine.Effects
private typealias AfterEnd = Machine.AfterEnd

/// Reconnects without delay, so the machine's answers can be compared whole.
private let noDelay = Backoff(base: .zero)

private func newMachine(
    replayCapacity: Duration = .seconds(60), interimResults: Bool = true, backoff: Backoff = noDelay
) -> Machine {
    Machine(replayCapacity: replayCapacity, interimResults: interimResults, backoff: backoff)
}

/// A step that only sends these frames.
private func sending(_ frames: Machine.Frame...) -> Step {
    Step(sends: Sends(frames: frames))
}

/// What the loop does after a drop: say so, then connect again.
private func dropped(_ end: WebSocketEnd) -> AfterEnd {
    AfterEnd(effects: Effects(log: .dropped(end), deliver: [.reconnecting(true)]), next: .reconnect(after: .zero))
}

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
        var machine = newMachine(interimResults: interimResults)
        _ = machine.connected(socket, now: t0)
        for value in values { _ = machine.audio(quarter(value), now: t0) }
        return machine
    }

    @Test func audioFinalizeAndCloseStreamLeaveInTheOrderAskedAndNothingFollowsTheClose() {
        var machine = newMachine()
        let socket = Socket()
        #expect(machine.connected(socket, now: t0) == Step())
        #expect(machine.audio(quarter(1), now: t0) == sending(.audio(quarter(1).samples)))
        #expect(machine.finalize(now: t0) == sending(.finalize))
        #expect(machine.audio(quarter(2), now: t0) == sending(.audio(quarter(2).samples)))
        #expect(machine.keepAliveDue(socket) == Sends(frames: [.keepAlive]))
        #expect(machine.finish(now: t0) == sending(.finalize, .closeStream))
        // After CloseStream: no audio, no KeepAlive, no second close, no Finalize.
        #expect(machine.audio(quarter(3), now: t0) == Step())
        #expect(machine.keepAliveDue(socket) == Sends())
        #expect(machine.finish(now: t0) == Step())
        #expect(machine.finalize(now: t0) == Step())
        #expect(
            machine.connectionEnded(socket, .closed(code: 1000, reason: ""))
                == AfterEnd(effects: Effects(log: .closed(code: 1000)), next: .conclude(.finished)))
    }

    @Test func audioThePacerHoldsBackGoesOutBeforeTheFinalizeAndCloseAskedAfterIt() {
        var machine = newMachine()
        _ = machine.connected(Socket(), now: t0)
        // Half a second of head start, then the pacer holds back: the drain is woken once.
        for value: Int16 in 1...3 {
            #expect(machine.audio(quarter(value), now: t0) == sending(.audio(quarter(value).samples)))
        }
        #expect(machine.audio(quarter(4), now: t0) == Step(effects: Effects(wakeDrain: true)))
        #expect(machine.audio(quarter(5), now: t0) == Step())
        #expect(machine.finalize(now: t0) == Step())
        #expect(machine.finish(now: t0) == Step())
        // Too early for the drain: it is told to come back, and nothing goes out.
        let early = machine.drain(now: t0)
        #expect(early.sends == Sends())
        #expect(early.again.map { $0 > .zero } == true)
        let due = machine.drain(now: t0 + .seconds(1))
        #expect(
            due.sends
                == Sends(frames: [
                    .audio(quarter(4).samples), .audio(quarter(5).samples), .finalize, .finalize, .closeStream,
                ]))
        #expect(due.again == nil)
        let done = machine.drain(now: t0 + .seconds(2))
        #expect(done.sends == Sends())
        #expect(done.again == nil)
    }

    @Test func aNewConnectionReplaysWhatTheServerHasNotAnsweredAndDropsRepeatedFinals() {
        let first = Socket()
        let second = Socket()
        var machine = streaming(on: first, sent: [1, 2])
        #expect(
            machine.received(results("one", start: 0, duration: 0.25))
                == Effects(deliver: [
                    .speechActivity(true),
                    .result(
                        RecognitionResult(
                            text: "one", isFinal: true, audioStart: 0, audioEnd: 0.25, endsUtterance: false)),
                ]))
        #expect(machine.connectionEnded(first, .dropped("reset")) == dropped(.dropped("reset")))
        // While down, audio waits, and the old connection gets no KeepAlive.
        #expect(machine.audio(quarter(3), now: t0) == Step())
        #expect(machine.keepAliveDue(first) == Sends())
        #expect(
            machine.reconnected(second, now: t0 + .seconds(1))
                == Step(
                    sends: Sends(frames: [.audio(quarter(2).samples), .audio(quarter(3).samples)]),
                    effects: Effects(deliver: [.reconnecting(false)])))
        // The new connection's time 0 is the first replayed sample.
        // Without `speech_final` a final does not end its utterance.
        let two = RecognitionResult(text: "two", isFinal: true, audioStart: 0.25, audioEnd: 0.5, endsUtterance: false)
        #expect(machine.received(results("two", start: 0, duration: 0.25)) == Effects(deliver: [.result(two)]))
        #expect(machine.received(results("two", start: 0, duration: 0.25)) == Effects())
        #expect(machine.unansweredAudio.start == AudioFormat.sampleRate / 2)
        #expect(machine.unansweredAudio.samples == quarter(3).samples)
        #expect(machine.keepAliveDue(second) == Sends(frames: [.keepAlive]))
    }

    @Test func finishWhileReconnectingClosesOnTheNextConnectionAfterTheReplay() {
        let first = Socket()
        var machine = streaming(on: first, sent: [1])
        let end = WebSocketEnd.closed(code: 1011, reason: "")
        #expect(machine.connectionEnded(first, end) == dropped(end))
        #expect(machine.finish(now: t0) == Step())
        #expect(
            machine.reconnected(Socket(), now: t0)
                == Step(
                    sends: Sends(frames: [.audio(quarter(1).samples), .finalize, .closeStream]),
                    effects: Effects(deliver: [.reconnecting(false)])))
    }

    @Test func cancelDuringTheDrainSendsNothingMoreAndKeepsNoMoreAudio() {
        let socket = Socket()
        var machine = streaming(on: socket, sent: [1, 2, 3])
        #expect(machine.audio(quarter(4), now: t0) == Step(effects: Effects(wakeDrain: true)))
        #expect(machine.cancel() == Step(sends: Sends(abort: true), effects: Effects(stopRun: true)))
        let drained = machine.drain(now: t0 + .seconds(5))
        #expect(drained.sends == Sends())
        #expect(drained.again == nil)
        #expect(machine.audio(quarter(5), now: t0) == Step())
        #expect(machine.finalize(now: t0) == Step())
        #expect(machine.keepAliveDue(socket) == Sends())
        #expect(machine.received(results("late", start: 0, duration: 0.25)) == Effects())
        #expect(machine.received(.speechStarted(timestamp: nil)) == Effects())
        #expect(machine.unansweredAudio.samples.count == AudioFormat.sampleRate)
        #expect(machine.connectionEnded(socket, .dropped("aborted")) == AfterEnd(next: .conclude(.stopped)))
        #expect(machine.failure == nil)
    }

    @Test func stopWhileReconnectingAbortsTheConnectionThatArrivesLate() {
        let first = Socket()
        let late = Socket()
        var machine = streaming(on: first, sent: [1])
        #expect(machine.connectionEnded(first, .dropped("reset")) == dropped(.dropped("reset")))
        // No connection to abort.
        #expect(machine.cancel() == Step(effects: Effects(stopRun: true)))
        // Adopted all the same, so the loop waits for its end, but nothing is replayed on it, and
        // the drop is not said to be over.
        #expect(machine.reconnected(late, now: t0) == Step(sends: Sends(abort: true)))
        #expect(machine.connection === late)
        #expect(machine.connectionEnded(late, .dropped("aborted")) == AfterEnd(next: .conclude(.stopped)))
        #expect(machine.runReturned() == Sends())
    }

    @Test func overflowWhileDownFailsTheSessionButKeepsTheAudioForTheOfflineEngine() {
        var machine = newMachine(replayCapacity: .seconds(1))
        let socket = Socket()
        _ = machine.connected(socket, now: t0)
        #expect(machine.connectionEnded(socket, .dropped("reset")) == dropped(.dropped("reset")))
        for value: Int16 in 1...4 { #expect(machine.audio(quarter(value), now: t0) == Step()) }
        let overflow = StreamLedger.Overflow(unsent: AudioFormat.sampleRate * 5 / 4, capacity: AudioFormat.sampleRate)
        #expect(machine.audio(quarter(5), now: t0) == Step(effects: Effects(log: .overflow(overflow), stopRun: true)))
        #expect(machine.failure?.kind == .backendUnavailable)
        // A later overflow is not reported again; the session stays failed after run() returns.
        #expect(machine.audio(quarter(6), now: t0) == Step())
        #expect(machine.runReturned() == Sends())
        #expect(machine.failure?.kind == .backendUnavailable)
        #expect(machine.unansweredAudio.samples.count == AudioFormat.sampleRate)
    }

    @Test func audioAfterRunReturnedStillGoesToTheLedgerUnlessFinishing() {
        var running = newMachine()
        #expect(running.runReturned() == Sends())
        #expect(running.audio(quarter(1), now: t0) == Step())
        #expect(running.unansweredAudio.samples == quarter(1).samples)

        var finishing = newMachine()
        _ = finishing.finish(now: t0)
        _ = finishing.runReturned()
        _ = finishing.audio(quarter(1), now: t0)
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
        if finishing { _ = machine.finish(now: t0) }
        switch machine.connectionEnded(socket, end).next {
        case .conclude(.finished): #expect(step == "finished")
        case .conclude(.failed): #expect(step == "failed")
        case .reconnect: #expect(step == "reconnect")
        case .conclude(.stopped): Issue.record("stopped, not \(step)")
        }
        #expect(machine.connection == nil)
    }

    @Test func aDropIsRetriedWithinTheBackoffThenTheSessionFailsUnreachable() {
        let socket = Socket()
        var machine = newMachine(backoff: Backoff(base: .zero, maxAttempts: 2))
        _ = machine.connected(socket, now: t0)
        #expect(machine.connectionEnded(socket, .dropped("reset")) == dropped(.dropped("reset")))
        let down = RecognitionError(.backendUnavailable, "no route")
        #expect(
            machine.reconnectFailed(down)
                == AfterEnd(effects: Effects(log: .reconnectFailed(attempt: 1)), next: .reconnect(after: .zero)))
        let spent = machine.reconnectFailed(down)
        #expect(spent.effects == Effects(log: .reconnectFailed(attempt: 2)))
        guard case .conclude(.failed(let error)) = spent.next else {
            Issue.record("did not give up: \(spent)")
            return
        }
        #expect(error.kind == .backendUnavailable)
        #expect(error.unreachable)
        #expect(error.message.contains("after 2 attempts"))
    }

    @Test func aConnectionBackStartsTheBackoffAfresh() {
        let first = Socket()
        let second = Socket()
        var machine = newMachine(backoff: Backoff(base: .zero, maxAttempts: 1))
        _ = machine.connected(first, now: t0)
        #expect(machine.connectionEnded(first, .dropped("reset")) == dropped(.dropped("reset")))
        _ = machine.reconnected(second, now: t0)
        #expect(machine.connectionEnded(second, .dropped("reset")) == dropped(.dropped("reset")))
    }

    @Test func aRefusedReconnectEndsTheSessionAndOneAfterAStopEndsItQuietly() {
        let socket = Socket()
        var refused = streaming(on: socket)
        _ = refused.connectionEnded(socket, .dropped("reset"))
        // A refused key or settings will not get better by retrying.
        let key = RecognitionError(.notAuthorized, "key refused")
        #expect(refused.reconnectFailed(key) == AfterEnd(next: .conclude(.failed(key))))

        var stopped = streaming(on: socket)
        _ = stopped.connectionEnded(socket, .dropped("reset"))
        _ = stopped.cancel()
        #expect(
            stopped.reconnectFailed(RecognitionError(.backendUnavailable, "no route"))
                == AfterEnd(next: .conclude(.stopped)))
    }

    @Test func speechActivityFramesTheResultsAndInterimsFollowTheOption() {
        var machine = streaming(on: Socket(), sent: [1], interimResults: false)
        // No interim asked for: only the start of speech goes out.
        #expect(
            machine.received(results("hel", start: 0, duration: 0.1, isFinal: false))
                == Effects(deliver: [.speechActivity(true)]))
        #expect(machine.received(.speechStarted(timestamp: nil)) == Effects())
        #expect(
            machine.received(results("hello", start: 0, duration: 0.25, speechFinal: true))
                == Effects(deliver: [
                    .result(RecognitionResult(text: "hello", isFinal: true, audioStart: 0, audioEnd: 0.25)),
                    .speechActivity(false),
                ]))
        #expect(machine.received(.utteranceEnd(lastWordEnd: nil)) == Effects())
        #expect(machine.received(.unknown(type: "Odd")) == Effects(log: .unknownType("Odd")))
        #expect(machine.received(.unknown(type: "Odd")) == Effects())
    }
}
