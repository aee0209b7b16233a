import CDBus

/// An owned reference to a libdbus message.
///
/// Not `Sendable`: a message is created, read and sent only on the connection's owner thread.
/// Other threads describe what to send with Sendable values (``OutgoingMessage``,
/// ``ReplyAddress``, ``DBusValue``) and the owner thread builds the message from them.
final class Message {
    let raw: OpaquePointer

    init(adopting raw: OpaquePointer) { self.raw = raw }
    init(retaining raw: OpaquePointer) {
        dbus_message_ref(raw)
        self.raw = raw
    }
    deinit { dbus_message_unref(raw) }

    var type: Int32 { dbus_message_get_type(raw) }
    var path: String? { dbus_message_get_path(raw).map { String(cString: $0) } }
    var interface: String? { dbus_message_get_interface(raw).map { String(cString: $0) } }
    var member: String? { dbus_message_get_member(raw).map { String(cString: $0) } }
    var sender: String? { dbus_message_get_sender(raw).map { String(cString: $0) } }
    var errorName: String? { dbus_message_get_error_name(raw).map { String(cString: $0) } }
    var signature: String { dbus_message_get_signature(raw).map { String(cString: $0) } ?? "" }
    var expectsReply: Bool { dbus_message_get_no_reply(raw) == 0 }

    /// A method return to the call at `address`, as `dbus_message_new_method_return` builds it;
    /// nil when out of memory. The values must have passed `Marshal.check`.
    static func methodReturn(to address: ReplyAddress, _ values: [DBusValue]) -> Message? {
        guard let message = reply(DBUS_MESSAGE_TYPE_METHOD_RETURN, to: address),
            (try? message.append(values)) != nil
        else { return nil }
        return message
    }

    /// An error reply to the call at `address`, as `dbus_message_new_error` builds it; nil when
    /// out of memory. The name must be valid and the text free of NULs (see ``DBusReply``).
    static func error(to address: ReplyAddress, _ error: DBusError) -> Message? {
        guard let message = reply(DBUS_MESSAGE_TYPE_ERROR, to: address),
            dbus_message_set_error_name(message.raw, error.name) != 0,
            (try? message.append([.string(error.message)])) != nil
        else { return nil }
        return message
    }

    private static func reply(_ type: Int32, to address: ReplyAddress) -> Message? {
        guard let raw = dbus_message_new(type) else { return nil }
        let message = Message(adopting: raw)
        guard dbus_message_set_reply_serial(raw, address.serial) != 0 else { return nil }
        // The sender came from the bus daemon, so it is a valid name; peer-to-peer calls have none.
        if let sender = address.sender, dbus_message_set_destination(raw, sender) == 0 { return nil }
        dbus_message_set_no_reply(raw, 1)
        return message
    }

    /// The message's arguments, decoded.
    func arguments() -> [DBusValue] {
        var iter = DBusMessageIter()
        guard dbus_message_iter_init(raw, &iter) != 0 else { return [] }
        var values: [DBusValue] = []
        repeat {
            guard let value = Marshal.read(&iter) else { break }
            values.append(value)
        } while dbus_message_iter_next(&iter) != 0
        return values
    }

    /// Appends arguments; every value is checked before anything is written.
    func append(_ values: [DBusValue]) throws(DBusError) {
        for value in values { try Marshal.check(value, depth: 0) }
        var iter = DBusMessageIter()
        dbus_message_iter_init_append(raw, &iter)
        for value in values {
            guard Marshal.append(value, to: &iter) else { throw .failed("out of memory marshalling") }
        }
    }
}

/// Where the reply to a method call goes: enough to build it later, on the owner thread.
struct ReplyAddress: Sendable {
    var serial: UInt32
    var sender: String?
    var expectsReply: Bool

    init(serial: UInt32, sender: String?, expectsReply: Bool) {
        self.serial = serial
        self.sender = sender
        self.expectsReply = expectsReply
    }

    init(of call: Message) {
        self.init(serial: dbus_message_get_serial(call.raw), sender: call.sender, expectsReply: call.expectsReply)
    }
}

/// A method call or signal described by Sendable values. Creating one validates every name and
/// value on the caller's thread, so errors reach the caller; ``build()`` makes the libdbus
/// message on the owner thread.
struct OutgoingMessage: Sendable {
    private enum Kind: Sendable {
        case methodCall(destination: String?)
        // A signal with a destination goes to that connection only (unicast).
        case signal(destination: String?)
    }
    private let kind: Kind
    private let path: String
    private let interface: String?
    private let member: String
    private let arguments: [DBusValue]

    static func methodCall(
        destination: String?, path: String, interface: String?, member: String, arguments: [DBusValue]
    ) throws(DBusError) -> OutgoingMessage {
        if let destination { try Validate.busName(destination) }
        let message = OutgoingMessage(
            kind: .methodCall(destination: destination), path: path, interface: interface, member: member,
            arguments: arguments)
        try message.validate()
        return message
    }

    static func signal(
        path: String, interface: String, member: String, arguments: [DBusValue], destination: String? = nil
    ) throws(DBusError) -> OutgoingMessage {
        if let destination { try Validate.busName(destination) }
        let message = OutgoingMessage(
            kind: .signal(destination: destination), path: path, interface: interface, member: member,
            arguments: arguments)
        try message.validate()
        return message
    }

    private init(kind: Kind, path: String, interface: String?, member: String, arguments: [DBusValue]) {
        self.kind = kind
        self.path = path
        self.interface = interface
        self.member = member
        self.arguments = arguments
    }

    private func validate() throws(DBusError) {
        try Validate.path(path)
        if let interface { try Validate.interface(interface) }
        try Validate.member(member)
        for value in arguments { try Marshal.check(value, depth: 0) }
    }

    /// Owner thread: the libdbus message; throws only when out of memory.
    func build() throws(DBusError) -> Message {
        let raw: OpaquePointer? =
            switch kind {
            case .methodCall(let destination): dbus_message_new_method_call(destination, path, interface, member)
            case .signal: dbus_message_new_signal(path, interface, member)
            }
        guard let raw else { throw .failed("out of memory creating a message") }
        let message = Message(adopting: raw)
        if case .signal(let destination?) = kind, dbus_message_set_destination(raw, destination) == 0 {
            throw .failed("out of memory creating a message")
        }
        try message.append(arguments)
        return message
    }
}

/// Conversion between ``DBusValue`` and libdbus message iterators.
enum Marshal {
    static let maxDepth = 64

    /// Strips NUL characters, which D-Bus strings cannot carry.
    static func sanitized(_ string: String) -> String {
        string.utf8.contains(0) ? String(string.filter { $0 != "\0" }) : string
    }

    /// Throws if libdbus would refuse (or abort on) this value.
    static func check(_ value: DBusValue, depth: Int) throws(DBusError) {
        guard depth < maxDepth else { throw .invalidArgs("value nests too deeply") }
        switch value {
        case .string(let s):
            if s.utf8.contains(0) { throw .invalidArgs("strings must not contain NUL characters") }
        case .objectPath(let p): try Validate.path(p)
        case .signature(let g): _ = try DBusType.parse(signature: g)
        case .variant(let inner): try check(inner, depth: depth + 1)
        case .array(let element, let items):
            if element == .unixFD { throw .invalidArgs("file descriptors are not supported") }
            for item in items {
                guard item.type == element else {
                    throw .invalidArgs("array of '\(element)' holds a '\(item.type)'")
                }
                try check(item, depth: depth + 1)
            }
        case .dictionary(let keyType, let valueType, let entries):
            guard keyType.isBasic, keyType != .unixFD else {
                throw .invalidArgs("dictionary keys must be a basic type")
            }
            for entry in entries {
                guard entry.key.type == keyType, entry.value.type == valueType else {
                    throw .invalidArgs("dictionary of '{\(keyType)\(valueType)}' holds a wrong entry")
                }
                try check(entry.key, depth: depth + 1)
                try check(entry.value, depth: depth + 1)
            }
        case .structure(let fields):
            guard !fields.isEmpty else { throw .invalidArgs("structs must have at least one field") }
            for field in fields { try check(field, depth: depth + 1) }
        default: break
        }
    }

    private static func code(_ ascii: Unicode.Scalar) -> Int32 { Int32(ascii.value) }

    private static func appendBasic<T: BitwiseCopyable>(
        _ iter: inout DBusMessageIter, _ type: Unicode.Scalar, _ value: T
    )
        -> Bool
    {
        var copy = value
        return dbus_message_iter_append_basic(&iter, code(type), &copy) != 0
    }

    private static func appendString(_ iter: inout DBusMessageIter, _ type: Unicode.Scalar, _ s: String)
        -> Bool
    {
        s.withCString { pointer in
            var p: UnsafePointer<CChar>? = pointer
            return dbus_message_iter_append_basic(&iter, code(type), &p) != 0
        }
    }

    private static func withContainer(
        _ iter: inout DBusMessageIter, _ type: Unicode.Scalar, _ signature: String?,
        _ body: (inout DBusMessageIter) -> Bool
    ) -> Bool {
        var sub = DBusMessageIter()
        let opened: Bool =
            if let signature {
                dbus_message_iter_open_container(&iter, code(type), signature, &sub) != 0
            } else {
                dbus_message_iter_open_container(&iter, code(type), nil, &sub) != 0
            }
        guard opened else { return false }
        guard body(&sub) else {
            dbus_message_iter_abandon_container(&iter, &sub)
            return false
        }
        return dbus_message_iter_close_container(&iter, &sub) != 0
    }

    static func append(_ value: DBusValue, to iter: inout DBusMessageIter) -> Bool {
        switch value {
        case .byte(let v): return appendBasic(&iter, "y", v)
        case .boolean(let v): return appendBasic(&iter, "b", dbus_bool_t(v ? 1 : 0))
        case .int16(let v): return appendBasic(&iter, "n", v)
        case .uint16(let v): return appendBasic(&iter, "q", v)
        case .int32(let v): return appendBasic(&iter, "i", v)
        case .uint32(let v): return appendBasic(&iter, "u", v)
        case .int64(let v): return appendBasic(&iter, "x", v)
        case .uint64(let v): return appendBasic(&iter, "t", v)
        case .double(let v): return appendBasic(&iter, "d", v)
        case .string(let v): return appendString(&iter, "s", v)
        case .objectPath(let v): return appendString(&iter, "o", v)
        case .signature(let v): return appendString(&iter, "g", v)
        case .variant(let inner):
            return withContainer(&iter, "v", inner.type.signature) { append(inner, to: &$0) }
        case .array(let element, let items):
            return withContainer(&iter, "a", element.signature) { sub in
                items.allSatisfy { append($0, to: &sub) }
            }
        case .dictionary(let key, let valueType, let entries):
            let entrySignature = "{" + key.signature + valueType.signature + "}"
            return withContainer(&iter, "a", entrySignature) { sub in
                entries.allSatisfy { entry in
                    withContainer(&sub, "e", nil) { pair in
                        append(entry.key, to: &pair) && append(entry.value, to: &pair)
                    }
                }
            }
        case .structure(let fields):
            return withContainer(&iter, "r", nil) { sub in fields.allSatisfy { append($0, to: &sub) } }
        }
    }

    private static func readBasic<T: BitwiseCopyable>(_ iter: inout DBusMessageIter, _ initial: T) -> T {
        var value = initial
        dbus_message_iter_get_basic(&iter, &value)
        return value
    }

    private static func readString(_ iter: inout DBusMessageIter) -> String {
        var pointer: UnsafePointer<CChar>? = nil
        dbus_message_iter_get_basic(&iter, &pointer)
        return pointer.map { String(cString: $0) } ?? ""
    }

    /// Reads the value at the iterator, or nil at the end (or for types the binding refuses).
    static func read(_ iter: inout DBusMessageIter) -> DBusValue? {
        let type = dbus_message_iter_get_arg_type(&iter)
        guard type != 0, let scalar = Unicode.Scalar(UInt32(type)) else { return nil }
        switch scalar {
        case "y": return .byte(readBasic(&iter, UInt8(0)))
        case "b": return .boolean(readBasic(&iter, dbus_bool_t(0)) != 0)
        case "n": return .int16(readBasic(&iter, Int16(0)))
        case "q": return .uint16(readBasic(&iter, UInt16(0)))
        case "i": return .int32(readBasic(&iter, Int32(0)))
        case "u": return .uint32(readBasic(&iter, UInt32(0)))
        case "x": return .int64(readBasic(&iter, Int64(0)))
        case "t": return .uint64(readBasic(&iter, UInt64(0)))
        case "d": return .double(readBasic(&iter, Double(0)))
        case "s": return .string(readString(&iter))
        case "o": return .objectPath(readString(&iter))
        case "g": return .signature(readString(&iter))
        case "v":
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return read(&sub).map(DBusValue.variant)
        case "a":
            guard let signaturePointer = dbus_message_iter_get_signature(&iter) else { return nil }
            let signature = String(cString: signaturePointer)
            dbus_free(signaturePointer)
            guard let arrayType = try? DBusType(signature: signature) else { return nil }
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            switch arrayType {
            case .dictionary(let keyType, let valueType):
                var entries: [DBusValue.DictionaryEntry] = []
                while dbus_message_iter_get_arg_type(&sub) != 0 {
                    var pair = DBusMessageIter()
                    dbus_message_iter_recurse(&sub, &pair)
                    guard let key = read(&pair) else { return nil }
                    dbus_message_iter_next(&pair)
                    guard let value = read(&pair) else { return nil }
                    entries.append(.init(key, value))
                    dbus_message_iter_next(&sub)
                }
                return .dictionary(key: keyType, value: valueType, entries)
            case .array(let element):
                var items: [DBusValue] = []
                while dbus_message_iter_get_arg_type(&sub) != 0 {
                    guard let item = read(&sub) else { return nil }
                    items.append(item)
                    dbus_message_iter_next(&sub)
                }
                return .array(element, items)
            default:
                return nil
            }
        case "r":
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var fields: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != 0 {
                guard let field = read(&sub) else { return nil }
                fields.append(field)
                dbus_message_iter_next(&sub)
            }
            return .structure(fields)
        default:
            // Unix file descriptors are never negotiated, so they cannot arrive.
            return nil
        }
    }
}

/// Checks names before libdbus sees them: libdbus aborts the process on invalid input.
enum Validate {
    static func path(_ path: String) throws(DBusError) {
        guard check(path, dbus_validate_path) else { throw .invalidArgs("'\(path)' is not a valid object path") }
    }
    static func interface(_ name: String) throws(DBusError) {
        guard check(name, dbus_validate_interface) else {
            throw .invalidArgs("'\(name)' is not a valid interface name")
        }
    }
    static func member(_ name: String) throws(DBusError) {
        guard check(name, dbus_validate_member) else { throw .invalidArgs("'\(name)' is not a valid member name") }
    }
    static func busName(_ name: String) throws(DBusError) {
        guard check(name, dbus_validate_bus_name) else { throw .invalidArgs("'\(name)' is not a valid bus name") }
    }
    static func isErrorName(_ name: String) -> Bool { check(name, dbus_validate_error_name) }

    private static func check(
        _ text: String,
        _ validator: (UnsafePointer<CChar>?, UnsafeMutablePointer<CDBus.DBusError>?) -> dbus_bool_t
    ) -> Bool {
        guard !text.utf8.contains(0) else { return false }
        return text.withCString { validator($0, nil) != 0 }
    }
}
