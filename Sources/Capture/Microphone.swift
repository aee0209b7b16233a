import Logging

/// Where sessions get their audio: PulseAudio in sttd, a scripted source in tests.
public protocol Microphone: Sendable {
    /// Opens capture of `source` (nil: the server's default). `deliver` gets every chunk, in order,
    /// on the capture thread; it must not block. Returns once audio flows.
    func open(source: String?, deliver: @escaping @Sendable (AudioChunk) -> Void) async throws(CaptureError)
        -> any MicrophoneStream

    /// Opens capture as ``open(source:deliver:)`` does, with a stream named `mediaName` (sound
    /// settings show it: sttd names the app a session is for).
    func open(source: String?, mediaName: String, deliver: @escaping @Sendable (AudioChunk) -> Void)
        async throws(CaptureError) -> any MicrophoneStream

    /// The capture sources on offer.
    func sources() async throws(CaptureError) -> [AudioSource]

    /// Checks that the server answers and that `source` (or a default source) exists.
    func probe(source: String?) async throws(CaptureError)
}

/// An open microphone.
extension Microphone {
    /// Microphones without stream names (test fakes) ignore the name.
    public func open(source: String?, mediaName: String, deliver: @escaping @Sendable (AudioChunk) -> Void)
        async throws(CaptureError) -> any MicrophoneStream
    {
        try await open(source: source, deliver: deliver)
    }
}

public protocol MicrophoneStream: Sendable {
    /// Waits until capture has ended and its last chunk was delivered: nil after ``stop()`` or
    /// ``cancel()``; the error when the server or the source went away.
    func ended() async -> CaptureError?

    /// Stops after delivering what the server already recorded (at most one chunk).
    func stop()

    /// Stops at once.
    func cancel()
}

/// The microphone of a PulseAudio (or pipewire-pulse) server.
public struct PulseAudioMicrophone: Microphone {
    /// The server address, or nil for the usual lookup (`PULSE_SERVER`, the user's runtime dir).
    public var server: String?
    public var chunk: Duration
    let logger: Logger

    public init(server: String? = nil, chunk: Duration = .milliseconds(100), logger: Logger) {
        self.server = server
        self.chunk = chunk
        self.logger = logger
    }

    public func open(source: String?, deliver: @escaping @Sendable (AudioChunk) -> Void) async throws(CaptureError)
        -> any MicrophoneStream
    {
        try await open(source: source, mediaName: PulseAudio.defaultMediaName, deliver: deliver)
    }

    public func open(source: String?, mediaName: String, deliver: @escaping @Sendable (AudioChunk) -> Void)
        async throws(CaptureError) -> any MicrophoneStream
    {
        try await PulseAudio.capture(
            source: source, chunk: chunk, server: server, mediaName: mediaName, logger: logger, deliver: deliver)
    }

    public func sources() async throws(CaptureError) -> [AudioSource] {
        try await PulseAudio.sources(server: server)
    }

    public func probe(source: String?) async throws(CaptureError) {
        try await PulseAudio.probe(source: source, server: server)
    }
}
