/*
 * etcd_fixture.h - a throwaway etcd-server for a test (through
 * scripts/etcd.sh): started on free loopback ports with its own data
 * folder, stopped, killed and restarted on the same port and data by the
 * test itself. No etcd is assumed to be running on the machine.
 */
#ifndef STRATA_TEST_ETCD_FIXTURE_H
#define STRATA_TEST_ETCD_FIXTURE_H

#include <sys/types.h>

typedef struct et_etcd {
    pid_t pid;         /* 0 when not running */
    int port;          /* client port; the peer port is port + 1 */
    char endpoint[64]; /* "http://127.0.0.1:port" */
    char dir[256];     /* data folder and log (dir/etcd.log) */
    char script[512];  /* scripts/etcd.sh */
} et_etcd_t;

/*
 * Starts etcd on a free port (and the next one) with a fresh data folder
 * under $TMPDIR, waits until it is healthy. script: the path of
 * scripts/etcd.sh (NULL: $STRATA_ETCD_SH, else "scripts/etcd.sh").
 * Returns 0; 77 when no etcd binary is installed (the test should skip);
 * -1 with the reason on stderr.
 */
int et_start(et_etcd_t *e, const char *script);

/* Stops etcd (SIGTERM, then SIGKILL), keeping its data. */
void et_stop(et_etcd_t *e);

/* Kills etcd with SIGKILL, keeping its data. */
void et_kill(et_etcd_t *e);

/* Starts it again on the same port and data; 0 or -1. */
int et_restart(et_etcd_t *e);

/* Stops it and removes its data folder. */
void et_destroy(et_etcd_t *e);

/*
 * Runs `etcdctl --endpoints <endpoint> args` (args as one shell string) and
 * returns its stdout, NUL-terminated, malloc'd (free it); NULL on failure.
 */
char *et_ctl(const et_etcd_t *e, const char *args);

#endif
