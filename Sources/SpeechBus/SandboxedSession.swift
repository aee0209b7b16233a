import Speech

/// What an allowed sandboxed app's session may be: its own transcript over D-Bus, from the
/// user's microphone, through the user's backend. Nothing it asks for reaches outside its
/// sandbox: it never types, pastes or touches the clipboard (whatever the config's `output`),
/// never records another source (a monitor of the desktop's own audio) and never sends audio
/// to a backend the user did not choose.
///
/// A forbidden option is refused, never silently dropped, so the app learns why; an option
/// equal to what the user already has is accepted.
enum SandboxedSession {
    /// `options` as a sandboxed app's session runs them: output `none`, the user's source and
    /// backend. Throws `NotAuthorized` naming the first option it may not use.
    static func confine(_ options: StartOptions, app: String, settings: SpeechSettings) throws(SpeechError)
        -> StartOptions
    {
        var confined = options
        if let output = options.output, output != .none {
            throw .notAuthorized(
                "\(app) may not use option 'output' = '\(output.rawValue)': an app in a sandbox gets its own transcript over D-Bus and never types, pastes or uses the clipboard. Leave 'output' out (or pass 'none')."
            )
        }
        confined.output = OutputMode.none
        if let source = options.source, !source.isEmpty, source != settings.source {
            throw .notAuthorized(
                "\(app) may not use option 'source' = '\(source)': an app in a sandbox records only the microphone you chose (`sttctl` or the Source property, outside the sandbox). Leave 'source' out."
            )
        }
        confined.source = settings.source
        if let backend = options.backend, backend != settings.backend {
            throw .notAuthorized(
                "\(app) may not use option 'backend' = '\(backend.rawValue)': an app in a sandbox uses the recognizer you chose ('\(settings.backend.rawValue)'), so it cannot send your voice elsewhere. Leave 'backend' out."
            )
        }
        confined.backend = settings.backend
        return confined
    }
}
