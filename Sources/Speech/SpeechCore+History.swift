import Foundation
import History
import Recognition

/// Finals kept in history as they arrive.
extension SpeechCore {
    func beginHistory(_ pipeline: SessionPipeline, backend: Backend) {
        historyID = nil
        guard let history else { return }
        let id = UUID().uuidString.lowercased()
        do {
            try history.beginSession(
                id: id, started: Date(), backend: backend.rawValue, language: pipeline.options.language,
                source: pipeline.source ?? "")
            historyID = id
        } catch {
            logger.error("history: session not recorded", metadata: ["reason": "\(error.description)"])
        }
    }

    /// Commits a final before anyone hears of it, so a crash right after loses nothing signalled.
    func store(_ text: String, of result: RecognitionResult) {
        guard let history, let historyID, !text.isEmpty else { return }
        do {
            try history.appendFinal(
                sessionID: historyID, text: text, audioStart: result.audioStart, audioEnd: result.audioEnd)
        } catch {
            logger.error("history: final not stored", metadata: ["reason": "\(error.description)"])
        }
    }

    /// "scratch that": the session's last final leaves history too.
    func retractFromHistory() {
        guard let history, let historyID else { return }
        do {
            try history.removeLastFinal(sessionID: historyID)
        } catch {
            logger.error("history: retracted final not removed", metadata: ["reason": "\(error.description)"])
        }
    }

    func endHistory() {
        guard let history, let historyID else { return }
        self.historyID = nil
        do {
            try history.endSession(id: historyID)
        } catch {
            logger.error("history: session end not recorded", metadata: ["reason": "\(error.description)"])
        }
    }

    /// Deletes sessions older than `history_days` (if set), at most once a day (startup pruned already).
    func pruneHistoryDaily() {
        guard let history, configuration.historyDays > 0, ContinuousClock.now - lastPruned > .seconds(86_400) else {
            return
        }
        lastPruned = .now
        do {
            let pruned = try history.prune(startedBefore: Configuration.historyCutoff(days: configuration.historyDays))
            if pruned > 0 { logger.info("pruned history", metadata: ["sessions": "\(pruned)"]) }
        } catch {
            logger.error("history pruning failed", metadata: ["reason": "\(error.description)"])
        }
    }
}
