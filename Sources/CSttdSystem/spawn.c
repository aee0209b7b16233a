// posix_spawn_file_actions_addclosefrom_np is a GNU extension (glibc 2.34).
#define _GNU_SOURCE
#include "csystem.h"

#include <fcntl.h>
#include <signal.h>
#include <errno.h>
#include <poll.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/// Threads of a test runner (or a service) may block signals; the child must not inherit that:
/// an empty mask and default dispositions, plus `extra_flags`.
static void reset_signals(posix_spawnattr_t *attributes, short extra_flags) {
    sigset_t empty, all;
    sigemptyset(&empty);
    sigfillset(&all);
    sigdelset(&all, SIGKILL);
    sigdelset(&all, SIGSTOP);
    posix_spawnattr_setsigmask(attributes, &empty);
    posix_spawnattr_setsigdefault(attributes, &all);
    posix_spawnattr_setflags(attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | extra_flags);
}

/// The one spawn path: `actions` (the caller's descriptor set-up, destroyed here) plus every
/// descriptor from `close_from` up closed, signals reset, in a process group of its own if asked.
static int spawn_with(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                      posix_spawn_file_actions_t *actions, int close_from, int own_group) {
    // Sockets from NIO and libdbus are not close-on-exec: a child holding a copy would keep a
    // connection open after its owner closed it.
    posix_spawn_file_actions_addclosefrom_np(actions, close_from);
    posix_spawnattr_t attributes;
    int result = posix_spawnattr_init(&attributes);
    if (result == 0) {
        if (own_group) posix_spawnattr_setpgroup(&attributes, 0);
        reset_signals(&attributes, own_group ? POSIX_SPAWN_SETPGROUP : 0);
        result = posix_spawn(pid, path, actions, &attributes, argv, envp);
        posix_spawnattr_destroy(&attributes);
    }
    posix_spawn_file_actions_destroy(actions);
    return result;
}

int sttd_spawn(pid_t *pid, const char *path, char *const argv[], char *const envp[],
               const char *stdin_path, const char *stdout_path, const char *stderr_path) {
    posix_spawn_file_actions_t actions;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    posix_spawn_file_actions_addopen(&actions, 0, stdin_path, O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&actions, 1, stdout_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    return spawn_with(pid, path, argv, envp, &actions, 3, 0);
}

int sttd_spawn_fds(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                   int stdin_fd, int stdout_fd, int stderr_fd) {
    posix_spawn_file_actions_t actions;
    int result = posix_spawn_file_actions_init(&actions);
    if (result != 0) return result;
    // dup2 onto the same number clears close-on-exec (glibc), so a descriptor already at 0/1/2 works.
    posix_spawn_file_actions_adddup2(&actions, stdin_fd, 0);
    posix_spawn_file_actions_adddup2(&actions, stdout_fd, 1);
    posix_spawn_file_actions_adddup2(&actions, stderr_fd, 2);
    // Its own process group: a timeout kills the tool and anything it started.
    return spawn_with(pid, path, argv, envp, &actions, 3, 1);
}

int sttd_memfd(const char *name) { return memfd_create(name, MFD_CLOEXEC); }

int sttd_wait_child(pid_t pid, int timeout_ms, int *status) {
    int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
    if (pidfd >= 0) {
        struct pollfd fd = {.fd = pidfd, .events = POLLIN};
        int ready;
        do {
            ready = poll(&fd, 1, timeout_ms);
        } while (ready < 0 && errno == EINTR);
        close(pidfd);
        if (ready == 0) return 0;
    } else {
        // Kernels before 5.3: poll the child every 2 ms.
        for (int waited = 0; waited < timeout_ms; waited += 2) {
            pid_t done = waitpid(pid, status, WNOHANG);
            if (done == pid) return 1;
            if (done < 0 && errno != EINTR) return -1;
            usleep(2000);
        }
    }
    pid_t done;
    do {
        done = waitpid(pid, status, pidfd >= 0 ? 0 : WNOHANG);
    } while (done < 0 && errno == EINTR);
    return done == pid ? 1 : (done == 0 ? 0 : -1);
}

int sttd_spawn_mapped(pid_t *pid, const char *path, char *const argv[], char *const envp[],
                      const int *fds, int count) {
    // Copies first, above every target number, so no dup2 overwrites a later source.
    int copies[count];
    for (int i = 0; i < count; i++) {
        copies[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, count + 3);
        if (copies[i] < 0) {
            int error = errno;
            while (i-- > 0) close(copies[i]);
            return error;
        }
    }
    posix_spawn_file_actions_t actions;
    int result = posix_spawn_file_actions_init(&actions);
    if (result == 0) {
        for (int i = 0; i < count; i++) posix_spawn_file_actions_adddup2(&actions, copies[i], i);
        result = spawn_with(pid, path, argv, envp, &actions, count, 0);
    }
    for (int i = 0; i < count; i++) close(copies[i]);
    return result;
}

int sttd_socketpair(int fds[2]) { return socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds); }

int sttd_set_receive_timeout(int fd, int timeout_ms) {
    struct timeval timeout = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    return setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
}

int sttd_set_send_timeout(int fd, int timeout_ms) {
    struct timeval timeout = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    return setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof timeout);
}

int sttd_send_all(int fd, const void *bytes, size_t count) {
    const char *at = bytes;
    while (count > 0) {
        ssize_t sent = send(fd, at, count, MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR) continue;
        if (sent <= 0) return -1;
        at += sent;
        count -= (size_t)sent;
    }
    return 0;
}

int sttd_receive_all(int fd, void *bytes, size_t count) {
    char *at = bytes;
    while (count > 0) {
        ssize_t received = recv(fd, at, count, 0);
        if (received < 0 && errno == EINTR) continue;
        if (received <= 0) return -1;
        at += received;
        count -= (size_t)received;
    }
    return 0;
}
