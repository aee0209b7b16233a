#!/usr/bin/env python3
"""Serves a page with a focused text field to a browser on 127.0.0.1 and records what the field
holds, the composition (the input method's preedit) and the focus, as the other test fields do
(field_state.py), from what the page's script posts back:

    {"text": "...", "preedit": "...", "preedits": N, "preedit_seen": ["...", ...], "focus": true}

  browser_page.py FOCUS PASSWORD_STATE READY STATE [--purpose password]

READY gets the page's URL once the server listens. The page's <textarea> has the focus
(autofocus) and STATE records it. With --purpose password an <input type=password> is beside it,
and PASSWORD_STATE records that. The test moves the focus to an element, as a click would, by
writing its id ("password" or "text") to the file FOCUS; the page asks for it.

While a composition runs, the field's value already holds the preedit: the text is recorded only
when no composition runs, so a field holding the expected text also shows no preedit.
"""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from field_state import FieldState, announce

focus_path, password_path, ready_path, state_path = sys.argv[1:5]
password = "--purpose" in sys.argv and sys.argv[sys.argv.index("--purpose") + 1] == "password"
states = {"text": FieldState(state_path)}
if password:
    states["password"] = FieldState(password_path)
last_sequence = {}
lock = threading.Lock()

PASSWORD = '<input type="password" id="password">' if password else ""
PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>sttd test field</title>
<style>body { margin: 0 } textarea, input { font-size: 20px; width: 780px } textarea { height: 250px }</style>
</head><body>
%s
<textarea id="text" autofocus></textarea>
<script>
"use strict";
const fields = [...document.querySelectorAll("textarea, input")];
const status = new Map(fields.map(f => [f, {composing: false, preedit: "", sequence: 0, sent: ""}]));
function report(field) {
  const s = status.get(field);
  const snapshot = {
    id: field.id, value: field.value, composing: s.composing, preedit: s.preedit,
    focus: document.hasFocus() && document.activeElement === field,
  };
  const body = JSON.stringify(snapshot);
  if (body === s.sent) return;
  s.sent = body;
  snapshot.sequence = ++s.sequence;
  fetch("/state", {method: "POST", body: JSON.stringify(snapshot)}).catch(() => { s.sent = ""; });
}
for (const field of fields) {
  const s = status.get(field);
  field.addEventListener("compositionstart", () => { s.composing = true; report(field); });
  field.addEventListener("compositionupdate", e => { s.preedit = e.data || ""; report(field); });
  field.addEventListener("compositionend", () => {
    s.composing = false; s.preedit = ""; report(field);
    setTimeout(() => report(field), 0);
  });
  for (const event of ["input", "focus", "blur"]) field.addEventListener(event, () => report(field));
}
for (const event of ["focus", "blur"]) window.addEventListener(event, () => fields.forEach(report));
// The window's focus comes without events in some browsers; and the test asks for focus moves.
setInterval(() => {
  fields.forEach(report);
  fetch("/focus").then(r => r.text()).then(id => {
    const wanted = document.getElementById(id);
    if (wanted && document.activeElement !== wanted) wanted.focus();
  }).catch(() => {});
}, 100);
</script>
</body></html>
""" % PASSWORD


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/focus":
            try:
                with open(focus_path, encoding="utf-8") as f:
                    body = f.read().strip().encode()
            except FileNotFoundError:
                body = b""
            self.reply(body, "text/plain")
        elif self.path == "/":
            self.reply(PAGE.encode(), "text/html; charset=utf-8")
        else:
            self.send_error(404)

    def do_POST(self):
        snapshot = json.loads(self.rfile.read(int(self.headers["Content-Length"])).decode("utf-8"))
        self.reply(b"", "text/plain")
        with lock:
            self.record(snapshot)

    @staticmethod
    def record(snapshot):
        field = snapshot["id"]
        # fetch() may deliver posts out of order over several connections.
        if field not in states or snapshot["sequence"] <= last_sequence.get(field, 0):
            return
        last_sequence[field] = snapshot["sequence"]
        state = states[field]
        if state.state["preedit"] != snapshot["preedit"]:
            state.preedit(snapshot["preedit"])
        values = {"focus": snapshot["focus"]}
        if not snapshot["composing"]:
            values["text"] = snapshot["value"]
        state.update(**values)

    def reply(self, body, content_type):
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format, *args):
        pass


# Threads: a browser may hold a connection open without sending a request on it.
server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
server.daemon_threads = True
for state in states.values():
    state.save()
announce(ready_path, "http://127.0.0.1:%d/" % server.server_address[1])
server.serve_forever()
