import Testing
import Waiting

@Suite struct FirstResultTests {
    @Test func theFirstValueWinsAndTheRestAreCancelledAndAwaited() async {
        let loserEnded = SetOnce<Bool>()
        let winner = await firstResult(
            {
                // Never returns on its own: only the cancellation ends it.
                while !Task.isCancelled { await Task.yield() }
                loserEnded.resolve(Task.isCancelled)
                return "loser"
            },
            { "winner" }
        )
        #expect(winner == "winner")
        // Awaited, not abandoned: it has finished by the time the race returns.
        #expect(loserEnded.isResolved)
        #expect(await loserEnded.value)
    }

    @Test func aTaskThatReturnsNilStepsAside() async {
        let gate = SetOnce<Void>()
        let winner: Int? = await firstResult(
            {
                gate.resolve(())
                return nil
            },
            {
                await gate.value
                return 2
            }
        )
        #expect(winner == 2)
    }

    @Test func nilWhenEveryTaskStepsAside() async {
        let none: Int? = await firstResult({ nil }, { nil })
        #expect(none == nil)
    }
}

@Suite struct SetOnceTests {
    @Test func theFirstResolveWinsForEveryWaiter() async {
        let once = SetOnce<Int>()
        async let early = once.value
        #expect(once.resolve(1))
        #expect(!once.resolve(2))
        #expect(await early == 1)
        #expect(await once.value == 1)
    }
}

@Suite struct TaskWakeupTests {
    @Test func aSignalWithNobodyWaitingIsKeptForTheNextWaitOnce() async {
        let wakeup = TaskWakeup()
        wakeup.signal()
        await wakeup.wait()  // returns: the earlier signal was kept
        let latched = TaskWakeup(latching: true)
        latched.signal()
        await latched.wait()
        await latched.wait()  // a latching wakeup keeps its signal for good
    }

    @Test func cancellationEndsAWait() async {
        let wakeup = TaskWakeup()
        let waiter = Task { await wakeup.wait() }
        waiter.cancel()
        await waiter.value
    }
}
