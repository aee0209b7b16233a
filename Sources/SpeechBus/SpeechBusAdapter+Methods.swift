import DBus
import Speech
import SpeechAPI

/// Method calls -> core: one handler per method of the interface.
extension SpeechBusAdapter {
    /// Each handler runs on the bus thread and must not block: it parses, hands the call to the
    /// core, and replies when the core answers. Calls about the session are decided on the core,
    /// in one step with the call itself: a sandboxed caller that does not own the running session
    /// gets `Busy` (see ``SessionView``).
    static func handler(
        for method: SpeechMethod, core: SpeechCore, consent: Consent?, view: SessionView, inputMethod: InputMethodRoute?
    ) -> DBusMethod.Handler {
        switch method {
        case .startTranscribing:
            return { call, reply in
                do throws(DBusError) {
                    let options = try startOptions(of: call, consent)
                    submitUnlessOthers(call, reply, core: core, consent: consent, view: view) { core in
                        core.startNow(options) { error in error.map(reply.fail) ?? reply.send([]) }
                    }
                } catch {
                    reply.fail(error)
                }
            }
        case .stopTranscribing:
            return { call, reply in
                let sandboxed = isSandboxed(call.sender, consent)
                core.submit { core in
                    if sandboxed && !view.isOwner(call.sender) {
                        // Idle: nothing of its own to stop; another's text is never shown.
                        guard core.state == .idle else { return reply.fail(view.busy) }
                        return reply.send([.string("")])
                    }
                    core.stopNow { reply.send([.string($0)]) }
                }
            }
        case .cancelTranscribing:
            return { call, reply in
                submitUnlessOthers(call, reply, core: core, consent: consent, view: view) { core in
                    core.cancelNow { reply.send([]) }
                }
            }
        case .toggleTranscribing:
            return { call, reply in
                do throws(DBusError) {
                    let options = try startOptions(of: call, consent)
                    submitUnlessOthers(call, reply, core: core, consent: consent, view: view) { core in
                        core.toggleNow(options) { result in
                            switch result {
                            case .success(let listening): reply.send([.boolean(listening)])
                            case .failure(let error): reply.fail(error)
                            }
                        }
                    }
                } catch {
                    reply.fail(error)
                }
            }
        case .resetTranscript:
            return { call, reply in
                let sandboxed = isSandboxed(call.sender, consent)
                core.submit { core in
                    if sandboxed && !view.isOwner(call.sender) {
                        // Idle: its own transcript (as it sees it) is empty already.
                        guard core.state == .idle else { return reply.fail(view.busy) }
                        return reply.send([])
                    }
                    core.resetTranscript()
                    reply.send([])
                }
            }
        case .requestAuthorization:
            return { call, reply in
                guard let consent, consent.identities.identity(of: call.sender)?.isSandboxed == true else {
                    return core.requestAuthorization { reply.send([.string($0.rawValue)]) }
                }
                // A sandboxed app learns its own status; once allowed, the service's.
                let queued = consent.enqueue {
                    let status = await consent.status(of: call.sender)
                    guard let status, status != .authorized else {
                        return core.requestAuthorization { reply.send([.string($0.rawValue)]) }
                    }
                    reply.send([.string(status.rawValue)])
                }
                if !queued { reply.fail(SpeechError.busy("sttd is busy; try again.")) }
            }
        case .listAppConsent:
            return { _, reply in
                guard let consent else { return reply.send([.dictionary(key: .string, value: .string, [])]) }
                let queued = consent.enqueue {
                    do throws(DBusError) {
                        let decisions = try await consent.store.decisions()
                        reply.send([
                            .dictionary(
                                key: .string, value: .string,
                                decisions.keys.sorted().map { .init(.string($0), .string(decisions[$0]!.rawValue)) })
                        ])
                    } catch {
                        reply.fail(SpeechError.internal("cannot read the consent decisions: \(error.message)"))
                    }
                }
                if !queued { reply.fail(SpeechError.busy("sttd is busy; try again.")) }
            }
        case .setAppConsent:
            return { call, reply in
                let app = call.arguments[0].string ?? ""
                let text = call.arguments[1].string ?? ""
                guard AppIdentity.isValidDecisionID(app) else {
                    return reply.fail(
                        DBusError.invalidArgs(
                            "app_id '\(app)' is not an app id (a Flatpak id such as org.example.Notes, or snap.NAME)"))
                }
                guard text == "ask" || ConsentDecision(rawValue: text) != nil else {
                    return reply.fail(DBusError.invalidArgs("decision must be 'allow', 'deny' or 'ask', not '\(text)'"))
                }
                guard let consent else {
                    return reply.fail(SpeechError.internal("per-app consent is not running in this sttd"))
                }
                let queued = consent.enqueue {
                    do throws(DBusError) {
                        try await consent.store.set(ConsentDecision(rawValue: text), for: app)
                        reply.send([])
                    } catch {
                        reply.fail(SpeechError.internal("cannot store the decision: \(error.message)"))
                    }
                }
                if !queued { reply.fail(SpeechError.busy("sttd is busy; try again.")) }
            }
        case .setInputMethodState:
            // Host callers only (the gate refuses sandboxed ones): an app must never pose as the
            // focused field and receive the user's dictation.
            return { call, reply in
                do throws(DBusError) {
                    let state = try InputMethodState(parsing: call.arguments[0])
                    guard let inputMethod else {
                        return reply.fail(SpeechError.internal("this sttd does not route text to an input method"))
                    }
                    inputMethod.update(from: call.sender, state)
                    reply.send([])
                } catch {
                    reply.fail(error)
                }
            }
        case .listSources:
            return { _, reply in
                core.sources { result in
                    switch result {
                    case .success(let sources):
                        reply.send([
                            .array(
                                SpeechMethod.sourceType,
                                sources.map {
                                    .structure([.string($0.name), .string($0.description), .boolean($0.isDefault)])
                                })
                        ])
                    case .failure(let error):
                        reply.fail(error)
                    }
                }
            }
        case .getHistory:
            return { call, reply in
                let limit = Int(call.arguments[0].uint32 ?? 0)
                core.submit { core in
                    do throws(SpeechError) {
                        let entries = try core.history(limit: limit)
                        reply.send([
                            .array(
                                SpeechMethod.historyEntryType,
                                entries.map { .structure([.string($0.id), .int64($0.started), .string($0.text)]) })
                        ])
                    } catch {
                        reply.fail(error)
                    }
                }
            }
        }
    }

    /// Who is starting a session: the app (its session then reports to it alone) or the host.
    /// A start's options from its first argument, for the app that called.
    static func startOptions(of call: DBusMethodCall, _ consent: Consent?) throws(DBusError) -> StartOptions {
        var options = try StartOptions(parsing: call.arguments[0])
        options.client = client(of: call, consent)
        return options
    }

    /// Runs `body` on the core, unless the caller is a sandboxed app and the running session is
    /// another's: that gets `Busy`. Decided in the same step as `body`, so no call slips between.
    static func submitUnlessOthers(
        _ call: DBusMethodCall, _ reply: DBusReply, core: SpeechCore, consent: Consent?, view: SessionView,
        _ body: @escaping @Sendable (isolated SpeechCore) -> Void
    ) {
        let sandboxed = isSandboxed(call.sender, consent)
        core.submit { core in
            if sandboxed, let busy = view.refusal(for: call.sender, listening: core.state != .idle) {
                return reply.fail(busy)
            }
            body(core)
        }
    }

    static func client(of call: DBusMethodCall, _ consent: Consent?) -> SessionClient {
        guard isSandboxed(call.sender, consent) else { return SessionClient(name: SpeechAPI.hostClient) }
        let name = consent?.identities.identity(of: call.sender)?.description ?? "unknown"
        return SessionClient(name: name, privateDestination: call.sender)
    }

    /// Whether a caller gets a sandboxed app's view. The gate identified the caller before its
    /// call got here; one no longer known (the cache is bounded) is not taken for the host.
    static func isSandboxed(_ sender: String, _ consent: Consent?) -> Bool {
        guard let consent else { return false }
        return consent.identities.identity(of: sender) != .host
    }
}
