import Foundation

/// A browser window showing a test page (`Tests/Clients/browser_page.py`, served on 127.0.0.1)
/// whose focused `<textarea>` (and `<input type=password>`, if asked for) reports its value, its composition
/// (the input method's preedit) and its focus back to the page's server, which records them as
/// the other test windows do: ``page`` reads them as an ``IBusField`` does, so the input method
/// tests dictate into a browser as into any other field. The browser runs with a fresh profile in
/// a temporary folder, as root where the tests run as root; it closes with ``close()``.
public final class BrowserField: @unchecked Sendable {
    // Safety: immutable after init.
    public enum Browser: String, CaseIterable, Sendable, CustomStringConvertible {
        /// Debian's `firefox-esr`, with a profile of its own (`user.js`: no first-run pages, telemetry or updates).
        case firefox
        /// Debian's `chromium`, with a user data folder of its own.
        case chromium
        public var description: String { rawValue }
    }

    /// How the browser reaches the desktop's input method.
    public enum Display: Sendable {
        /// Wayland's text-input protocol; `textInputV3Only` where the compositor offers no other
        /// version (mutter), which Chromium must be told.
        case wayland(textInputV3Only: Bool)
        /// X11, through GTK's IBus module (GTK_IM_MODULE=ibus), as Chromium and Firefox use it there.
        case x11
    }

    /// The page's field as the page recorded it; the URL is its `windowID`.
    public let page: IBusField
    public let browser: Browser
    private let process: ChildProcess
    private let directory: String

    /// Starts the page's server and `browser` on it, and waits (up to 60 s: a browser starts
    /// slowly on a busy 2-core machine) until the field has the keyboard focus, calling
    /// `activate` (as a click on the window would) until it does. `password`: the page has an
    /// `<input type=password>` beside the field (``passwordRecord``).
    public init(
        _ browser: Browser, environment: [String: String], display: Display, password: Bool = false,
        activate: @Sendable () async throws -> Void
    ) async throws {
        self.browser = browser
        directory = try makeTemporaryDirectory("sttd-browser")
        page = try await IBusField(
            environment: environment, password: password, client: "browser_page.py",
            options: ["\(directory)/focus", "\(directory)/password"], needs: "python3")
        var environment = environment
        // The browser's own files go to its folder, owned by the user it runs as (root in CI).
        environment["HOME"] = directory
        environment["XDG_CACHE_HOME"] = "\(directory)/cache"
        let (program, arguments) = try Self.command(
            browser, display: display, folder: directory, url: page.windowID, environment: &environment)
        do {
            process = try ChildProcess(
                program, arguments, environment: environment, stdout: "\(directory)/browser.log",
                stderr: "\(directory)/browser.log")
        } catch {
            page.close()
            throw error
        }
        do {
            try await waitForFocus(activate: activate)
        } catch {
            close()
            throw error
        }
    }

    private static func command(
        _ browser: Browser, display: Display, folder: String, url: String, environment: inout [String: String]
    ) throws -> (String, [String]) {
        switch browser {
        case .firefox:
            let firefox = try requireTool("firefox-esr", package: "firefox-esr")
            try FileManager.default.createDirectory(atPath: "\(folder)/profile", withIntermediateDirectories: true)
            try firefoxPreferences.write(toFile: "\(folder)/profile/user.js", atomically: true, encoding: .utf8)
            if case .wayland = display { environment["MOZ_ENABLE_WAYLAND"] = "1" }
            environment["MOZ_CRASHREPORTER_DISABLE"] = "1"
            return (firefox, ["--profile", "\(folder)/profile", "--no-remote", "--new-window", url])
        case .chromium:
            let chromium = try requireTool("chromium", package: "chromium")
            // As root Chromium refuses to start without --no-sandbox.
            var arguments = [
                "--no-sandbox", "--user-data-dir=\(folder)/chromium", "--no-first-run", "--no-default-browser-check",
                "--disable-gpu", "--password-store=basic",
            ]
            switch display {
            case .wayland(let v3Only):
                arguments += ["--ozone-platform=wayland", "--enable-wayland-ime"]
                if v3Only { arguments.append("--wayland-text-input-version=3") }
            case .x11:
                // Chromium on X11 talks to the input method through GTK's module.
                arguments.append("--ozone-platform=x11")
            }
            return (chromium, arguments + [url])
        }
    }

    /// A profile that opens only the page: no first-run or welcome pages, telemetry, updates,
    /// session restore, or other traffic of its own.
    static let firefoxPreferences = [
        ("browser.shell.checkDefaultBrowser", "false"), ("browser.startup.homepage_override.mstone", "\"ignore\""),
        ("startup.homepage_welcome_url", "\"\""), ("startup.homepage_welcome_url.additional", "\"\""),
        ("browser.aboutwelcome.enabled", "false"), ("datareporting.policy.dataSubmissionEnabled", "false"),
        ("datareporting.policy.firstRunURL", "\"\""), ("datareporting.healthreport.uploadEnabled", "false"),
        ("toolkit.telemetry.enabled", "false"), ("toolkit.telemetry.reportingpolicy.firstRun", "false"),
        ("app.update.disabledForTesting", "true"), ("app.update.auto", "false"),
        ("browser.sessionstore.resume_from_crash", "false"), ("browser.startup.page", "0"),
        ("browser.safebrowsing.malware.enabled", "false"), ("browser.safebrowsing.phishing.enabled", "false"),
        ("network.captive-portal-service.enabled", "false"), ("network.connectivity-service.enabled", "false"),
        ("extensions.update.enabled", "false"), ("browser.translations.automaticallyPopup", "false"),
    ].map { "user_pref(\"\($0.0)\", \($0.1));\n" }.joined()

    private func waitForFocus(activate: @Sendable () async throws -> Void) async throws {
        let page = page
        let process = process
        let focused = try await happens(within: .seconds(60)) {
            if let status = process.exitStatus {
                throw MissingPrerequisite(description: "\(browser) exited (status \(status)): \(log)")
            }
            if page.record?.focus == true { return true }
            // Until the window is shown there is nothing to activate.
            try? await activate()
            return await happens(within: .seconds(2)) { page.record?.focus == true }
        }
        guard focused else {
            throw MissingPrerequisite(
                description: "\(browser)'s page field never had the focus (\(String(describing: page.record))): \(log)")
        }
    }

    /// The browser's own log (stdout and stderr).
    public var log: String {
        (try? String(contentsOfFile: "\(directory)/browser.log", encoding: .utf8)) ?? "(no log)"
    }

    /// The browser's process, by which a compositor's scripts find its window.
    public var pid: pid_t { process.pid }

    /// What the password field beside the page's field recorded (``init`` with `password`).
    public var passwordRecord: IBusField.Record? {
        guard let data = FileManager.default.contents(atPath: "\(directory)/password") else { return nil }
        return try? JSONDecoder().decode(IBusField.Record.self, from: data)
    }

    /// Moves the focus within the page to the element `id` ("password" or "text"), as a click
    /// on it would, and waits until it has it.
    public func focusElement(_ id: String) async throws {
        try id.write(toFile: "\(directory)/focus", atomically: true, encoding: .utf8)
        try await waitFor("the page to focus #\(id)") {
            (id == "password" ? passwordRecord : page.record)?.focus == true
        }
    }

    /// Stops the browser with all its processes (content processes, zygotes) and the page's server.
    public func close() {
        let processes = descendants(of: process.pid)
        process.stop(grace: 5)
        for pid in processes { kill(pid, SIGKILL) }
        page.close()
        try? FileManager.default.removeItem(atPath: directory)
    }

    deinit { close() }
}

/// All processes below `pid`, children first.
private func descendants(of pid: pid_t) -> [pid_t] {
    childProcesses(of: pid).flatMap { [$0] + descendants(of: $0) }
}

/// A test desktop that opens browsers on the test page.
public protocol BrowserDesktop: Sendable {
    /// Opens `browser` on the page, its field focused (`password`: with a password field beside it).
    func openBrowser(_ browser: BrowserField.Browser, password: Bool) async throws -> BrowserField
    /// The desktop's log (compositor, ibus-daemon and the engine).
    var log: String { get }
    func close()
}

extension KdeDesktop: BrowserDesktop {}
extension GnomeDesktop: BrowserDesktop {}
extension IBusDesktop: BrowserDesktop {}

/// The title of the test page, which the browsers put at the start of their windows' titles.
let browserPageTitle = "sttd test field"

extension KdeDesktop {
    /// Opens `browser` on the test page in this Plasma session; KWin activates its window.
    public func openBrowser(_ browser: BrowserField.Browser, password: Bool = false) async throws -> BrowserField {
        try await BrowserField(
            browser, environment: clientEnvironment, display: .wayland(textInputV3Only: false), password: password
        ) { [self] in
            try await runScript(
                """
                for (const client of workspace.clientList())
                    if (client.caption.startsWith("\(browserPageTitle)")) workspace.activeClient = client;
                """)
        }
    }
}

extension GnomeDesktop {
    /// Opens `browser` on the test page in this GNOME session and activates its window, as a
    /// click on it would (see ``openField(password:)``).
    public func openBrowser(_ browser: BrowserField.Browser, password: Bool = false) async throws -> BrowserField {
        try await BrowserField(
            browser, environment: clientEnvironment, display: .wayland(textInputV3Only: true), password: password
        ) { [self] in
            _ = try await eval(
                """
                const browser = global.get_window_actors().map(a => a.meta_window)
                    .find(w => (w.get_title() || '').startsWith('\(browserPageTitle)'));
                if (browser) {
                    global.display.unset_input_focus(global.get_current_time());
                    imports.ui.main.activateWindow(browser);
                }
                String(!!browser)
                """)
        }
    }
}

extension IBusDesktop {
    /// Opens `browser` on the test page on the X11 desktop (GTK_IM_MODULE=ibus) and gives its
    /// window the keyboard focus (no window manager: it stays there).
    public func openBrowser(_ browser: BrowserField.Browser, password: Bool = false) async throws -> BrowserField {
        let xdotool = try requireTool("xdotool", package: "xdotool")
        let environment = environment
        return try await BrowserField(browser, environment: environment, display: .x11, password: password) {
            let found = try await run(
                xdotool, ["search", "--onlyvisible", "--name", "^\(browserPageTitle)"], environment: environment,
                timeout: 5)
            for window in found.stdout.split(whereSeparator: \.isNewline) {
                try await run(xdotool, ["windowfocus", "--sync", String(window)], environment: environment, timeout: 5)
                try await run(
                    xdotool, ["mousemove", "--window", String(window), "20", "20"], environment: environment,
                    timeout: 5)
            }
        }
    }
}
