#!/usr/bin/python3
"""Sends random, mostly malformed method calls to sttd from an independent client (dbus-python).

usage: fuzz.py BUS_ADDRESS CALLS SEED [CALLS_PER_CONNECTION]
With CALLS_PER_CONNECTION, each run of that many calls comes from a new connection (short-lived
callers, as a conformance checker's are); by default all calls share one.
Prints one JSON object: calls sent, replies, errors by name, calls the client library refused to
build, and calls that got no reply at all (which must be none).
"""
import json
import random
import sys

import dbus
import dbus.lowlevel

NAME = "io.github.sttd.Speech1"
PATH = "/io/github/sttd/Speech1"
METHODS = [
    "StartTranscribing", "StopTranscribing", "CancelTranscribing", "ToggleTranscribing", "ResetTranscript",
    "RequestAuthorization", "ListSources", "GetHistory",
]
PROPERTIES = ["State", "Transcript", "AuthorizationStatus", "MicrophoneStatus", "Backend", "Language", "Source",
              "LastError", "Version"]
OPTION_KEYS = ["backend", "language", "source", "interim_results", "keyterms", "auto_stop_ms", "output", "bogus", ""]
BASIC = "ybnqiuxtdsog"


def random_signature(rng, depth=0):
    roll = rng.random()
    if depth > 3 or roll < 0.55:
        return rng.choice(BASIC)
    if roll < 0.7:
        return "a" + random_signature(rng, depth + 1)
    if roll < 0.8:
        return "a{" + rng.choice(BASIC) + random_signature(rng, depth + 1) + "}"
    if roll < 0.9:
        return "(" + "".join(random_signature(rng, depth + 1) for _ in range(rng.randint(1, 3))) + ")"
    return "v"


def split_signature(signature):
    """Splits a signature into complete types."""
    types, i = [], 0
    while i < len(signature):
        j = i
        while signature[j] == "a":
            j += 1
        if signature[j] in "({":
            close = {"(": ")", "{": "}"}[signature[j]]
            level = 0
            while True:
                if signature[j] in "({":
                    level += 1
                elif signature[j] in ")}":
                    level -= 1
                    if level == 0 and signature[j] == close:
                        break
                j += 1
        types.append(signature[i:j + 1])
        i = j + 1
    return types


def random_string(rng, depth):
    roll = rng.random()
    if roll < 0.1 and depth < 2:
        return "x" * rng.choice([4096, 65536, 1 << 20])
    if roll < 0.2:
        return "".join(chr(rng.randint(0x20, 0xD7FF)) for _ in range(rng.randint(0, 64)))
    if roll < 0.3:
        return "ünïcødé 😀 " * rng.randint(1, 50)
    return rng.choice(["", "local", "deepgram", "en-US", "xx-!!", "mic.monitor", "none", "type", "/", "a" * 300])


def random_value(rng, signature, depth=0):
    code = signature[0]
    if code == "y":
        return dbus.Byte(rng.randint(0, 255))
    if code == "b":
        return dbus.Boolean(rng.random() < 0.5)
    if code in "nqiuxt":
        bits = {"n": 15, "q": 16, "i": 31, "u": 32, "x": 63, "t": 64}[code]
        signed = code in "nix"
        value = rng.choice([0, 1, -1 if signed else 2, rng.randint(-(1 << bits) if signed else 0, (1 << bits) - 1)])
        return {"n": dbus.Int16, "q": dbus.UInt16, "i": dbus.Int32, "u": dbus.UInt32, "x": dbus.Int64,
                "t": dbus.UInt64}[code](value)
    if code == "d":
        return dbus.Double(rng.choice([0.0, -1.5, 1e308, float("inf"), float("nan")]))
    if code == "s":
        return dbus.String(random_string(rng, depth))
    if code == "o":
        return dbus.ObjectPath(rng.choice(["/", "/a/b", PATH]))
    if code == "g":
        return dbus.Signature(rng.choice(["", "s", "a{sv}"]))
    if code == "v":
        if depth > 20 or rng.random() < 0.7:
            inner = random_signature(rng, 2)
        else:
            inner = "v"  # deep variant nesting
        return random_value(rng, inner, depth + 1)
    if code == "a" and signature[1] == "{":
        key, value = split_signature(signature[2:-1])
        entries = {}
        for _ in range(rng.randint(0, 4)):
            if key == "s" and rng.random() < 0.7:
                k = dbus.String(rng.choice(OPTION_KEYS))
            else:
                k = random_value(rng, key, depth + 1)
            try:
                entries[k] = random_value(rng, value, depth + 1)
            except TypeError:
                pass
        return dbus.Dictionary(entries, signature=signature[2:-1])
    if code == "a":
        element = signature[1:]
        count = rng.choice([0, 1, 3, 50]) if depth < 3 else rng.randint(0, 1)
        return dbus.Array([random_value(rng, element, depth + 1) for _ in range(count)], signature=element)
    if code == "(":
        return dbus.Struct([random_value(rng, part, depth + 1) for part in split_signature(signature[1:-1])],
                           signature=signature[1:-1])
    raise ValueError(signature)


def options_dict(rng):
    """A{sv} with real keys and random values: the interesting case for Start/Toggle."""
    entries = {}
    for _ in range(rng.randint(0, 3)):
        key = rng.choice(OPTION_KEYS)
        entries[dbus.String(key)] = random_value(rng, rng.choice(["s", "b", "u", "as", "i", "v", "d"]), 1)
    return dbus.Dictionary(entries, signature="sv")


def random_call(rng):
    roll = rng.random()
    interface, member, signature, values = NAME, rng.choice(METHODS), "", []
    if roll < 0.25:
        # A real method with random arguments.
        signature = "".join(random_signature(rng) for _ in range(rng.randint(0, 3)))
    elif roll < 0.45:
        member = rng.choice(["StartTranscribing", "ToggleTranscribing"])
        signature, values = "a{sv}", [options_dict(rng)]
    elif roll < 0.6:
        interface = "org.freedesktop.DBus.Properties"
        member = rng.choice(["Get", "Set", "GetAll", "Bogus"])
        prop = rng.choice(PROPERTIES + ["Nope", ""])
        if member == "Set":
            inner = rng.choice(["s", "b", "u", "as", "v"])
            signature, values = "ssv", [NAME if rng.random() < 0.8 else "x.y", prop, random_value(rng, inner, 1)]
        elif member == "Get":
            signature, values = "ss", [rng.choice([NAME, "x.y", ""]), prop]
        else:
            signature = rng.choice(["s", "", "u"])
    elif roll < 0.7:
        interface = rng.choice([None, "x.y.Z", "org.freedesktop.DBus.Introspectable", "org.freedesktop.DBus.Peer"])
        member = rng.choice(["Introspect", "Ping", "GetMachineId", "Nope"] + METHODS)
        signature = rng.choice(["", "s"])
    elif roll < 0.8:
        member = "".join(rng.choice("ABCdefGhij_0") for _ in range(rng.randint(1, 40)))
        member = member if not member[0].isdigit() else "M" + member
        signature = "".join(random_signature(rng) for _ in range(rng.randint(0, 2)))
    elif roll < 0.9:
        member = "GetHistory"
        signature = rng.choice(["u", "i", "s", "", "uu", "x"])
    else:
        signature = "".join(random_signature(rng) for _ in range(rng.randint(1, 4)))
    if not values and signature:
        values = [random_value(rng, part) for part in split_signature(signature)]
    path = PATH if rng.random() < 0.9 else rng.choice(["/", "/io/github/sttd", "/x/y"])
    return path, interface, member, signature, values


def main():
    address, count, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    per_connection = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    rng = random.Random(seed)
    bus = dbus.bus.BusConnection(address)
    summary = {"calls": 0, "replies": 0, "errors": {}, "unbuildable": 0, "no_reply": 0}
    on_connection = 0
    while summary["calls"] < count:
        if per_connection and on_connection == per_connection:
            bus.close()
            bus = dbus.bus.BusConnection(address)
            on_connection = 0
        path, interface, member, signature, values = random_call(rng)
        try:
            message = dbus.lowlevel.MethodCallMessage(NAME, path, interface, member)
            if signature:
                message.append(*values, signature=signature)
        except (TypeError, ValueError, OverflowError, UnicodeError, dbus.exceptions.DBusException):
            summary["unbuildable"] += 1
            continue
        summary["calls"] += 1
        on_connection += 1
        try:
            bus.send_message_with_reply_and_block(message, 30.0)
            summary["replies"] += 1
        except dbus.exceptions.DBusException as error:
            name = error.get_dbus_name() or "?"
            if name in ("org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout"):
                summary["no_reply"] += 1
            summary["errors"][name] = summary["errors"].get(name, 0) + 1
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    main()
