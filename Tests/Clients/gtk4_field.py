#!/usr/bin/env python3
"""ibus_field.py for GTK 4: a window with one GtkTextView using GTK's default input method module
(on Wayland the compositor's text-input-v3; GTK_IM_MODULE=ibus on X11), recording what it holds
and every preedit shown (field_state.py).

  gtk4_field.py READY STATE [--purpose password | --invisible]

READY gets the window's X id once the window is shown ("wayland" on a Wayland display). With
--purpose password the field is a visible GtkEntry whose input purpose is PASSWORD, with
--invisible an invisible GtkEntry (set_visibility(False)), as in ibus_field.py.
"""
import sys

import gi
from field_state import FieldState, announce

gi.require_version("Gtk", "4.0")
from gi.repository import GLib, Gtk  # noqa: E402

try:
    gi.require_version("GdkX11", "4.0")
    from gi.repository import GdkX11  # noqa: E402
except (ImportError, ValueError):
    GdkX11 = None

ready_path, state_path = sys.argv[1], sys.argv[2]
password = "--purpose" in sys.argv and sys.argv[sys.argv.index("--purpose") + 1] == "password"
invisible = "--invisible" in sys.argv
state = FieldState(state_path)

loop = GLib.MainLoop()
window = Gtk.Window(title="sttd test field")
window.set_default_size(800, 300)
if password or invisible:
    field = Gtk.Entry()
    if password:
        field.set_input_purpose(Gtk.InputPurpose.PASSWORD)
    else:
        field.set_visibility(False)
    field.connect("changed", lambda e: state.update(text=e.get_text()))
    # The entry's GtkText child shows the preedit.
    field.get_delegate().connect("preedit-changed", lambda _field, preedit: state.preedit(preedit))
else:
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


def shown():
    surface = window.get_surface()
    # An X window id on X11; on Wayland windows have no id a client can name.
    if GdkX11 and isinstance(surface, GdkX11.X11Surface):
        return announce(ready_path, str(surface.get_xid()))
    return announce(ready_path)


GLib.timeout_add(100, shown)
loop.run()
