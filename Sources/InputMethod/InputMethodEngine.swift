import DBus
import Foundation
import Logging
import SpeechAPI
import Synchronization
import Waiting

/// `sttd-ibus`: an IBus engine that passes every key through (but the push-to-talk key) and puts
/// sttd's dictation into the focused field, with the pending words as preedit.
///
/// Two connections: ibus-daemon's private bus (the factory and the engines it asks for) and the
/// session bus (sttd). Their handlers only queue events; one task runs them through the
/// ``EngineMachine`` in order and carries out its actions. Calls that wait for a reply (reports,
/// sessions, the settling round trip) run in their own child tasks, each fed by a stream, so a
/// slow sttd never holds up text for the field.
final class InputMethodEngine: Sendable {
    /// Events wait here for the machine; beyond it an event is refused (logged). ibus-daemon and
    /// sttd send a handful per keystroke or result; 4096 is far beyond any burst.
    static let eventCapacity = 4096

    let configuration: EngineConfiguration
    private let environment: [String: String]
    let logger: Logger
    private let engineCount = Mutex<Int>(0)

    init(configuration: EngineConfiguration, environment: [String: String], logger: Logger) {
        self.configuration = configuration
        self.environment = environment
        self.logger = logger
    }

    /// Serves until ibus-daemon or the session bus goes away.
    func run() async throws(IBusError) {
        let address = try IBus.address(environment: environment)
        let ibus: DBusConnection
        let session: DBusConnection
        do {
            ibus = try await DBusConnection.connect(to: .address(address), logger: logger)
        } catch {
            throw IBusError("cannot connect to ibus-daemon at its address: \(error.message)")
        }
        do {
            session = try await DBusConnection.connect(to: .session, logger: logger)
        } catch {
            ibus.close()
            throw IBusError("cannot connect to the session bus, where sttd is: \(error.message)")
        }
        defer {
            ibus.close()
            session.close()
        }

        let (events, eventInput) = AsyncStream.makeStream(
            of: EngineMachine.Event.self, bufferingPolicy: .bufferingOldest(Self.eventCapacity))
        let queue = EventQueue(input: eventInput, logger: logger)
        // Only the newest state matters to sttd; one settling round at a time, the newest.
        let (reports, reportInput) = AsyncStream.makeStream(
            of: InputMethodState.self, bufferingPolicy: .bufferingNewest(1))
        let (rounds, roundInput) = AsyncStream.makeStream(of: UInt64.self, bufferingPolicy: .bufferingNewest(1))
        // Presses and releases in order; a held key does not repeat here (the machine filters).
        let (commands, commandInput) = AsyncStream.makeStream(
            of: SessionCommand.self, bufferingPolicy: .bufferingOldest(16))
        // Focus losses while push-to-talk is held: only the newest counts.
        let (focusLosses, focusLossInput) = AsyncStream.makeStream(of: UInt64.self, bufferingPolicy: .bufferingNewest(1))

        ibus.export(factory(on: ibus, queue: queue))
        ibus.export(waylandPurpose(queue: queue))
        // `sttd-ibus --wayland` may have a field active already: not known until it says again,
        // which it does when this engine takes its name (below).
        if (try? await ibus.nameHasOwner(IBus.waylandProxyName)) == true { queue.yield(.waylandPurpose(nil)) }
        do {
            let reply = try await ibus.requestName(IBus.componentName)
            guard reply == 1 else { throw IBusError("another \(IBus.componentName) runs on this ibus-daemon") }
        } catch let error as IBusError {
            throw error
        } catch {
            throw IBusError("cannot own \(IBus.componentName) on ibus-daemon's bus: \(error)")
        }
        logger.info(
            "serving the IBus engine",
            metadata: ["engine": "\(IBus.engineName)", "push_to_talk": "\(configuration.pushToTalkName ?? "off")"])

        await withTaskGroup(of: Void.self) { group in
            group.addTask { [self] in
                var machine = EngineMachine()
                for await event in events {
                    for action in machine.handle(event) {
                        perform(
                            action, ibus: ibus,
                            outputs: Outputs(
                                reports: reportInput, rounds: roundInput, commands: commandInput,
                                focusLosses: focusLossInput))
                    }
                }
                reportInput.finish()
                roundInput.finish()
                commandInput.finish()
                focusLossInput.finish()
            }
            group.addTask {
                for await loss in focusLosses {
                    try? await Task.sleep(for: EngineMachine.focusGrace)
                    queue.yield(.focusGraceOver(loss))
                }
            }
            group.addTask { [self] in await followText(from: session, into: queue) }
            group.addTask { [self] in await followOwner(on: session, into: queue) }
            group.addTask { [self] in await report(reports, on: session) }
            group.addTask { [self] in await settle(rounds, on: ibus, into: queue) }
            group.addTask { [self] in await runSessions(commands, on: session) }
            group.addTask { [logger] in
                // Either bus gone: the engine is done (ibus-daemon starts it again when needed). A
                // connection's wait ends only when it closes, so the first to end closes the other.
                let gone =
                    await firstResult(
                        { await ibus.waitUntilDisconnected(); session.close(); return "ibus-daemon" },
                        { await session.waitUntilDisconnected(); ibus.close(); return "the session bus" }
                    ) ?? "a bus"
                logger.notice("the connection to \(gone) closed; exiting")
                eventInput.finish()
            }
        }
    }

    // MARK: The engines ibus-daemon asks for

    private func factory(on ibus: DBusConnection, queue: EventQueue) -> DBusObject {
        let create = DBusMethod.answering(IBus.createEngine) { [self] _, name throws(DBusError) in
            guard name == IBus.engineName else { throw .failed("this component has one engine, \(IBus.engineName)") }
            let number = engineCount.withLock { count in
                count += 1
                return count
            }
            let path = IBus.enginePathPrefix + "\(number)"
            ibus.export(try engine(at: path, on: ibus, queue: queue))
            queue.yield(.created(path: path))
            return DBusObjectPath(path)
        }
        // A fixed, valid declaration: it cannot fail.
        return try! DBusObject(
            path: IBus.factoryPath, interfaces: [DBusInterface(name: IBus.factoryInterface, methods: [create])],
            logger: logger)
    }

    // MARK: Actions

    /// Where actions that wait go: each stream feeds a child task of ``run()``.
    private struct Outputs {
        let reports: AsyncStream<InputMethodState>.Continuation
        let rounds: AsyncStream<UInt64>.Continuation
        let commands: AsyncStream<SessionCommand>.Continuation
        let focusLosses: AsyncStream<UInt64>.Continuation
    }

    private func perform(_ action: EngineMachine.Action, ibus: DBusConnection, outputs: Outputs) {
        switch action {
        case .showPreedit(let path, let text):
            emit(
                on: ibus, path: path, "UpdatePreeditText",
                [
                    IBus.text(text), .uint32(IBus.characterCount(text)), .boolean(!text.isEmpty),
                    .uint32(IBus.preeditClear),
                ])
        case .commit(let path, let text):
            emit(on: ibus, path: path, "CommitText", [IBus.text(text)])
        case .deleteBefore(let path, let characters):
            emit(
                on: ibus, path: path, "DeleteSurroundingText",
                [.int32(-Int32(clamping: characters)), .uint32(UInt32(clamping: characters))])
        case .forwardKey(let path, let keysym):
            guard let key = IBus.key(named: keysym) else {
                return logger.warning(
                    "sttd asked for a key this engine does not know", metadata: ["keysym": "\(keysym)"])
            }
            // GTK queues a forwarded key behind events already waiting, so a commit sent after it
            // may land first; commands send line breaks as text for that reason.
            for state in [IBus.forwardMask, IBus.forwardMask | IBus.releaseMask] {
                emit(
                    on: ibus, path: path, "ForwardKeyEvent",
                    [.uint32(key.keyval), .uint32(key.keycode), .uint32(state)])
            }
        case .report(let state):
            outputs.reports.yield(state)
        case .settle(let round):
            outputs.rounds.yield(round)
        case .startSession:
            outputs.commands.yield(.start)
        case .stopSession:
            outputs.commands.yield(.stop)
        case .watchFocus(let loss):
            outputs.focusLosses.yield(loss)
        case .deleteRefused(let characters):
            logger.notice(
                "\"scratch that\" deleted nothing: the text before the cursor is not what this engine put into the focused field",
                metadata: ["characters": "\(characters)"])
        case .dropped(let characters, let secret):
            // Never the text itself: it may be anything the user said.
            logger.notice(
                "dictated text not put into a field: \(secret ? "a password or PIN field" : "no text field") has the focus",
                metadata: ["characters": "\(characters)"])
        }
    }

    private func emit(on ibus: DBusConnection, path: String, _ member: String, _ arguments: [DBusValue]) {
        do {
            try ibus.emitSignal(path: path, interface: IBus.engineInterface, member: member, arguments: arguments)
        } catch {
            logger.error("cannot send \(member) to ibus-daemon", metadata: ["error": "\(error.message)"])
        }
    }

    // MARK: sttd

    /// sttd's preedit and commits, sent to this connection alone, from whoever owns sttd's name.
    private func followText(from session: DBusConnection, into queue: EventQueue) async {
        let signals: AsyncCompactMapSequence<AsyncStream<DBusSignalMessage>, SpeechSignal>
        do {
            signals = try await sttd(on: session).signals()
        } catch {
            return logger.error("cannot follow sttd's signals", metadata: ["error": "\(error.message)"])
        }
        for await signal in signals {
            switch signal {
            case .inputMethodPreedit(let text): queue.yield(.preedit(text))
            case .inputMethodCommit(let text): queue.yield(.deliver(.commit(text)))
            case .inputMethodDelete(let characters): queue.yield(.deliver(.delete(Int(characters))))
            case .inputMethodKey(let keysym): queue.yield(.deliver(.key(keysym)))
            default: break
            }
        }
    }

    /// sttd, called with libdbus's default timeout.
    private func sttd(on session: DBusConnection) -> SpeechProxy {
        SpeechProxy(connection: session, timeout: .seconds(25))
    }

    /// A new sttd (a restart, or started by activation) learns the state again.
    private func followOwner(on session: DBusConnection, into queue: EventQueue) async {
        let changes: AsyncStream<DBusSignalMessage>
        do {
            changes = try await session.signals(
                sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged",
                argument0: SpeechAPI.busName)
        } catch {
            return logger.error("cannot follow sttd's bus name", metadata: ["error": "\(error.message)"])
        }
        for await change in changes {
            guard let change = NameOwnerChange(arguments: change.arguments), change.name == SpeechAPI.busName,
                change.newOwner != nil
            else { continue }
            queue.yield(.sttdAppeared)
        }
    }

    /// Tells sttd each state. An active one starts sttd if needed (the user chose dictation); an
    /// inactive one is not worth starting it for.
    private func report(_ states: AsyncStream<InputMethodState>, on session: DBusConnection) async {
        for await state in states {
            do {
                if !state.active {
                    guard try await session.nameHasOwner(SpeechAPI.busName) else { continue }
                }
                try await sttd(on: session).call(Speech1.setInputMethodState, state)
            } catch {
                logger.warning(
                    "cannot tell sttd the input method's state; it hears it again when it restarts",
                    metadata: ["error": "\(error.message)"])
            }
        }
    }

    /// A round trip to ibus-daemon: its reply comes after everything it sent before it.
    private func settle(_ rounds: AsyncStream<UInt64>, on ibus: DBusConnection, into queue: EventQueue) async {
        for await round in rounds {
            _ = try? await ibus.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetId", timeout: .seconds(5))
            queue.yield(.settled(round))
        }
    }

    private enum SessionCommand: Sendable { case start, stop }

    /// Push-to-talk: a press starts a session typed through this engine, its release stops the
    /// session it started (not one somebody else started).
    private func runSessions(_ commands: AsyncStream<SessionCommand>, on session: DBusConnection) async {
        let sttd = self.sttd(on: session)
        var started = false
        for await command in commands {
            do {
                switch command {
                case .start:
                    // A session already running is somebody else's: this key does not end it.
                    guard try await sttd.property(.state) ?? "idle" == "idle" else {
                        logger.notice("push-to-talk: a session is running already; the key leaves it alone")
                        continue
                    }
                    try await sttd.call(Speech1.startTranscribing, StartRequest(output: "type"))
                    started = true
                case .stop:
                    guard started else { continue }
                    started = false
                    try await sttd.call(Speech1.stopTranscribing)
                }
            } catch {
                // sttd shows why in a notification; the log says it too.
                logger.warning("push-to-talk: sttd refused", metadata: ["error": "\(error)"])
            }
        }
    }
}

/// The machine's queue, fed from the buses' threads.
struct EventQueue: Sendable {
    let input: AsyncStream<EngineMachine.Event>.Continuation
    let logger: Logger

    func yield(_ event: EngineMachine.Event) {
        if case .dropped = input.yield(event) {
            logger.error("the input method's event queue is full; an event was dropped")
        }
    }
}
