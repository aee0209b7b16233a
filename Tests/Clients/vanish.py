#!/usr/bin/python3
"""Sends method calls to sttd and exits without waiting for any reply.

usage: vanish.py BUS_ADDRESS MEMBER...
Start and Toggle get empty options. Prints {"sent": N}.
"""
import json
import sys

import dbus
import dbus.lowlevel

NAME = "io.github.sttd.Speech1"
PATH = "/io/github/sttd/Speech1"


def main():
    bus = dbus.bus.BusConnection(sys.argv[1])
    # One answered call first, so sttd has seen who this is: a caller already gone when sttd
    # first looks at it cannot be identified and is refused (per-app consent).
    bus.call_blocking(NAME, PATH, "org.freedesktop.DBus.Properties", "Get", "ss", (NAME, "State"))
    sent = 0
    for member in sys.argv[2:]:
        message = dbus.lowlevel.MethodCallMessage(NAME, PATH, NAME, member)
        if member in ("StartTranscribing", "ToggleTranscribing"):
            message.append(dbus.Dictionary({}, signature="sv"), signature="a{sv}")
        bus.send_message(message)
        sent += 1
    bus.flush()
    print(json.dumps({"sent": sent}))


if __name__ == "__main__":
    main()
