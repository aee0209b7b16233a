// Descriptor passing (SCM_RIGHTS) for the Wayland proxy: Swift cannot use the CMSG_* macros.
#include "csystem.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

// libwayland sends at most 28 descriptors with one message batch (MAX_FDS_OUT).
enum { most_fds = 32 };

long sttd_receive_with_fds(int fd, void *bytes, size_t capacity, int *fds, int max_fds, int *fd_count) {
    union {
        char buffer[CMSG_SPACE(sizeof(int) * most_fds)];
        struct cmsghdr align;
    } control;
    struct iovec vector = {.iov_base = bytes, .iov_len = capacity};
    struct msghdr message = {
        .msg_iov = &vector, .msg_iovlen = 1, .msg_control = control.buffer, .msg_controllen = sizeof control.buffer};
    *fd_count = 0;
    ssize_t received;
    do {
        received = recvmsg(fd, &message, MSG_CMSG_CLOEXEC);
    } while (received < 0 && errno == EINTR);
    if (received < 0) return -1;
    int count = 0;
    int overflow = (message.msg_flags & MSG_CTRUNC) != 0;
    for (struct cmsghdr *header = CMSG_FIRSTHDR(&message); header; header = CMSG_NXTHDR(&message, header)) {
        if (header->cmsg_level != SOL_SOCKET || header->cmsg_type != SCM_RIGHTS) continue;
        size_t n = (header->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int received_fd;
            memcpy(&received_fd, CMSG_DATA(header) + i * sizeof(int), sizeof(int));
            if (count < max_fds) {
                fds[count++] = received_fd;
            } else {
                close(received_fd);
                overflow = 1;
            }
        }
    }
    if (overflow) {
        for (int i = 0; i < count; i++) close(fds[i]);
        errno = EMSGSIZE;
        return -1;
    }
    *fd_count = count;
    return received;
}

int sttd_send_with_fds(int fd, const void *bytes, size_t count, const int *fds, int fd_count) {
    if (fd_count < 0 || fd_count > most_fds) {
        errno = EINVAL;
        return -1;
    }
    union {
        char buffer[CMSG_SPACE(sizeof(int) * most_fds)];
        struct cmsghdr align;
    } control;
    const char *next = bytes;
    size_t left = count;
    int descriptors_sent = fd_count == 0;
    while (left > 0 || !descriptors_sent) {
        struct iovec vector = {.iov_base = (void *)next, .iov_len = left};
        struct msghdr message = {.msg_iov = &vector, .msg_iovlen = 1};
        if (!descriptors_sent) {
            memset(control.buffer, 0, sizeof control.buffer);
            message.msg_control = control.buffer;
            message.msg_controllen = CMSG_SPACE(sizeof(int) * fd_count);
            struct cmsghdr *header = CMSG_FIRSTHDR(&message);
            header->cmsg_level = SOL_SOCKET;
            header->cmsg_type = SCM_RIGHTS;
            header->cmsg_len = CMSG_LEN(sizeof(int) * fd_count);
            memcpy(CMSG_DATA(header), fds, sizeof(int) * fd_count);
        }
        ssize_t sent = sendmsg(fd, &message, MSG_NOSIGNAL);
        if (sent < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        descriptors_sent = 1;
        next += sent;
        left -= (size_t)sent;
    }
    return 0;
}
