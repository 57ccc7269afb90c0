/*
 * bench_rebalance.c - durable objects when members change (issue #23;
 * docs/daemon.md "Membership changes"), against a plain copy of the same
 * bytes, in one run:
 *   - the load: --sessions sessions of a --tokens-token prompt (64K), each a
 *     durable session record and its last --kda KDA checkpoints of --kda-bytes
 *     bytes, written through libstrata with R = 2 to 3 daemons (static mode,
 *     SSD tier on /tmp with ssd_sync none);
 *   - a client's lookup latency (st_client_lookup of a session's prompt, in a
 *     loop on its own thread): steady state, during the join of a 4th daemon,
 *     during the drain of one;
 *   - re-replication after kill -9 of one of the 3 left: the time until the
 *     survivors report nothing pending, the bytes they pushed, against a plain
 *     TCP copy of the same bytes over loopback (the same host) in the same run,
 *     and the CPU time of each (the survivors' from /proc; the copy's, of this
 *     process, whose lookup thread has stopped by then): the measure that a
 *     busy shared machine disturbs least.
 * Usage: bench_rebalance [STRATAD] [--sessions N] [--kda N] [--kda-bytes N]
 *        [--tokens N] [--rate BYTES_PER_S]
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bench_util.h"
#include "cluster.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"

#define MAX_LAT (1u << 20)

static size_t n_sessions = 1000, n_kda = 4, kda_bytes = 65536, n_tokens = 65536;
static uint64_t rate = 0;

/* A client thread's lookup latencies, by window. */
typedef struct lat {
    st_client_t *c;
    st_hash_t **chains;
    size_t n_blocks;
    atomic_int window; /* -1 stop; 0 steady; 1 join; 2 drain; 3 idle */
    double *us[3];
    size_t n[3];
    uint64_t errors;
} lat_t;

static void *lat_main(void *arg)
{
    lat_t *l = arg;
    size_t k = 0;

    for (int w; (w = atomic_load(&l->window)) >= 0;) {
        st_lookup_result_t r;
        uint64_t t0 = bench_now_ns();
        st_status_t st = st_client_lookup(l->c, l->chains[k++ % n_sessions], l->n_blocks, 0, &r);
        double us = (double)(bench_now_ns() - t0) / 1e3;

        if (st != ST_OK) {
            l->errors++;
        }
        if (w < 3 && l->n[w] < MAX_LAT) {
            l->us[w][l->n[w]++] = us;
        }
    }
    return NULL;
}

static st_client_t *connect_nodes(const char *nodes)
{
    st_client_params_t p = {0};
    st_client_t *c = NULL;

    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TIMEOUT | ST_CLIENT_FIELD_TENANT |
                   ST_CLIENT_FIELD_MODEL | ST_CLIENT_FIELD_REPLICAS;
    p.nodes = nodes;
    p.timeout_ms = 30000;
    p.tenant = "bench";
    p.model = "k3";
    p.replicas = 2;
    for (int i = 0; i < 50 && st_client_connect(&p, &c) != ST_OK; i++) {
        usleep(100000);
    }
    return c;
}

/* A node-wide Stats counter of node addr (-1: no answer). */
static int64_t stat_of(const char *addr, const char *name)
{
    Strata__V1__StatsRequest req = STRATA__V1__STATS_REQUEST__INIT;
    Strata__V1__StatsResponse *resp = NULL;
    srpc_channel_config_t cc = {0};
    srpc_channel_t *ch = NULL;
    srpc_error_t err;
    int64_t v = -1;

    if (srpc_channel_open(addr, &cc, &ch) == ST_OK &&
        srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_STATS], &req.base, 5000,
                  (ProtobufCMessage **)&resp, &err) == ST_OK) {
        for (size_t i = 0; i < resp->n_counters; i++) {
            if (strcmp(resp->counters[i]->key, name) == 0) {
                v = (int64_t)resp->counters[i]->value;
            }
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    srpc_channel_close(ch);
    return v;
}

/* The ring epochs of the nodes of idx before a change. */
static void epochs_of(const tc_cluster_t *cl, const int *idx, int n, int64_t *out)
{
    for (int k = 0; k < n; k++) {
        out[k] = stat_of(cl->node[idx[k]].addr, "rebalance_ring_epoch");
    }
}

/* Waits until every node of idx whose list changed (before[k] >= 0) applied
 * it, and every node finished a pass over its ring with nothing pending;
 * returns the seconds since t0. */
static double wait_moved(const tc_cluster_t *cl, const int *idx, int n, const int64_t *before,
                         uint64_t t0)
{
    for (;;) {
        int done = 1;

        for (int k = 0; k < n && done; k++) {
            const char *a = cl->node[idx[k]].addr;
            int64_t ring = stat_of(a, "rebalance_ring_epoch");

            done = (before[k] < 0 || ring > before[k]) && stat_of(a, "rebalance_epoch") >= ring &&
                   stat_of(a, "rebalance_pending") == 0;
        }
        if (done) {
            return (double)(bench_now_ns() - t0) / 1e9;
        }
        usleep(20000);
    }
}

/* CPU seconds (user and system) process pid has used so far, from /proc. */
static double cpu_of_pid(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long long ut = 0, st = 0;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    if ((f = fopen(path, "r")) == NULL) {
        return 0;
    }
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* After the command's closing parenthesis: fields 3.., utime and stime are 14 and 15. */
    if ((p = strrchr(buf, ')')) == NULL ||
        sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) {
        return 0;
    }
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* CPU seconds this process has used so far (the TCP copy's two threads). */
static double cpu_self(void)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static int64_t sum_stat(const tc_cluster_t *cl, const int *idx, int n, const char *name)
{
    int64_t s = 0;

    for (int k = 0; k < n; k++) {
        s += stat_of(cl->node[idx[k]].addr, name);
    }
    return s;
}

static void apply(tc_cluster_t *cl, const int *idx, int n)
{
    if (tc_set_peers(cl, idx, n) != 0) {
        fprintf(stderr, "cannot write the peers file\n");
        exit(1);
    }
    for (int k = 0; k < n; k++) {
        tc_signal(cl, idx[k], SIGHUP);
    }
}

/* The load: each session's record and its last n_kda checkpoints. */
static void write_load(st_client_t *c, st_hash_t **chains, size_t n_blocks)
{
    uint8_t *buf = malloc(kda_bytes);
    st_put_op_t *ops = calloc(n_kda, sizeof(*ops));
    uint32_t bt = st_client_block_tokens(c);

    for (size_t i = 0; i < kda_bytes; i++) {
        buf[i] = (uint8_t)(i * 131 + 7);
    }
    for (size_t k = 0; k < n_sessions; k++) {
        char id[32];
        st_handle_t *h = NULL;
        st_session_info_t info;
        st_write_result_t wr;

        for (size_t j = 0; j < n_kda; j++) {
            ops[j] = (st_put_op_t){.block = n_blocks - 1 - 16 * (n_kda - 1 - j),
                                   .kind = ST_KIND_KDA,
                                   .src = buf,
                                   .len = kda_bytes};
        }
        if (st_client_put(c, chains[k], n_blocks, ops, n_kda, ST_PUT_DURABLE, &h) != ST_OK ||
            st_handle_wait(h, -1) != ST_OK) {
            fprintf(stderr, "put failed: %s\n", st_client_last_error());
            exit(1);
        }
        st_handle_release(h);
        snprintf(id, sizeof(id), "bench-%zu", k);
        if (st_session_open_ex(c, id, 0, ST_SESSION_DURABLE, &info, &wr) != ST_OK ||
            st_session_append_ex(c, id, &chains[k][n_blocks - 1], n_blocks * bt, ST_SESSION_DURABLE,
                                 &wr) != ST_OK) {
            fprintf(stderr, "session failed: %s\n", st_client_last_error());
            exit(1);
        }
    }
    free(buf);
    free(ops);
}

typedef struct tcp_copy {
    int fd;
    uint64_t bytes;
} tcp_copy_t;

static void *tcp_sink(void *arg)
{
    tcp_copy_t *t = arg;
    char *b = malloc(1 << 20);
    uint64_t got = 0;
    ssize_t r;

    while (got < t->bytes && (r = read(t->fd, b, 1 << 20)) > 0) {
        got += (uint64_t)r;
    }
    free(b);
    return NULL;
}

/* Seconds a plain TCP copy of bytes takes over loopback (the peer). */
static double tcp_copy_s(uint64_t bytes)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t al = sizeof(a);
    int ls = socket(AF_INET, SOCK_STREAM, 0), cs = socket(AF_INET, SOCK_STREAM, 0), ss;
    char *b = malloc(1 << 20);
    tcp_copy_t t = {0, bytes};
    pthread_t th;
    uint64_t sent = 0, t0;
    double s;

    memset(b, 0x5a, 1 << 20);
    bind(ls, (struct sockaddr *)&a, sizeof(a));
    listen(ls, 1);
    getsockname(ls, (struct sockaddr *)&a, &al);
    connect(cs, (struct sockaddr *)&a, sizeof(a));
    ss = accept(ls, NULL, NULL);
    t.fd = ss;
    t0 = bench_now_ns();
    pthread_create(&th, NULL, tcp_sink, &t);
    while (sent < bytes) {
        size_t n = bytes - sent < (1u << 20) ? (size_t)(bytes - sent) : (1u << 20);
        ssize_t w = write(cs, b, n);

        if (w <= 0) {
            break;
        }
        sent += (uint64_t)w;
    }
    pthread_join(th, NULL);
    s = (double)(bench_now_ns() - t0) / 1e9;
    close(cs), close(ss), close(ls);
    free(b);
    return s;
}

static void print_lat(const char *what, lat_t *l, int w, bench_stats_t *out)
{
    bench_stats(l->us[w], l->n[w] ? l->n[w] : 1, out);
    printf("  lookup %-8s n=%-7zu p50=%8.1f us  p99=%8.1f us  max=%9.1f us\n", what, l->n[w],
           out->median, out->p99, out->max);
}

/* Drains node 1 (a Drain call; it must exit 0), then applies m_drained to
 * the others; returns the seconds until they settled. */
static double drain_step(tc_cluster_t *cl, const int *m_drained)
{
    Strata__V1__DrainRequest req = STRATA__V1__DRAIN_REQUEST__INIT;
    Strata__V1__DrainResponse *resp = NULL;
    srpc_channel_config_t cc = {0};
    srpc_channel_t *ch = NULL;
    srpc_error_t err;
    int64_t before[4];
    uint64_t t0 = bench_now_ns();

    srpc_channel_open(cl->node[1].addr, &cc, &ch);
    if (srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_DRAIN], &req.base, 10000,
                  (ProtobufCMessage **)&resp, &err) != ST_OK) {
        fprintf(stderr, "drain: %s\n", err.message);
        exit(1);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    srpc_channel_close(ch);
    if (tc_wait_exit(cl, 1, 600000) != 0) {
        fprintf(stderr, "the drained node did not exit 0\n");
        exit(1);
    }
    epochs_of(cl, m_drained, 3, before);
    apply(cl, m_drained, 3);
    return wait_moved(cl, m_drained, 3, before, t0);
}

int main(int argc, char **argv)
{
    const char *stratad = argc > 1 && argv[1][0] != '-' ? argv[1] : "build/release/cached/stratad";
    const bench_opt_t opts[] = {
        {"--sessions", BENCH_OPT_SIZE, &n_sessions},
        {"--kda", BENCH_OPT_SIZE, &n_kda},
        {"--kda-bytes", BENCH_OPT_SIZE, &kda_bytes},
        {"--tokens", BENCH_OPT_SIZE, &n_tokens},
        {"--rate", BENCH_OPT_U64, &rate},
    };
    int m3[] = {0, 1, 2}, m4[] = {0, 1, 2, 3}, m_drained[] = {0, 2, 3}, m_crashed[] = {0, 3};
    char dir[64], args[512], nodes[128], sub[96];
    tc_cluster_t cl;
    lat_t l = {0};
    pthread_t th;
    size_t n_blocks;
    double join_s, drain_s, crash_s, tcp[5], cpu_rr, cpu_tcp;
    int64_t before[4], b0, o0, f0, bytes, objs, failed;
    bench_stats_t steady, join, drain, tcps;

    bench_opts(argc, argv, argc > 1 && argv[1][0] != '-' ? 2 : 1, opts, 5);
    n_blocks = n_tokens / 64;
    snprintf(dir, sizeof(dir), "/tmp/strata-bench-rebal-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        return 1;
    }
    for (int i = 0; i < 4; i++) {
        snprintf(sub, sizeof(sub), "%s/%d", dir, i);
        mkdir(sub, 0700);
    }
    snprintf(args, sizeof(args),
             "--memory-limit 2G --chunk-bytes 64M --max-object 4M --transport none "
             "--ssd-map-size 4G --ssd-sync none --replicas 2 --log-level warn "
             "--rebalance-rate %llu --data-dir %s/{node}",
             (unsigned long long)rate, dir);
    if (tc_start_static(&cl, stratad, 4, 3, dir, args) != 0) {
        return 1;
    }
    snprintf(nodes, sizeof(nodes), "%s,%s,%s", cl.node[0].addr, cl.node[1].addr, cl.node[2].addr);
    l.c = connect_nodes(nodes);
    l.chains = calloc(n_sessions, sizeof(*l.chains));
    for (size_t k = 0; k < n_sessions; k++) {
        l.chains[k] = malloc(sizeof(st_hash_t) * n_blocks);
        for (size_t i = 0; i < n_blocks; i++) {
            XXH128_hash_t h = XXH3_128bits_withSeed(&i, sizeof(i), k + 1);

            memcpy(l.chains[k][i].b, &h, 16);
        }
    }
    l.n_blocks = n_blocks;
    for (int w = 0; w < 3; w++) {
        l.us[w] = malloc(sizeof(double) * MAX_LAT);
    }
    write_load(l.c, l.chains, n_blocks);
    printf("bench_rebalance: %zu sessions of %zu tokens, each a durable session record and %zu "
           "KDA checkpoints of %zu bytes: %zu objects, %.1f MiB per copy, R=2 on 3 daemons\n",
           n_sessions, n_tokens, n_kda, kda_bytes, n_sessions * (n_kda + 1),
           (double)(n_sessions * n_kda * kda_bytes) / (1 << 20));

    atomic_store(&l.window, 0);
    pthread_create(&th, NULL, lat_main, &l);
    sleep(3);

    /* Join a 4th daemon. */
    atomic_store(&l.window, 3);
    if (tc_set_peers(&cl, m4, 4) != 0 || tc_restart(&cl, 3) != 0) {
        return 1;
    }
    epochs_of(&cl, m4, 4, before);
    before[3] = -1; /* started with the new list */
    b0 = sum_stat(&cl, m3, 3, "rebalance_bytes");
    {
        uint64_t t0 = bench_now_ns();

        atomic_store(&l.window, 1);
        apply(&cl, m4, 4);
        join_s = wait_moved(&cl, m4, 4, before, t0);
    }
    printf("  join:  %.3f s, %lld bytes pushed\n", join_s,
           (long long)(sum_stat(&cl, m4, 4, "rebalance_bytes") - b0));
    atomic_store(&l.window, 3);
    sleep(1);

    /* Drain node 1, then the others take the list without it. */
    atomic_store(&l.window, 2);
    drain_s = drain_step(&cl, m_drained);
    printf("  drain: %.3f s (Drain call to the others settled)\n", drain_s);
    atomic_store(&l.window, -1);
    pthread_join(th, NULL);

    /* Crash: kill -9 of node 2; the survivors re-replicate. */
    b0 = sum_stat(&cl, m_crashed, 2, "rebalance_bytes");
    o0 = sum_stat(&cl, m_crashed, 2, "rebalance_objects");
    f0 = sum_stat(&cl, m_crashed, 2, "rebalance_failed");
    epochs_of(&cl, m_crashed, 2, before);
    tc_kill(&cl, 2);
    {
        uint64_t t0 = bench_now_ns();
        double c0 = cpu_of_pid(cl.node[0].pid) + cpu_of_pid(cl.node[3].pid);

        apply(&cl, m_crashed, 2);
        crash_s = wait_moved(&cl, m_crashed, 2, before, t0);
        cpu_rr = cpu_of_pid(cl.node[0].pid) + cpu_of_pid(cl.node[3].pid) - c0;
    }
    bytes = sum_stat(&cl, m_crashed, 2, "rebalance_bytes") - b0;
    objs = sum_stat(&cl, m_crashed, 2, "rebalance_objects") - o0;
    failed = sum_stat(&cl, m_crashed, 2, "rebalance_failed") - f0;
    cpu_tcp = cpu_self();
    for (int r = 0; r < 5; r++) {
        tcp[r] = tcp_copy_s((uint64_t)bytes);
    }
    cpu_tcp = (cpu_self() - cpu_tcp) / 5;
    bench_stats(tcp, 5, &tcps);
    printf("  re-replication after kill -9 of 1 of 3: %lld objects, %.1f MiB in %.3f s = %.1f "
           "MB/s\n",
           (long long)objs, (double)bytes / (1 << 20), crash_s, (double)bytes / crash_s / 1e6);
    printf("  (pushes and checks not acknowledged, retried: %lld)\n", (long long)failed);
    printf("  plain TCP copy of the same bytes over loopback: median %.3f s (min %.3f max %.3f) "
           "= %.1f MB/s\n",
           tcps.median, tcps.min, tcps.max, (double)bytes / tcps.median / 1e6);
    printf("  ratio (re-replication time / TCP copy time): %.1f\n", crash_s / tcps.median);
    printf("  CPU: re-replication %.2f s (both survivors), TCP copy %.2f s (mean of 5); ratio "
           "%.1f\n",
           cpu_rr, cpu_tcp, cpu_tcp > 0 ? cpu_rr / cpu_tcp : 0.0);
    print_lat("steady", &l, 0, &steady);
    print_lat("join", &l, 1, &join);
    print_lat("drain", &l, 2, &drain);
    printf("  lookup p99 ratio join/steady %.2f, drain/steady %.2f; lookup errors %llu\n",
           join.p99 / steady.p99, drain.p99 / steady.p99, (unsigned long long)l.errors);
    st_client_close(l.c);
    tc_stop_all(&cl);
    unlink(cl.peers_file);
    for (int i = 0; i < 4; i++) {
        char cmd[160];

        snprintf(cmd, sizeof(cmd), "rm -rf %s/%d", dir, i);
        if (system(cmd) != 0) {
            break;
        }
    }
    rmdir(dir);
    return 0;
}
