import DBus
import Foundation
import Logging
import Recognition
import Speech
import SpeechAPI
import Synchronization

/// Per-app consent: the gate in front of `io.github.sttd.Speech1`.
///
/// Host callers (unsandboxed, same user) always pass, decided on the bus thread once their
/// identity is cached. Every call of a sandboxed caller is decided here asynchronously: its
/// identity is read once per unique name, its remembered decision is looked up in the
/// ``ConsentStore``, and under policy `ask` its first `StartTranscribing`, `ToggleTranscribing`
/// or `RequestAuthorization` asks the user with a notification that has Allow and Deny actions.
/// That work runs as child tasks of ``run()``, fed through a bounded queue (see ``queueLimit``).
///
/// Sandboxed callers never change settings (`Set`) or read history (`GetHistory`: it holds what
/// was dictated in every app); which session they see and control is the bus adapter's business.
public final class Consent: Sendable {
    /// The answer to a prompt.
    enum Answer: Sendable, Equatable {
        case allow, deny
        /// Dismissed, timed out, or no notification server with actions: asked again next time.
        case unanswered(String)
    }

    typealias Job = @Sendable () async -> Void

    /// How many calls of sandboxed apps may be undecided at once (queued, or waiting for the
    /// user's answer to a prompt); beyond it a call is refused with `Busy` at once, so a flood of
    /// calls from many connections while a prompt is open cannot grow sttd's memory. (One
    /// connection has one call here at a time: the object keeps the rest in order behind it,
    /// bounded too; see `DBusObject.maxWaitingPerSender`.)
    public static let queueLimit = 256
    /// Methods that may ask the user.
    static let asking: Set<String> = [
        Speech1.startTranscribing.name, Speech1.toggleTranscribing.name,
        Speech1.requestAuthorization.name,
    ]
    /// Methods for host callers only, with what a sandboxed caller is told.
    static let hostOnly: [String: String] = [
        Speech1.listAppConsent.name: appDecisionsAreHostOnly,
        Speech1.setAppConsent.name: appDecisionsAreHostOnly,
        Speech1.setInputMethodState.name:
            "Only the desktop's input method (sttd-ibus, outside any sandbox) may receive dictated text for the focused field.",
        Speech1.setHandsFree.name: SpeechCore.handsFreeIsHostOnly,
        Speech1.getHistory.name:
            "History holds what was dictated in every app, so only programs outside a sandbox can read it (`sttctl history` in a terminal); an app gets its own text from StopTranscribing and TranscriptChanged.",
    ]
    static let appDecisionsAreHostOnly =
        "Only programs outside a sandbox can see or change which apps may use dictation; run `sttctl apps` in a terminal."

    public let policy: ConsentPolicy
    public let store: any ConsentStore
    let identities = IdentityCache()
    let connection: DBusConnection
    let timeout: Duration
    let logger: Logger
    let jobs: AsyncStream<Job>
    let jobInput: AsyncStream<Job>.Continuation
    let prompts = PromptBook()
    /// Apps being asked right now, with the callers waiting for the answer: one prompt per app.
    let asking = Mutex<[String: [@Sendable (Answer) -> Void]]>([:])
    let ownUID = getuid()
    /// Called with each unique name that leaves the bus.
    let departureObservers = Mutex<[@Sendable (String) -> Void]>([])
    /// Calls being decided (see ``queueLimit``).
    let undecided = Mutex(0)

    public init(
        connection: DBusConnection, policy: ConsentPolicy, store: any ConsentStore, timeout: Duration,
        logger: Logger
    ) {
        self.connection = connection
        self.policy = policy
        self.store = store
        self.timeout = timeout
        self.logger = logger
        (jobs, jobInput) = AsyncStream<Job>.makeStream(bufferingPolicy: .bufferingOldest(Self.queueLimit))
    }

    /// The desktop's permission store when one is on the bus, else sttd's own file; logs which.
    public static func chooseStore(connection: DBusConnection, environment: [String: String], logger: Logger) async
        -> any ConsentStore
    {
        let store: any ConsentStore =
            await PermissionStoreConsent.isAvailable(on: connection)
            ? PermissionStoreConsent(connection: connection)
            : FileConsentStore(path: FileConsentStore.defaultPath(environment: environment))
        logger.info("per-app consent decisions are kept in \(store.description)")
        return store
    }

    // MARK: The gate (bus thread)

    /// The gate to install on the exported object.
    public var gate: DBusGate {
        { [self] access, decision in
            if identities.identity(of: access.sender) == .host { return decision.allow() }
            let queued = enqueue { [self] in
                // Only a sandboxed caller holds a place: a host program met for the first time
                // passes once known, however many apps wait for their prompts.
                guard await identity(of: access.sender).isSandboxed else { return decision.allow() }
                guard reserveDecision() else { return decision.refuse(Self.tooManyUndecided) }
                let verdict = await self.decision(for: access)
                undecided.withLock { $0 -= 1 }
                decision.decide(verdict)
            }
            if !queued { decision.refuse(Self.tooManyUndecided) }
        }
    }

    static let tooManyUndecided = SpeechError.busy(
        "sttd is deciding too many calls from sandboxed apps; wait for their answers and try again."
    ).dbusError

    /// Counts one more undecided call; false at ``queueLimit``.
    private func reserveDecision() -> Bool {
        undecided.withLock { count in
            guard count < Self.queueLimit else { return false }
            count += 1
            return true
        }
    }

    /// Queues work for ``run()``; false if the queue is full or closed.
    @discardableResult
    public func enqueue(_ job: @escaping @Sendable () async -> Void) -> Bool {
        if case .enqueued = jobInput.yield(job) { return true }
        return false
    }

    /// Ends ``run()`` once the queued work is done.
    public func finish() { jobInput.finish() }

    /// Calls `observer` with each unique name that leaves the bus (as the bus itself announces
    /// it), from ``run()``; it must not block.
    public func observeDepartures(_ observer: @escaping @Sendable (String) -> Void) {
        departureObservers.withLock { $0.append(observer) }
    }

    /// Whether `uniqueName` is still connected to the bus (unique names are never reused: once
    /// false, always false). True if the bus cannot be asked, so nothing is ended on a guess.
    public func isConnected(_ uniqueName: String) async -> Bool {
        do {
            let reply = try await connection.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "NameHasOwner", arguments: [.string(uniqueName)], timeout: .seconds(5))
            return reply.first?.boolean ?? true
        } catch {
            logger.warning(
                "cannot ask the bus whether a caller is connected",
                metadata: ["sender": "\(uniqueName)", "error": "\(error.message)"])
            return true
        }
    }

    // MARK: Service

    /// Decides queued calls, follows the notification server's answers and forgets callers that
    /// leave the bus; returns after ``finish()`` (or when cancelled).
    public func run() async {
        let answers = try? await connection.signals(interface: "org.freedesktop.Notifications")
        let departures = try? await connection.signals(
            sender: "org.freedesktop.DBus", interface: "org.freedesktop.DBus", member: "NameOwnerChanged")
        await withDiscardingTaskGroup { group in
            if let answers {
                group.addTask { [prompts] in
                    for await signal in answers { prompts.receive(signal) }
                }
            }
            if let departures {
                group.addTask { [self] in
                    // Only the bus's own signals reach here (the subscription checks the sender).
                    for await signal in departures {
                        // A unique name whose owner went away.
                        guard let change = NameOwnerChange(arguments: signal.arguments), change.name.hasPrefix(":"), change.newOwner == nil
                        else { continue }
                        identities.forget(change.name)
                        for observer in departureObservers.withLock({ $0 }) { observer(change.name) }
                    }
                }
            }
            for await job in jobs { group.addTask { await job() } }
            group.cancelAll()
        }
    }

    // MARK: Deciding

    /// The caller's identity: cached, or read now from the bus's credentials and `/proc`.
    func identity(of sender: String) async -> AppIdentity {
        if let known = identities.identity(of: sender) { return known }
        identities.beginReading(sender)
        let identity: AppIdentity
        // Only an identity read from the bus's credentials is kept: a caller that has already
        // left cannot be read, and keeping that would keep a name nobody will use again.
        var keep = false
        do {
            let reply = try await connection.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus", interface: "org.freedesktop.DBus",
                member: "GetConnectionCredentials", arguments: [.string(sender)], timeout: .seconds(5))
            let credentials = reply.first?.stringVariantDictionary ?? []
            let pid = credentials.first { $0.key == "ProcessID" }?.value.uint32
            let uid = credentials.first { $0.key == "UnixUserID" }?.value.uint32
            if let pid, let uid {
                identity = AppIdentity.of(pid: pid, uid: uid, ownUID: ownUID)
                keep = true
            } else {
                identity = .unknown(reason: "the bus gave no process or user id for the caller")
            }
        } catch {
            identity = .unknown(reason: "the caller's credentials could not be read (\(error.message))")
        }
        identities.endReading(sender, keeping: keep ? identity : nil)
        logger.info("caller identified", metadata: ["sender": "\(sender)", "identity": "\(identity)"])
        return identity
    }

    /// The `AuthorizationStatus` of a sandboxed app as `RequestAuthorization` reports it to that
    /// app; nil for host callers (they get the service's own status).
    public func status(of sender: String) async -> RecognizerAuthorization? {
        let identity = await identity(of: sender)
        guard identity.isSandboxed else { return nil }
        guard let app = identity.appID, policy != .deny else { return .restricted }
        if policy == .allow { return .authorized }
        switch try? await store.decision(for: app) {
        case .allow?: return .authorized
        case .deny?: return .denied
        case nil: return .notDetermined
        }
    }

    /// nil to let the call through, or the error to refuse it with.
    func decision(for access: DBusAccess) async -> DBusError? {
        let identity = await identity(of: access.sender)
        guard identity.isSandboxed else { return nil }
        let method = access.kind == .method ? access.member : nil
        // RequestAuthorization answers with the app's status instead of failing.
        let reportsStatus = method == Speech1.requestAuthorization.name
        if let method, let why = Self.hostOnly[method] { return Self.notAuthorized(why) }
        if access.kind == .setProperty { return Self.settingsAreHostOnly(access.member) }
        guard let app = identity.appID else {
            if case .unknown(let reason) = identity, !reportsStatus {
                return Self.notAuthorized("sttd cannot tell which app is calling (\(reason)), so it is not allowed.")
            }
            return nil
        }
        switch policy {
        case .allow: return nil
        case .deny:
            return reportsStatus
                ? nil
                : Self.notAuthorized(
                    "sttd is configured with consent = \"deny\": sandboxed apps such as \(app) may not use dictation.")
        case .ask: break
        }
        let remembered: ConsentDecision?
        do {
            remembered = try await store.decision(for: app)
        } catch {
            logger.error(
                "cannot read consent decisions",
                metadata: ["store": "\(store.description)", "error": "\(error.message)"])
            return Self.notAuthorized(
                "sttd cannot read its consent decisions (\(error.message)); \(app) is not allowed for now.")
        }
        switch remembered {
        case .allow?: return nil
        case .deny?: return reportsStatus ? nil : Self.denied(app)
        case nil: break
        }
        guard let method, Self.asking.contains(method) else {
            return Self.notAuthorized(
                "\(app) has not been allowed to use dictation. Starting dictation from it asks you; or run `sttctl allow \(app)`."
            )
        }
        switch await ask(app) {
        case .allow: return nil
        case .deny: return reportsStatus ? nil : Self.denied(app)
        case .unanswered(let why):
            return reportsStatus
                ? nil
                : Self.notAuthorized(
                    "\(app) was not allowed to use dictation: \(why). Run `sttctl allow \(app)` to allow it.")
        }
    }

    static func notAuthorized(_ message: String) -> DBusError {
        DBusError(name: SpeechAPI.errorName("NotAuthorized"), message: message)
    }

    /// A sandboxed app may not change what every later session uses (it could send the user's
    /// dictation to another backend); it may pass a language for its own session.
    static func settingsAreHostOnly(_ property: String) -> DBusError {
        let name = property.isEmpty ? "sttd's settings" : property
        return DBusError(
            name: "org.freedesktop.DBus.Error.AccessDenied",
            message:
                "Only programs outside a sandbox can change \(name): it applies to every later dictation session. An app may pass a 'language' option to StartTranscribing for its own session; the microphone, the recognizer and where text goes stay the user's choice."
        )
    }

    static func denied(_ app: String) -> DBusError {
        notAuthorized("\(app) is not allowed to use dictation. Run `sttctl allow \(app)` to allow it.")
    }
}
