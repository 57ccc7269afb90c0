/* cluster.c - see cluster.h. */
#include "cluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Binds a loopback TCP socket to port (0: any); returns the port bound, or -1. */
static int tc_try_port(int port)
{
    struct sockaddr_in a;
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int got = -1;

    if (fd < 0) {
        return -1;
    }
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0) {
        got = ntohs(a.sin_port);
    }
    close(fd);
    return got;
}

/*
 * A port that is free now, for a daemon to listen on a moment later. It is
 * drawn below the kernel's ephemeral range (ip_local_port_range): a port the
 * kernel handed out and took back could be handed out again in between, to
 * any socket (a daemon's own UCX listener took one that way and the daemon's
 * gRPC server then found its port in use). Falls back to a kernel-chosen port
 * where the range leaves no room below it.
 */
int tc_free_port(void)
{
    static unsigned seed;
    int lo = 10000, hi = 32767, eph_lo = 0, eph_hi = 0;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");

    if (f != NULL) {
        if (fscanf(f, "%d %d", &eph_lo, &eph_hi) == 2 && eph_lo > lo + 1000) {
            hi = eph_lo - 1;
        } else {
            hi = 0;
        }
        fclose(f);
    }
    if (seed == 0) {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        seed = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec;
    }
    for (int attempt = 0; hi > lo && attempt < 200; attempt++) {
        int port = lo + (int)(rand_r(&seed) % (unsigned)(hi - lo + 1));

        if (tc_try_port(port) == port) {
            return port;
        }
    }
    return tc_try_port(0);
}

char *tc_http_get(int port, const char *path)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    char req[512];
    size_t got = 0, cap = 1 << 20;
    char *buf = malloc(cap);
    ssize_t k;
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\n\r\n", path);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (buf == NULL || fd < 0 || n <= 0 || (size_t)n >= sizeof(req) ||
        connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || write(fd, req, (size_t)n) != n) {
        if (fd >= 0) {
            close(fd);
        }
        free(buf);
        return NULL;
    }
    while (got + 1 < cap && (k = read(fd, buf + got, cap - 1 - got)) > 0) {
        got += (size_t)k;
    }
    close(fd);
    buf[got] = '\0';
    return buf;
}

double tc_metric(int port, const char *series)
{
    char *buf = tc_http_get(port, "/metrics"), *p;
    size_t n = strlen(series);
    double v = -1;

    if (buf == NULL) {
        return -1;
    }
    /* A line that starts with the series, then a space and the value. */
    for (p = buf; (p = strstr(p, series)) != NULL; p += n) {
        if ((p == buf || p[-1] == '\n') && p[n] == ' ') {
            v = strtod(p + n + 1, NULL);
            break;
        }
    }
    free(buf);
    return v;
}

/* Splits s on spaces into argv[*argc..max). s is modified. */
static void tc_split(char *s, char **argv, int *argc, int max)
{
    char *save = NULL;

    for (char *t = strtok_r(s, " ", &save); t != NULL && *argc < max - 1;
         t = strtok_r(NULL, " ", &save)) {
        argv[(*argc)++] = t;
    }
}

/* Copies extra into out (size out_len), each "{node}" replaced by the node's index. */
static void tc_subst_node(const char *extra, int i, char *out, size_t out_len)
{
    size_t o = 0;

    for (const char *p = extra; *p != '\0' && o + 1 < out_len;) {
        if (strncmp(p, "{node}", 6) == 0) {
            int w = snprintf(out + o, out_len - o, "%d", i);

            o = w > 0 && (size_t)w < out_len - o ? o + (size_t)w : out_len - 1;
            p += 6;
            continue;
        }
        out[o++] = *p++;
    }
    out[o] = '\0';
}

/*
 * Node i's port (free now, and no other node's of c: two draws of tc_free_port can give the same
 * port, since each only checks that nobody holds it at that moment), address and log.
 */
static void tc_node_place(tc_cluster_t *c, int i)
{
    tc_node_t *nd = &c->node[i];
    int clash;

    do {
        nd->port = tc_free_port();
        clash = 0;
        for (int j = 0; j < TC_MAX_NODES; j++) {
            clash |= j != i && nd->port > 0 && c->node[j].port == nd->port;
        }
    } while (clash);
    snprintf(nd->addr, sizeof(nd->addr), "127.0.0.1:%d", nd->port);
    snprintf(nd->log, sizeof(nd->log), "/tmp/stratad-test-%d-%d.log", (int)getpid(), nd->port);
}

static int tc_spawn(tc_cluster_t *c, int i)
{
    tc_node_t *nd = &c->node[i];
    int out[2];
    char listen[64], extra[1024], line[256];
    size_t used = 0;
    uint64_t deadline;
    struct timespec ts;

    if (pipe(out) != 0) {
        return -1;
    }
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", nd->port);
    tc_subst_node(c->extra, i, extra, sizeof(extra));
    nd->pid = fork();
    if (nd->pid < 0) {
        close(out[0]);
        close(out[1]);
        return -1;
    }
    if (nd->pid == 0) {
        char *argv[64];
        int argc = 0;
        int logfd = open(nd->log, O_WRONLY | O_CREAT | O_APPEND, 0644);

        /* A test that dies (an assertion, a crash) takes its daemons along. */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(out[1], STDOUT_FILENO);
        if (logfd >= 0) {
            dup2(logfd, STDERR_FILENO);
        }
        close(out[0]);
        argv[argc++] = c->stratad;
        argv[argc++] = "--listen";
        argv[argc++] = listen;
        if (c->etcd[0] != '\0') {
            argv[argc++] = "--etcd";
            argv[argc++] = c->etcd;
        } else if (c->peers_file[0] != '\0') {
            argv[argc++] = "--config";
            argv[argc++] = c->peers_file;
        } else {
            argv[argc++] = "--peers";
            argv[argc++] = c->peers;
        }
        argv[argc++] = "--cluster-secret";
        argv[argc++] = "integration-test-cluster-secret";
        tc_split(extra, argv, &argc, 64);
        argv[argc] = NULL;
        execv(c->stratad, argv);
        fprintf(stderr, "exec %s: %s\n", c->stratad, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    clock_gettime(CLOCK_MONOTONIC, &ts);
    deadline = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 + 20000;
    line[0] = '\0';
    for (;;) {
        struct pollfd p = {out[0], POLLIN, 0};
        uint64_t now;
        ssize_t r;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        now = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
        if (now >= deadline || poll(&p, 1, (int)(deadline - now)) <= 0) {
            break;
        }
        r = read(out[0], line + used, sizeof(line) - 1 - used);
        if (r <= 0) {
            break;
        }
        used += (size_t)r;
        line[used] = '\0';
        if (strstr(line, "stratad ready") != NULL && strchr(line, '\n') != NULL) {
            close(out[0]);
            return 0;
        }
    }
    close(out[0]);
    fprintf(stderr, "cluster: node %d (%s) did not become ready; its log %s says:\n", i, nd->addr,
            nd->log);
    {
        FILE *f = fopen(nd->log, "r");
        char buf[512];

        while (f != NULL && fgets(buf, sizeof(buf), f) != NULL) {
            fprintf(stderr, "  %s", buf);
        }
        if (f != NULL) {
            fclose(f);
        }
    }
    kill(nd->pid, SIGKILL);
    waitpid(nd->pid, NULL, 0);
    nd->pid = 0;
    return -1;
}

int tc_start(tc_cluster_t *c, const char *stratad, int n, const char *extra_args)
{
    const char *env = getenv("STRATAD");
    size_t off = 0;

    memset(c, 0, sizeof(*c));
    if (n < 1 || n > TC_MAX_NODES) {
        return -1;
    }
    c->n = n;
    snprintf(c->stratad, sizeof(c->stratad), "%s", env ? env : stratad);
    snprintf(c->extra, sizeof(c->extra), "%s", extra_args ? extra_args : "");
    for (int i = 0; i < n; i++) {
        tc_node_place(c, i);
        off += (size_t)snprintf(c->peers + off, sizeof(c->peers) - off, "%s%s", i ? "," : "",
                                c->node[i].addr);
    }
    for (int i = 0; i < n; i++) {
        if (tc_spawn(c, i) != 0) {
            tc_stop_all(c);
            return -1;
        }
    }
    return 0;
}

int tc_start_etcd(tc_cluster_t *c, const char *stratad, int n, const char *etcd,
                  const char *extra_args)
{
    const char *env = getenv("STRATAD");

    memset(c, 0, sizeof(*c));
    snprintf(c->stratad, sizeof(c->stratad), "%s", env ? env : stratad);
    snprintf(c->extra, sizeof(c->extra), "%s", extra_args ? extra_args : "");
    snprintf(c->etcd, sizeof(c->etcd), "%s", etcd);
    for (int i = 0; i < n; i++) {
        if (tc_add(c) < 0) {
            tc_stop_all(c);
            return -1;
        }
    }
    return 0;
}

int tc_set_peers(tc_cluster_t *c, const int *idx, int n)
{
    char tmp[160];
    FILE *f;

    snprintf(tmp, sizeof(tmp), "%s.tmp", c->peers_file);
    if ((f = fopen(tmp, "w")) == NULL) {
        return -1;
    }
    fprintf(f, "peers = ");
    for (int k = 0; k < n; k++) {
        fprintf(f, "%s%s", k ? "," : "", c->node[idx[k]].addr);
    }
    fprintf(f, "\n");
    /* Renamed into place: a daemon never reads half a file. */
    return fclose(f) == 0 && rename(tmp, c->peers_file) == 0 ? 0 : -1;
}

int tc_start_static(tc_cluster_t *c, const char *stratad, int n_slots, int n, const char *dir,
                    const char *extra_args)
{
    const char *env = getenv("STRATAD");
    int idx[TC_MAX_NODES];

    memset(c, 0, sizeof(*c));
    if (n < 1 || n > n_slots || n_slots > TC_MAX_NODES) {
        return -1;
    }
    c->n = n_slots;
    snprintf(c->stratad, sizeof(c->stratad), "%s", env ? env : stratad);
    snprintf(c->extra, sizeof(c->extra), "%s", extra_args ? extra_args : "");
    snprintf(c->peers_file, sizeof(c->peers_file), "%s/peers.ini", dir);
    for (int i = 0; i < n_slots; i++) {
        tc_node_place(c, i);
        idx[i] = i;
    }
    if (tc_set_peers(c, idx, n) != 0) {
        return -1;
    }
    for (int i = 0; i < n; i++) {
        if (tc_spawn(c, i) != 0) {
            tc_stop_all(c);
            return -1;
        }
    }
    return 0;
}

int tc_add(tc_cluster_t *c)
{
    int i = c->n;

    if (i >= TC_MAX_NODES) {
        return -1;
    }
    tc_node_place(c, i);
    c->n++;
    if (tc_spawn(c, i) != 0) {
        c->n--;
        return -1;
    }
    return i;
}

void tc_signal(tc_cluster_t *c, int i, int sig)
{
    if (c->node[i].pid > 0) {
        kill(c->node[i].pid, sig);
    }
}

int tc_wait_exit(tc_cluster_t *c, int i, int timeout_ms)
{
    int status = 0;

    for (int waited = 0; c->node[i].pid > 0 && waited <= timeout_ms; waited += 10) {
        if (waitpid(c->node[i].pid, &status, WNOHANG) == c->node[i].pid) {
            c->node[i].pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    return -1;
}

int tc_restart(tc_cluster_t *c, int i)
{
    return tc_spawn(c, i);
}

void tc_kill(tc_cluster_t *c, int i)
{
    if (c->node[i].pid > 0) {
        kill(c->node[i].pid, SIGKILL);
        waitpid(c->node[i].pid, NULL, 0);
        c->node[i].pid = 0;
    }
}

int tc_stop(tc_cluster_t *c, int i, int timeout_ms)
{
    int status = 0;

    if (c->node[i].pid <= 0) {
        return -1;
    }
    kill(c->node[i].pid, SIGTERM);
    for (int waited = 0; waited < timeout_ms; waited += 10) {
        if (waitpid(c->node[i].pid, &status, WNOHANG) == c->node[i].pid) {
            c->node[i].pid = 0;
            return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        }
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    tc_kill(c, i);
    return -1;
}

void tc_stop_all(tc_cluster_t *c)
{
    for (int i = 0; i < c->n; i++) {
        tc_stop(c, i, 15000);
        if (getenv("TC_KEEP_LOGS") == NULL) {
            unlink(c->node[i].log);
        }
    }
}

unsigned long long tc_rss(const tc_cluster_t *c, int i)
{
    char path[64], line[256];
    unsigned long long kb = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)c->node[i].pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb * 1024;
}
