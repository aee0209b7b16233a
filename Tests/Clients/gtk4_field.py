#!/usr/bin/env python3
"""ibus_field.py for GTK 4: a window with one GtkTextView using GTK's default input method module
(on Wayland the compositor's text-input-v3), recording what it holds and every preedit shown
(field_state.py).

  gtk4_field.py READY STATE

READY gets "wayland" once the window is shown.
"""
import sys

import gi
from field_state import FieldState, announce

gi.require_version("Gtk", "4.0")
from gi.repository import GLib, Gtk  # noqa: E402

ready_path, state_path = sys.argv[1], sys.argv[2]
state = FieldState(state_path)

loop = GLib.MainLoop()
window = Gtk.Window(title="sttd test field")
window.set_default_size(800, 300)
field = Gtk.TextView()
field.get_buffer().connect(
    "changed", lambda b: state.update(text=b.get_text(b.get_start_iter(), b.get_end_iter(), True))
)
field.connect("preedit-changed", lambda _field, preedit: state.preedit(preedit))
# GTK 4 widgets have no focus events: a focus controller reports them.
focus = Gtk.EventControllerFocus()
focus.connect("enter", lambda *_: state.update(focus=True))
focus.connect("leave", lambda *_: state.update(focus=False))
field.add_controller(focus)
window.set_child(field)
window.connect("close-request", lambda *_: (loop.quit(), False)[-1])
window.present()
field.grab_focus()
state.save()
GLib.timeout_add(100, announce, ready_path)
loop.run()
