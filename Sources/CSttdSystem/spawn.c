// posix_spawn_file_actions_addclosefrom_np is a GNU extension (glibc 2.34).
#define _GNU_SOURCE
#include "csystem.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>

int sttd_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[],
               const char *stdin_path, const char *stdout_path, const char *stderr_path) {
    posix_spawn_file_actions_t actions;
    posix_spawnattr_t attributes;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    result = posix_spawnattr_init(&attributes);
    if (result != 0) {
        posix_spawn_file_actions_destroy(&actions);
        return result;
    }
    posix_spawn_file_actions_addopen(&actions, 0, stdin_path, O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, stdout_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    // Sockets from NIO and libdbus are not close-on-exec: a child holding a copy would keep a
    // connection open after its owner closed it.
    posix_spawn_file_actions_addclosefrom_np(&actions, 3);

    // Threads of a test runner (or a service) may block signals; the child must not inherit that.
    sigset_t empty, all;
    sigemptyset(&empty);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(&attributes, &empty);
    posix_spawnattr_setsigdefault(&attributes, &all);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);

    result = posix_spawn(pid, path, &actions, &attributes, argv, envp);
    posix_spawnattr_destroy(&attributes);
    posix_spawn_file_actions_destroy(&actions);
    return result;
}
