import DBus
import Foundation
import History
import SpeechAPI
import TestSupport
import Testing

/// Per-app consent with real sandboxed callers: `gdbus` inside `bwrap` sandboxes that look like
/// Flatpak apps, against sttd on a private bus, with a notification server the test answers.
@Suite("Per-app consent", .serialized, .timeLimit(.minutes(3)))
struct ConsentTests {
    static let notAuthorized = "io.github.sttd.Speech1.Error.NotAuthorized"
    static let busy = "io.github.sttd.Speech1.Error.Busy"

    /// Prompts (notifications with actions) shown so far.
    static func prompts(_ server: NotificationServer) -> [NotificationServer.Notification] {
        server.notifications.filter { !$0.actions.isEmpty }
    }

    @Test func aSandboxedAppIsAskedOnceAndTheAnswerIsRemembered() async throws {
        let fixture = try await SttdFixture()
        let server = try await NotificationServer(busAddress: fixture.bus.address, actions: true)
        defer { server.stop() }
        let notes = try FlatpakSandbox(appID: "org.example.Notes", busAddress: fixture.bus.address)

        // Without consent, reads are refused and the prompt is not shown for them; Introspect is open.
        let read = try await notes.getSttdProperty("State")
        #expect(read.status != 0 && read.stderr.contains(Self.notAuthorized), "\(read)")
        let history = try await notes.callSttd("GetHistory", ["10"])
        #expect(history.status != 0 && history.stderr.contains(Self.notAuthorized), "\(history)")
        let introspect = try await notes.callSttd("Introspect", interface: "org.freedesktop.DBus.Introspectable")
        #expect(introspect.status == 0 && introspect.stdout.contains("StartTranscribing"), "\(introspect)")
        #expect(Self.prompts(server).isEmpty)

        // The first Start asks, naming the app; Deny fails the call.
        async let first = notes.callSttd("StartTranscribing", ["{}"])
        try await waitFor { Self.prompts(server).count == 1 }
        let prompt = try #require(Self.prompts(server).first)
        #expect(prompt.summary.contains("org.example.Notes"))
        #expect(prompt.actions == ["allow", "Allow", "deny", "Deny"])
        server.invokeAction("deny", on: prompt.id)
        let denied = try await first
        #expect(denied.status != 0, "\(denied)")
        #expect(denied.stderr.contains(Self.notAuthorized), "\(denied)")
        #expect(denied.stderr.contains("sttctl allow org.example.Notes"), "\(denied)")

        // Asked once: the next Start fails at once, without a prompt.
        let again = try await notes.callSttd("StartTranscribing", ["{}"])
        #expect(again.status != 0 && again.stderr.contains(Self.notAuthorized), "\(again)")
        #expect(Self.prompts(server).count == 1)
        // A denied app learns its status.
        let status = try await notes.callSttd("RequestAuthorization")
        #expect(status.stdout.contains("'denied'"), "\(status)")

        // Host callers are never asked, and they alone change decisions.
        #expect(try await fixture.property("State") == .string("idle"))
        let apps = try fixture.sttctl(["apps"])
        #expect(apps.status == 0 && apps.stdout.contains("org.example.Notes\tdeny"), "\(apps)")
        let sneaky = try await notes.callSttd("SetAppConsent", ["org.example.Notes", "allow"])
        #expect(sneaky.status != 0 && sneaky.stderr.contains(Self.notAuthorized), "\(sneaky)")
        // An app cannot pose as the focused field to receive the user's dictation.
        let posing = try await notes.callSttd(
            "SetInputMethodState", ["{'active': <true>, 'focused': <true>, 'secret': <false>}"])
        #expect(posing.status != 0 && posing.stderr.contains(Self.notAuthorized), "\(posing)")
        #expect(try await fixture.property("InputMethod") == .string(""))
        let allow = try fixture.sttctl(["allow", "org.example.Notes"])
        #expect(allow.status == 0, "\(allow)")

        // The decision survives a restart; the allowed app listens and is named while it does.
        try await fixture.restartService()
        let server2Prompts = Self.prompts(server).count
        let notesApp = try notes.launchApp()
        let started = try await notesApp.call("StartTranscribing")
        #expect(started.error == nil, "\(started)")
        #expect(try await fixture.property("ActiveClient") == .string("org.example.Notes"))
        #expect(try await fixture.property("State") == .string("listening"))
        // The sound server names the app the microphone is open for.
        let pactl = try requireTool("pactl", package: "pulseaudio-utils")
        let outputs = try await run(pactl, ["list", "source-outputs"], environment: fixture.environment)
        #expect(outputs.stdout.contains("media.name = \"Dictation for org.example.Notes\""), "\(outputs.stdout)")
        #expect(outputs.stdout.contains("application.name = \"sttd\""))
        // The app's session reports to the app alone: a host client does not see its TranscriptChanged.
        let recorder = try await fixture.record()
        let reset = try await notesApp.call("ResetTranscript")
        #expect(reset.error == nil, "\(reset)")
        try await fixture.set("Language", .string("en-GB"))  // broadcast, after the reset's signal
        try await recorder.wait("the Language change") { _ in !recorder.changes(of: "Language").isEmpty }
        #expect(recorder.signals(named: "TranscriptChanged").isEmpty)
        let stopped = try await notesApp.call("StopTranscribing")
        #expect(stopped.error == nil, "\(stopped)")
        #expect(try await fixture.property("ActiveClient") == .string(""))
        #expect(Self.prompts(server).count == server2Prompts, "an allowed app is not asked")

        // A host session is named `host`, and the host is never asked.
        try await fixture.speech.call(Speech1.startTranscribing, StartRequest())
        #expect(try await fixture.property("ActiveClient") == .string("host"))
        try await fixture.speech.call(Speech1.stopTranscribing)
        #expect(try fixture.sttctl(["status"]).status == 0)
        let busctl = try requireTool("busctl", package: "systemd")
        let hostCall = try await run(
            busctl,
            [
                "--address=\(fixture.bus.address)", "call", SpeechAPI.busName, SpeechAPI.objectPath,
                SpeechAPI.interface,
                "RequestAuthorization",
            ])
        #expect(hostCall.status == 0 && hostCall.stdout.hasPrefix("s "), "\(hostCall)")
        #expect(Self.prompts(server).count == server2Prompts)

        // A second app is asked separately.
        let other = try FlatpakSandbox(appID: "org.example.Other", busAddress: fixture.bus.address).launchApp()
        async let otherStart = other.call("StartTranscribing")
        try await waitFor { Self.prompts(server).count == server2Prompts + 1 }
        let otherPrompt = try #require(Self.prompts(server).last)
        #expect(otherPrompt.summary.contains("org.example.Other"))
        server.invokeAction("allow", on: otherPrompt.id)
        let otherResult = try await otherStart
        #expect(otherResult.error == nil, "\(otherResult)")
        #expect(try await fixture.property("ActiveClient") == .string("org.example.Other"))
        #expect(try await other.call("CancelTranscribing").error == nil)
        let listed = try fixture.sttctl(["apps"])
        #expect(listed.stdout.contains("org.example.Other\tallow"), "\(listed)")
        #expect(listed.stdout.contains("org.example.Notes\tallow"), "\(listed)")
        #expect(try fixture.sttctl(["forget", "org.example.Other"]).status == 0)
        #expect(!(try fixture.sttctl(["apps"]).stdout.contains("org.example.Other")))
        #expect(fixture.log.contains("consent decisions are kept in sttd's own file"))
    }

    /// Rule 3 of issue 26: an app sees and controls only its own session; settings and history
    /// are the host's; a session whose app leaves the bus stops as Stop would.
    @Test func eachAppSeesAndControlsOnlyItsOwnSession() async throws {
        let fixture = try await SttdFixture(config: "consent = \"allow\"\n")
        let notes = try FlatpakSandbox(appID: "org.example.Notes", busAddress: fixture.bus.address).launchApp()
        let spy = try FlatpakSandbox(appID: "org.example.Spy", busAddress: fixture.bus.address).launchApp()
        let started = try await notes.call("StartTranscribing")
        #expect(started.error == nil, "\(started)")
        try await fixture.pulse.play(try LibriVox.recordings()[1].path)
        try await waitFor("words in the Transcript: \(fixture.log)", timeout: .seconds(30)) {
            (try? await fixture.property("Transcript"))??.string?.isEmpty == false
        }
        let own = try await notes.get("Transcript")
        #expect(own.error == nil && own.value?.isEmpty == false, "the app reads its own text: \(own)")

        // Another app neither reads the text, nor takes it, ends it, clears it, nor sends later dictation elsewhere.
        #expect(try await spy.get("Transcript").failed(with: Self.busy))
        let all = try await spy.request(["get_all": true])
        let shown = try #require(
            try JSONSerialization.jsonObject(with: Data((all.value ?? "").utf8)) as? [String: Any], "\(all)")
        #expect(shown["Transcript"] as? String == "", "GetAll shows another's transcript: \(all)")
        #expect(shown["State"] as? String == "listening")
        for member in [
            "StopTranscribing", "CancelTranscribing", "ToggleTranscribing", "ResetTranscript", "StartTranscribing",
        ] {
            let answer = try await spy.call(member)
            #expect(answer.failed(with: Self.busy), "\(member): \(answer)")
        }
        let history = try await spy.call("GetHistory")
        #expect(history.failed(with: Self.notAuthorized) && history.message.contains("sttctl history"), "\(history)")
        for (app, property, value) in [
            (spy, "Backend", "deepgram"), (notes, "Language", "en-GB"), (spy, "Source", "x"),
        ] {
            let set = try await app.request(["set": property, "value": value])
            #expect(set.failed(with: "org.freedesktop.DBus.Error.AccessDenied"), "\(property): \(set)")
            #expect(set.message.contains("'language' option"), "\(set)")
        }
        #expect(try await fixture.property("Backend") == .string("local"))
        #expect(try await fixture.property("Language") == .string("en-US"))
        #expect(try await fixture.property("State") == .string("listening"))
        #expect(try await fixture.property("ActiveClient") == .string("org.example.Notes"))
        #expect(try await notes.get("Transcript").value?.isEmpty == false, "the app still reads its own text")

        // The app leaves the bus (it crashed or was closed): its session stops as Stop would.
        try await notes.leave()
        try await waitFor("State idle", timeout: .seconds(20)) {
            (try? await fixture.property("State")) == .string("idle")
        }
        let sessions = try #require(try HistoryStore(readingAt: fixture.historyPath)).sessions()
        #expect(sessions.count == 1 && sessions.first?.ended != nil && sessions.first?.text.isEmpty == false)
        #expect(fixture.log.contains("left the bus; stopping the session"))
        // What it left behind is the host's to read, never another app's.
        let left = try #require(try await fixture.property("Transcript")?.string)
        #expect(!left.isEmpty)
        #expect(try await spy.get("Transcript").value == "")
        #expect(try await spy.call("StopTranscribing").value == "")
        #expect(try await spy.call("ResetTranscript").error == nil)
        #expect(try await fixture.property("Transcript")?.string == left, "another app cleared it")
        // The host keeps full control.
        try await fixture.set("Backend", .string("local"))
        try await fixture.speech.call(Speech1.resetTranscript)
        #expect(try await fixture.property("Transcript") == .string(""))
    }

    /// An app that asks for a session and leaves before it opens does not leave the microphone on.
    @Test func aSessionWhoseAppLeftBeforeItOpenedStops() async throws {
        let fixture = try await SttdFixture()
        let server = try await NotificationServer(busAddress: fixture.bus.address, actions: true)
        defer { server.stop() }
        let notes = try FlatpakSandbox(appID: "org.example.Notes", busAddress: fixture.bus.address).launchApp()
        _ = try await notes.request(["call": "StartTranscribing", "send": true])
        try await waitFor { Self.prompts(server).count == 1 }
        try await notes.leave()
        // Allowed only after the app has gone: the session opens for nobody, and stops.
        server.invokeAction("allow", on: try #require(Self.prompts(server).first).id)
        try await waitFor("the session to stop for the app that left: \(fixture.log)", timeout: .seconds(30)) {
            fixture.log.contains("left the bus; stopping the session")
        }
        try await waitFor("State idle", timeout: .seconds(20)) {
            (try? await fixture.property("State")) == .string("idle")
        }
        #expect(try await fixture.property("ActiveClient") == .string(""))
    }

    @Test func noAnswerWithinTheBoundIsNotAuthorizedAndAsksAgain() async throws {
        let fixture = try await SttdFixture(config: "consent_timeout_ms = 1500\n")
        let server = try await NotificationServer(busAddress: fixture.bus.address, actions: true)
        defer { server.stop() }
        let notes = try FlatpakSandbox(appID: "org.example.Notes", busAddress: fixture.bus.address)
        let first = try await notes.callSttd("StartTranscribing", ["{}"])
        #expect(first.status != 0 && first.stderr.contains(Self.notAuthorized), "\(first)")
        #expect(first.stderr.contains("no answer"), "\(first)")
        let prompt = try #require(Self.prompts(server).first)
        #expect(prompt.expireTimeout == 1500)
        try await waitFor("the unanswered prompt to be withdrawn") { server.closedByService.contains(prompt.id) }

        // Not remembered: the next call asks again; dismissing it is no answer either.
        async let second = notes.callSttd("ToggleTranscribing", ["{}"])
        try await waitFor { Self.prompts(server).count == 2 }
        server.dismiss(Self.prompts(server)[1].id)
        let dismissed = try await second
        #expect(dismissed.status != 0 && dismissed.stderr.contains("dismissed"), "\(dismissed)")
        let status = try await notes.callSttd("RequestAuthorization")
        #expect(Self.prompts(server).count == 3, "RequestAuthorization asks too")
        #expect(status.stdout.contains("'notDetermined'"), "\(status)")
        #expect(try fixture.sttctl(["apps"]).stdout.contains("No app"))
    }

    @Test func aCallWaitingForAnAnswerDoesNotHoldUpShutdown() async throws {
        let fixture = try await SttdFixture()
        let server = try await NotificationServer(busAddress: fixture.bus.address, actions: true)
        defer { server.stop() }
        let notes = try FlatpakSandbox(appID: "org.example.Notes", busAddress: fixture.bus.address)
        async let waiting = notes.callSttd("StartTranscribing", ["{}"])
        try await waitFor { Self.prompts(server).count == 1 }
        fixture.sttd.signal(SIGTERM)
        // The prompt would wait 20 s; shutdown answers it and exits well before.
        try await waitFor("sttd to exit: \(fixture.log)", timeout: .seconds(10)) { !fixture.sttd.isRunning }
        #expect(fixture.sttd.exitStatus == 0)
        let result = try await waiting
        #expect(result.status != 0, "\(result)")
    }

    @Test func withoutActionsOrUnderPolicyDenyNothingIsAsked() async throws {
        let fixture = try await SttdFixture()
        let server = try await NotificationServer(busAddress: fixture.bus.address, actions: false)
        defer { server.stop() }
        let notes = try FlatpakSandbox(appID: "org.example.Notes", busAddress: fixture.bus.address)
        let first = try await notes.callSttd("StartTranscribing", ["{}"])
        #expect(first.status != 0 && first.stderr.contains(Self.notAuthorized), "\(first)")
        #expect(first.stderr.contains("Allow and Deny"), "\(first)")
        #expect(server.notifications.isEmpty)

        let strict = try await SttdFixture(config: "consent = \"deny\"\n")
        let strictNotes = try FlatpakSandbox(appID: "org.example.Notes", busAddress: strict.bus.address)
        let refused = try await strictNotes.callSttd("StartTranscribing", ["{}"])
        #expect(refused.status != 0 && refused.stderr.contains(Self.notAuthorized), "\(refused)")
        let status = try await strictNotes.callSttd("RequestAuthorization")
        #expect(status.stdout.contains("'restricted'"), "\(status)")
        // Even an explicit allow does not override the policy.
        #expect(try strict.sttctl(["allow", "org.example.Notes"]).status == 0)
        let still = try await strictNotes.callSttd("StartTranscribing", ["{}"])
        #expect(still.status != 0 && still.stderr.contains("consent = \"deny\""), "\(still)")
    }
}

/// Decisions in the desktop's permission store (xdg-permission-store from xdg-desktop-portal),
/// where `flatpak permission-show sttd` finds them.
@Suite("Consent in the desktop permission store", .serialized, .timeLimit(.minutes(2)))
struct PermissionStoreTests {
    static let store = "org.freedesktop.impl.portal.PermissionStore"

    func lookUp(_ fixture: SttdFixture) async throws -> [String: [String]] {
        var reply: [DBusValue] = []
        do {
            reply = try await fixture.client.call(
                destination: Self.store, path: "/org/freedesktop/impl/portal/PermissionStore", interface: Self.store,
                member: "Lookup", arguments: [.string("sttd"), .string("microphone")])
        } catch {
            // No entry yet is "nothing decided".
            guard error.name.hasSuffix("NotFound") else { throw error }
        }
        guard case .dictionary(_, _, let entries)? = reply.first else { return [:] }
        return Dictionary(uniqueKeysWithValues: entries.map { ($0.key.string ?? "", $0.value.strings ?? []) })
    }

    @Test func decisionsGoToThePermissionStoreWhenOneRuns() async throws {
        let fixture = try await SttdFixture()
        let binary = try requireFile("/usr/libexec/xdg-permission-store", package: "xdg-desktop-portal")
        var environment = fixture.environment
        environment["XDG_DATA_HOME"] = "\(fixture.home)/data"
        let store = try ChildProcess(binary, [], environment: environment, stderr: "\(fixture.home)/store.log")
        defer { store.stop() }
        try await waitFor("the permission store on the bus") {
            let owned = try? await fixture.client.call(
                destination: "org.freedesktop.DBus", path: "/org/freedesktop/DBus",
                interface: "org.freedesktop.DBus", member: "NameHasOwner", arguments: [.string(Self.store)])
            return owned?.first?.boolean == true
        }
        // sttd chooses its store at startup.
        try await fixture.restartService()
        try await waitFor { fixture.log.contains("kept in the desktop permission store") }

        #expect(try fixture.sttctl(["allow", "org.example.Notes"]).status == 0)
        #expect(try await lookUp(fixture)["org.example.Notes"] == ["yes"])
        let notes = try FlatpakSandbox(appID: "org.example.Notes", busAddress: fixture.bus.address)
        let started = try await notes.callSttd("StartTranscribing", ["{}"])
        #expect(started.status == 0, "\(started)")
        _ = try await notes.callSttd("CancelTranscribing")

        #expect(try fixture.sttctl(["deny", "org.example.Notes"]).status == 0)
        #expect(try await lookUp(fixture)["org.example.Notes"] == ["no"])
        let refused = try await notes.callSttd("StartTranscribing", ["{}"])
        #expect(refused.status != 0 && refused.stderr.contains(ConsentTests.notAuthorized), "\(refused)")

        // Cleared from outside, as `flatpak permission-reset` does: sttd follows the store.
        _ = try await fixture.client.call(
            destination: Self.store, path: "/org/freedesktop/impl/portal/PermissionStore", interface: Self.store,
            member: "DeletePermission",
            arguments: [.string("sttd"), .string("microphone"), .string("org.example.Notes")])
        #expect(try fixture.sttctl(["apps"]).stdout.contains("No app"))
    }
}
