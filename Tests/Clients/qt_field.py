#!/usr/bin/env python3
"""A Qt window (PyQt5 or PyQt6) with one QLineEdit that uses Qt's default input method: on a
Wayland display (QT_QPA_PLATFORM=wayland) the compositor's text-input protocol. It records what
the field holds and every preedit the input method showed (field_state.py).

  qt_field.py 5|6 READY STATE

READY gets "wayland" once the window is shown.
"""
import sys

from field_state import FieldState, announce

if sys.argv[1] == "6":
    from PyQt6.QtCore import QTimer
    from PyQt6.QtWidgets import QApplication, QLineEdit
else:
    from PyQt5.QtCore import QTimer
    from PyQt5.QtWidgets import QApplication, QLineEdit

ready_path, state_path = sys.argv[2], sys.argv[3]
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
field = Field()
field.setWindowTitle("sttd test field")
field.resize(800, 100)
field.textChanged.connect(lambda text: state.update(text=text))
field.show()
field.setFocus()
state.save()
QTimer.singleShot(100, lambda: announce(ready_path))
sys.exit(app.exec())
