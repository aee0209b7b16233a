import Foundation
import Testing

@testable import Speech

/// sttd.conf(5) and docs/configuration.md are rendered from `Configuration.reference`; these
/// tests hold that table to the parser, so the documentation cannot drift from the code.
@Suite("Configuration reference")
struct ConfigurationReferenceTests {
    static let reference = Configuration.reference

    /// The keys the parser names in its unknown-key error for `section`.
    static func parserKeys(section: String) throws -> [String] {
        let toml = section.isEmpty ? "not_a_key_zz = 1" : "[\(section)]\nnot_a_key_zz = 1"
        do {
            _ = try Configuration(toml: toml)
        } catch {
            let message = error.message
            guard let open = message.range(of: "(known here: "), let close = message.range(of: ");") else {
                Issue.record("unexpected message: \(message)")
                return []
            }
            return message[open.upperBound..<close.lowerBound].components(separatedBy: ", ").sorted()
        }
        Issue.record("[\(section)] accepted an unknown key")
        return []
    }

    /// `key = value` in its table.
    static func document(_ key: ConfigurationKey, value: String) -> String {
        key.section.isEmpty ? "\(key.name) = \(value)" : "[\(key.section)]\n\(key.name) = \(value)"
    }

    @Test func documentsEveryKeyTheParserAccepts() throws {
        let tables = Configuration.referenceSections.filter { !$0.isEmpty }
        for section in Configuration.referenceSections {
            var documented = Self.reference.filter { $0.section == section }.map(\.name)
            if section.isEmpty { documented += tables }
            #expect(try Self.parserKeys(section: section) == documented.sorted(), "[\(section)]")
        }
    }

    @Test(arguments: Configuration.reference.filter { $0.defaultValue != nil })
    func documentedDefaultIsTheParsersDefault(_ key: ConfigurationKey) throws {
        let parsed = try Configuration(toml: Self.document(key, value: key.defaultValue ?? ""))
        #expect(parsed == Configuration(), "\(key.path) = \(key.defaultValue ?? "")")
    }

    @Test(arguments: Configuration.reference.filter { $0.defaultValue == nil })
    func keyDocumentedUnsetIsUnsetByDefault(_ key: ConfigurationKey) throws {
        // The first allowed value (a flag's `true`, a choice's first name) must change the config.
        let first = key.allowed == "true or false" ? "true" : String(key.allowed.prefix { $0 != "," })
        let parsed = try Configuration(toml: Self.document(key, value: first))
        #expect(parsed != Configuration(), "\(key.path) = \(first)")
    }

    @Test(arguments: Configuration.reference.filter { $0.range != nil })
    func documentedRangeIsTheEnforcedRange(_ key: ConfigurationKey) throws {
        let range = try #require(key.range)
        #expect(key.allowed.hasPrefix("\(range.lowerBound) to \(range.upperBound)"))
        _ = try Configuration(toml: Self.document(key, value: "\(range.lowerBound)"))
        _ = try Configuration(toml: Self.document(key, value: "\(range.upperBound)"))
        #expect(throws: ConfigurationError.self) {
            try Configuration(toml: Self.document(key, value: "\(range.lowerBound - 1)"))
        }
        #expect(throws: ConfigurationError.self) {
            try Configuration(toml: Self.document(key, value: "\(range.upperBound + 1)"))
        }
    }

    @Test func audioDirectoryMustBeAbsoluteAsDocumented() throws {
        let key = try #require(Self.reference.first { $0.path == "debug.audio_dir" })
        #expect(key.allowed == "an absolute path, or empty")
        #expect(throws: ConfigurationError.self) { try Configuration(toml: "[debug]\naudio_dir = \"sttd-audio\"") }
        #expect(try Configuration(toml: "[debug]\naudio_dir = \"/tmp/a\"").debug.audioDirectory == "/tmp/a")
    }

    @Test func configurationDocumentHoldsTheGeneratedKeyTables() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        let text = try String(contentsOf: root.appendingPathComponent("docs/configuration.md"), encoding: .utf8)
        let begin = try #require(text.range(of: "<!-- config-reference begin -->\n"))
        let end = try #require(text.range(of: "<!-- config-reference end -->"))
        #expect(
            String(text[begin.upperBound..<end.lowerBound]) == Configuration.referenceMarkdown(),
            "docs/configuration.md is out of date: run scripts/config-reference")
    }

    @Test func manPageNamesEveryKeyWithoutBlankLines() {
        let page = Configuration.referenceManPage()
        for key in Self.reference {
            let escaped = key.name.replacingOccurrences(of: "-", with: "\\-")
            #expect(page.contains("\\fB\(escaped)\\fR"), "\(key.path)")
        }
        for section in Configuration.referenceSections where !section.isEmpty {
            #expect(page.contains(".SS \"[\(section)]\"\n"))
        }
        #expect(!page.contains("\n\n"), "a blank line in roff is a paragraph break groff warns about")
        #expect(page.hasPrefix(".TH STTD.CONF 5"))
        #expect(page.unicodeScalars.allSatisfy { $0.isASCII }, "groff warns on other characters")
    }
}

extension ConfigurationKey: CustomTestStringConvertible {
    public var testDescription: String { path }
}
