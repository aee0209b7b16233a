import CWaylandClient
import CWaylandIM
import Foundation

extension SeatSession {
    /// How long the compositor may take to answer a round trip before it counts as gone (a
    /// compositor still starting on a loaded machine can take seconds).
    static let roundTripLimit = Duration.seconds(10)

    /// Waits until the compositor has answered everything sent so far.
    func roundTrip() throws(LoopEnd) {
        syncDone = false
        let callback = wl_display_sync(display)
        wl_callback_add_listener(callback, Listeners.callback, Unmanaged.passUnretained(self).toOpaque())
        try loop(until: { [unowned self] in syncDone }, deadline: .now + Self.roundTripLimit)
    }

    /// Reads and dispatches the compositor's events and the core's commands until `done` says
    /// so, ``SeatCommands/stop()``, the deadline or an error.
    func loop(until done: () -> Bool, deadline: ContinuousClock.Instant? = nil) throws(LoopEnd) {
        while !done() {
            while wl_display_prepare_read(display) != 0 {
                guard wl_display_dispatch_pending(display) >= 0 else { throw failure() }
            }
            if done() {
                wl_display_cancel_read(display)
                return
            }
            var writable = true
            if wl_display_flush(display) < 0 {
                guard errno == EAGAIN else {
                    wl_display_cancel_read(display)
                    throw failure()
                }
                writable = false
            }
            var fds = [
                pollfd(fd: wl_display_get_fd(display), events: Int16(POLLIN) | (writable ? 0 : Int16(POLLOUT)), revents: 0),
                pollfd(fd: commands.wakeFD, events: Int16(POLLIN), revents: 0),
            ]
            if !machine.isProbing { probeDeadline = nil }
            let wake = [deadline, probeDeadline].compactMap { $0 }.min()
            let ready = poll(&fds, 2, Self.milliseconds(until: wake))
            if ready < 0 {
                wl_display_cancel_read(display)
                if errno == EINTR { continue }
                throw .failed("poll failed: \(String(cString: strerror(errno)))")
            }
            if ready == 0 {
                wl_display_cancel_read(display)
                // Woken for the probe's deadline, not a round trip's.
                if let probeDeadline, deadline.map({ probeDeadline < $0 }) ?? true {
                    self.probeDeadline = nil
                    handle(.probeOverdue)
                    continue
                }
                throw .failed("the compositor did not answer within \(Self.roundTripLimit)")
            }
            if fds[0].revents & Int16(POLLIN) != 0 {
                guard wl_display_read_events(display) >= 0 else { throw failure() }
            } else {
                wl_display_cancel_read(display)
                if fds[0].revents & Int16(POLLHUP | POLLERR) != 0 { throw .failed("the compositor closed the connection") }
            }
            guard wl_display_dispatch_pending(display) >= 0 else { throw failure() }
            if fds[1].revents != 0 {
                let taken = commands.take()
                if taken.stop { throw .stopped }
                for command in taken.commands {
                    switch command {
                    case .preedit(let text): perform(machine.handle(.preedit(text)))
                    case .deliver(let delivery): perform(machine.handle(.deliver(delivery)))
                    }
                }
            }
        }
    }

    /// Why libwayland gave up on the display, for the log.
    private func failure() -> LoopEnd {
        let code = wl_display_get_error(display)
        guard code == EPROTO else { return .failed(String(cString: strerror(code))) }
        var interface: UnsafePointer<wl_interface>?
        var object: UInt32 = 0
        let error = wl_display_get_protocol_error(display, &interface, &object)
        let name = interface.map { String(cString: $0.pointee.name) } ?? "?"
        return .failed("protocol error \(error) on \(name)@\(object)")
    }

    private static func milliseconds(until deadline: ContinuousClock.Instant?) -> Int32 {
        guard let deadline else { return -1 }
        let left = ContinuousClock.now.duration(to: deadline).components
        // Rounded up: poll must not wake before the deadline.
        let milliseconds = left.seconds * 1000 + (left.attoseconds + 999_999_999_999_999) / 1_000_000_000_000_000
        return Int32(max(0, min(Int64(Int32.max), milliseconds)))
    }

    func handle(_ event: SeatMachine.Event) { perform(machine.handle(event)) }

    func perform(_ actions: [SeatMachine.Action]) {
        for action in actions {
            switch action {
            case .send(let commit):
                guard let inputMethod else { continue }
                let cursor = Int32(commit.preedit.utf8.count)
                zwp_input_method_v2_set_preedit_string(inputMethod, commit.preedit, cursor, cursor)
                if let text = commit.text { zwp_input_method_v2_commit_string(inputMethod, text) }
                if commit.deleteBefore > 0 { zwp_input_method_v2_delete_surrounding_text(inputMethod, commit.deleteBefore, 0) }
                zwp_input_method_v2_commit(inputMethod, commit.serial)
            case .pressKey(let keysym):
                if keyboard?.press(keysym) != true {
                    logger.notice("sttd asked for a key the virtual keyboard does not have", metadata: ["key": "\(keysym)"])
                }
            case .report(let fieldReport):
                report(fieldReport)
            case .dropped(let characters, let secret):
                // Never the text: it is what the user said.
                logger.info(
                    secret ? "text for a password field dropped" : "text dropped: no text field is active",
                    metadata: ["characters": "\(characters)"])
            case .probeSent:
                probeDeadline = .now + SeatMachine.probeLimit
            case .probeUnanswered:
                logger.notice(
                    "the field did not show its text within \(SeatMachine.probeLimit); it gets no dictation, as a password field")
            case .deleteRefused(let characters):
                logger.notice(
                    "\"scratch that\" refused: the text before the cursor is not what sttd typed there",
                    metadata: ["characters": "\(characters)"])
            }
        }
    }
}
