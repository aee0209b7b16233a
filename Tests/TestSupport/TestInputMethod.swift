import CWaylandClient
import CWaylandIM
import Foundation
import Synchronization

/// A minimal `zwp_input_method_v2` on a wlroots compositor's first seat: a Wayland client of the
/// tests' own that records every event the compositor sends it and commits text or preedit into
/// the focused field when asked. It stands in for another input method holding the seat (fcitx5)
/// and shows what a field tells an input method.
///
/// ```swift
/// let im = try TestInputMethod(socket: sway.socketPath)
/// let field = try await sway.openField(.gtk3)
/// try await im.waitForState("the field to activate") { $0.active }
/// try im.commit("café")
/// try await field.waitForText("café")
/// ```
public final class TestInputMethod: @unchecked Sendable {
    // Safety: immutable after init; what the events change is in `recorder`.
    private let client: WaylandTestClient
    private let inputMethod: OpaquePointer
    private let recorder = Recorder()

    /// An event of `zwp_input_method_v2`, in the order the compositor sent them.
    public enum Event: Equatable, Sendable, CustomStringConvertible {
        case activate, deactivate
        case surroundingText(String, cursor: UInt32, anchor: UInt32)
        case textChangeCause(UInt32)
        case contentType(hint: UInt32, purpose: UInt32)
        case done
        case unavailable

        public var description: String {
            switch self {
            case .activate: "activate"
            case .deactivate: "deactivate"
            case .surroundingText(let text, let cursor, let anchor):
                "surrounding_text(\(text.debugDescription), \(cursor), \(anchor))"
            case .textChangeCause(let cause): "text_change_cause(\(cause))"
            case .contentType(let hint, let purpose):
                "content_type(hint 0x\(String(hint, radix: 16)), purpose \(purpose))"
            case .done: "done"
            case .unavailable: "unavailable"
            }
        }
    }

    /// text-input-v3's content type: `purpose` 8 is password, 9 PIN, 13 terminal; `hint` bits
    /// 0x40 hidden text, 0x80 sensitive data, 0x200 multiline.
    public struct ContentType: Equatable, Sendable {
        public var hint: UInt32
        public var purpose: UInt32

        public init(hint: UInt32 = 0, purpose: UInt32 = 0) {
            self.hint = hint
            self.purpose = purpose
        }
    }

    /// The field's state as the last `done` applied it.
    public struct FieldState: Equatable, Sendable {
        public var active = false
        public var contentType = ContentType()
        /// The text around the cursor (byte offsets), if the app sent it in the last batch.
        public var surroundingText: (text: String, cursor: UInt32, anchor: UInt32)? {
            surrounding.map { ($0.text, $0.cursor, $0.anchor) }
        }
        /// 0: the input method changed the text last; 1: something else did.
        public var changeCause: UInt32 = 0
        fileprivate var surrounding: Surrounding?

        fileprivate struct Surrounding: Equatable {
            var text: String
            var cursor: UInt32
            var anchor: UInt32
        }
    }

    /// Binds the input method on the first seat of the compositor at the socket `path`. One round
    /// trip later the compositor has said whether the seat was free: ``isUnavailable``.
    public init(socket path: String) throws {
        let client = try WaylandTestClient(socket: path)
        self.client = client
        do {
            let seat = try client.bindSeat()
            let manager = try client.bind("zwp_input_method_manager_v2", with: sttd_wl_bind_input_method_manager)
            guard let inputMethod = zwp_input_method_manager_v2_get_input_method(manager, seat) else {
                throw MissingPrerequisite(description: "could not bind an input method: \(client.error ?? "")")
            }
            self.inputMethod = inputMethod
            client.retain(recorder)
            zwp_input_method_v2_add_listener(
                inputMethod, Self.listener, Unmanaged.passUnretained(recorder).toOpaque())
            try client.roundtrip()
        } catch {
            client.close()
            throw error
        }
        client.startDispatching(name: "test-input-method")
    }

    /// Every event so far, oldest first.
    public var events: [Event] { recorder.state.withLock { $0.events } }

    /// The field's state after the last `done`.
    public var state: FieldState { recorder.state.withLock { $0.current } }

    /// How many `done` events came: the serial a commit carries.
    public var doneCount: UInt32 { recorder.state.withLock { $0.doneCount } }

    /// Whether the compositor refused this input method (another one holds the seat).
    public var isUnavailable: Bool { events.contains(.unavailable) }

    /// Commits `text` into the focused field (and `preedit` after it, if given; without it the
    /// field's preedit goes away).
    public func commit(_ text: String, preedit: String? = nil) throws {
        try send {
            if let preedit { setPreeditString(preedit) }
            zwp_input_method_v2_commit_string(inputMethod, text)
        }
    }

    /// Shows `text` as the field's preedit, the cursor at its end unless given (byte offsets).
    public func setPreedit(_ text: String, cursorBegin: Int32? = nil, cursorEnd: Int32? = nil) throws {
        try send { setPreeditString(text, cursorBegin: cursorBegin, cursorEnd: cursorEnd) }
    }

    /// Deletes `before` bytes before the cursor and `after` after it.
    public func deleteSurroundingText(before: UInt32, after: UInt32 = 0) throws {
        try send { zwp_input_method_v2_delete_surrounding_text(inputMethod, before, after) }
    }

    private func setPreeditString(_ text: String, cursorBegin: Int32? = nil, cursorEnd: Int32? = nil) {
        let end = Int32(text.utf8.count)
        zwp_input_method_v2_set_preedit_string(inputMethod, text, cursorBegin ?? end, cursorEnd ?? cursorBegin ?? end)
    }

    /// The requests `body` queues, then `commit` with the serial the protocol asks for (the
    /// number of `done` events so far), sent at once.
    private func send(_ body: () -> Void) throws {
        body()
        zwp_input_method_v2_commit(inputMethod, doneCount)
        try client.flush()
    }

    /// Waits until `condition` holds for the events so far; throws ``WaitTimedOut`` naming `what`
    /// and the events that came.
    public func waitForEvents(
        _ what: @autoclosure () -> String, timeout: Duration = .seconds(20), fileID: String = #fileID,
        line: Int = #line, until condition: ([Event]) -> Bool
    ) async throws {
        guard await happens(within: timeout, { condition(events) }) else {
            throw WaitTimedOut(
                "\(what()); the input method saw \(describeLast(events.map(\.description), 30))", after: timeout,
                fileID: fileID, line: line)
        }
    }

    /// Waits until the applied field state satisfies `condition`.
    public func waitForState(
        _ what: @autoclosure () -> String, timeout: Duration = .seconds(20), fileID: String = #fileID,
        line: Int = #line, until condition: (FieldState) -> Bool
    ) async throws {
        guard await happens(within: timeout, { condition(state) }) else {
            throw WaitTimedOut(
                "\(what()); the input method saw \(describeLast(events.map(\.description), 30))", after: timeout,
                fileID: fileID, line: line)
        }
    }

    /// Gives the seat back (the connection closes; the compositor destroys the input method).
    public func close() { client.close() }

    deinit { close() }

    /// What the events changed: kept as the protocol double-buffers it.
    private final class Recorder: Sendable {
        struct State {
            var events: [Event] = []
            var pending = FieldState()
            var current = FieldState()
            var doneCount: UInt32 = 0
        }
        let state = Mutex(State())

        func handle(_ event: Event) {
            state.withLock { state in
                state.events.append(event)
                switch event {
                // activate resets what the earlier activation set.
                case .activate: state.pending = FieldState(active: true)
                case .deactivate: state.pending.active = false
                case .surroundingText(let text, let cursor, let anchor):
                    state.pending.surrounding = .init(text: text, cursor: cursor, anchor: anchor)
                case .textChangeCause(let cause): state.pending.changeCause = cause
                case .contentType(let hint, let purpose):
                    state.pending.contentType = ContentType(hint: hint, purpose: purpose)
                case .done:
                    state.current = state.pending
                    state.doneCount &+= 1
                    // Surrounding text and cause apply to one batch only.
                    state.pending.surrounding = nil
                    state.pending.changeCause = 0
                case .unavailable: break
                }
            }
        }
    }

    private static func recorder(_ data: UnsafeMutableRawPointer?) -> Recorder? {
        data.map { Unmanaged<Recorder>.fromOpaque($0).takeUnretainedValue() }
    }

    nonisolated(unsafe) private static let listener: UnsafeMutablePointer<zwp_input_method_v2_listener> = {
        let listener = UnsafeMutablePointer<zwp_input_method_v2_listener>.allocate(capacity: 1)
        listener.initialize(
            to: zwp_input_method_v2_listener(
                activate: { data, _ in TestInputMethod.recorder(data)?.handle(.activate) },
                deactivate: { data, _ in TestInputMethod.recorder(data)?.handle(.deactivate) },
                surrounding_text: { data, _, text, cursor, anchor in
                    TestInputMethod.recorder(data)?.handle(
                        .surroundingText(text.map { String(cString: $0) } ?? "", cursor: cursor, anchor: anchor))
                },
                text_change_cause: { data, _, cause in TestInputMethod.recorder(data)?.handle(.textChangeCause(cause))
                },
                content_type: { data, _, hint, purpose in
                    TestInputMethod.recorder(data)?.handle(.contentType(hint: hint, purpose: purpose))
                },
                done: { data, _ in TestInputMethod.recorder(data)?.handle(.done) },
                unavailable: { data, _ in TestInputMethod.recorder(data)?.handle(.unavailable) }))
        return listener
    }()
}
