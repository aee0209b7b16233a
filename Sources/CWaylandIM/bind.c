#include "CWaylandIM.h"

struct wl_seat *sttd_wl_bind_seat(struct wl_registry *registry, uint32_t name, uint32_t version) {
    return wl_registry_bind(registry, name, &wl_seat_interface, version);
}

struct zwp_input_method_manager_v2 *sttd_wl_bind_input_method_manager(struct wl_registry *registry,
                                                                      uint32_t name) {
    return wl_registry_bind(registry, name, &zwp_input_method_manager_v2_interface, 1);
}

struct zwp_virtual_keyboard_manager_v1 *sttd_wl_bind_virtual_keyboard_manager(struct wl_registry *registry,
                                                                              uint32_t name) {
    return wl_registry_bind(registry, name, &zwp_virtual_keyboard_manager_v1_interface, 1);
}

struct zwlr_foreign_toplevel_manager_v1 *sttd_wl_bind_foreign_toplevel_manager(struct wl_registry *registry,
                                                                               uint32_t name) {
    return wl_registry_bind(registry, name, &zwlr_foreign_toplevel_manager_v1_interface, 3);
}
