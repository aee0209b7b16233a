import ConfigFile

extension Configuration {
    /// The `[hands_free]` table: what a session started by the wake phrase does (issue 42).
    public struct HandsFree: Sendable, Equatable {
        /// The phrase that starts a session while hands-free is on; empty: hands-free cannot be
        /// turned on. Checked when it is turned on (`WakePhrase`), never at load, so a bad
        /// phrase cannot stop sttd.
        public var wakePhrase = ""
        /// Where the phrase's session sends its finals besides D-Bus.
        public var output = OutputMode.type
        /// The phrase's session stops after this much silence following speech; 0: never.
        public var autoStopMilliseconds: UInt32 = 2000
        /// Turn hands-free on when sttd starts.
        public var armAtStart = false

        public init() {}
    }

    mutating func readHandsFree(_ reader: inout TableReader) throws(ConfigurationError) {
        guard let table = try reader.table("hands_free") else { return }
        var handsFreeReader = TableReader(table: table, prefix: "hands_free.")
        handsFree.wakePhrase = try handsFreeReader.string("wake_phrase", default: handsFree.wakePhrase)
        handsFree.output = try handsFreeReader.choice("output", default: handsFree.output)
        handsFree.autoStopMilliseconds = try handsFreeReader.milliseconds(
            "auto_stop_ms", default: handsFree.autoStopMilliseconds, allowZero: true)
        handsFree.armAtStart = try handsFreeReader.bool("arm_at_start", default: handsFree.armAtStart)
        try handsFreeReader.refuseUnknownKeys()
    }
}
