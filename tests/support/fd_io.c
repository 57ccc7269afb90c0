/* fd_io.c - see fd_io.h. */
#include "fd_io.h"

#include <errno.h>
#include <stdint.h>
#include <unistd.h>

/* Moves len bytes between fd and p, in the direction `writing` says. */
static int fio_full(int fd, uint8_t *p, size_t len, int writing)
{
    while (len > 0) {
        ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

int fio_write_full(int fd, const void *buf, size_t len)
{
    return fio_full(fd, (uint8_t *)(uintptr_t)buf, len, 1);
}

int fio_read_full(int fd, void *buf, size_t len)
{
    return fio_full(fd, buf, len, 0);
}
