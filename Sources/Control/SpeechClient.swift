import DBus
import Foundation
import SpeechAPI

/// A client of `io.github.sttd.Speech1` for `sttctl`: the typed ``SpeechProxy``, its errors
/// turned into the contract's exit codes.
public struct SpeechClient: Sendable {
    public static let name = SpeechAPI.busName

    let proxy: SpeechProxy
    var connection: DBusConnection { proxy.connection }

    /// One `TranscriptChanged` signal.
    public struct TranscriptUpdate: Sendable, Equatable {
        public var transcript: String
        public var segment: String
        public var isFinal: Bool
        /// `TranscriptRetracted`: the final "scratch that" removed (segment empty, is_final true).
        public var retracted: String?
    }

    /// Connects to the session bus; the service itself is started by bus activation on first call.
    public static func connect() async throws -> SpeechClient {
        do {
            return SpeechClient(proxy: SpeechProxy(connection: try await DBusConnection.connect(to: .session)))
        } catch {
            throw ControlFailure(
                exitCode: ControlFailure.unreachable,
                message: "sttctl: cannot reach the session bus: \(error.message)")
        }
    }

    /// Calls a method of the interface; errors become exit codes 3 or 4 with a message.
    @discardableResult
    public func call<Output: DBusDecodable, each Input: DBusEncodable>(
        _ spec: DBusMethodSpec<Output, repeat each Input>, _ arguments: repeat each Input
    ) async throws -> Output {
        do {
            return try await proxy.call(spec, repeat each arguments)
        } catch {
            throw Self.failure(error)
        }
    }

    /// Calls a method that answers with no values.
    public func call<each Input: DBusEncodable>(
        _ spec: DBusMethodSpec<DBusNoReply, repeat each Input>, _ arguments: repeat each Input
    ) async throws {
        do {
            try await proxy.call(spec, repeat each arguments)
        } catch {
            throw Self.failure(error)
        }
    }

    public func property<Value>(_ property: SpeechProperty<Value>) async throws -> Value? {
        do {
            return try await proxy.property(property)
        } catch {
            throw Self.failure(error)
        }
    }

    /// Every property, in the service's order.
    public func allProperties() async throws -> [(String, DBusValue)] {
        do {
            return try await proxy.allProperties()
        } catch {
            throw Self.failure(error)
        }
    }

    /// `TranscriptChanged` and `TranscriptRetracted` signals as they arrive. Subscribes before
    /// returning, so no update after this call is missed.
    public func transcriptUpdates() async throws
        -> AsyncCompactMapSequence<
            AsyncCompactMapSequence<AsyncStream<DBusSignalMessage>, SpeechSignal>, TranscriptUpdate
        >
    {
        let signals: AsyncCompactMapSequence<AsyncStream<DBusSignalMessage>, SpeechSignal>
        do {
            // One rule for both signals (the interface's others are few and skipped here).
            signals = try await proxy.signals()
        } catch {
            throw Self.failure(error)
        }
        return signals.compactMap { signal in
            switch signal {
            case .transcriptChanged(let transcript, let segment, let isFinal):
                return TranscriptUpdate(transcript: transcript, segment: segment, isFinal: isFinal)
            case .transcriptRetracted(let transcript, let removed):
                return TranscriptUpdate(transcript: transcript, segment: "", isFinal: true, retracted: removed)
            default:
                return nil
            }
        }
    }

    static func failure(_ error: DBusError) -> ControlFailure {
        if error.isServiceMissing {
            return ControlFailure(
                exitCode: ControlFailure.unreachable,
                message: """
                    sttctl: sttd is not running and could not be started (\(error.name)).
                    Start it with `systemctl --user start sttd`, or install it with `make install` for bus activation.
                    """)
        }
        if error.name == "org.freedesktop.DBus.Error.NoReply" || error.name == "org.freedesktop.DBus.Error.Disconnected"
            || error.name == "org.freedesktop.DBus.Error.Timeout"
        {
            return ControlFailure(
                exitCode: ControlFailure.unreachable,
                message:
                    "sttctl: sttd did not answer (\(error.name): \(error.message)). See `journalctl --user -u sttd`.")
        }
        return ControlFailure(exitCode: ControlFailure.serviceError, message: "\(error.name): \(error.message)")
    }
}

/// A JSON value for `--json` output. Objects are written member by member, in order (the
/// contract's `transcript`, `segment`, `is_final`), which `JSONEncoder`'s keyed containers do not
/// keep; scalars are written by `JSONEncoder`, which escapes them.
enum JSONOutput {
    case string(String)
    case bool(Bool)
    case integer(Int64)
    case unsigned(UInt64)
    case number(Double)
    case null
    case array([JSONOutput])
    case object([(String, JSONOutput)])

    /// One line of JSON.
    var line: String {
        switch self {
        case .object(let members):
            "{" + members.map { Self.encoded($0.0) + ":" + $0.1.line }.joined(separator: ",") + "}"
        case .array(let items): "[" + items.map(\.line).joined(separator: ",") + "]"
        case .string(let text): Self.encoded(text)
        case .bool(let flag): Self.encoded(flag)
        case .integer(let number): Self.encoded(number)
        case .unsigned(let number): Self.encoded(number)
        case .number(let number): Self.encoded(number)
        case .null: "null"
        }
    }

    private static func encoded(_ value: some Encodable) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return (try? encoder.encode(value)).map { String(decoding: $0, as: UTF8.self) } ?? "null"
    }

    /// A D-Bus value as JSON: variants unwrapped, structures as arrays, non-finite numbers null.
    init(_ value: DBusValue) {
        switch value {
        case .string(let s), .objectPath(let s), .signature(let s): self = .string(s)
        case .boolean(let b): self = .bool(b)
        case .byte(let n): self = .integer(Int64(n))
        case .int16(let n): self = .integer(Int64(n))
        case .uint16(let n): self = .integer(Int64(n))
        case .int32(let n): self = .integer(Int64(n))
        case .uint32(let n): self = .integer(Int64(n))
        case .int64(let n): self = .integer(n)
        case .uint64(let n): self = .unsigned(n)
        case .double(let d): self = d.isFinite ? .number(d) : .null
        case .variant(let inner): self.init(inner)
        case .array(_, let items), .structure(let items): self = .array(items.map(JSONOutput.init))
        case .dictionary(_, _, let entries):
            self = .object(entries.map { ($0.key.string ?? "\($0.key)", JSONOutput($0.value)) })
        }
    }

    /// A value as `sttctl status` prints it without `--json`.
    static func plain(_ value: DBusValue) -> String {
        if case .string(let s) = value { return s }
        if case .variant(let inner) = value { return plain(inner) }
        return JSONOutput(value).line
    }
}
