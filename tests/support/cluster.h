/*
 * cluster.h - real stratad processes on loopback for integration tests and
 * benchmarks: start n daemons on free ports (each knows the others as
 * peers), wait until each prints its ready line, kill or stop them.
 */
#ifndef STRATA_TEST_CLUSTER_H
#define STRATA_TEST_CLUSTER_H

#include <sys/types.h>

#define TC_MAX_NODES 8

typedef struct tc_node {
    pid_t pid;
    int port;
    char addr[32]; /* "127.0.0.1:port" */
    char log[128]; /* the daemon's stderr */
} tc_node_t;

typedef struct tc_cluster {
    int n;
    tc_node_t node[TC_MAX_NODES];
    char stratad[512];
    char peers[TC_MAX_NODES * 32];
    char extra[1024];     /* extra flags for every node, space separated */
    char etcd[128];       /* set: nodes get --etcd <etcd> in place of --peers */
    char peers_file[128]; /* static membership: the config file of peers (tc_start_static) */
} tc_cluster_t;

/*
 * Starts n daemons (binary: $STRATAD, else the path given). extra_args are
 * appended to every node's command line (may be NULL); "{node}" in them
 * becomes the node's index (0..n-1), e.g. "--data-dir /tmp/d/{node}". Returns 0, or -1 with
 * the reason on stderr (the started ones are stopped).
 */
int tc_start(tc_cluster_t *c, const char *stratad, int n, const char *extra_args);

/*
 * Like tc_start(), with membership on etcd: every node gets --etcd etcd (the
 * endpoint of tests/support/etcd_fixture.h) in place of --peers.
 */
int tc_start_etcd(tc_cluster_t *c, const char *stratad, int n, const char *etcd,
                  const char *extra_args);

/* Starts one more node (index c->n, then counted) on a free port; its index or -1. */
int tc_add(tc_cluster_t *c);

/*
 * Static-mode membership changes (docs/daemon.md "Membership changes"): like
 * tc_start, with ports for n_slots nodes of which the first n are started,
 * and the peers read from the config file c->peers_file (in dir; "peers =
 * " the first n) instead of --peers, so that a node re-reads them on SIGHUP.
 * Start another slot with tc_restart. Returns as tc_start.
 */
int tc_start_static(tc_cluster_t *c, const char *stratad, int n_slots, int n, const char *dir,
                    const char *extra_args);

/* Writes c->peers_file: peers = the nodes of indices idx[0..n). Returns 0 or -1. */
int tc_set_peers(tc_cluster_t *c, const int *idx, int n);

/* Sends sig to node i (if it runs). */
void tc_signal(tc_cluster_t *c, int i, int sig);

/* Waits up to timeout_ms for node i to exit by itself; its exit status (128 +
 * signal when killed by one), or -1 when it still runs. */
int tc_wait_exit(tc_cluster_t *c, int i, int timeout_ms);

/* Starts node i again (after tc_kill / tc_stop), on the same port. */
int tc_restart(tc_cluster_t *c, int i);

/* Sends SIGKILL to node i and reaps it. */
void tc_kill(tc_cluster_t *c, int i);

/* Sends SIGTERM to node i; returns its exit status (waits up to timeout_ms),
 * or -1 if it had to be killed. */
int tc_stop(tc_cluster_t *c, int i, int timeout_ms);

/* Stops every node and removes the logs. */
void tc_stop_all(tc_cluster_t *c);

/* Resident set size of node i in bytes (from /proc), 0 if unknown. */
unsigned long long tc_rss(const tc_cluster_t *c, int i);

/* A free TCP port on 127.0.0.1. */
int tc_free_port(void);

/* The value of one series of the /metrics page served on 127.0.0.1:port
 * (series: the metric name with its labels exactly as printed, e.g.
 * strata_spills_total{namespace="t/m",kind="kv"}), or -1 when the page
 * cannot be read or has no such series. */
double tc_metric(int port, const char *series);

/* The whole HTTP/1.0 response (status line, headers, body) to GET path on
 * 127.0.0.1:port, NUL-terminated, at most 1 MiB; the caller frees it. NULL
 * when the server cannot be reached. */
char *tc_http_get(int port, const char *path);

#endif
