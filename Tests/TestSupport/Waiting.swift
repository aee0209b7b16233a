/// A wait for something a test expected ran out of time: the test fails with what was awaited,
/// for how long, and where it waited.
///
/// The waits that expect something throw this (`try await waitFor { … }`), so a timeout cannot
/// pass unnoticed. A test that checks that something does *not* happen within a bound, or acts on
/// whether it did, asks ``happens(within:_:)`` (or a helper's `happens(within:)`) instead, and
/// must use its answer.
public struct WaitTimedOut: Error, CustomStringConvertible {
    /// What was awaited, with what was seen instead where the waiter knows it.
    public var what: String
    public var timeout: Duration
    /// Where the test waited (`Module/File.swift:42`).
    public var location: String

    public init(_ what: String, after timeout: Duration, fileID: String = #fileID, line: Int = #line) {
        self.what = what
        self.timeout = timeout
        location = "\(fileID):\(line)"
    }

    public var description: String { "\(location): gave up after \(timeout) waiting for \(what)" }
}

/// Waits until a condition holds that no event announces (a file's content, a counter), checking
/// it every 20 ms; throws ``WaitTimedOut`` naming `what` if `timeout` passes first. `what` is
/// worked out only then, so it may read logs.
public func waitFor(
    _ what: @autoclosure () -> String = "the condition", timeout: Duration = .seconds(30),
    fileID: String = #fileID, line: Int = #line, _ condition: () async throws -> Bool
) async throws {
    guard try await happens(within: timeout, condition) else {
        throw WaitTimedOut(what(), after: timeout, fileID: fileID, line: line)
    }
}

/// Whether `condition` comes to hold within `timeout` (checked every 20 ms). For a test that
/// checks that something does *not* happen, or that acts on the answer: use the result
/// (`#expect(await !happens(within: .seconds(1)) { … })`); to expect it, use ``waitFor(_:timeout:fileID:line:_:)``.
public func happens(within timeout: Duration, _ condition: () async throws -> Bool) async rethrows -> Bool {
    let deadline = ContinuousClock.now + timeout
    while try await !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try? await Task.sleep(for: .milliseconds(20))
    }
    return true
}

/// The last `count` items as a short list, for saying what a wait saw instead.
public func describeLast(_ items: [String], _ count: Int = 12) -> String {
    let shown = items.suffix(count).joined(separator: ", ")
    return items.count > count ? "\(items.count) in all, the last \(count): \(shown)" : "[\(shown)]"
}
