/// The bus's `NameOwnerChanged(name, old_owner, new_owner)` signal, decoded in one place. An
/// empty owner is none: `newOwner == nil` means the name was released or its owner left.
public struct NameOwnerChange: Sendable, Equatable {
    public var name: String
    public var oldOwner: String?
    public var newOwner: String?

    /// Decodes the signal's arguments; nil unless they are three strings.
    public init?(arguments: [DBusValue]) {
        guard arguments.count == 3, let name = arguments[0].string, let old = arguments[1].string,
            let new = arguments[2].string
        else { return nil }
        self.name = name
        oldOwner = old.isEmpty ? nil : old
        newOwner = new.isEmpty ? nil : new
    }
}
