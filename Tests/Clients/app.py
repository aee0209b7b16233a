#!/usr/bin/python3
"""An app that keeps one connection to sttd and makes the calls it is told to (dbus-python).

usage: app.py BUS_ADDRESS
Reads one JSON request per line on stdin, answers each with one JSON line on stdout:
  {"call": MEMBER}                      a method of io.github.sttd.Speech1 (Start/Toggle get the
                                        "options" given, strings, booleans, unsigned numbers and
                                        string lists, or none; GetHistory a limit of 10);
                                        "send": true sends it without waiting for the reply
  {"get": PROPERTY} / {"get_all": true}   org.freedesktop.DBus.Properties.Get / GetAll
  {"set": PROPERTY, "value": STRING}    org.freedesktop.DBus.Properties.Set
  {"name": true}                        this connection's unique name
  {"exit": true}                        leave without closing anything by hand
Answers: {"value": ...} or {"error": NAME, "message": TEXT}.
"""
import json
import sys

import dbus
import dbus.lowlevel

NAME = "io.github.sttd.Speech1"
PATH = "/io/github/sttd/Speech1"
PROPERTIES = "org.freedesktop.DBus.Properties"


def plain(value):
    """D-Bus values as JSON values."""
    if value is None:
        return None
    if isinstance(value, dbus.Dictionary):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (dbus.Array, dbus.Struct, list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dbus.Boolean):
        return bool(value)
    if isinstance(value, (dbus.String, dbus.ObjectPath, dbus.Signature)):
        return str(value)
    if isinstance(value, (int, float)):
        return value
    return str(value)


def option(value):
    """A JSON option value as the D-Bus type sttd expects of it."""
    if isinstance(value, bool):
        return dbus.Boolean(value)
    if isinstance(value, int):
        return dbus.UInt32(value)
    if isinstance(value, list):
        return dbus.Array(value, signature="s")
    return dbus.String(value)


def answer(bus, request):
    if "name" in request:
        return bus.get_unique_name()
    if "get" in request:
        return bus.call_blocking(NAME, PATH, PROPERTIES, "Get", "ss", (NAME, request["get"]), timeout=30)
    if "get_all" in request:
        return bus.call_blocking(NAME, PATH, PROPERTIES, "GetAll", "s", (NAME,), timeout=30)
    if "set" in request:
        return bus.call_blocking(
            NAME, PATH, PROPERTIES, "Set", "ssv", (NAME, request["set"], dbus.String(request["value"])), timeout=30)
    member = request["call"]
    signature, arguments = "", ()
    if member in ("StartTranscribing", "ToggleTranscribing"):
        options = {key: option(value) for key, value in request.get("options", {}).items()}
        signature, arguments = "a{sv}", (dbus.Dictionary(options, signature="sv"),)
    elif member == "GetHistory":
        signature, arguments = "u", (dbus.UInt32(10),)
    if request.get("send"):
        message = dbus.lowlevel.MethodCallMessage(NAME, PATH, NAME, member)
        if signature:
            message.append(*arguments, signature=signature)
        bus.send_message(message)
        bus.flush()
        return None
    return bus.call_blocking(NAME, PATH, NAME, member, signature, arguments, timeout=30)


def main():
    bus = dbus.bus.BusConnection(sys.argv[1])
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("exit"):
            break
        try:
            reply = {"value": plain(answer(bus, request))}
        except dbus.exceptions.DBusException as error:
            reply = {"error": error.get_dbus_name() or "", "message": error.get_dbus_message() or ""}
        print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
