#ifndef CWAYLANDIM_H
#define CWAYLANDIM_H

// The wlroots input-method, virtual-keyboard and foreign-toplevel protocols as wayland-scanner
// writes them for a client (scripts/wayland-protocols), plus binds Swift cannot write safely.
#include <stdint.h>
#include "input-method-unstable-v2-client-protocol.h"
#include "virtual-keyboard-unstable-v1-client-protocol.h"
#include "wlr-foreign-toplevel-management-unstable-v1-client-protocol.h"

// Binding a global needs the address of its `wl_interface`, which libwayland keeps in the proxy.
// Swift imports those `extern const` tables as values: `&wl_seat_interface` there would be the
// address of a temporary copy. So the binds are made here, at the version sttd speaks.

/// `wl_seat` at `version` (2 or later sends the seat's name).
struct wl_seat *sttd_wl_bind_seat(struct wl_registry *registry, uint32_t name, uint32_t version);

/// `zwp_input_method_manager_v2`, version 1.
struct zwp_input_method_manager_v2 *sttd_wl_bind_input_method_manager(struct wl_registry *registry,
                                                                      uint32_t name);

/// `zwp_virtual_keyboard_manager_v1`, version 1.
struct zwp_virtual_keyboard_manager_v1 *sttd_wl_bind_virtual_keyboard_manager(struct wl_registry *registry,
                                                                              uint32_t name);

/// `zwlr_foreign_toplevel_manager_v1`, version 3 (what wlroots 0.15, sway 1.7, offers): the
/// toplevels' `app_id` and `activated` state tell which app's window has the focus.
struct zwlr_foreign_toplevel_manager_v1 *sttd_wl_bind_foreign_toplevel_manager(struct wl_registry *registry,
                                                                               uint32_t name);

#endif
