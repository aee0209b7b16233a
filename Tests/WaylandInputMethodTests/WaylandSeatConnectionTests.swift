import Synchronization
import TestSupport
import Testing

@testable import WaylandInputMethod

/// The connection against the headless sway of `scripts/desktop-env`, with foot as the field.
@Suite("The Wayland input method's connection on sway", .serialized)
struct WaylandSeatConnectionTests {
    final class Seen: Sendable {
        let statuses = Mutex<[SeatStatus]>([])
        let reports = Mutex<[FieldReport]>([])
    }

    @Test func aFocusedTerminalGetsCommitsAndBackSpaces() async throws {
        let window = try await ReceivingWindow.open(.wayland)
        defer { window.close() }
        let environment = try DesktopKind.wayland.environment()
        let path = "\(environment["XDG_RUNTIME_DIR"]!)/\(environment["WAYLAND_DISPLAY"]!)"
        let connection = try WaylandSeatConnection(socketPath: path, logger: .init(label: "test"))
        let seen = Seen()
        let served = Task {
            await connection.serve(
                status: { status in seen.statuses.withLock { $0.append(status) } },
                report: { report in seen.reports.withLock { $0.append(report) } })
        }
        try await waitFor("the seat held") { seen.statuses.withLock { $0.contains(.held(seat: "seat0")) } }
        try await waitFor("foot's field active") {
            seen.reports.withLock { $0.last.map { $0.active && $0.focused && !$0.secret } == true }
        }
        // foot's window is the active one (foreign-toplevel), by its app id.
        #expect(seen.reports.withLock { $0.last?.app?.hasPrefix("sttd-test-") } == true)
        #expect(connection.deliver(.commit("café ✓ 😀")))
        try await window.waitForText("café ✓ 😀")
        #expect(connection.deliver(.commit(" gone")))
        #expect(connection.deliver(.delete(characters: 5)))
        #expect(connection.deliver(.commit(" kept")))
        try await window.waitForText("café ✓ 😀 kept")
        connection.stop()
        #expect(await served.value == .disconnected)
    }
}
