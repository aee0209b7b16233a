import CWaylandClient
import CWaylandIM
import Foundation
import TestSupport
import Testing

/// The vendored wayland-scanner output in Sources/CWaylandIM says what its XML says.
@Suite("The vendored Wayland protocol files")
struct WaylandProtocolFilesTests {
    static let module = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources/CWaylandIM").path
    static let protocols = [
        "input-method-unstable-v2", "virtual-keyboard-unstable-v1", "wlr-foreign-toplevel-management-unstable-v1",
    ]

    /// The generated files of one protocol, by the scanner's mode that writes each.
    static func vendoredFiles(_ name: String) -> [(mode: String, path: String)] {
        [
            ("private-code", "\(module)/\(name)-protocol.c"),
            ("client-header", "\(module)/include/\(name)-client-protocol.h"),
        ]
    }

    static func scanner() throws -> String {
        let path = "/usr/bin/wayland-scanner"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw MissingPrerequisite(
                description:
                    "wayland-scanner is not installed: run `sudo scripts/setup build` (Debian package libwayland-dev)")
        }
        return path
    }

    /// The wayland-scanner that wrote the vendored files: Debian 12's (libwayland-bin 1.21.0-1),
    /// as CI has. Another version writes other bytes from the same XML (its name in the first
    /// line, and more), so the comparison needs this one; scripts/wayland-protocols checks it too.
    static let vendoringScanner = "1.21.0"

    /// "1.21.0", from the scanner's `--version` or from the first line of a file it wrote.
    static func scannerVersion(in text: String) -> String? {
        text.split(separator: "\n").first?.split(separator: " ").first { $0.first?.isNumber == true }.map(String.init)
    }

    @Test func vendoredCIsWhatTheScannerWritesFromTheXML() throws {
        let scanner = try Self.scanner()
        let answer = try run(scanner, ["--version"])
        let installed = Self.scannerVersion(in: answer.stderr + answer.stdout) ?? "of unknown version"
        try #require(
            installed == Self.vendoringScanner,
            """
            wayland-scanner \(installed) is installed, but the vendored C is compared byte for byte with what \
            wayland-scanner \(Self.vendoringScanner) writes (Debian 12's libwayland-bin, as CI has): run this test \
            there, or regenerate with scripts/wayland-protocols and change vendoringScanner in the same commit
            """)
        let output = try makeTemporaryDirectory("sttd-wayland-scanner")
        defer { try? FileManager.default.removeItem(atPath: output) }
        let xmls = try FileManager.default.contentsOfDirectory(atPath: "\(Self.module)/protocol").sorted()
        #expect(xmls == Self.protocols.map { "\($0).xml" })
        for name in Self.protocols {
            for (mode, vendored) in Self.vendoredFiles(name) {
                let text = try String(contentsOfFile: vendored, encoding: .utf8)
                #expect(Self.scannerVersion(in: text) == Self.vendoringScanner, "\(vendored)")
                let generated = "\(output)/\(name)-\(mode)"
                let result = try run(scanner, [mode, "\(Self.module)/protocol/\(name).xml", generated])
                try #require(result.status == 0, "\(result.stderr)")
                #expect(
                    FileManager.default.contents(atPath: generated) == FileManager.default.contents(atPath: vendored),
                    "\(vendored) is not what wayland-scanner \(mode) writes: run scripts/wayland-protocols")
            }
        }
    }

    /// The tables compiled from the vendored C, by interface name.
    static func compiledInterfaces() -> [String: wl_interface] {
        let tables = [
            zwp_input_method_manager_v2_interface, zwp_input_method_v2_interface,
            zwp_input_method_keyboard_grab_v2_interface, zwp_input_popup_surface_v2_interface,
            zwp_virtual_keyboard_manager_v1_interface, zwp_virtual_keyboard_v1_interface,
            zwlr_foreign_toplevel_manager_v1_interface, zwlr_foreign_toplevel_handle_v1_interface,
        ]
        return Dictionary(uniqueKeysWithValues: tables.map { (String(cString: $0.name), $0) })
    }

    /// An interface as its XML declares it: version and message names in order.
    struct Declared: Equatable {
        var version: Int32
        var requests: [String]
        var events: [String]
    }

    /// Every `<interface>` of an XML file; attribute order as in wlroots' files (name first).
    static func declaredInterfaces(_ xml: String) -> [String: Declared] {
        func names(_ tag: String, in text: String) -> [String] {
            text.components(separatedBy: "<\(tag) name=\"").dropFirst().compactMap { $0.split(separator: "\"").first }
                .map(String.init)
        }
        var declared: [String: Declared] = [:]
        for chunk in xml.components(separatedBy: "<interface name=\"").dropFirst() {
            let body = chunk.components(separatedBy: "</interface>")[0]
            let name = String(body.prefix { $0 != "\"" })
            let version = body.split(separator: "version=\"").dropFirst().first?.prefix { $0 != "\"" }
            declared[name] = Declared(
                version: Int32(version ?? "") ?? 0, requests: names("request", in: body),
                events: names("event", in: body))
        }
        return declared
    }

    @Test func compiledTablesMatchTheXML() throws {
        let compiled = Self.compiledInterfaces()
        var declaredNames: Set<String> = []
        for name in Self.protocols {
            let xml = try String(contentsOfFile: "\(Self.module)/protocol/\(name).xml", encoding: .utf8)
            for (interface, declared) in Self.declaredInterfaces(xml) {
                declaredNames.insert(interface)
                let table = try #require(compiled[interface], "\(interface) has no compiled table")
                let requests = (0..<Int(table.method_count)).map { String(cString: table.methods[$0].name) }
                let events = (0..<Int(table.event_count)).map { String(cString: table.events[$0].name) }
                #expect(
                    Declared(version: table.version, requests: requests, events: events) == declared, "\(interface)")
            }
        }
        #expect(declaredNames == Set(compiled.keys))
    }

    /// The interfaces sttd binds, at the version sway 1.7 (wlroots 0.15) offers.
    @Test func interfacesAreTheVersionsSttdSpeaks() {
        let compiled = Self.compiledInterfaces()
        #expect(compiled["zwp_input_method_manager_v2"]?.version == 1)
        #expect(compiled["zwp_input_method_v2"]?.version == 1)
        #expect(compiled["zwp_virtual_keyboard_manager_v1"]?.version == 1)
        #expect(compiled["zwp_virtual_keyboard_v1"]?.version == 1)
        let inputMethod = compiled["zwp_input_method_v2"]
        #expect(inputMethod.map { String(cString: $0.methods[3].name) } == "commit")
        #expect(inputMethod.map { String(cString: $0.methods[3].signature) } == "u", "commit carries the done count")
        // Version 3 sends `parent`, which sttd ignores; the events it reads come first.
        #expect(compiled["zwlr_foreign_toplevel_manager_v1"]?.version == 3)
        #expect(compiled["zwlr_foreign_toplevel_handle_v1"]?.version == 3)
        let handle = compiled["zwlr_foreign_toplevel_handle_v1"]
        let events = handle.map { table in (0..<Int(table.event_count)).map { String(cString: table.events[$0].name) } }
        #expect(events?.prefix(7) == ["title", "app_id", "output_enter", "output_leave", "state", "done", "closed"])
    }
}
