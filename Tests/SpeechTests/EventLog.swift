import Speech
import Synchronization
import TestSupport

/// Events of a core as they arrive, for waiting on the one that matters.
final class EventLog: Sendable {
    private typealias Condition = @Sendable ([SpeechEvent]) -> Bool
    private struct State {
        var events: [SpeechEvent] = []
        var waiters: [Int: (condition: Condition, continuation: CheckedContinuation<Bool, Never>)] = [:]
        var nextID = 0
    }
    private let state = Mutex(State())

    func append(_ event: SpeechEvent) {
        let ready = state.withLock { state in
            state.events.append(event)
            let events = state.events
            let ready = state.waiters.filter { $0.value.condition(events) }
            for id in ready.keys { state.waiters[id] = nil }
            return ready.values.map(\.continuation)
        }
        for continuation in ready { continuation.resume(returning: true) }
    }

    var all: [SpeechEvent] { state.withLock { $0.events } }

    var states: [SessionState] { all.compactMap { if case .state(let state) = $0 { state } else { nil } } }
    var failures: [SpeechError] { all.compactMap { if case .sessionFailed(let error) = $0 { error } else { nil } } }
    var finals: [String] {
        all.compactMap { if case .transcript(_, let update?) = $0, update.isFinal { update.segment } else { nil } }
    }
    var levels: Int { all.filter { if case .audioLevel = $0 { true } else { false } }.count }

    /// Waits until `condition` holds for the events so far; throws ``WaitTimedOut`` (naming
    /// `what` and the events that did come) if it does not within `timeout`.
    func wait(
        _ what: @autoclosure () -> String = "the awaited events", timeout: Duration = .seconds(10),
        fileID: String = #fileID, line: Int = #line, until condition: @escaping @Sendable ([SpeechEvent]) -> Bool
    ) async throws {
        guard await happens(within: timeout, condition) else {
            let seen = all.filter { if case .audioLevel = $0 { false } else { true } }.map { "\($0)" }
            throw WaitTimedOut(
                "\(what()); events (audio levels left out): \(describeLast(seen, 8))", after: timeout, fileID: fileID,
                line: line)
        }
    }

    /// Waits until the core reports a session failure; throws ``WaitTimedOut`` if it does not.
    func waitForFailure(timeout: Duration = .seconds(10), fileID: String = #fileID, line: Int = #line) async throws {
        try await wait("a session failure", timeout: timeout, fileID: fileID, line: line) { events in
            events.contains { if case .sessionFailed = $0 { true } else { false } }
        }
    }

    /// Waits until the core reports this state (after the first `count` events); throws
    /// ``WaitTimedOut`` if it does not.
    func wait(
        for state: SessionState, after count: Int = 0, timeout: Duration = .seconds(10), fileID: String = #fileID,
        line: Int = #line
    ) async throws {
        try await wait("state \(state)", timeout: timeout, fileID: fileID, line: line) { events in
            events.dropFirst(count).contains { if case .state(state) = $0 { true } else { false } }
        }
    }

    /// Whether `condition` comes to hold for the events within `timeout`: for checking that an
    /// event does *not* come (use the answer); to expect one, ``wait(_:timeout:fileID:line:until:)``.
    func happens(within timeout: Duration, _ condition: @escaping @Sendable ([SpeechEvent]) -> Bool) async -> Bool {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                await withCheckedContinuation { continuation in
                    let now = self.state.withLock { state in
                        if condition(state.events) { return true }
                        state.waiters[id] = (condition, continuation)
                        return false
                    }
                    if now { continuation.resume(returning: true) }
                }
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                // Gave up: wake the waiter with false (if the event did not come meanwhile).
                self.state.withLock { $0.waiters.removeValue(forKey: id) }?.continuation.resume(returning: false)
                return false
            }
            let met = await group.next() ?? false
            group.cancelAll()
            return met
        }
    }
}
