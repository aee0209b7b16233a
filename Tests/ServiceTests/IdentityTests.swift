import Foundation
import TestSupport
import Testing

@testable import SpeechBus

@Suite("Caller identity")
struct IdentityTests {
    @Test func flatpakInfoNamesTheApp() {
        let info = """
            [Application]
            name=org.example.Notes
            runtime=runtime/org.freedesktop.Platform/x86_64/23.08

            [Instance]
            instance-id=1234
            """
        #expect(AppIdentity.flatpakAppID(keyfile: info) == "org.example.Notes")
        // `name` only counts in [Application]; garbage is no app.
        #expect(AppIdentity.flatpakAppID(keyfile: "[Runtime]\nname=org.freedesktop.Platform\n") == nil)
        #expect(AppIdentity.flatpakAppID(keyfile: "[Application]\nname=../../etc\n") == nil)
        #expect(AppIdentity.flatpakAppID(keyfile: "[Application]\nname=1bad.start\n") == nil)
        #expect(AppIdentity.flatpakAppID(keyfile: "") == nil)
    }

    @Test func snapNamesComeFromTheAppArmorLabelOrTheCgroup() {
        #expect(AppIdentity.snapName(appArmorLabel: "snap.firefox.firefox (enforce)") == "firefox")
        #expect(AppIdentity.snapName(appArmorLabel: "unconfined") == nil)
        #expect(AppIdentity.snapName(appArmorLabel: "snap-update-ns.firefox (enforce)") == nil)
        let cgroup =
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/snap.signal-desktop.signal-desktop-123.scope\n"
        #expect(AppIdentity.snapName(cgroup: cgroup) == "signal-desktop")
        #expect(AppIdentity.snapName(cgroup: "0::/user.slice/user-1000.slice/session-2.scope\n") == nil)
        #expect(AppIdentity.snap("firefox").appID == "snap.firefox")
    }

    @Test func processesAreReadFromProc() throws {
        // This test process: unsandboxed, same user.
        #expect(AppIdentity.of(pid: UInt32(getpid()), uid: getuid(), ownUID: getuid()) == .host)
        // Another user, a pid that does not exist, no pid: unknown, never host.
        if case .unknown = AppIdentity.of(pid: UInt32(getpid()), uid: getuid() + 1, ownUID: getuid()) {
        } else {
            Issue.record("another user's process must be unknown")
        }
        if case .unknown = AppIdentity.of(pid: 0x3fff_fff0, uid: getuid(), ownUID: getuid()) {
        } else {
            Issue.record("a gone process must be unknown")
        }
        // A fake /proc: a process whose root holds .flatpak-info.
        let proc = try makeTemporaryDirectory("sttd-proc")
        defer { try? FileManager.default.removeItem(atPath: proc) }
        try FileManager.default.createDirectory(atPath: "\(proc)/42/root", withIntermediateDirectories: true)
        try "[Application]\nname=org.example.Notes\n".write(
            toFile: "\(proc)/42/root/.flatpak-info", atomically: true, encoding: .utf8)
        #expect(AppIdentity.of(pid: 42, uid: 7, ownUID: 7, proc: proc) == .flatpak("org.example.Notes"))
        try "[Application]\n".write(toFile: "\(proc)/42/root/.flatpak-info", atomically: true, encoding: .utf8)
        if case .unknown = AppIdentity.of(pid: 42, uid: 7, ownUID: 7, proc: proc) {
        } else {
            Issue.record("a sandbox naming no app must be unknown")
        }
        try FileManager.default.createDirectory(atPath: "\(proc)/43/root/usr", withIntermediateDirectories: true)
        try FileManager.default.createDirectory(atPath: "\(proc)/43/attr", withIntermediateDirectories: true)
        try "snap.notes.notes (enforce)\n".write(toFile: "\(proc)/43/attr/current", atomically: true, encoding: .utf8)
        #expect(AppIdentity.of(pid: 43, uid: 7, ownUID: 7, proc: proc) == .snap("notes"))
    }

    @Test func theCacheIsBoundedAndForgetsDepartedNames() {
        let cache = IdentityCache()
        cache.store(.flatpak("org.example.Notes"), for: ":1.1")
        cache.store(.host, for: ":1.2")
        cache.forget(":1.1")
        #expect(cache.identity(of: ":1.1") == nil)
        #expect(cache.identity(of: ":1.2") == .host)
        for n in 0..<(IdentityCache.limit + 10) { cache.store(.host, for: ":2.\(n)") }
        #expect(cache.count == IdentityCache.limit)
        #expect(cache.identity(of: ":1.2") == nil, "the oldest entry went first")
        #expect(cache.identity(of: ":2.\(IdentityCache.limit + 9)") == .host)
    }

    @Test func theFileStoreKeepsDecisions() async throws {
        let directory = try makeTemporaryDirectory("sttd-consent")
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let store = FileConsentStore(path: "\(directory)/sttd/consent")
        #expect(try await store.decisions().isEmpty)
        try await store.set(.allow, for: "org.example.Notes")
        try await store.set(.deny, for: "snap.spy")
        let reopened = FileConsentStore(path: store.path)
        #expect(try await reopened.decisions() == ["org.example.Notes": .allow, "snap.spy": .deny])
        try await reopened.set(nil, for: "snap.spy")
        #expect(try await store.decision(for: "snap.spy") == nil)
        #expect(FileConsentStore.parse("org.example.Notes yes\nbad line\n../x yes\n") == ["org.example.Notes": .allow])
    }
}
