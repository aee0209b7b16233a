import Foundation
import Synchronization
import Testing

@testable import Output

@Suite("Worker and text rules")
struct WorkerTests {
    @Test func fullQueueRefusesAndOrderIsKept() {
        let worker = SerialWorker(name: "test-worker", capacity: 2)
        let gate = DispatchSemaphore(value: 0)
        let started = DispatchSemaphore(value: 0)
        let order = Mutex<[Int]>([])
        #expect(
            worker.submit {
                started.signal()
                gate.wait()
                order.withLock { $0.append(0) }
            })
        started.wait()  // the first job runs, so the queue is empty again
        #expect(worker.submit { order.withLock { $0.append(1) } })
        let finished = DispatchSemaphore(value: 0)
        #expect(
            worker.submit {
                order.withLock { $0.append(2) }
                finished.signal()
            })
        #expect(!worker.submit { order.withLock { $0.append(3) } }, "a third waiting job was accepted")
        gate.signal()
        finished.wait()
        #expect(order.withLock { $0 } == [0, 1, 2])
        worker.close()
    }

    @Test func controlCharactersBecomeSpaces() {
        #expect(OutputText.sanitized("a\r\nb\tc\u{7}d\u{2028}e\nf\u{1b}[31m") == "a b c d e f [31m")
        #expect(OutputText.sanitized("café ✓ 😀") == "café ✓ 😀")
    }

    @Test func onlyPrintableASCIIIsTypedByXdotool() {
        #expect(OutputText.isPrintableASCII("it's 100% (ok) ~`"))
        #expect(!OutputText.isPrintableASCII("café"))
        #expect(!OutputText.isPrintableASCII("a\u{7f}"))
    }
}
