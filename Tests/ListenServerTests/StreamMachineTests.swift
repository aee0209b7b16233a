import Testing

@testable import ListenServer

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
                .releaseSlot, .sendMetadata, .sendClose(code: 1000, reason: ""), .endOutput,
                .startTimer(.closeHandshake),
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
        #expect(!actions.contains(.releaseSlot), "the session has not ended yet")
        guard case .sendClose(let code, let reason) = actions.dropFirst().first else {
            Issue.record("no close: \(actions)")
            return
        }
        #expect(code == 1011)
        #expect(reason.hasPrefix("NET-0001") && reason.contains("10 seconds"))
        // The session's end after the cancel sends nothing more; the stream's slot is free.
        #expect(machine.handle(.sessionEnded(failure: nil)) == [.releaseSlot])
    }

    @Test func anEngineFailureOrUnaskedEndIs1011NET0000() {
        var failed = StreamMachine(idleTimeoutSeconds: 10)
        #expect(
            failed.handle(.sessionEnded(failure: "backlog")) == [
                .releaseSlot, .sendClose(code: 1011, reason: "NET-0000: backlog"), .endOutput, .startTimer(.closeHandshake),
            ])
        var ended = StreamMachine(idleTimeoutSeconds: 10)
        let actions = ended.handle(.sessionEnded(failure: nil))
        #expect(actions.prefix(2) == [.releaseSlot, .sendMetadata])
        #expect(actions.contains(.sendClose(code: 1011, reason: "NET-0000: the local engine ended the stream")))
    }

    @Test func theClientClosingOrVanishingCancelsTheSession() {
        var closing = StreamMachine(idleTimeoutSeconds: 10)
        #expect(
            closing.handle(.clientClosed(code: 1005)) == [
                .cancelSession, .sendClose(code: 1000, reason: ""), .endOutput, .startTimer(.closeHandshake),
            ])
        #expect(closing.handle(.sessionEnded(failure: nil)) == [.releaseSlot])
        #expect(closing.handle(.writerDone) == [.stop])

        var vanishing = StreamMachine(idleTimeoutSeconds: 10)
        #expect(vanishing.handle(.clientGone) == [.cancelSession, .endOutput, .stop])
        #expect(vanishing.reason == "client gone")

        var deaf = StreamMachine(idleTimeoutSeconds: 10)
        #expect(deaf.handle(.overflow) == [.cancelSession, .endOutput, .stop])
    }
}

@Suite("Wire helpers")
struct WireHelperTests {
    @Test func resultsTranslatorSpreadsWordsAndFollowsTheRequest() throws {
        var request = ListenRequest()
        request.interimResults = false
        request.utteranceEndMilliseconds = 1000
        var translator = ResultsTranslator(request: request, requestID: "r", model: .init(name: "m"))
        #expect(translator.messages(for: .result(.init(text: "a b", isFinal: false)), audioSeconds: 1).isEmpty)
        #expect(translator.messages(for: .speechActivity(true), audioSeconds: 1).isEmpty)
        // The end of speech before the final: UtteranceEnd waits for it.
        #expect(translator.messages(for: .speechActivity(false), audioSeconds: 2).isEmpty)
        let messages = translator.messages(
            for: .result(.init(text: "Hello, world.", isFinal: true, audioStart: 0.5, audioEnd: 1.5)), audioSeconds: 2)
        #expect(messages.count == 2)
        #expect(messages[0].contains(#""punctuated_word":"world.""#) && messages[0].contains(#""word":"world""#))
        #expect(messages[0].contains(#""start":1,"word":"world""#), "\(messages[0])")
        #expect(messages[1].contains(#""type":"UtteranceEnd""#) && messages[1].contains(#""last_word_end":1.5"#))
    }

    @Test func clientMessagesDecode() {
        #expect(ServerMessages.decodeClient(#"{"type":"KeepAlive"}"#) == .keepAlive)
        #expect(ServerMessages.decodeClient(#"{"type":"Finalize"}"#) == .finalize)
        #expect(ServerMessages.decodeClient(#" {"type":"CloseStream","extra":1}"#) == .closeStream)
        for text in ["", "null", "[1]", #"{"kind":"KeepAlive"}"#, #"{"type":"keepalive"}"#] {
            guard case .unknown = ServerMessages.decodeClient(text) else {
                Issue.record("\(text) decoded as a message")
                continue
            }
        }
    }
}
