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

    @Test func controlCharactersBecomeSpacesAndLineBreaksStay() {
        #expect(OutputText.sanitized("a\r\nb\tc\u{7}d\u{2028}e\nf\u{1b}[31m\rg") == "a\nb c d e\nf [31m\ng")
        #expect(OutputText.sanitized("café ✓ 😀") == "café ✓ 😀")
    }

    @Test func theXKeymapIsReadAsXmodmapPrintsIt() throws {
        let output = """
            There are 7 KeySyms per KeyCode; KeyCodes range from 8 to 11.

                KeyCode\tKeysym (Keysym)\t...
                Value  \tValue   (Name) \t...

                  8    \t
                  9    \t0x00e9 (eacute)\t0x00c9 (Eacute)\t0x00e9 (eacute)\t0x00c9 (Eacute)\t
                 10    \t0x0061 (a)\t0x0041 (A)\t0x20ac (EuroSign)\t0x0000 (NoSymbol)\t0x100201c (U201C)\t
                 11    \t0x0000 (NoSymbol)\t

            """
        let map = try #require(KeyboardMap(xmodmap: output))
        #expect(map.spareKeycodes == [8, 11])
        // EuroSign is not a code point: € counts as missing (binding it again is harmless).
        #expect(map.characters == ["é", "É", "a", "A", "\u{201C}"])
        #expect(map.keycode(9, holds: "É"))
        #expect(!map.keycode(10, holds: "É"))
        #expect(KeyboardMap(xmodmap: "xmodmap: unable to open display") == nil)
    }

    @Test func charactersBecomeTheKeysymsXdotoolLooksFor() {
        #expect(X11Keymap.keysymName("é") == "U00E9")
        #expect(X11Keymap.keysym("é") == 0xe9)
        #expect(X11Keymap.keysymName("😀") == "U1F600")
        #expect(X11Keymap.keysym("😀") == 0x101_f600)
        #expect(X11Keymap.keysym("~") == 0x7e)
        for scalar: Unicode.Scalar in ["a", "é", "\u{201C}", "日", "😀"] {
            #expect(X11Keymap.character(X11Keymap.keysym(scalar)) == scalar)
        }
        #expect(X11Keymap.character(0x20ac) == nil)
        #expect(X11Keymap.character(0xff1b) == nil)
    }
}
