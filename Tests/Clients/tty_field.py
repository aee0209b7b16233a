#!/usr/bin/env python3
"""A terminal app as the input method tests' field: run inside a terminal (foot), it reads every
byte the terminal sends it and records what a line editor would show (field_state.py's JSON):
CR is a line break, DEL or BS takes back one character. It asks the terminal for focus reports
(CSI ?1004h: CSI I on focus in, CSI O on focus out) and records them as "focus". A terminal
shows its preedit itself and tells its app nothing, so "preedits" stays 0.

  foot --app-id ID python3 tty_field.py READY STATE [--echo]

READY gets "wayland" once the terminal is in raw mode and reports focus. With --echo the app
writes back what it received, as a shell's line editor does (the cursor moves with the text);
otherwise the screen stays still.
"""
import codecs
import os
import sys
import termios
import tty

from field_state import FieldState, announce

ready_path, state_path = sys.argv[1], sys.argv[2]
echo = "--echo" in sys.argv
state = FieldState(state_path)

stdin = sys.stdin.fileno()
tty.setraw(stdin, termios.TCSANOW)
os.write(sys.stdout.fileno(), b"\x1b[?1004h")
state.save()
announce(ready_path)

decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
text = ""
# Bytes of an escape sequence being read (the focus reports are the only ones expected).
escape = b""


def edit(data):
    global text
    shown = b""
    for char in decoder.decode(data):
        if char == "\r":
            text += "\n"
            shown += b"\r\n"
        elif char in ("\x7f", "\x08"):
            if text and text[-1] != "\n":
                shown += b"\x08 \x08"
            text = text[:-1]
        else:
            text += char
            shown += char.encode("utf-8")
    if echo and shown:
        os.write(sys.stdout.fileno(), shown)


while True:
    data = os.read(stdin, 4096)
    if not data:
        break
    plain = b""
    focus = None
    for byte in data:
        byte = bytes([byte])
        if escape or byte == b"\x1b":
            escape += byte
            if escape in (b"\x1b[I", b"\x1b[O"):
                focus = escape == b"\x1b[I"
                escape = b""
            elif len(escape) >= 3 or not b"\x1b[".startswith(escape[:2]):
                # Not a focus report: the bytes are the app's input after all.
                plain += escape
                escape = b""
            continue
        plain += byte
    if plain:
        edit(plain)
    values = {"text": text}
    if focus is not None:
        values["focus"] = focus
    if values["text"] != state.state["text"] or "focus" in values:
        state.update(**values)
