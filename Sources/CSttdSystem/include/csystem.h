#ifndef CSYSTEM_H
#define CSYSTEM_H

#include <stddef.h>
#include <sys/types.h>

/// Starts `path` with stdin/stdout/stderr opened on the given files, every other descriptor
/// closed, an empty signal mask and default signal dispositions. Returns 0 or an errno value.
int sttd_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[],
               const char *stdin_path, const char *stdout_path, const char *stderr_path);

/// Starts `path` with the given descriptors as stdin/stdout/stderr, every other descriptor closed,
/// an empty signal mask, default signal dispositions, in a process group of its own (pgid = pid).
/// Returns 0 or an errno value.
int sttd_spawn_fds(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                   int stdin_fd, int stdout_fd, int stderr_fd);

/// Starts `path` with `fds[i]` as its descriptor i (for i < count), every other descriptor closed,
/// an empty signal mask and default signal dispositions. Returns 0 or an errno value.
int sttd_spawn_mapped(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                      const int *fds, int count);

/// A connected pair of local stream sockets (close-on-exec); 0, or -1 with errno set.
int sttd_socketpair(int fds[2]);

/// Makes a receive on `fd` fail after `timeout_ms` without data; 0, or -1 with errno set.
int sttd_set_receive_timeout(int fd, int timeout_ms);

/// Makes a send on `fd` fail after `timeout_ms` without room in the socket; 0, or -1 with errno set.
int sttd_set_send_timeout(int fd, int timeout_ms);

/// Sends all `count` bytes (no SIGPIPE when the peer is gone); 0, or -1 when the peer is gone.
int sttd_send_all(int fd, const void *bytes, size_t count);

/// Receives exactly `count` bytes; 0, or -1 on end of stream, error or the socket's timeout.
int sttd_receive_all(int fd, void *bytes, size_t count);

/// Receives up to `capacity` bytes and the descriptors (SCM_RIGHTS, close-on-exec) that came with
/// them, at most `max_fds` into `fds` (`*fd_count` set). Returns the byte count (0: the peer
/// closed), or -1 with errno set (EMSGSIZE: more descriptors than `max_fds`; none are kept).
long sttd_receive_with_fds(int fd, void *bytes, size_t capacity, int *fds, int max_fds, int *fd_count);

/// Sends all `count` bytes, the `fd_count` descriptors with the first of them (no SIGPIPE when
/// the peer is gone); 0, or -1 with errno set.
int sttd_send_with_fds(int fd, const void *bytes, size_t count, const int *fds, int fd_count);

/// An anonymous in-memory file (close-on-exec), or -1 with errno set.
int sttd_memfd(const char *name);

/// Waits up to `timeout_ms` for the child to end and reaps it into `status`.
/// Returns 1 when it ended, 0 on timeout (the child is left running), -1 on error.
int sttd_wait_child(pid_t pid, int timeout_ms, int *status);

/// Makes glibc give freed memory back: two arenas, and a fixed mmap threshold so large buffers
/// are unmapped when freed instead of staying in the heap.
void sttd_limit_allocator_retention(void);

/// Returns freed heap memory to the system now (malloc_trim), e.g. after unloading a model.
void sttd_release_free_memory(void);

/// Drops from memory the pages of never-written, read-only mappings of files whose path contains
/// `name` (the code of a library no longer used); they are read back if touched. Returns bytes.
size_t sttd_drop_clean_library_pages(const char *name);

#endif
