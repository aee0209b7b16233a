import Testing

@testable import Speech

typealias Machine = SessionMachine<String>

@Suite("Session state machine")
struct SessionMachineTests {
    let failure = SpeechError.microphoneUnavailable("mic gone")

    @Test func startThenStop() {
        var machine = Machine()
        #expect(machine.handle(.start(1, "a")) == [.open("a")])
        #expect(machine.state == .starting)
        #expect(machine.handle(.opened) == [.reply(1, .started)])
        #expect(machine.state == .listening)
        #expect(machine.handle(.stop(2)) == [.close(flush: true)])
        #expect(machine.state == .stopping)
        #expect(machine.handle(.closed) == [.reply(2, .stopped)])
        #expect(machine.state == .idle)
    }

    /// Issue 26, defect 1: an engine that ends a listening session by itself ends the core's
    /// session too: idle, a failure, and later calls answered at once.
    @Test func aSessionThatEndsByItselfWhileListeningIsOver() {
        for reconnecting in [false, true] {
            var machine = Machine()
            _ = machine.handle(.start(1, "a"))
            _ = machine.handle(.opened)
            machine.setReconnecting(reconnecting)
            #expect(machine.handle(.closed) == [.recordFailure(.endedByRecognizer, signal: true)])
            #expect(machine.state == .idle)
            #expect(machine.handle(.stop(2)) == [.reply(2, .stopped)])
            #expect(machine.handle(.start(3, "b")) == [.open("b")])
        }
    }

    @Test func startAndStopAreIdempotent() {
        var machine = Machine()
        #expect(machine.handle(.stop(1)) == [.reply(1, .stopped)])
        #expect(machine.handle(.cancel(2)) == [.reply(2, .cancelled)])
        _ = machine.handle(.start(3, "a"))
        _ = machine.handle(.opened)
        #expect(machine.handle(.start(4, "b")) == [.reply(4, .started)])
        #expect(machine.state == .listening)
    }

    @Test func startsDuringStartingShareTheOutcome() {
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        #expect(machine.handle(.start(2, "b")).isEmpty)
        #expect(machine.handle(.opened) == [.reply(1, .started), .reply(2, .started)])

        var failing = Machine()
        _ = failing.handle(.start(1, "a"))
        _ = failing.handle(.start(2, "a"))
        #expect(
            failing.handle(.openFailed(failure)) == [
                .recordFailure(failure, signal: false), .reply(1, .error(failure)), .reply(2, .error(failure)),
            ])
        #expect(failing.state == .idle)
    }

    @Test func stopDuringStartingStopsOnceAudioFlows() {
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        #expect(machine.handle(.stop(2)).isEmpty)
        #expect(machine.handle(.opened) == [.reply(1, .started), .close(flush: true)])
        #expect(machine.state == .stopping)
        #expect(machine.handle(.closed) == [.reply(2, .stopped)])
    }

    @Test func callsDuringStartingKeepTheirOrder() {
        // Start, Toggle (= stop), Stop, Start, all before audio flows: the last Start wins.
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        #expect(machine.handle(.toggle(2, "b")).isEmpty)
        #expect(machine.handle(.stop(3)).isEmpty)
        #expect(machine.handle(.start(4, "c")).isEmpty)
        #expect(machine.handle(.opened) == [.reply(1, .started), .close(flush: true)])
        #expect(
            machine.handle(.closed) == [
                .reply(2, .toggled(listening: false)), .reply(3, .stopped), .open("c"),
            ])
        #expect(machine.handle(.opened) == [.reply(4, .started)])
        #expect(machine.state == .listening)
    }

    @Test func stopDuringAFailedStartStillAnswers() {
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        _ = machine.handle(.stop(2))
        _ = machine.handle(.toggle(3, "a"))  // after a stop, a press means start again
        #expect(
            machine.handle(.openFailed(failure)) == [
                .recordFailure(failure, signal: false), .reply(1, .error(failure)), .reply(2, .stopped), .open("a"),
            ])
        #expect(
            machine.handle(.openFailed(failure)) == [
                .recordFailure(failure, signal: false), .reply(3, .error(failure)),
            ])
        #expect(machine.state == .idle)
    }

    @Test func toggleStartsAndStops() {
        var machine = Machine()
        #expect(machine.handle(.toggle(1, "a")) == [.open("a")])
        #expect(machine.handle(.opened) == [.reply(1, .toggled(listening: true))])
        #expect(machine.handle(.toggle(2, "a")) == [.close(flush: true)])
        #expect(machine.handle(.closed) == [.reply(2, .toggled(listening: false))])
    }

    @Test func doublePressWhileStartingMeansStop() {
        var machine = Machine()
        _ = machine.handle(.toggle(1, "a"))
        #expect(machine.handle(.toggle(2, "a")).isEmpty)
        #expect(machine.handle(.opened) == [.reply(1, .toggled(listening: true)), .close(flush: true)])
        #expect(machine.handle(.closed) == [.reply(2, .toggled(listening: false))])
    }

    @Test func startDuringStoppingRunsAfterTheStopWithTheFirstOptions() {
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        _ = machine.handle(.opened)
        _ = machine.handle(.stop(2))
        #expect(machine.handle(.start(3, "b")).isEmpty)
        #expect(machine.handle(.toggle(4, "c")).isEmpty)
        #expect(machine.handle(.stop(5)).isEmpty)
        #expect(machine.handle(.closed) == [.reply(2, .stopped), .reply(5, .stopped), .open("b")])
        #expect(machine.state == .starting)
        #expect(machine.handle(.opened) == [.reply(3, .started), .reply(4, .toggled(listening: true))])
    }

    @Test func cancelAbortsAtOnceEvenWhileFlushing() {
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        _ = machine.handle(.opened)
        #expect(machine.handle(.cancel(2)) == [.close(flush: false)])
        #expect(machine.handle(.closed) == [.reply(2, .cancelled)])

        var flushing = Machine()
        _ = flushing.handle(.start(1, "a"))
        _ = flushing.handle(.opened)
        _ = flushing.handle(.stop(2))
        #expect(flushing.handle(.cancel(3)) == [.close(flush: false)])
        #expect(flushing.handle(.cancel(4)).isEmpty, "one abort is enough")
        #expect(flushing.handle(.closed) == [.reply(2, .stopped), .reply(3, .cancelled), .reply(4, .cancelled)])
    }

    @Test func cancelWhileStartingWaitsForAudioThenAborts() {
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        #expect(machine.handle(.cancel(2)).isEmpty)
        #expect(machine.handle(.opened) == [.reply(1, .started), .close(flush: false)])
        #expect(machine.handle(.closed) == [.reply(2, .cancelled)])
    }

    @Test func failureWhileListeningSignalsAndGoesIdle() {
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        _ = machine.handle(.opened)
        #expect(machine.handle(.failed(failure)) == [.recordFailure(failure, signal: true)])
        #expect(machine.state == .idle)
        #expect(machine.handle(.closed).isEmpty, "a late completion changes nothing")
        #expect(machine.handle(.opened).isEmpty)
    }

    @Test func failureWhileStoppingStillRepliesToTheStop() {
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        _ = machine.handle(.opened)
        _ = machine.handle(.stop(2))
        #expect(machine.handle(.failed(failure)) == [.recordFailure(failure, signal: true), .reply(2, .stopped)])
    }

    @Test func reconnectingBehavesAsListening() {
        var machine = Machine()
        _ = machine.handle(.start(1, "a"))
        _ = machine.handle(.opened)
        machine.setReconnecting(true)
        #expect(machine.state == .reconnecting)
        #expect(machine.handle(.start(2, "a")) == [.reply(2, .started)])
        machine.setReconnecting(false)
        #expect(machine.state == .listening)
    }

    /// Random event sequences: every call is answered exactly once once the session settles.
    @Test func everyCallIsAnsweredExactlyOnce() {
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<500 {
            var machine = Machine()
            var nextID: UInt64 = 0
            var pending = Set<UInt64>()
            var answered = Set<UInt64>()
            var sessionOpen = false
            func apply(_ event: Machine.Event) {
                for action in machine.handle(event) {
                    switch action {
                    case .reply(let id, _):
                        #expect(pending.remove(id) != nil && answered.insert(id).inserted, "one reply for \(id)")
                    case .open: sessionOpen = true
                    default: break
                    }
                }
            }
            for _ in 0..<40 {
                nextID += 1
                let id = nextID
                switch Int.random(in: 0..<8, using: &generator) {
                case 0: pending.insert(id); apply(.start(id, "o"))
                case 1: pending.insert(id); apply(.stop(id))
                case 2: pending.insert(id); apply(.toggle(id, "o"))
                case 3: pending.insert(id); apply(.cancel(id))
                case 4: if sessionOpen { sessionOpen = false; apply(.opened) }
                case 5: apply(.closed)
                case 6: apply(.failed(failure))
                default: if sessionOpen { sessionOpen = false; apply(.openFailed(failure)) }
                }
            }
            // Settle: let the session finish whatever it was doing.
            for _ in 0..<6 {
                if sessionOpen { sessionOpen = false; apply(.opened) }
                nextID += 1
                pending.insert(nextID)
                apply(.stop(nextID))
                apply(.closed)
            }
            #expect(pending.isEmpty, "unanswered: \(pending)")
            #expect(machine.state == .idle)
        }
    }
}
