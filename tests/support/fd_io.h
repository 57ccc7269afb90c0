/*
 * fd_io.h - whole reads and writes on a file descriptor (a socketpair or a
 * pipe between a test or benchmark and the process it forked), retried after
 * EINTR and after short transfers.
 */
#ifndef STRATA_TEST_FD_IO_H
#define STRATA_TEST_FD_IO_H

#include <stddef.h>

/* Writes all len bytes of buf to fd. Returns 0, or -1 on an error. */
int fio_write_full(int fd, const void *buf, size_t len);

/* Reads exactly len bytes from fd into buf. Returns 0, or -1 on an error or
 * when fd reaches its end first. */
int fio_read_full(int fd, void *buf, size_t len);

#endif
