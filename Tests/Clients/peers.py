#!/usr/bin/python3
"""Short-lived callers: each connects, makes one call that sttd's consent gate decides, and leaves.

usage: peers.py BUS_ADDRESS COUNT
Every other caller leaves without waiting for its reply (often before sttd has read who it is).
Prints {"peers": COUNT}.
"""
import json
import sys

import dbus
import dbus.lowlevel

NAME = "io.github.sttd.Speech1"
PATH = "/io/github/sttd/Speech1"


def main():
    address, count = sys.argv[1], int(sys.argv[2])
    for n in range(count):
        bus = dbus.bus.BusConnection(address)
        if n % 2:
            bus.call_blocking(NAME, PATH, "org.freedesktop.DBus.Properties", "Get", "ss", (NAME, "State"))
        else:
            message = dbus.lowlevel.MethodCallMessage(NAME, PATH, "org.freedesktop.DBus.Properties", "Get")
            message.append(NAME, "State", signature="ss")
            bus.send_message(message)
            bus.flush()
        bus.close()
    print(json.dumps({"peers": count}))


if __name__ == "__main__":
    main()
