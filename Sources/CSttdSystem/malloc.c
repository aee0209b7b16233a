#include "csystem.h"

#include <malloc.h>

void sttd_limit_allocator_retention(void) {
    mallopt(M_ARENA_MAX, 2);
    mallopt(M_MMAP_THRESHOLD, 128 * 1024);
}

void sttd_release_free_memory(void) {
    malloc_trim(0);
}
