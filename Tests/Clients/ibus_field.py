#!/usr/bin/env python3
"""A GTK 3 window with one text field that uses the input method GTK_IM_MODULE names (ibus in
the tests), as a desktop app's field does. It records what the field holds, and every preedit
the input method showed, in a JSON file the tests read:

    {"text": "...", "preedit": "...", "preedits": N, "preedit_seen": ["...", ...], "focus": true}

  ibus_field.py READY STATE [--purpose password | --invisible]

READY gets the window's X id once the window is shown ("wayland" on a Wayland display, where
GTK's default input method module is the compositor's, text-input-v3). With --purpose password the field
is a visible GtkEntry whose input purpose is PASSWORD (GTK keeps input methods away from
invisible ones by itself); with --invisible an invisible GtkEntry (set_visibility(False)), the
password field most apps have; otherwise a GtkTextView (free form, several lines).
"""
import sys

import gi
from field_state import FieldState, announce

gi.require_version("Gtk", "3.0")
from gi.repository import GLib, Gtk  # noqa: E402

ready_path, state_path = sys.argv[1], sys.argv[2]
password = "--purpose" in sys.argv and sys.argv[sys.argv.index("--purpose") + 1] == "password"
invisible = "--invisible" in sys.argv

state = FieldState(state_path)

window = Gtk.Window(title="sttd test field")
window.set_default_size(800, 300)
window.move(0, 0)
if password or invisible:
    field = Gtk.Entry()
    if password:
        field.set_input_purpose(Gtk.InputPurpose.PASSWORD)
    else:
        field.set_visibility(False)
    field.connect("changed", lambda e: state.update(text=e.get_text()))
else:
    field = Gtk.TextView()
    buffer = field.get_buffer()
    buffer.connect(
        "changed",
        lambda b: state.update(text=b.get_text(b.get_start_iter(), b.get_end_iter(), True)),
    )
field.connect("preedit-changed", lambda _field, preedit: state.preedit(preedit))
field.connect("focus-in-event", lambda *_: (state.update(focus=True), False)[-1])
field.connect("focus-out-event", lambda *_: (state.update(focus=False), False)[-1])
window.add(field)
window.connect("destroy", Gtk.main_quit)
window.show_all()
field.grab_focus()
state.save()


def shown():
    gdk_window = window.get_window()
    # An X window id on X11; on Wayland windows have no id a client can name.
    return announce(ready_path, str(gdk_window.get_xid()) if hasattr(gdk_window, "get_xid") else "wayland")


GLib.timeout_add(100, shown)
Gtk.main()
