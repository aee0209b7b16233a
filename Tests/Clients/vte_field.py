#!/usr/bin/env python3
"""A terminal (VTE, GTK 3) whose shell is a reader that writes every byte it receives to a file,
as a terminal app gets its input; GTK_IM_MODULE picks the input method as in ibus_field.py. It
records what the reader received as the field's text (field_state.py). VTE draws its preedit
itself and reports it to no one, so "preedits" stays 0.

  vte_field.py READY STATE

READY gets the window's X id once the reader runs ("wayland" on a Wayland display).
"""
import os
import sys

import gi
from field_state import FieldState, announce

gi.require_version("Gtk", "3.0")
gi.require_version("Vte", "2.91")
from gi.repository import GLib, Gtk, Vte  # noqa: E402

ready_path, state_path = sys.argv[1], sys.argv[2]
received_path = state_path + ".received"
state = FieldState(state_path)

window = Gtk.Window(title="sttd test field")
window.set_default_size(800, 300)
window.move(0, 0)
terminal = Vte.Terminal()
terminal.connect("focus-in-event", lambda *_: (state.update(focus=True), False)[-1])
terminal.connect("focus-out-event", lambda *_: (state.update(focus=False), False)[-1])
terminal.connect("child-exited", lambda *_: Gtk.main_quit())
window.add(terminal)
window.connect("destroy", Gtk.main_quit)
window.show_all()
terminal.grab_focus()
state.save()

# Raw mode, no echo: every byte the terminal sends its app lands in the file unchanged.
reader = 'stty raw -echo && : > "$1" && exec cat > "$1"'
terminal.spawn_async(
    Vte.PtyFlags.DEFAULT, None, ["/bin/sh", "-c", reader, "reader", received_path], None,
    GLib.SpawnFlags.DEFAULT, None, None, -1, None, None, None)


def poll():
    try:
        with open(received_path, "rb") as f:
            received = f.read().decode("utf-8", errors="replace")
    except FileNotFoundError:
        return True
    if not os.path.exists(ready_path):
        gdk_window = window.get_window()
        announce(ready_path, str(gdk_window.get_xid()) if hasattr(gdk_window, "get_xid") else "wayland")
    if received != state.state["text"]:
        state.update(text=received)
    return True


GLib.timeout_add(50, poll)
Gtk.main()
