/// Rules for what text may reach a window.
enum OutputText {
    /// Control characters are never sent as keys: a line break (LF, CR LF or CR) stays one LF,
    /// typed as Enter; every other control character becomes a space, as do the Unicode line and
    /// paragraph separators.
    static func sanitized(_ text: String) -> String {
        var result = String.UnicodeScalarView()
        var previousWasCR = false
        for scalar in text.unicodeScalars {
            defer { previousWasCR = scalar == "\r" }
            if scalar == "\n" && previousWasCR { continue }
            if scalar == "\n" || scalar == "\r" {
                result.append("\n")
            } else if scalar.properties.generalCategory == .control || scalar == "\u{2028}" || scalar == "\u{2029}" {
                result.append(" ")
            } else {
                result.append(scalar)
            }
        }
        return String(result)
    }
}
