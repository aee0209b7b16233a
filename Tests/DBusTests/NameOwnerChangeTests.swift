import DBus
import Testing

/// `NameOwnerChanged` is decoded in one place; an empty owner is none.
@Suite struct NameOwnerChangeTests {
    @Test func anOwnerLeavingHasNoNewOwner() throws {
        let change = try #require(NameOwnerChange(arguments: [.string(":1.7"), .string(":1.7"), .string("")]))
        #expect(change == NameOwnerChange(arguments: [.string(":1.7"), .string(":1.7"), .string("")]))
        #expect(change.name == ":1.7" && change.oldOwner == ":1.7" && change.newOwner == nil)
        let taken = try #require(NameOwnerChange(arguments: [.string("a.b"), .string(""), .string(":1.9")]))
        #expect(taken.oldOwner == nil && taken.newOwner == ":1.9")
    }

    @Test func otherArgumentsAreNoChange() {
        #expect(NameOwnerChange(arguments: [.string("a.b"), .string("")]) == nil)
        #expect(NameOwnerChange(arguments: [.string("a.b"), .uint32(1), .string("")]) == nil)
    }
}
