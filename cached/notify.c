/*
 * notify.c - the sd_notify(3) datagrams, written by hand: one AF_UNIX
 * SOCK_DGRAM socket to $NOTIFY_SOCKET, one datagram per message. The protocol
 * is systemd's documented, stable interface; there is no other state.
 */
#include "notify.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

_Static_assert(sizeof(((cd_notify_t *)0)->addr) >= sizeof(struct sockaddr_un),
               "cd_notify_t.addr holds a sockaddr_un");

/* The watchdog interval from WATCHDOG_USEC (half of it, as systemd advises)
 * when WATCHDOG_PID is unset or names this process; 0 otherwise. */
static uint64_t cd_notify_watchdog_ms(void)
{
    const char *usec = getenv("WATCHDOG_USEC");
    const char *pid = getenv("WATCHDOG_PID");
    unsigned long long v;
    char *end;

    if (usec == NULL || usec[0] == '\0') {
        return 0;
    }
    if (pid != NULL && pid[0] != '\0' && strtol(pid, NULL, 10) != (long)getpid()) {
        return 0; /* the watchdog is another process's */
    }
    errno = 0;
    v = strtoull(usec, &end, 10); /* which would take "-5" as 2^64 - 5 */
    if (usec[0] < '0' || usec[0] > '9' || errno != 0 || *end != '\0' || v < 2000) {
        lg_warn("WATCHDOG_USEC=%s is not a number of microseconds of at least 2000: no "
                "watchdog pings",
                usec);
        return 0;
    }
    return v / 2000u;
}

void cd_notify_open(cd_notify_t *n)
{
    const char *path = getenv("NOTIFY_SOCKET");
    struct sockaddr_un sun;
    size_t len;

    memset(n, 0, sizeof(*n));
    n->fd = -1;
    if (path == NULL || path[0] == '\0') {
        return;
    }
    len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len >= sizeof(sun.sun_path)) {
        lg_warn("NOTIFY_SOCKET=%s is neither an absolute path nor @name of at most %zu bytes: "
                "no readiness notification",
                path, sizeof(sun.sun_path) - 1);
        return;
    }
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, path, len);
    if (path[0] == '@') {
        sun.sun_path[0] = '\0'; /* the abstract namespace: no terminating NUL counted */
    }
    n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (n->fd < 0) {
        lg_warn("cannot open a socket for NOTIFY_SOCKET=%s: %s", path, strerror(errno));
        return;
    }
    memcpy(n->addr, &sun, sizeof(sun));
    n->addr_len = (unsigned)(offsetof(struct sockaddr_un, sun_path) + len + (path[0] == '/'));
    n->watchdog_ms = cd_notify_watchdog_ms();
    lg_debug("notify socket=%s watchdog_ms=%llu", path, (unsigned long long)n->watchdog_ms);
}

void cd_notify_send(cd_notify_t *n, const char *msg)
{
    ssize_t sent;

    if (n->fd < 0) {
        return;
    }
    do {
        sent = sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL, (const struct sockaddr *)n->addr,
                      (socklen_t)n->addr_len);
    } while (sent < 0 && errno == EINTR);
    if (sent < 0 && atomic_exchange(&n->warned, 1) == 0) {
        /* once: the watchdog would repeat it every few seconds */
        lg_warn("cannot notify the service manager (NOTIFY_SOCKET) message=%.*s: %s",
                (int)strcspn(msg, "\n"), msg, strerror(errno));
    }
}

void cd_notify_watchdog(cd_notify_t *n, uint64_t now_ms)
{
    if (n->fd < 0 || n->watchdog_ms == 0 || now_ms < n->next_watchdog_ms) {
        return;
    }
    n->next_watchdog_ms = now_ms + n->watchdog_ms;
    cd_notify_send(n, "WATCHDOG=1");
}

void cd_notify_close(cd_notify_t *n)
{
    if (n->fd >= 0) {
        close(n->fd);
    }
    n->fd = -1;
}
