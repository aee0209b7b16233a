import Foundation

/// The LibriVox recordings and reference transcripts of Debian's `pocketsphinx-testdata`.
public enum LibriVox {
    public static let directory = "/usr/share/pocketsphinx/test/data/librivox"

    /// Each recording's id, WAV path and reference words.
    public static func recordings() throws -> [(id: String, path: String, reference: [String])] {
        let transcription = try requireFile("\(directory)/transcription", package: "pocketsphinx-testdata")
        let text = try String(contentsOfFile: transcription, encoding: .utf8)
        return text.split(separator: "\n").compactMap { line in
            guard let open = line.lastIndex(of: "("), let close = line.lastIndex(of: ")") else { return nil }
            let id = String(line[line.index(after: open)..<close])
            let words = normalizedWords(String(line[..<open]))
            return (id, "\(directory)/\(id).wav", words)
        }
    }
}

/// Lowercased words without sentence markers or punctuation.
public func normalizedWords(_ text: String) -> [String] {
    text.lowercased().split(whereSeparator: { $0.isWhitespace }).map(String.init)
        .filter { $0 != "<s>" && $0 != "</s>" }
        .map { $0.filter { $0.isLetter || $0.isNumber || $0 == "'" } }
        .filter { !$0.isEmpty }
}

/// Word error rate in percent: word-level Levenshtein distance over the reference length.
public func wordErrorRate(reference: [String], hypothesis: [String]) -> Double {
    guard !reference.isEmpty else { return hypothesis.isEmpty ? 0 : 100 }
    return Double(wordErrors(reference: reference, hypothesis: hypothesis)) * 100 / Double(reference.count)
}

/// Word errors: the word-level Levenshtein distance (substitutions, insertions, deletions).
public func wordErrors(reference: [String], hypothesis: [String]) -> Int {
    var previous = Array(0...hypothesis.count)
    for (i, referenceWord) in reference.enumerated() {
        var current = [i + 1] + Array(repeating: 0, count: hypothesis.count)
        for (j, hypothesisWord) in hypothesis.enumerated() {
            let substitution = previous[j] + (referenceWord == hypothesisWord ? 0 : 1)
            current[j + 1] = min(substitution, previous[j + 1] + 1, current[j] + 1)
        }
        previous = current
    }
    return previous[hypothesis.count]
}

/// Reads a 16 kHz mono WAV's samples (after the 44-byte header, as pocketsphinx_continuous does).
public func wavSamples(_ path: String) throws -> [Int16] {
    let data = try Data(contentsOf: URL(fileURLWithPath: path))
    return data.dropFirst(44).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
}
