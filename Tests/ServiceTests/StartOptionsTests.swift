import DBus
import Speech
import SpeechBus
import Testing

@Suite("Start options")
struct StartOptionsTests {
    @Test func parsesEveryOption() throws {
        let options = try StartOptions(
            dbusValue: .vardict([
                ("backend", .string("deepgram")), ("language", .string("fr-FR")), ("source", .string("")),
                ("interim_results", .boolean(false)), ("keyterms", .strings(["sttd", "D-Bus"])),
                ("auto_stop_ms", .uint32(1500)), ("output", .string("clipboard")),
            ]))
        #expect(options.backend == .deepgram)
        #expect(options.language == "fr-FR")
        #expect(options.source == "")
        #expect(options.interimResults == false)
        #expect(options.keyterms == ["sttd", "D-Bus"])
        #expect(options.autoStopMilliseconds == 1500)
        #expect(options.output == .clipboard)
    }

    @Test func refusesBadOptions() {
        let cases: [DBusValue] = [
            .vardict([("nope", .string(""))]), .vardict([("backend", .boolean(true))]),
            .vardict([("keyterms", .strings([""]))]), .vardict([("keyterms", .array(.uint32, []))]),
            .vardict([("output", .string("speaker"))]), .vardict([("language", .string("12"))]),
            .vardict([("auto_stop_ms", .uint32(600_001))]), .vardict([("auto_stop_ms", .int32(800))]),
            .string("not a dict"),
        ]
        for value in cases {
            let error = #expect(throws: DBusError.self) { try StartOptions(dbusValue: value) }
            #expect(error?.name == "org.freedesktop.DBus.Error.InvalidArgs", "\(value)")
        }
    }
}
