/*
 * bench_client.c - loading a 1M-token prefix from four daemons through
 * libstrata, against the memcpy bandwidth of this machine and against four
 * Redis servers holding the same objects, in the same run; and the lookup of
 * the 1M-token chain across the four nodes.
 *
 * The prefix is 16,384 blocks x 2 DSA layers of one KV object (41,984 B) and
 * one IDX object (8,448 B): 1.65 GB. Each round loads all of it into one
 * client buffer. Redis holds the same objects spread over four servers and is
 * read with pipelined GETs, one connection per server, copying each reply
 * into place. Two memcpy references: the whole prefix in one memcpy (the
 * machine's copy bandwidth, the goal's reference: glibc copies that large
 * with non-temporal stores), and the same bytes copied object by object
 * (41,984 B and 8,448 B copies into their places: what any path that moves
 * the objects one by one can reach on one thread).
 *
 * usage: bench_client STRATAD [--blocks N] [--rounds N]
 *                     [--transport inline|ucx|libfabric[:PROVIDER]]
 *                     [--verify-reads lease|always] [--transport-calls on|off]
 *                     [--copy-threads N] [--lookup-only | --on-off [--control]]
 * (--lookup-only: no load phases and no Redis; the chain is stored with 64-byte
 * objects and looked up 300 times in each form; --transport-calls off keeps
 * Locate, Release and Lookup on gRPC; libfabric:PROVIDER, e.g.
 * 'libfabric:tcp;ofi_rxm', also starts the daemons on that provider)
 *
 * --on-off (issue 16): no Redis; two clusters of four daemons in the same
 * run, each holding the prefix. "off" is the plain setup: no tenants file, no
 * TLS, verify_reads as given (lease). "on" has everything issue 16 adds: a
 * tenants file (tests/support/tenants.c: token hashes in a file, the client
 * presents its token) of two tenants, one over UCX unless `stratad --help`
 * names an --allow-shared... flag (then given), gRPC over TLS (certificates of
 * tests/tools/make_test_certs.sh in a temp dir; daemons with tls_cert,
 * tls_key and tls_ca for their peers, the client with tls_ca). Both have the
 * cluster secret, per-Hello transport keys, row sums at commit and the
 * reader verification the transport asks for (UCX: committed_read_only
 * false, every object hashed while copied; libfabric: read-only keys): these
 * are not switches. Round by round each cluster loads the whole prefix, in
 * alternating order, then one memcpy of it (the hardware's reference); then
 * 300 lookups of each chain, alternating. It prints the load's median,
 * min, max, MAD for on and off, on/off (of the medians, and order-balanced
 * per pair of rounds), and the lookups' p50 and p99. --control starts the
 * second cluster plain too: an A/A run, the bias of the setup itself.
 *
 * Results (docs/performance.md, "Tenancy, TLS and verification on against
 * off"; 2026-12-01, the 2-core VM shared with other builds):
 *   bench_client STRATAD --blocks 16384 --rounds 24 --transport ucx --on-off
 *     five runs at load 1.8-4.7: on/off 0.98-1.19, order-balanced 0.98-1.05
 *     (A/A, --control: 0.90-1.02); lookup p99 on 0.67-1.40 ms, off 0.76-1.28.
 *     Eight 8-12-round runs at load 7-13: on/off 0.89-1.32, median 1.12
 *     (A/A 0.81-0.91: the noise is +-20-30 % there); lookup p99 on 0.38-1.20
 *     ms in six, 4.02 and 4.08 in two (off 2.52 and 2.91 there)
 *   bench_client STRATAD --blocks 16384 --rounds 6 --on-off
 *       --transport 'libfabric:tcp;ofi_rxm'
 *     twelve runs (6 and 12 rounds): on/off 0.66-1.11, median 0.98 (A/A
 *     0.86-1.01; one run at 0.66); lookup p99 on 1.87 and 1.98 ms in the two
 *     quietest runs, 2.34-4.94 in the others (gRPC lookups over TLS), off
 *     1.36-5.75; memcpy 7.8-9.8 GB/s, UCX loads 3.2-6.6, libfabric 0.8-1.4
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bench_util.h"
#include "cluster.h"
#include "peer_redis.h"
#include "tenants.h"
#include "strata/strata.h"

#define KV_BYTES  41984
#define IDX_BYTES 8448
#define LAYERS    2
#define NODES     4
#define PIPE      64

static size_t obj_len(int kind)
{
    return kind == ST_KIND_KV ? KV_BYTES : IDX_BYTES;
}

/* Offset of object (block, kind, layer) in the prefix buffer. */
static size_t obj_off(size_t b, int kind, int layer)
{
    size_t per_block = LAYERS * (KV_BYTES + IDX_BYTES);

    return b * per_block + (size_t)layer * (KV_BYTES + IDX_BYTES) +
           (kind == ST_KIND_KV ? 0 : KV_BYTES);
}

static void redis_key(char *key, size_t len, const st_hash_t *h, int kind, int layer)
{
    snprintf(key, len, "%016" PRIx64 ":%d:%d", XXH3_64bits(h->b, 16), kind, layer);
}

/*
 * Times rounds lookups of the whole chain in each form, alternating which
 * goes first: compact segments as libstrata sends them, and every hash
 * (STRATA_LOOKUP_COMPACT=0). Returns 0, or 1 when a lookup missed a block.
 */
static int lookup_both(st_client_t *c, const st_hash_t *chain, size_t n_blocks, size_t rounds,
                       bench_stats_t *s_compact, bench_stats_t *s_full)
{
    double *t[2] = {calloc(rounds, sizeof(double)), calloc(rounds, sizeof(double))};

    if (t[0] == NULL || t[1] == NULL) {
        free(t[0]), free(t[1]);
        return 1;
    }
    for (size_t r = 0; r < rounds; r++) {
        for (int pass = 0; pass < 2; pass++) {
            int full = (int)((r + (size_t)pass) % 2);
            st_lookup_result_t lr;
            uint64_t t0;

            setenv("STRATA_LOOKUP_COMPACT", full ? "0" : "1", 1);
            t0 = bench_now_ns();
            st_client_lookup(c, chain, n_blocks, LAYERS, &lr);
            t[full][r] = (double)(bench_now_ns() - t0) / 1e6;
            if (lr.matched_blocks != n_blocks) {
                fprintf(stderr, "bench_client: lookup matched %" PRIu64 "\n", lr.matched_blocks);
                free(t[0]), free(t[1]);
                return 1;
            }
        }
    }
    unsetenv("STRATA_LOOKUP_COMPACT");
    bench_stats(t[0], rounds, s_compact);
    bench_stats(t[1], rounds, s_full);
    free(t[0]), free(t[1]);
    return 0;
}

static void lookup_print(const bench_stats_t *s_lk, const bench_stats_t *s_lkf)
{
    printf("%-34s %10.3f %10.3f %10.3f ms (p99 %.3f)\n", "lookup of the chain, 4 nodes",
           s_lk->median, s_lk->min, s_lk->mad, s_lk->p99);
    printf("%-34s %10.3f %10.3f %10.3f ms (p99 %.3f)\n", "  the same, every hash sent",
           s_lkf->median, s_lkf->min, s_lkf->mad, s_lkf->p99);
}

/* --lookup-only: the chain with one 64-byte KV and IDX object per block and
 * layer (the index is what a lookup reads), then 300 lookups in each form. */
static int lookup_only(st_client_t *c, size_t n_blocks)
{
    uint32_t *tok = malloc(sizeof(uint32_t) * n_blocks * 64);
    st_hash_t *chain = malloc(sizeof(st_hash_t) * n_blocks);
    st_put_op_t *puts = calloc(n_blocks * LAYERS * 2, sizeof(*puts));
    static uint8_t obj[64];
    bench_stats_t s_lk, s_lkf;
    st_handle_t *h;
    size_t nb, k = 0;
    int rc;

    if (!tok || !chain || !puts) {
        return 1;
    }
    for (size_t i = 0; i < n_blocks * 64; i++) {
        tok[i] = (uint32_t)(XXH3_64bits(&i, sizeof(i)) % 150000);
    }
    st_client_hash(c, tok, n_blocks * 64, NULL, 0, chain, n_blocks, &nb);
    for (size_t b = 0; b < n_blocks; b++) {
        for (int l = 0; l < LAYERS; l++) {
            for (int kind = ST_KIND_KV; kind <= ST_KIND_IDX; kind++) {
                puts[k++] = (st_put_op_t){b, (uint8_t)kind, (uint16_t)l, obj, sizeof(obj), 0, 0};
            }
        }
    }
    st_client_put(c, chain, n_blocks, puts, k, 0, &h);
    st_handle_wait(h, -1);
    st_handle_release(h);
    rc = lookup_both(c, chain, n_blocks, 300, &s_lk, &s_lkf);
    if (rc == 0) {
        printf("bench_client --lookup-only: %zu blocks x %d layers from %d daemons, 300 rounds\n",
               n_blocks, LAYERS, NODES);
        printf("%-34s %10s %10s %10s\n", "", "median", "min", "MAD");
        lookup_print(&s_lk, &s_lkf);
        printf("lookup p99 %.2f ms (goal < 2)\n", s_lk.p99);
    }
    free(tok), free(chain), free(puts);
    return rc;
}

/* One thread's part of the threaded memcpy reference. */
typedef struct mc_part {
    pthread_t th;
    uint8_t *dst;
    const uint8_t *src;
    size_t len;
} mc_part_t;

static void *mc_part_run(void *arg)
{
    mc_part_t *m = arg;

    memcpy(m->dst, m->src, m->len);
    return NULL;
}

/* memcpy of [0, total) cut into n equal parts, one per thread (this one too). */
static void memcpy_threads(uint8_t *dst, const uint8_t *src, size_t total, size_t n)
{
    mc_part_t part[16];
    size_t per = (total / n) & ~(size_t)4095;

    for (size_t t = 0; t < n; t++) {
        part[t].dst = dst + t * per;
        part[t].src = src + t * per;
        part[t].len = t + 1 == n ? total - t * per : per;
    }
    for (size_t t = 1; t < n; t++) {
        if (pthread_create(&part[t].th, NULL, mc_part_run, &part[t]) != 0) {
            mc_part_run(&part[t]);
            part[t].len = 0; /* done here: nothing to join */
        }
    }
    mc_part_run(&part[0]);
    for (size_t t = 1; t < n; t++) {
        if (part[t].len != 0) {
            pthread_join(part[t].th, NULL);
        }
    }
}

/* The gets of the whole prefix, each into its place in dst. */
static void prefix_gets(st_get_op_t *gets, size_t n_blocks, uint8_t *dst)
{
    size_t k = 0;

    for (size_t b = 0; b < n_blocks; b++) {
        for (int l = 0; l < LAYERS; l++) {
            for (int kind = ST_KIND_KV; kind <= ST_KIND_IDX; kind++) {
                gets[k++] = (st_get_op_t){b,
                                          (uint8_t)kind,
                                          (uint16_t)l,
                                          dst + obj_off(b, kind, l),
                                          obj_len(kind),
                                          0,
                                          NULL,
                                          0,
                                          0,
                                          0};
            }
        }
    }
}

/* Stores the prefix src under chain through c, one put of every object.
 * Returns 0, or 1 with the failed put on stderr. */
static int prefix_put(st_client_t *c, const st_hash_t *chain, size_t n_blocks, const uint8_t *src)
{
    size_t n_ops = n_blocks * LAYERS * 2, k = 0;
    st_put_op_t *puts = calloc(n_ops, sizeof(*puts));
    st_handle_t *h;
    int ret = 0;

    if (puts == NULL) {
        return 1;
    }
    for (size_t b = 0; b < n_blocks; b++) {
        for (int l = 0; l < LAYERS; l++) {
            for (int kind = ST_KIND_KV; kind <= ST_KIND_IDX; kind++) {
                puts[k++] = (st_put_op_t){
                    b, (uint8_t)kind, (uint16_t)l, src + obj_off(b, kind, l), obj_len(kind), 0, 0};
            }
        }
    }
    st_client_put(c, chain, n_blocks, puts, n_ops, 0, &h);
    st_handle_wait(h, -1);
    st_handle_release(h);
    for (size_t i = 0; i < n_ops && ret == 0; i++) {
        if (puts[i].status != ST_OK) {
            fprintf(stderr, "bench_client: put %zu: %s\n", i, st_strerror(puts[i].status));
            ret = 1;
        }
    }
    free(puts);
    return ret;
}

/* Loads the whole prefix into dst (zeroed first) through c with one get of
 * every object, and checks it against src. *gbps: GB/s of the get. Returns
 * 0, or 1 (a failed get, wrong bytes). */
static int prefix_load(st_client_t *c, const st_hash_t *chain, size_t n_blocks, st_get_op_t *gets,
                       uint8_t *dst, const uint8_t *src, double *gbps)
{
    size_t total = n_blocks * LAYERS * (KV_BYTES + IDX_BYTES), n_ops = n_blocks * LAYERS * 2;
    st_handle_t *h;
    uint64_t t0;

    memset(dst, 0, total);
    prefix_gets(gets, n_blocks, dst);
    t0 = bench_now_ns();
    st_client_get(c, chain, n_blocks, gets, n_ops, &h);
    st_handle_wait(h, -1);
    st_handle_release(h);
    *gbps = (double)total / (double)(bench_now_ns() - t0);
    for (size_t i = 0; i < n_ops; i++) {
        if (gets[i].status != ST_OK) {
            fprintf(stderr, "bench_client: get %zu: %s\n", i, st_strerror(gets[i].status));
            return 1;
        }
    }
    if (memcmp(dst, src, total) != 0) {
        fprintf(stderr, "bench_client: strata returned wrong bytes\n");
        return 1;
    }
    return 0;
}

/* Stores the prefix in the four Redis servers, pipelined SETs. */
static int redis_store(redisContext **rc, const st_hash_t *chain, size_t n_blocks,
                       const uint8_t *src)
{
    size_t pending[NODES] = {0};

    for (size_t b = 0; b < n_blocks; b++) {
        for (int l = 0; l < LAYERS; l++) {
            for (int kind = ST_KIND_KV; kind <= ST_KIND_IDX; kind++) {
                char key[64];

                redis_key(key, sizeof(key), &chain[b], kind, l);
                redisAppendCommand(rc[b % NODES], "SET %s %b", key, src + obj_off(b, kind, l),
                                   obj_len(kind));
                pending[b % NODES]++;
            }
        }
        if ((b + 1) % PIPE == 0 || b + 1 == n_blocks) {
            for (int i = 0; i < NODES; i++) {
                for (; pending[i] > 0; pending[i]--) {
                    redisReply *rep = NULL;

                    if (redisGetReply(rc[i], (void **)&rep) != REDIS_OK) {
                        fprintf(stderr, "bench_client: redis SET failed\n");
                        return 1;
                    }
                    freeReplyObject(rep);
                }
            }
        }
    }
    return 0;
}

/* Loads the prefix from Redis (one connection per server, pipelined GETs,
 * each reply copied into place) and checks it. */
static int redis_load(redisContext **rc, const st_hash_t *chain, size_t n_blocks, uint8_t *dst,
                      const uint8_t *src, double *gbps)
{
    size_t total = n_blocks * LAYERS * (KV_BYTES + IDX_BYTES);
    uint64_t t0;

    memset(dst, 0, total);
    t0 = bench_now_ns();
    for (size_t b0 = 0; b0 < n_blocks; b0 += PIPE * NODES) {
        size_t b1 = b0 + PIPE * NODES < n_blocks ? b0 + PIPE * NODES : n_blocks;

        for (size_t b = b0; b < b1; b++) {
            for (int l = 0; l < LAYERS; l++) {
                for (int kind = ST_KIND_KV; kind <= ST_KIND_IDX; kind++) {
                    char key[64];

                    redis_key(key, sizeof(key), &chain[b], kind, l);
                    redisAppendCommand(rc[b % NODES], "GET %s", key);
                }
            }
        }
        for (size_t b = b0; b < b1; b++) {
            for (int l = 0; l < LAYERS; l++) {
                for (int kind = ST_KIND_KV; kind <= ST_KIND_IDX; kind++) {
                    redisReply *rep;

                    if (redisGetReply(rc[b % NODES], (void **)&rep) != REDIS_OK || rep == NULL ||
                        (size_t)rep->len != obj_len(kind)) {
                        fprintf(stderr, "bench_client: redis GET failed\n");
                        return 1;
                    }
                    memcpy(dst + obj_off(b, kind, l), rep->str, obj_len(kind));
                    freeReplyObject(rep);
                }
            }
        }
    }
    *gbps = (double)total / (double)(bench_now_ns() - t0);
    if (memcmp(dst, src, total) != 0) {
        fprintf(stderr, "bench_client: redis returned wrong bytes\n");
        return 1;
    }
    return 0;
}

/* Fills src with the prefix's bytes and tok with the token ids it hashes from. */
static void prefix_fill(uint8_t *src, size_t total, uint32_t *tok, size_t n_tok)
{
    for (size_t i = 0; i < n_tok; i++) {
        tok[i] = (uint32_t)(XXH3_64bits(&i, sizeof(i)) % 150000);
    }
    for (size_t i = 0; i < total; i += 8) {
        uint64_t x = XXH3_64bits(&i, sizeof(i));

        memcpy(src + i, &x, total - i < 8 ? total - i : 8);
    }
}

/* What every mode takes from the command line. */
typedef struct bc_opts {
    const char *stratad;
    const char *transport; /* the client's: inline, ucx, libfabric[:provider] */
    const char *verify;
    const char *tcalls;
    size_t copy_threads;
} bc_opts_t;

/*
 * One cluster of four daemons and its client. The plain setup (certs NULL):
 * no tenants file, no TLS. Everything issue 16 adds (certs, the directory
 * of make_test_certs.sh): a tenants file of n_tenants (the client is the
 * first), gRPC over TLS (daemons with tls_cert, tls_key and tls_ca for their
 * peers; the client with tls_ca), the client's token. Both have the cluster
 * secret (tc_start gives it), per-Hello transport keys (every Hello), row
 * sums (every commit) and the reader verification the transport asks for
 * (Hello's committed_read_only). extra_flag: more daemon flags, or "".
 */
typedef struct bc_side {
    const char *name;
    tc_cluster_t cl;
    tt_set_t tt;
    st_client_t *c;
    st_hash_t *chain;
    double *gbps; /* per round */
    double *lk;   /* lookup samples, ms */
} bc_side_t;

static int side_start(bc_side_t *s, const bc_opts_t *o, const char *certs, size_t n_tenants,
                      const char *extra_flag)
{
    static const char *const names[] = {"acme", "blue"};
    static const char *const tokens[] = {"bench-token-acme-5c1e0f7a", "bench-token-blue-93d2b8e4"};
    char args[1024], ca[300];
    const char *fab = strncmp(o->transport, "libfabric:", 10) == 0 ? o->transport + 10 : NULL;
    st_client_params_t p = {0};
    int n = 0;

    n += snprintf(args + n, sizeof(args) - (size_t)n, "--memory-limit 1G --max-message 64M");
    if (fab != NULL) {
        n += snprintf(args + n, sizeof(args) - (size_t)n,
                      " --transport libfabric --fabric-provider %s", fab);
    }
    if (certs != NULL) {
        if (tt_prepare(&s->tt, o->stratad, names, tokens, n_tenants, "m") != 0) {
            return 1;
        }
        n += snprintf(args + n, sizeof(args) - (size_t)n,
                      " --tls-cert %s/server.pem --tls-key %s/server.key --tls-ca %s/ca.pem %s %s",
                      certs, certs, certs, s->tt.flags, extra_flag);
        snprintf(ca, sizeof(ca), "%s/ca.pem", certs);
    }
    if (tc_start(&s->cl, o->stratad, NODES, args) != 0) {
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_TIMEOUT |
                   ST_CLIENT_FIELD_VERIFY_READS | ST_CLIENT_FIELD_TRANSPORT_CALLS |
                   ST_CLIENT_FIELD_COPY_THREADS;
    p.copy_threads = (uint32_t)o->copy_threads;
    p.verify_reads = o->verify;
    p.transport_calls = strcmp(o->tcalls, "off") != 0;
    p.nodes = s->cl.peers;
    p.transport = o->transport;
    p.timeout_ms = 60000;
    if (certs != NULL) {
        p.field_mask |= ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL | ST_CLIENT_FIELD_TOKEN |
                        ST_CLIENT_FIELD_TLS_CA;
        p.tenant = s->tt.t[0].name;
        p.model = "m";
        p.token = s->tt.t[0].token;
        p.tls_ca = ca;
    }
    if (st_client_connect(&p, &s->c) != ST_OK) {
        fprintf(stderr, "bench_client: %s: %s\n", s->name, st_client_last_error());
        tc_stop_all(&s->cl);
        return 1;
    }
    return 0;
}

static void side_stop(bc_side_t *s)
{
    if (s->c != NULL) {
        st_client_close(s->c);
        tc_stop_all(&s->cl);
        s->c = NULL;
    }
    tt_cleanup(&s->tt);
    free(s->chain), free(s->gbps), free(s->lk);
}

/* The flag of `stratad --help` that lets several tenants share a data plane
 * that enforces no keys (UCX), copied into flag ("" when there is none). */
static void shared_dataplane_flag(const char *stratad, char *flag, size_t len)
{
    char cmd[600], line[512];
    FILE *f;

    flag[0] = '\0';
    snprintf(cmd, sizeof(cmd), "'%s' --help 2>&1", stratad);
    f = popen(cmd, "r");
    if (f == NULL) {
        return;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *d = strstr(line, "--allow-shared");

        if (d != NULL && flag[0] == '\0') {
            size_t n = strcspn(d, " \t\n=,`|");

            snprintf(flag, len, "%.*s", (int)n, d);
        }
    }
    pclose(f);
}

/* CPU time (user + system) the daemons of cl have used, in ms, from /proc. */
static double cluster_cpu_ms(const tc_cluster_t *cl)
{
    double ms = 0;

    for (int i = 0; i < cl->n; i++) {
        char path[64], buf[1024], *p;
        unsigned long long ut = 0, st = 0;
        FILE *f;
        size_t n;

        snprintf(path, sizeof(path), "/proc/%d/stat", (int)cl->node[i].pid);
        f = fopen(path, "r");
        if (f == NULL) {
            continue;
        }
        n = fread(buf, 1, sizeof(buf) - 1, f);
        fclose(f);
        buf[n] = '\0';
        p = strrchr(buf, ')'); /* fields after the command name: state is the 3rd */
        if (p != NULL &&
            sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) == 2) {
            ms += (double)(ut + st) * 1000.0 / (double)sysconf(_SC_CLK_TCK);
        }
    }
    return ms;
}

/* One --on-off run: the two clusters, the prefix, the timings. */
typedef struct oo_run {
    const bc_opts_t *o;
    size_t n_blocks, rounds, lk_rounds, total, n_tok, n_tenants;
    int control, is_ucx;
    bc_side_t side[2];
    double *t_mc, *ratio;
    uint32_t *tok;
    uint8_t *src, *dst;
    st_get_op_t *gets;
    double cpu[2][3]; /* the daemons' CPU ms: before the loads, after them, after the lookups */
    char flag[64];
} oo_run_t;

/* Makes the certificates into certs (a mkdtemp template); *made once the
 * directory exists. Returns 0 or 1. */
static int oo_certs(char *certs, int *made)
{
    char cmd[512];

    if (mkdtemp(certs) == NULL) {
        fprintf(stderr, "bench_client: cannot make %s: %s\n", certs, strerror(errno));
        return 1;
    }
    *made = 1;
    snprintf(cmd, sizeof(cmd), "bash '%s' '%s' >/dev/null", BENCH_CERTS_SCRIPT, certs);
    if (system(cmd) != 0) {
        fprintf(stderr, "bench_client: %s failed (openssl missing?)\n", BENCH_CERTS_SCRIPT);
        return 1;
    }
    return 0;
}

/* Each side's chain, buffers and registration; the prefix put into both. */
static int oo_fill(oo_run_t *u)
{
    size_t nb;

    prefix_fill(u->src, u->total, u->tok, u->n_tok);
    for (int i = 0; i < 2; i++) {
        bc_side_t *s = &u->side[i];

        s->chain = malloc(sizeof(st_hash_t) * u->n_blocks);
        s->gbps = calloc(u->rounds, sizeof(double));
        s->lk = calloc(u->lk_rounds, sizeof(double));
        if (!s->chain || !s->gbps || !s->lk) {
            return 1;
        }
        /* The chains differ: the namespace seed is the tenant's. */
        st_client_hash(s->c, u->tok, u->n_tok, NULL, 0, s->chain, u->n_blocks, &nb);
        if (st_client_register(s->c, u->dst, u->total) != ST_OK) {
            fprintf(stderr, "bench_client: %s: cannot register the buffer: %s\n", s->name,
                    st_client_last_error());
            return 1;
        }
        if (prefix_put(s->c, s->chain, u->n_blocks, u->src) != 0) {
            return 1;
        }
    }
    return 0;
}

/* Round by round both sides load the prefix, alternating, then one
 * memcpy; then the lookups, alternating too; the daemons' CPU around each. */
static int oo_measure(oo_run_t *u)
{
    for (int i = 0; i < 2; i++) {
        u->cpu[i][0] = cluster_cpu_ms(&u->side[i].cl);
    }
    for (size_t r = 0; r < u->rounds; r++) {
        uint64_t t0;

        for (int pass = 0; pass < 2; pass++) {
            bc_side_t *s = &u->side[(r + (size_t)pass + 1) % 2]; /* even rounds: on first */

            if (prefix_load(s->c, s->chain, u->n_blocks, u->gets, u->dst, u->src, &s->gbps[r]) !=
                0) {
                return 1;
            }
        }
        t0 = bench_now_ns();
        memcpy(u->dst, u->src, u->total);
        u->t_mc[r] = (double)u->total / (double)(bench_now_ns() - t0);
    }
    for (int i = 0; i < 2; i++) {
        u->cpu[i][1] = cluster_cpu_ms(&u->side[i].cl);
    }
    for (size_t r = 0; r < u->lk_rounds; r++) {
        for (int pass = 0; pass < 2; pass++) {
            bc_side_t *s = &u->side[(r + (size_t)pass + 1) % 2];
            st_lookup_result_t lr;
            uint64_t t0 = bench_now_ns();

            st_client_lookup(s->c, s->chain, u->n_blocks, LAYERS, &lr);
            s->lk[r] = (double)(bench_now_ns() - t0) / 1e6;
            if (lr.matched_blocks != u->n_blocks) {
                fprintf(stderr, "bench_client: %s: lookup matched %" PRIu64 "\n", s->name,
                        lr.matched_blocks);
                return 1;
            }
        }
    }
    for (int i = 0; i < 2; i++) {
        u->cpu[i][2] = cluster_cpu_ms(&u->side[i].cl);
    }
    return 0;
}

/* Prints every round, the statistics and the ratios of a measured run. */
static void oo_print(oo_run_t *u)
{
    const bc_opts_t *o = u->o;
    bc_side_t *side = u->side;
    bench_stats_t s_gb[2], s_lk[2], s_mc, s_ratio;
    size_t rounds = u->rounds,
           n_ratio = bench_balanced(side[1].gbps, side[0].gbps, rounds, u->ratio);

    for (int i = 1; i >= 0; i--) { /* every round, in order, to pool runs */
        printf("rounds %-4s GB/s:", side[i].name);
        for (size_t r = 0; r < rounds; r++) {
            printf(" %.2f", side[i].gbps[r]);
        }
        printf("\n");
    }
    for (int i = 0; i < 2; i++) {
        st_client_deregister(side[i].c, u->dst);
        bench_stats(side[i].gbps, rounds, &s_gb[i]);
        bench_stats(side[i].lk, u->lk_rounds, &s_lk[i]);
    }
    bench_stats(u->t_mc, rounds, &s_mc);
    printf("bench_client --on-off: %zu blocks x %d layers (%.2f GB) from %d daemons, transport "
           "%s, verify_reads %s, %zu rounds, on and off alternating\n",
           u->n_blocks, LAYERS, (double)u->total / 1e9, NODES, o->transport, o->verify, rounds);
    if (u->control) {
        printf("--control: both clusters plain (what tells the two clusters' placement apart)\n");
    } else {
        printf("on: tenants file of %zu tenant(s)%s%s, TLS (gRPC), token; off: none of them\n",
               u->n_tenants, u->flag[0] != '\0' && u->is_ucx ? ", " : "", u->is_ucx ? u->flag : "");
    }
    printf("%-34s %10s %10s %10s %10s\n", "", "median", "min", "max", "MAD");
    for (int i = 1; i >= 0; i--) {
        char label[64];

        snprintf(label, sizeof(label), "strata load, %s", side[i].name);
        printf("%-34s %10.2f %10.2f %10.2f %10.2f GB/s\n", label, s_gb[i].median, s_gb[i].min,
               s_gb[i].max, s_gb[i].mad);
    }
    printf("%-34s %10.2f %10.2f %10.2f %10.2f GB/s\n", "memcpy of the same bytes", s_mc.median,
           s_mc.min, s_mc.max, s_mc.mad);
    for (int i = 1; i >= 0; i--) {
        printf("lookup of the chain, %-3s           p50 %.3f ms  p99 %.3f ms  (min %.3f, max "
               "%.3f)\n",
               side[i].name, s_lk[i].median, s_lk[i].p99, s_lk[i].min, s_lk[i].max);
    }
    printf("ratios: on/off %.3f of the medians (goal >= 0.95)", s_gb[1].median / s_gb[0].median);
    if (n_ratio > 0) {
        bench_stats(u->ratio, n_ratio, &s_ratio);
        printf("; per pair of rounds, order-balanced: median %.3f, min %.3f, max %.3f",
               s_ratio.median, s_ratio.min, s_ratio.max);
    }
    printf("\n        on/memcpy %.3f, off/memcpy %.3f; lookup p99 on %.2f ms, off %.2f ms (goal "
           "< 2)\n",
           s_gb[1].median / s_mc.median, s_gb[0].median / s_mc.median, s_lk[1].p99, s_lk[0].p99);
    for (int i = 1; i >= 0; i--) { /* each cluster's daemons serve its client alone */
        printf("daemons' CPU, %-4s: %.1f ms per load of the prefix, %.1f us per lookup (4 "
               "daemons)\n",
               side[i].name, (u->cpu[i][1] - u->cpu[i][0]) / (double)rounds,
               (u->cpu[i][2] - u->cpu[i][1]) * 1000.0 / (double)u->lk_rounds);
    }
}

/*
 * --on-off: the plain setup and everything on, two clusters in one run.
 * Round by round each loads the whole prefix, in alternating order (even
 * rounds "on" first), then the whole prefix in one memcpy, the hardware's
 * reference; then 300 lookups of each cluster's chain, alternating too.
 */
static int on_off(const bc_opts_t *o, size_t n_blocks, size_t rounds, int control)
{
    oo_run_t u = {.o = o,
                  .n_blocks = n_blocks,
                  .rounds = rounds,
                  .lk_rounds = 300,
                  .n_tenants = 2,
                  .control = control,
                  .side = {{.name = "off"}, {.name = control ? "off2" : "on"}}};
    char certs[] = "/tmp/strata-bench-certs-XXXXXX", cmd[512];
    int ret = 1, certs_made = 0;

    u.total = n_blocks * LAYERS * (KV_BYTES + IDX_BYTES);
    u.n_tok = n_blocks * 64;
    u.is_ucx = strcmp(o->transport, "ucx") == 0;
    u.t_mc = calloc(rounds, sizeof(double));
    u.ratio = calloc(rounds, sizeof(double));
    u.tok = malloc(sizeof(uint32_t) * u.n_tok);
    u.src = malloc(u.total);
    u.dst = malloc(u.total);
    u.gets = calloc(n_blocks * LAYERS * 2, sizeof(*u.gets));
    if (!u.t_mc || !u.ratio || !u.tok || !u.src || !u.dst || !u.gets) {
        fprintf(stderr, "bench_client: out of memory for %zu bytes\n", 2 * u.total);
        goto out;
    }
    if (oo_certs(certs, &certs_made) != 0) {
        goto out;
    }
    shared_dataplane_flag(o->stratad, u.flag, sizeof(u.flag));
    if (u.is_ucx && u.flag[0] == '\0') {
        u.n_tenants = 1; /* no flag: stratad may refuse tenants sharing UCX */
    }
    if (side_start(&u.side[0], o, NULL, 0, "") != 0 ||
        side_start(&u.side[1], o, control ? NULL : certs, u.n_tenants, u.is_ucx ? u.flag : "") !=
            0) {
        goto out;
    }
    if (oo_fill(&u) != 0 || oo_measure(&u) != 0) {
        goto out;
    }
    oo_print(&u);
    ret = 0;
out:
    side_stop(&u.side[1]);
    side_stop(&u.side[0]);
    if (certs_made) {
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", certs);
        if (system(cmd) != 0) {
            fprintf(stderr, "bench_client: could not remove %s\n", certs);
        }
    }
    free(u.t_mc), free(u.ratio), free(u.tok), free(u.src), free(u.dst), free(u.gets);
    return ret;
}

/* The whole prefix in one memcpy, object by object, and on n threads. */
static int memcpy_refs(uint8_t *dst, const uint8_t *src, size_t n_blocks, size_t threads,
                       double *mc, double *mo, double *mt)
{
    size_t total = n_blocks * LAYERS * (KV_BYTES + IDX_BYTES);
    uint64_t t0 = bench_now_ns();

    memcpy(dst, src, total);
    *mc = (double)total / (double)(bench_now_ns() - t0);
    memset(dst, 0, total);
    t0 = bench_now_ns();
    for (size_t b = 0; b < n_blocks; b++) {
        for (int l = 0; l < LAYERS; l++) {
            for (int kind = ST_KIND_KV; kind <= ST_KIND_IDX; kind++) {
                size_t off = obj_off(b, kind, l);

                memcpy(dst + off, src + off, obj_len(kind));
            }
        }
    }
    *mo = (double)total / (double)(bench_now_ns() - t0);
    memset(dst, 0, total);
    t0 = bench_now_ns();
    memcpy_threads(dst, src, total, threads);
    *mt = (double)total / (double)(bench_now_ns() - t0);
    if (memcmp(dst, src, total) != 0) {
        fprintf(stderr, "bench_client: the per-object copy went wrong\n");
        return 1;
    }
    return 0;
}

/* The modes the flags choose. */
typedef struct bc_modes {
    int lookup_only, on_off, control;
} bc_modes_t;

/* Reads the flags after STRATAD; returns 0, or 2 after the reason. */
static int bc_args(int argc, char **argv, bc_opts_t *o, size_t *n_blocks, size_t *rounds,
                   bc_modes_t *md)
{
    o->stratad = argv[1];
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--lookup-only") == 0 || strcmp(argv[i], "--on-off") == 0 ||
            strcmp(argv[i], "--control") == 0) {
            *(argv[i][2] == 'l'   ? &md->lookup_only
              : argv[i][2] == 'o' ? &md->on_off
                                  : &md->control) = 1;
            i--; /* a flag without a value */
        } else if (i + 1 == argc) {
            break;
        } else if (strcmp(argv[i], "--blocks") == 0) {
            *n_blocks = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--rounds") == 0) {
            *rounds = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--transport") == 0) {
            o->transport = argv[i + 1];
        } else if (strcmp(argv[i], "--verify-reads") == 0) {
            o->verify = argv[i + 1];
        } else if (strcmp(argv[i], "--transport-calls") == 0) {
            o->tcalls = argv[i + 1];
        } else if (strcmp(argv[i], "--copy-threads") == 0) {
            o->copy_threads = strtoul(argv[i + 1], NULL, 10);
        }
        i++;
    }
    if (*n_blocks == 0 || *rounds == 0) {
        fprintf(stderr, "bench_client: blocks and rounds must be positive\n");
        return 2;
    }
    if (o->copy_threads < 1 || o->copy_threads > 16) {
        fprintf(stderr, "bench_client: --copy-threads must be 1 to 16\n");
        return 2;
    }
    return 0;
}

/* The plain run: the prefix from the daemons of sd against four Redis
 * servers and memcpy, then the lookups. Returns 0 or 1. */
static int plain_run(bc_side_t *sd, const bc_opts_t *o, size_t n_blocks, size_t rounds)
{
    bench_redis_t rd[NODES];
    redisContext *rc[NODES];
    st_hash_t *chain;
    uint32_t *tok;
    uint8_t *src, *dst;
    size_t total = n_blocks * LAYERS * (KV_BYTES + IDX_BYTES), n_ops = n_blocks * LAYERS * 2, nb;
    st_get_op_t *gets;
    double *t_st, *t_rd, *t_mc, *t_mo, *t_mt;
    bench_stats_t s_st, s_rd, s_mc, s_mo, s_mt, s_lk, s_lkf;

    for (int i = 0; i < NODES; i++) {
        if (bench_redis_start(&rd[i], 0) != 0 || (rc[i] = bench_redis_connect(&rd[i])) == NULL) {
            fprintf(stderr, "bench_client: no Redis peer (install redis-server)\n");
            side_stop(sd);
            return 1;
        }
    }
    tok = malloc(sizeof(uint32_t) * n_blocks * 64);
    chain = malloc(sizeof(st_hash_t) * n_blocks);
    src = malloc(total);
    dst = malloc(total);
    gets = calloc(n_ops, sizeof(*gets));
    t_st = calloc(rounds, sizeof(double));
    t_rd = calloc(rounds, sizeof(double));
    t_mc = calloc(rounds, sizeof(double));
    t_mo = calloc(rounds, sizeof(double));
    t_mt = calloc(rounds, sizeof(double));
    if (!tok || !chain || !src || !dst || !gets || !t_st || !t_rd || !t_mc || !t_mo || !t_mt) {
        fprintf(stderr, "bench_client: out of memory for %zu bytes\n", 2 * total);
        return 1;
    }
    prefix_fill(src, total, tok, n_blocks * 64);
    st_client_hash(sd->c, tok, n_blocks * 64, NULL, 0, chain, n_blocks, &nb);
    /* An engine registers its KV pool once; so does the benchmark. */
    if (st_client_register(sd->c, dst, total) != ST_OK) {
        fprintf(stderr, "bench_client: cannot register the buffer: %s\n", st_client_last_error());
        return 1;
    }
    /* Store the prefix in both. */
    if (redis_store(rc, chain, n_blocks, src) != 0 ||
        prefix_put(sd->c, chain, n_blocks, src) != 0) {
        return 1;
    }
    for (size_t r = 0; r < rounds; r++) {
        if (prefix_load(sd->c, chain, n_blocks, gets, dst, src, &t_st[r]) != 0 ||
            redis_load(rc, chain, n_blocks, dst, src, &t_rd[r]) != 0 ||
            memcpy_refs(dst, src, n_blocks, o->copy_threads, &t_mc[r], &t_mo[r], &t_mt[r]) != 0) {
            return 1;
        }
    }
    if (lookup_both(sd->c, chain, n_blocks, 100, &s_lk, &s_lkf) != 0) {
        return 1;
    }
    bench_stats(t_st, rounds, &s_st);
    bench_stats(t_rd, rounds, &s_rd);
    bench_stats(t_mc, rounds, &s_mc);
    bench_stats(t_mo, rounds, &s_mo);
    bench_stats(t_mt, rounds, &s_mt);
    printf("bench_client: %zu blocks x %d layers (%.2f GB) from %d daemons, transport %s, "
           "verify_reads %s, %zu rounds\n",
           n_blocks, LAYERS, (double)total / 1e9, NODES, o->transport, o->verify, rounds);
    printf("%-34s %10s %10s %10s\n", "", "median", "min", "MAD");
    printf("%-34s %10.2f %10.2f %10.2f GB/s\n", "strata load (libstrata get)", s_st.median,
           s_st.min, s_st.mad);
    printf("%-34s %10.2f %10.2f %10.2f GB/s\n", "4 x redis GET (hiredis, pipelined)", s_rd.median,
           s_rd.min, s_rd.mad);
    printf("%-34s %10.2f %10.2f %10.2f GB/s\n", "memcpy of the same bytes", s_mc.median, s_mc.min,
           s_mc.mad);
    printf("%-34s %10.2f %10.2f %10.2f GB/s\n", "memcpy object by object", s_mo.median, s_mo.min,
           s_mo.mad);
    printf("memcpy on %zu threads (copy_threads) %10.2f %10.2f %10.2f GB/s\n", o->copy_threads,
           s_mt.median, s_mt.min, s_mt.mad);
    lookup_print(&s_lk, &s_lkf);
    printf("ratios: strata/memcpy %.3f (goal >= 0.7), strata/redis %.2fx; lookup p99 %.2f ms "
           "(goal < 2)\n",
           s_st.median / s_mc.median, s_st.median / s_rd.median, s_lk.p99);
    printf("        strata/per-object memcpy %.3f; per-object/whole memcpy %.3f; strata/memcpy on "
           "%zu threads %.3f\n",
           s_st.median / s_mo.median, s_mo.median / s_mc.median, o->copy_threads,
           s_st.median / s_mt.median);
    st_client_deregister(sd->c, dst);
    for (int i = 0; i < NODES; i++) {
        redisFree(rc[i]);
        bench_redis_stop(&rd[i]);
    }
    side_stop(sd);
    free(tok), free(chain), free(src), free(dst), free(gets);
    free(t_st), free(t_rd), free(t_mc), free(t_mo), free(t_mt);
    return 0;
}

int main(int argc, char **argv)
{
    size_t n_blocks = 16384, rounds = 3;
    bc_opts_t o = {NULL, "inline", "lease", "on", 2};
    bc_modes_t md = {0};
    bc_side_t sd = {.name = "plain"};
    int rc;

    if (argc < 2) {
        fprintf(stderr, "usage: bench_client STRATAD [--blocks N] [--rounds N] "
                        "[--transport inline|ucx|libfabric[:PROVIDER]]\n"
                        "                    [--verify-reads lease|always] "
                        "[--transport-calls on|off] [--copy-threads N]\n"
                        "                    [--lookup-only | --on-off [--control]]\n"
                        "  --lookup-only: no load phases and no Redis: the chain with small\n"
                        "                 objects, then 300 lookups in each form\n"
                        "  --on-off:      no Redis: a plain cluster and one with a tenants file,\n"
                        "                 TLS and a token, loads alternating round by round\n"
                        "  --control:     with --on-off, both clusters plain (an A/A run)\n");
        return 2;
    }
    rc = bc_args(argc, argv, &o, &n_blocks, &rounds, &md);
    if (rc != 0) {
        return rc;
    }
    if (md.on_off) {
        return on_off(&o, n_blocks, rounds, md.control);
    }
    if (side_start(&sd, &o, NULL, 0, "") != 0) {
        return 1;
    }
    if (md.lookup_only) {
        int ret = lookup_only(sd.c, n_blocks);

        side_stop(&sd);
        return ret;
    }
    return plain_run(&sd, &o, n_blocks, rounds);
}
