#!/usr/bin/env python3
"""A Qt window (PyQt5 or PyQt6) with one QLineEdit that uses the input method Qt picks: on a
Wayland display (QT_QPA_PLATFORM=wayland) the compositor's text-input protocol, or IBus itself
with QT_IM_MODULE=ibus. It records what the field holds and every preedit the input method
showed (field_state.py).

  qt_field.py 5|6 READY STATE [--purpose password] [--app-id ID]

READY gets the window's X id once the window is shown ("wayland" on a Wayland display). With
--purpose password the field hides what it holds (QLineEdit.EchoMode.Password). --app-id sets
the window's Wayland app id (the desktop file name), by which a compositor tells apps apart.
"""
import sys

from field_state import FieldState, announce

if sys.argv[1] == "6":
    from PyQt6.QtCore import QTimer
    from PyQt6.QtGui import QGuiApplication
    from PyQt6.QtWidgets import QApplication, QLineEdit
else:
    from PyQt5.QtCore import QTimer
    from PyQt5.QtGui import QGuiApplication
    from PyQt5.QtWidgets import QApplication, QLineEdit

ready_path, state_path = sys.argv[2], sys.argv[3]
password = "--purpose" in sys.argv and sys.argv[sys.argv.index("--purpose") + 1] == "password"
state = FieldState(state_path)


class Field(QLineEdit):
    # QLineEdit has no preedit signal: the input method's events carry it.
    def inputMethodEvent(self, event):
        super().inputMethodEvent(event)
        state.preedit(event.preeditString())

    def focusInEvent(self, event):
        super().focusInEvent(event)
        state.update(focus=True)

    def focusOutEvent(self, event):
        super().focusOutEvent(event)
        state.update(focus=False)


app = QApplication(sys.argv[:1])
if "--app-id" in sys.argv:
    QGuiApplication.setDesktopFileName(sys.argv[sys.argv.index("--app-id") + 1])
field = Field()
field.setWindowTitle("sttd test field")
field.resize(800, 100)
if password:
    field.setEchoMode(QLineEdit.EchoMode.Password)
field.textChanged.connect(lambda text: state.update(text=text))
field.show()
field.setFocus()
state.save()
# An X window id on X11 (xcb); on Wayland windows have no id a client can name.
window_id = str(int(field.winId())) if QGuiApplication.platformName() == "xcb" else "wayland"
QTimer.singleShot(100, lambda: announce(ready_path, window_id))
sys.exit(app.exec())
