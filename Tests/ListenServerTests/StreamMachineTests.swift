import ListenServer
import Testing

@Suite("How a stream ends (StreamMachine)")
struct StreamMachineTests {
    @Test func closeStreamFlushesThenMetadataThenCloses1000() {
        var machine = StreamMachine(idleTimeoutSeconds: 10)
        #expect(machine.handle(.closeStream) == [.finishSession, .startTimer(.flush)])
        // A second CloseStream, and the idle timer, change nothing while flushing.
        #expect(machine.handle(.closeStream) == [])
        #expect(machine.handle(.idle) == [])
        #expect(
            machine.handle(.sessionEnded(failure: nil)) == [
                .sendMetadata, .sendClose(code: 1000, reason: ""), .endOutput, .startTimer(.closeHandshake),
            ])
        #expect(machine.handle(.flushTimeout) == [])
        #expect(machine.handle(.writerDone) == [])
        #expect(machine.handle(.clientClosed(code: 1000)) == [.stop])
        #expect(machine.reason == "CloseStream")
    }

    @Test func shutdownFlushesAndCloses1001AndASlowFlushIsCancelled() {
        var machine = StreamMachine(idleTimeoutSeconds: 10)
        #expect(machine.handle(.shutdown) == [.finishSession, .startTimer(.flush)])
        #expect(machine.handle(.flushTimeout) == [.cancelSession])
        #expect(machine.handle(.sessionEnded(failure: nil)).contains(.sendClose(code: 1001, reason: "")))
        #expect(machine.handle(.closeTimeout) == [.stop])
    }

    @Test func idleIsNET0001() {
        var machine = StreamMachine(idleTimeoutSeconds: 10)
        let actions = machine.handle(.idle)
        #expect(actions.first == .cancelSession)
        guard case .sendClose(let code, let reason) = actions.dropFirst().first else {
            Issue.record("no close: \(actions)")
            return
        }
        #expect(code == 1011)
        #expect(reason.hasPrefix("NET-0001") && reason.contains("10 seconds"))
        // The session's end after the cancel sends nothing more.
        #expect(machine.handle(.sessionEnded(failure: nil)) == [])
    }

    @Test func anEngineFailureOrUnaskedEndIs1011NET0000() {
        var failed = StreamMachine(idleTimeoutSeconds: 10)
        #expect(
            failed.handle(.sessionEnded(failure: "backlog")) == [
                .sendClose(code: 1011, reason: "NET-0000: backlog"), .endOutput, .startTimer(.closeHandshake),
            ])
        var ended = StreamMachine(idleTimeoutSeconds: 10)
        let actions = ended.handle(.sessionEnded(failure: nil))
        #expect(actions.first == .sendMetadata)
        #expect(actions.contains(.sendClose(code: 1011, reason: "NET-0000: the local engine ended the stream")))
    }

    @Test func theClientClosingOrVanishingCancelsTheSession() {
        var closing = StreamMachine(idleTimeoutSeconds: 10)
        #expect(
            closing.handle(.clientClosed(code: 1005)) == [
                .cancelSession, .sendClose(code: 1000, reason: ""), .endOutput, .startTimer(.closeHandshake),
            ])
        #expect(closing.handle(.sessionEnded(failure: nil)) == [])
        #expect(closing.handle(.writerDone) == [.stop])

        var vanishing = StreamMachine(idleTimeoutSeconds: 10)
        #expect(vanishing.handle(.clientGone) == [.cancelSession, .endOutput, .stop])
        #expect(vanishing.reason == "client gone")

        var deaf = StreamMachine(idleTimeoutSeconds: 10)
        #expect(deaf.handle(.overflow) == [.cancelSession, .endOutput, .stop])
    }
}
