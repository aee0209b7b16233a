/// Rules for what text may reach a window.
enum OutputText {
    /// Control characters are never sent as keys: each (and CR LF as a pair) becomes one space,
    /// as do the Unicode line and paragraph separators.
    static func sanitized(_ text: String) -> String {
        var result = String.UnicodeScalarView()
        var previousWasCR = false
        for scalar in text.unicodeScalars {
            defer { previousWasCR = scalar == "\r" }
            if scalar == "\n" && previousWasCR { continue }
            if scalar.properties.generalCategory == .control || scalar == "\u{2028}" || scalar == "\u{2029}" {
                result.append(" ")
            } else {
                result.append(scalar)
            }
        }
        return String(result)
    }
}
