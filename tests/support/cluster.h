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
    char extra[1024]; /* extra flags for every node, space separated */
} tc_cluster_t;

/*
 * Starts n daemons (binary: $STRATAD, else the path given). extra_args are
 * appended to every node's command line (may be NULL); "{node}" in them
 * becomes the node's index (0..n-1), e.g. "--data-dir /tmp/d/{node}". Returns 0, or -1 with
 * the reason on stderr (the started ones are stopped).
 */
int tc_start(tc_cluster_t *c, const char *stratad, int n, const char *extra_args);

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
