#!/usr/bin/env python3
"""Holds one key down on KWin's Wayland display, as a keyboard would, through KWin's
org_kde_kwin_fake_input protocol (libwayland-client through ctypes; the protocol's interface
comes from libKF5WaylandClient, which KWin's packages install).

  kwin_fake_key.py EVDEV_KEYCODE PRESSED RELEASE

Presses the key, writes PRESSED, waits until the file RELEASE exists, releases the key. KWin
offers the protocol only to clients it trusts: the test's KWin runs with
KWIN_WAYLAND_NO_PERMISSION_CHECKS=1.
"""
import ctypes
import os
import sys
import time

code, pressed_path, release_path = int(sys.argv[1]), sys.argv[2], sys.argv[3]

wayland = ctypes.CDLL("libwayland-client.so.0")
kwayland = ctypes.CDLL("libKF5WaylandClient.so.5")
fake_input_interface = ctypes.c_void_p.in_dll(kwayland, "org_kde_kwin_fake_input_interface")
registry_interface = ctypes.c_void_p.in_dll(wayland, "wl_registry_interface")
wayland.wl_display_connect.restype = ctypes.c_void_p
wayland.wl_display_connect.argtypes = [ctypes.c_char_p]
wayland.wl_display_roundtrip.argtypes = [ctypes.c_void_p]
wayland.wl_display_disconnect.argtypes = [ctypes.c_void_p]
wayland.wl_proxy_add_listener.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
wayland.wl_proxy_marshal_constructor.restype = ctypes.c_void_p
wayland.wl_proxy_marshal_constructor_versioned.restype = ctypes.c_void_p

# Opcodes: wl_display.get_registry 1, wl_registry.bind 0; org_kde_kwin_fake_input (version 4):
# authenticate 0, keyboard_key 10.
GLOBAL = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_char_p, ctypes.c_uint32)
REMOVE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint32)
found = {}


def on_global(_data, registry, name, interface, version):
    if interface == b"org_kde_kwin_fake_input" and version >= 4:
        found["fake_input"] = wayland.wl_proxy_marshal_constructor_versioned(
            ctypes.c_void_p(registry), ctypes.c_uint32(0), ctypes.byref(fake_input_interface), ctypes.c_uint32(4),
            ctypes.c_uint32(name), interface, ctypes.c_uint32(4), None)


callbacks = (GLOBAL(on_global), REMOVE(lambda *_: None))  # kept alive while the display is read
listener = (ctypes.c_void_p * 2)(*(ctypes.cast(c, ctypes.c_void_p) for c in callbacks))

display = wayland.wl_display_connect(None)
if not display:
    sys.exit("cannot connect to the Wayland display")
registry = wayland.wl_proxy_marshal_constructor(
    ctypes.c_void_p(display), ctypes.c_uint32(1), ctypes.byref(registry_interface), None)
wayland.wl_proxy_add_listener(registry, listener, None)
wayland.wl_display_roundtrip(display)
fake_input = found.get("fake_input")
if not fake_input:
    sys.exit("KWin offers no org_kde_kwin_fake_input version 4 to this client")
proxy = ctypes.c_void_p(fake_input)
wayland.wl_proxy_marshal(proxy, ctypes.c_uint32(0), b"sttd tests", b"push-to-talk")


def key(state):
    wayland.wl_proxy_marshal(proxy, ctypes.c_uint32(10), ctypes.c_uint32(code), ctypes.c_uint32(state))
    if wayland.wl_display_roundtrip(display) < 0:
        sys.exit("the Wayland connection failed")


key(1)
with open(pressed_path, "w"):
    pass
while not os.path.exists(release_path):
    time.sleep(0.02)
key(0)
wayland.wl_display_disconnect(display)
