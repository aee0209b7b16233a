#!/usr/bin/python3
"""Many independent clients calling sttd at once, in random order, for a while.

usage: load.py BUS_ADDRESS CLIENTS SECONDS SEED
Each client is its own process with its own bus connection. Prints one JSON object: calls,
errors by name, calls without a reply (must be none), and State values read that are not in the
contract (must be none).
"""
import json
import multiprocessing
import random
import sys
import time

import dbus

NAME = "io.github.sttd.Speech1"
PATH = "/io/github/sttd/Speech1"
STATES = {"idle", "starting", "listening", "stopping", "reconnecting"}


def client(address, seconds, seed, results):
    rng = random.Random(seed)
    bus = dbus.bus.BusConnection(address)
    proxy = bus.get_object(NAME, PATH, introspect=False)
    speech = dbus.Interface(proxy, NAME)
    properties = dbus.Interface(proxy, "org.freedesktop.DBus.Properties")
    summary = {"calls": 0, "errors": {}, "no_reply": 0, "bad_states": []}
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        action = rng.choice(["start", "stop", "toggle", "reset", "getall", "cancel"])
        summary["calls"] += 1
        try:
            if action == "start":
                speech.StartTranscribing(dbus.Dictionary({}, signature="sv"), timeout=60)
            elif action == "stop":
                speech.StopTranscribing(timeout=60)
            elif action == "toggle":
                speech.ToggleTranscribing(dbus.Dictionary({}, signature="sv"), timeout=60)
            elif action == "reset":
                speech.ResetTranscript(timeout=60)
            elif action == "cancel":
                speech.CancelTranscribing(timeout=60)
            else:
                state = str(properties.GetAll(NAME, timeout=60)["State"])
                if state not in STATES:
                    summary["bad_states"].append(state)
        except dbus.exceptions.DBusException as error:
            name = error.get_dbus_name() or "?"
            if name in ("org.freedesktop.DBus.Error.NoReply", "org.freedesktop.DBus.Error.Timeout"):
                summary["no_reply"] += 1
            summary["errors"][name] = summary["errors"].get(name, 0) + 1
        time.sleep(rng.random() * 0.05)
    results.put(summary)


def main():
    address, clients, seconds, seed = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    results = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=client, args=(address, seconds, seed + n, results))
               for n in range(clients)]
    for worker in workers:
        worker.start()
    total = {"clients": clients, "calls": 0, "errors": {}, "no_reply": 0, "bad_states": []}
    for _ in workers:
        summary = results.get(timeout=seconds + 120)
        total["calls"] += summary["calls"]
        total["no_reply"] += summary["no_reply"]
        total["bad_states"] += summary["bad_states"]
        for name, count in summary["errors"].items():
            total["errors"][name] = total["errors"].get(name, 0) + count
    for worker in workers:
        worker.join(timeout=10)
    total["clients_finished"] = sum(1 for worker in workers if worker.exitcode == 0)
    print(json.dumps(total, sort_keys=True))


if __name__ == "__main__":
    main()
