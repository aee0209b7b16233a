#include "csystem.h"

#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

// One mapping of /proc/self/smaps: its range, whether it can be written, its dirty size.
struct mapping {
    unsigned long start, end;
    int writable, matches;
    long dirty_kb;
};

static size_t drop_if_clean(const struct mapping *m) {
    if (!m->matches || m->writable || m->dirty_kb != 0 || m->end <= m->start) return 0;
    // A private file mapping no page of which was ever written: dropped pages are read back from
    // the page cache, identical, when touched again (RELRO pages were written, so they stay).
    if (madvise((void *)m->start, m->end - m->start, MADV_DONTNEED) != 0) return 0;
    return m->end - m->start;
}

size_t sttd_drop_clean_library_pages(const char *name) {
    FILE *smaps = fopen("/proc/self/smaps", "re");
    if (!smaps) return 0;
    char line[4096];
    struct mapping current = {0};
    size_t dropped = 0;
    while (fgets(line, sizeof line, smaps)) {
        unsigned long start, end;
        char perms[8];
        long kb;
        if (sscanf(line, "%lx-%lx %7s", &start, &end, perms) == 3) {
            dropped += drop_if_clean(&current);
            current = (struct mapping){start, end, perms[1] == 'w', strstr(line, name) != NULL, 0};
        } else if (sscanf(line, "Private_Dirty: %ld kB", &kb) == 1 || sscanf(line, "Shared_Dirty: %ld kB", &kb) == 1) {
            current.dirty_kb += kb;
        }
    }
    dropped += drop_if_clean(&current);
    fclose(smaps);
    return dropped;
}
