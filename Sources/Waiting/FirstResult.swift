/// Runs `tasks` side by side; the first to return a value wins. The others are then cancelled
/// and awaited, so nothing they started outlives the call. A task that returns nil steps aside
/// without ending the race; nil comes back only when every task did.
public func firstResult<Value: Sendable>(
    of _: Value.Type = Value.self, _ tasks: (@Sendable () async -> Value?)...
) async -> Value? {
    await withTaskGroup(of: Value?.self) { group in
        for task in tasks { group.addTask(operation: task) }
        for await result in group {
            guard let result else { continue }
            group.cancelAll()
            return result
        }
        return nil
    }
}
