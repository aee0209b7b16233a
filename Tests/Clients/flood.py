#!/usr/bin/python3
"""A sandboxed app that floods sttd with StartTranscribing calls while its consent prompt is open.

usage: flood.py BUS_ADDRESS CONNECTIONS CALLS_PER_CONNECTION
Sends every call without waiting, then a Ping on each connection (answered only after sttd has
taken every call before it) and prints {"sent": N}. Then waits for every reply (at most 120 s)
and prints {"replies": N, "errors": {NAME: COUNT}}.
"""
import json
import sys

import dbus
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

NAME = "io.github.sttd.Speech1"
PATH = "/io/github/sttd/Speech1"


def main():
    address, connections, calls = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    DBusGMainLoop(set_as_default=True)
    buses = [dbus.bus.BusConnection(address) for _ in range(connections)]
    expected = connections * calls
    summary = {"replies": 0, "errors": {}}
    loop = GLib.MainLoop()

    def answered():
        summary["replies"] += 1
        if summary["replies"] == expected:
            loop.quit()

    def failed(error):
        name = error.get_dbus_name() or ""
        summary["errors"][name] = summary["errors"].get(name, 0) + 1
        answered()

    for bus in buses:
        for _ in range(calls):
            bus.call_async(
                NAME, PATH, NAME, "StartTranscribing", "a{sv}", (dbus.Dictionary({}, signature="sv"),),
                lambda *_: answered(), failed, timeout=120)
    for bus in buses:
        bus.call_blocking(NAME, PATH, "org.freedesktop.DBus.Peer", "Ping", "", (), timeout=60)
    print(json.dumps({"sent": expected}), flush=True)
    GLib.timeout_add_seconds(120, loop.quit)
    loop.run()
    print(json.dumps(summary), flush=True)


main()
