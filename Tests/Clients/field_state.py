"""What the test fields (ibus_field.py, gtk4_field.py, qt_field.py) record, in the JSON file the
tests read (IBusField in Tests/TestSupport):

    {"text": "...", "preedit": "...", "preedits": N, "preedit_seen": ["...", ...], "focus": true}
"""
import json
import os


class FieldState:
    def __init__(self, path):
        self.path = path
        self.state = {"text": "", "preedit": "", "preedits": 0, "preedit_seen": [], "focus": False}

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(self.state, f, ensure_ascii=False)
        os.replace(tmp, self.path)

    def update(self, **values):
        self.state.update(values)
        self.save()

    def preedit(self, preedit):
        self.state["preedit"] = preedit
        if preedit:
            self.state["preedits"] += 1
            self.state["preedit_seen"] = (self.state["preedit_seen"] + [preedit])[-50:]
        self.save()


def announce(ready_path, content="wayland"):
    """Tells the test the window is shown (READY holds an X window id, or "wayland")."""
    tmp = ready_path + ".tmp"
    with open(tmp, "w") as f:
        f.write(content)
    os.replace(tmp, ready_path)
    return False
