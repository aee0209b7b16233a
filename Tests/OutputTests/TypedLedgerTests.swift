import Testing

@testable import Output

/// Issue 37: the typing tools take back only what they typed themselves.
@Suite struct TypedLedgerTests {
    @Test func onlyTheNewestTypedTextIsTakenBackNewestFirst() {
        var ledger = TypedLedger()
        ledger.typed("One.", into: .x11("41"))
        ledger.typed(" Two.", into: .x11("41"))
        #expect(ledger.takeLast(" Two.") == .init(text: " Two.", window: .x11("41")))
        #expect(ledger.takeLast("One.") == .init(text: "One.", window: .x11("41")))
        #expect(ledger.takeLast("One.") == nil, "taken already")
    }

    @Test func textThatWasNeverTypedIsNotTakenBackAndEndsTheLedger() {
        var ledger = TypedLedger()
        ledger.typed("One.", into: .notKnowable)
        #expect(ledger.takeLast(" Lost.") == nil, "a final the tool never typed")
        #expect(ledger.takeLast("One.") == nil, "what came before is no longer known to be just before the cursor")
    }

    @Test func theLedgerIsBounded() {
        var ledger = TypedLedger()
        for index in 0..<(TypedLedger.limit + 5) { ledger.typed("w\(index)", into: .notKnowable) }
        #expect(ledger.entries.count == TypedLedger.limit)
        #expect(ledger.entries.first?.text == "w5")
    }
}
