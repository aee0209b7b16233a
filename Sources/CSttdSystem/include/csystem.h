#ifndef CSYSTEM_H
#define CSYSTEM_H

#include <sys/types.h>

/// Starts `path` with stdin/stdout/stderr opened on the given files, every other descriptor
/// closed, an empty signal mask and default signal dispositions. Returns 0 or an errno value.
int sttd_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[],
               const char *stdin_path, const char *stdout_path, const char *stderr_path);

/// Makes glibc give freed memory back: two arenas, and a fixed mmap threshold so large buffers
/// are unmapped when freed instead of staying in the heap.
void sttd_limit_allocator_retention(void);

/// Returns freed heap memory to the system now (malloc_trim), e.g. after unloading a model.
void sttd_release_free_memory(void);

#endif
