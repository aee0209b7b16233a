/// Corrects an offline engine's near-misses of the user's names and terms.
///
/// An offline engine can only write words of its own dictionary, so a term it lacks comes out
/// split ("pipe wire") or as a near spelling. A window of one to three words is rewritten to a
/// term when its letters, lowercased and joined, are the term's letters exactly; or, for a window
/// of two or three words and a term of at least ``fuzzyLength`` letters, one edit away (a letter
/// added, dropped, changed or two swapped) with the same first letter. A single word is never
/// rewritten on a near spelling: that is how ordinary words get replaced.
struct Vocabulary: Sendable {
    static let fuzzyLength = 8
    static let window = 3

    private let terms: [(term: String, letters: [Character])]

    init(_ terms: [String]) {
        self.terms = terms.map { ($0, Self.letters($0)) }.filter { !$0.1.isEmpty }
    }

    static func letters(_ text: String) -> [Character] {
        text.lowercased().filter { $0.isLetter || $0.isNumber }.map { $0 }
    }

    func corrected(_ words: [Word]) -> [Word] {
        guard !terms.isEmpty else { return words }
        var result: [Word] = []
        var index = 0
        while index < words.count {
            if let (term, count) = match(at: index, in: words) {
                let matched = words[index..<index + count]
                result.append(Word(lead: matched.first!.lead, core: term, trail: matched.last!.trail))
                index += count
            } else {
                result.append(words[index])
                index += 1
            }
        }
        return result
    }

    /// The term the words from `index` spell, longest window first.
    private func match(at index: Int, in words: [Word]) -> (String, Int)? {
        for count in stride(from: min(Self.window, words.count - index), through: 1, by: -1) {
            let window = words[index..<index + count]
            // Words with their own marks inside the window ("pipe, wire") are two things said.
            guard window.dropLast().allSatisfy({ $0.trail.isEmpty }), window.dropFirst().allSatisfy({ $0.lead.isEmpty })
            else { continue }
            let spoken = Self.letters(window.map(\.core).joined())
            for (term, letters) in terms {
                if spoken == letters { return (term, count) }
                if count > 1, letters.count >= Self.fuzzyLength, spoken.first == letters.first,
                    Self.withinOneEdit(spoken, letters)
                {
                    return (term, count)
                }
            }
        }
        return nil
    }

    /// Whether `a` becomes `b` with at most one insertion, deletion, substitution or swap of
    /// neighbours (optimal string alignment distance ≤ 1).
    static func withinOneEdit(_ a: [Character], _ b: [Character]) -> Bool {
        if a == b { return true }
        guard abs(a.count - b.count) <= 1 else { return false }
        let prefix = zip(a, b).prefix { $0 == $1 }.count
        let restA = a.dropFirst(prefix)
        let restB = b.dropFirst(prefix)
        if restA.dropFirst().elementsEqual(restB.dropFirst()) { return true }  // substitution
        if restA.dropFirst().elementsEqual(restB) || restA.elementsEqual(restB.dropFirst()) { return true }
        // A swap of two neighbours.
        return a.count == b.count && restA.count >= 2 && restA.first == restB.dropFirst().first
            && restB.first == restA.dropFirst().first && restA.dropFirst(2).elementsEqual(restB.dropFirst(2))
    }
}
