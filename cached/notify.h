/*
 * notify.h - stratad's readiness and liveness for a service manager: the
 * sd_notify(3) datagrams (READY=1, STATUS=, RELOADING=1, STOPPING=1,
 * WATCHDOG=1) sent to $NOTIFY_SOCKET, written here rather than linked from
 * libsystemd (docs/operations.md "Readiness" says why).
 *
 * Without NOTIFY_SOCKET every call does nothing. A datagram that cannot be
 * sent is logged once at warn and never stops the daemon: readiness is a
 * courtesy to the manager, not a condition of serving.
 *
 * Thread safety: cd_notify_send may run on any thread (one datagram is one
 * sendto); cd_notify_watchdog on one thread only (the reaper's).
 */
#ifndef STRATA_CACHED_NOTIFY_H
#define STRATA_CACHED_NOTIFY_H

#include <stdatomic.h>
#include <stdint.h>

typedef struct cd_notify {
    int fd;                  /* -1: no NOTIFY_SOCKET, nothing is sent */
    unsigned char addr[112]; /* the struct sockaddr_un of NOTIFY_SOCKET */
    unsigned addr_len;
    atomic_int warned;    /* a failed send was logged */
    uint64_t watchdog_ms; /* WATCHDOG=1 every this many ms; 0: no watchdog */
    uint64_t next_watchdog_ms;
} cd_notify_t;

/*
 * Reads NOTIFY_SOCKET (a path, or "@name" in the abstract namespace),
 * WATCHDOG_USEC and WATCHDOG_PID from the environment and opens a datagram
 * socket when there is one. A value it cannot use is logged at warn and
 * leaves n off. Never fails.
 */
void cd_notify_open(cd_notify_t *n);

/* Sends msg ("READY=1\nSTATUS=serving", newline-separated assignments). */
void cd_notify_send(cd_notify_t *n, const char *msg);

/* Sends WATCHDOG=1 when the interval (half of WATCHDOG_USEC) has passed
 * since the last one; now_ms is the monotonic clock. */
void cd_notify_watchdog(cd_notify_t *n, uint64_t now_ms);

/* Closes the socket; n is off afterwards. */
void cd_notify_close(cd_notify_t *n);

#endif
