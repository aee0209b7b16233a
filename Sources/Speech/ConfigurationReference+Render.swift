extension Configuration {
    /// The key tables of docs/configuration.md (between its `config-reference` markers).
    public static func referenceMarkdown() -> String {
        var lines: [String] = []
        for section in referenceSections {
            if !lines.isEmpty { lines.append("") }
            lines.append(section.isEmpty ? "### Top level" : "### `[\(section)]`")
            lines.append("")
            lines.append("| key | default | allowed | what it does |")
            lines.append("|---|---|---|---|")
            for key in reference where key.section == section {
                let value = key.defaultValue.map { "`\($0)`" } ?? "unset"
                let cells = ["`\(key.name)`", value, key.allowed, key.summary].map(markdownCell)
                lines.append("| " + cells.joined(separator: " | ") + " |")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// sttd.conf(5), written into the Debian package by scripts/deb.
    public static func referenceManPage() -> String {
        var page = manPageHead
        for section in referenceSections {
            page += ".SS \(section.isEmpty ? "\"Top level\"" : "\"[\(section)]\"")\n"
            for key in reference where key.section == section {
                let value = key.defaultValue.map { " = \(roff($0))" } ?? " (unset by default)"
                page += ".TP\n\\fB\(roff(key.name))\\fR\(value)\n\(roff(key.summary))\n"
                page += ".br\nAllowed: \(roff(key.allowed)).\n"
            }
        }
        return page + manPageTail
    }

    /// Pipes would split a table cell.
    private static func markdownCell(_ text: String) -> String {
        text.replacingOccurrences(of: "|", with: "\\|")
    }

    /// Backslashes, hyphens and arrows escaped (groff wants ASCII); a leading dot or quote would start a request.
    static func roff(_ text: String) -> String {
        let escaped = text.replacingOccurrences(of: "\\", with: "\\e").replacingOccurrences(of: "-", with: "\\-")
            .replacingOccurrences(of: "→", with: "\\(->")
        return escaped.hasPrefix(".") || escaped.hasPrefix("'") ? "\\&" + escaped : escaped
    }

    private static let manPageHead = #"""
        .TH STTD.CONF 5 "" "sttd" "File Formats"
        .SH NAME
        sttd.conf \- configuration of sttd, the speech\-to\-text service
        .SH SYNOPSIS
        .I $XDG_CONFIG_HOME/sttd/config.toml
        (usually
        .IR ~/.config/sttd/config.toml )
        .SH DESCRIPTION
        .B sttd
        reads a TOML file at startup:
        .B sttd \-\-config
        .IR PATH ,
        else the file the environment variable
        .B STTD_CONFIG
        names, else
        .IR $XDG_CONFIG_HOME/sttd/config.toml .
        When that last file is missing, sttd uses the defaults; a file named with
        .B \-\-config
        or
        .B STTD_CONFIG
        must exist.
        sttd refuses to start on a missing named file or an invalid file (an unknown key, a wrong
        type, a value out of range) with exit status 78 (EX_CONFIG) and a message naming the key,
        the value and what is allowed;
        .B journalctl \-\-user \-u sttd
        shows it.
        .PP
        The options of the D\-Bus method
        .B StartTranscribing
        (and the flags of
        .BR "sttctl start" )
        override
        .BR backend ,
        .BR language ,
        .BR source ,
        .BR interim_results ,
        .B auto_stop_ms
        and
        .B output
        for one session.
        .SH KEYS
        Every key with its default value and the values allowed.
        A key left out has its default; an unset key has no value until it is written.

        """#

    private static let manPageTail = #"""
        .SH API KEY
        The key of a streaming backend is read from, in order:
        .BR api_key_file ,
        the systemd credential
        .B api\-key
        .RI ( $CREDENTIALS_DIRECTORY/api\-key ),
        the environment variable
        .BR STTD_API_KEY .
        A key file must not be readable by group or others.
        No key ever appears in a log or an error message.
        .SH ENVIRONMENT
        .TP
        .B STTD_CONFIG
        the configuration file.
        .TP
        .B STTD_LOG_LEVEL
        trace, debug, info, notice, warning or error.
        .TP
        .B XDG_DATA_HOME
        the data folder is
        .IR $XDG_DATA_HOME/sttd ;
        unset, empty or not an absolute path:
        .IR ~/.local/share/sttd .
        .SH FILES
        .TP
        .I ~/.config/sttd/config.toml
        this file.
        .TP
        .I ~/.local/share/sttd/history.sqlite
        the transcript history
        .RB ( history " and " history_days ),
        in the data folder.
        .TP
        .I ~/.local/share/sttd/consent
        the answers to consent prompts, when the desktop has no permission store.
        .PP
        The systemd unit sttd.service may write only
        .IR ~/.local/share/sttd .
        With
        .B XDG_DATA_HOME
        elsewhere, or
        .B debug.audio_dir
        outside that folder, allow the folder with a drop\-in
        .RB ( "systemctl \-\-user edit sttd" ):
        .PP
        .nf
        [Service]
        ExecStartPre=+/bin/mkdir \-p \-m 0700 /the/folder
        ReadWritePaths=/the/folder
        .fi
        .PP
        Otherwise sttd logs at startup which folder it cannot write, and history, remembered
        consent or kept audio stay off.
        .SH SEE ALSO
        .BR sttd (1),
        .BR sttctl (1),
        .BR sttd\-ibus (1);
        .I /usr/share/doc/sttd
        and https://github.com/sttd/sttd/tree/main/docs for every key explained.

        """#
}
