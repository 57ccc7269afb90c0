/*
 * bench_daemon.c - one stratad against one Redis, in the same run:
 *
 *   lookup  a 1M-token chain (16,384 block hashes) through libstrata, against
 *           Redis answering the same question: a pipelined EXISTS of the
 *           16,384 keys; libstrata's lookup is timed as it is (compact
 *           segments) and with every hash sent (STRATA_LOOKUP_COMPACT=0);
 *   put/get 64 KiB objects, one per call, through libstrata's inline path,
 *           against Redis SET and GET of the same bytes.
 *
 * Prints medians, p99 and MAD, and the ratios. Both servers run on loopback
 * on this machine, started by the benchmark.
 *
 * usage: bench_daemon STRATAD [--rounds N] [--objects N] [--lookup-only] [--tls DIR]
 * (--lookup-only: the lookups back to back, no Redis rounds between them and
 * no put/get part; for profiles. --tls DIR: stratad serves TLS with
 * DIR/server.pem and DIR/server.key, libstrata verifies it with DIR/ca.pem, as
 * tests/tools/make_test_certs.sh DIR makes them; Redis stays plaintext)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bench_util.h"
#include "cluster.h"
#include "peer_redis.h"
#include "strata/strata.h"

#define N_BLOCKS  16384
#define OBJ_BYTES (64 * 1024)

static void report(const char *what, double *v, size_t n, const char *unit, bench_stats_t *s)
{
    bench_stats(v, n, s);
    printf("%-40s %10.3f %10.3f %10.3f %s\n", what, s->median, s->p99, s->mad, unit);
}

/* One run: the client and Redis connection, the chain, the objects and
 * the timings (in the unit each part reports). */
typedef struct bd {
    size_t rounds, n_obj;
    int lookup_only;
    const char *tls;
    st_client_t *c;
    redisContext *rc;
    st_hash_t *chain;
    double *t_st, *t_rd, *t_full;
    uint8_t *obj, *back;
    char key[64];
} bd_t;

/* Reads the flags after STRATAD into b; returns 0, or 2 after the usage. */
static int bd_args(bd_t *b, int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: bench_daemon STRATAD [--rounds N] [--objects N] [--lookup-only]\n"
                        "  --lookup-only: lookups back to back, without Redis in between and\n"
                        "                 without the put/get part (for profiles)\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--lookup-only") == 0) {
            b->lookup_only = 1;
            continue;
        }
        if (i + 1 == argc) {
            break;
        }
        if (strcmp(argv[i], "--rounds") == 0) {
            b->rounds = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--objects") == 0) {
            b->n_obj = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--tls") == 0) {
            b->tls = argv[i + 1];
        }
        i++;
    }
    if (b->rounds == 0 || b->n_obj == 0) {
        fprintf(stderr, "bench_daemon: rounds and objects must be positive\n");
        return 2;
    }
    return 0;
}

/* The buffers of b and the chain of a 1M-token stream; returns 0 or 1. */
static int bd_alloc(bd_t *b)
{
    size_t n = b->rounds > b->n_obj ? b->rounds : b->n_obj, nb;
    uint32_t *tok = malloc(sizeof(uint32_t) * N_BLOCKS * 64);

    b->chain = malloc(sizeof(st_hash_t) * N_BLOCKS);
    b->t_st = malloc(sizeof(double) * n);
    b->t_rd = malloc(sizeof(double) * n);
    b->t_full = malloc(sizeof(double) * b->rounds);
    b->obj = malloc(OBJ_BYTES);
    b->back = malloc(OBJ_BYTES);
    if (!tok || !b->chain || !b->t_st || !b->t_rd || !b->t_full || !b->obj || !b->back) {
        return 1;
    }
    for (size_t i = 0; i < N_BLOCKS * 64; i++) {
        tok[i] = (uint32_t)(XXH3_64bits(&i, sizeof(i)) % 150000);
    }
    st_client_hash(b->c, tok, N_BLOCKS * 64, NULL, 0, b->chain, N_BLOCKS, &nb);
    for (size_t i = 0; i < OBJ_BYTES; i++) {
        b->obj[i] = (uint8_t)(i * 7);
    }
    free(tok);
    return 0;
}

/* The Redis key of block i of the chain in b->key. */
static void bd_block_key(bd_t *b, size_t i)
{
    snprintf(b->key, sizeof(b->key), "blk:%016" PRIx64 "%016" PRIx64, st_hash_lo64(&b->chain[i]),
             st_hash_lo64(&b->chain[i]) ^ i);
}

/* Stores the chain: one small KV and IDX object per block and layer 0. */
static void bd_store_chain(bd_t *b)
{
    st_put_op_t *ops = calloc(N_BLOCKS * 2, sizeof(*ops));
    st_handle_t *h;

    for (size_t i = 0; i < N_BLOCKS; i++) {
        ops[2 * i] = (st_put_op_t){i, ST_KIND_KV, 0, b->obj, 64, 0, 0};
        ops[2 * i + 1] = (st_put_op_t){i, ST_KIND_IDX, 0, b->obj + 64, 64, 0, 0};
        bd_block_key(b, i);
        redisAppendCommand(b->rc, "SET %s %b", b->key, b->obj, (size_t)64);
    }
    st_client_put(b->c, b->chain, N_BLOCKS, ops, N_BLOCKS * 2, 0, &h);
    st_handle_wait(h, -1);
    st_handle_release(h);
    for (size_t i = 0; i < N_BLOCKS; i++) {
        redisReply *r;

        redisGetReply(b->rc, (void **)&r);
        freeReplyObject(r);
    }
    free(ops);
}

/* A pipelined EXISTS of every block's key; returns how many exist. */
static size_t bd_redis_exists(bd_t *b)
{
    size_t hits = 0;

    for (size_t i = 0; i < N_BLOCKS; i++) {
        bd_block_key(b, i);
        redisAppendCommand(b->rc, "EXISTS %s", b->key);
    }
    for (size_t i = 0; i < N_BLOCKS; i++) {
        redisReply *rep;

        redisGetReply(b->rc, (void **)&rep);
        hits += rep != NULL && rep->integer == 1;
        freeReplyObject(rep);
    }
    return hits;
}

/* Lookup of the whole chain, interleaved with Redis; each round also looks
 * it up with every hash sent (STRATA_LOOKUP_COMPACT=0, the full form),
 * alternating which goes first. Returns 0, or 1 on a wrong answer. */
static int bd_lookups(bd_t *b)
{
    for (size_t r = 0; r < b->rounds; r++) {
        st_lookup_result_t lr;
        uint64_t t0;
        size_t hits;

        for (int pass = 0; pass < 2; pass++) {
            int full = (int)((r + (size_t)pass) % 2);

            setenv("STRATA_LOOKUP_COMPACT", full ? "0" : "1", 1);
            t0 = bench_now_ns();
            st_client_lookup(b->c, b->chain, N_BLOCKS, 1, &lr);
            (full ? b->t_full : b->t_st)[r] = (double)(bench_now_ns() - t0) / 1e6;
            if (lr.matched_blocks != N_BLOCKS) {
                fprintf(stderr, "bench_daemon: lookup matched %" PRIu64 "\n", lr.matched_blocks);
                return 1;
            }
        }
        unsetenv("STRATA_LOOKUP_COMPACT");
        if (b->lookup_only) {
            b->t_rd[r] = 0;
            continue;
        }
        t0 = bench_now_ns();
        hits = bd_redis_exists(b);
        b->t_rd[r] = (double)(bench_now_ns() - t0) / 1e6;
        if (hits != N_BLOCKS) {
            fprintf(stderr, "bench_daemon: redis found %zu\n", hits);
            return 1;
        }
    }
    return 0;
}

/* 64 KiB objects, one per call: puts, then gets, each against Redis.
 * Returns 0, or 1 when a get fails. */
static int bd_objects(bd_t *b, bench_stats_t *s_put, bench_stats_t *s_rput, bench_stats_t *s_get,
                      bench_stats_t *s_rget)
{
    for (size_t i = 0; i < b->n_obj; i++) {
        st_put_op_t op = {i % N_BLOCKS, ST_KIND_KDA, 0, b->obj, OBJ_BYTES, 0, 0};
        st_handle_t *h;
        redisReply *rep;
        uint64_t t0;

        b->obj[0] = (uint8_t)i;
        t0 = bench_now_ns();
        st_client_put(b->c, b->chain, N_BLOCKS, &op, 1, 0, &h);
        st_handle_wait(h, -1);
        st_handle_release(h);
        b->t_st[i] = (double)(bench_now_ns() - t0) / 1e3;
        snprintf(b->key, sizeof(b->key), "obj:%zu", i);
        t0 = bench_now_ns();
        rep = redisCommand(b->rc, "SET %s %b", b->key, b->obj, (size_t)OBJ_BYTES);
        b->t_rd[i] = (double)(bench_now_ns() - t0) / 1e3;
        freeReplyObject(rep);
    }
    report("put 64 KiB: strata (inline)", b->t_st, b->n_obj, "us", s_put);
    report("put 64 KiB: redis SET", b->t_rd, b->n_obj, "us", s_rput);
    for (size_t i = 0; i < b->n_obj; i++) {
        st_get_op_t g = {i % N_BLOCKS, ST_KIND_KDA, 0, b->back, OBJ_BYTES, 0, NULL, 0, 0, 0};
        st_handle_t *h;
        redisReply *rep;
        uint64_t t0;

        t0 = bench_now_ns();
        st_client_get(b->c, b->chain, N_BLOCKS, &g, 1, &h);
        st_handle_wait(h, -1);
        st_handle_release(h);
        b->t_st[i] = (double)(bench_now_ns() - t0) / 1e3;
        if (g.status != ST_OK || g.length != OBJ_BYTES) {
            fprintf(stderr, "bench_daemon: get failed: %s\n", st_strerror(g.status));
            return 1;
        }
        snprintf(b->key, sizeof(b->key), "obj:%zu", i);
        t0 = bench_now_ns();
        rep = redisCommand(b->rc, "GET %s", b->key);
        b->t_rd[i] = (double)(bench_now_ns() - t0) / 1e3;
        freeReplyObject(rep);
    }
    report("get 64 KiB: strata (inline)", b->t_st, b->n_obj, "us", s_get);
    report("get 64 KiB: redis GET", b->t_rd, b->n_obj, "us", s_rget);
    return 0;
}

int main(int argc, char **argv)
{
    bd_t b = {.rounds = 50, .n_obj = 512};
    tc_cluster_t cl;
    bench_redis_t rd;
    st_client_params_t p = {0};
    bench_stats_t s_lk, s_full, s_rlk, s_put, s_rput, s_get, s_rget;
    char extra[1200], ca[1024];
    int rc = bd_args(&b, argc, argv);

    if (rc != 0) {
        return rc;
    }
    snprintf(extra, sizeof(extra), "--memory-limit 2G");
    if (b.tls != NULL) {
        snprintf(extra, sizeof(extra),
                 "--memory-limit 2G --tls-cert %s/server.pem --tls-key %s/server.key", b.tls,
                 b.tls);
        snprintf(ca, sizeof(ca), "%s/ca.pem", b.tls);
    }
    if (tc_start(&cl, argv[1], 1, extra) != 0) {
        return 1;
    }
    if (bench_redis_start(&rd, 0) != 0 || (b.rc = bench_redis_connect(&rd)) == NULL) {
        fprintf(stderr, "bench_daemon: no Redis peer (install redis-server)\n");
        tc_stop_all(&cl);
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES;
    p.nodes = cl.node[0].addr;
    if (b.tls != NULL) {
        p.field_mask |= ST_CLIENT_FIELD_TLS_CA;
        p.tls_ca = ca;
    }
    if (st_client_connect(&p, &b.c) != ST_OK) {
        fprintf(stderr, "bench_daemon: %s\n", st_client_last_error());
        return 1;
    }
    if (bd_alloc(&b) != 0) {
        return 1;
    }
    bd_store_chain(&b);
    if (bd_lookups(&b) != 0) {
        return 1;
    }
    printf("bench_daemon: one stratad (%s) and one redis-server on loopback, %zu rounds\n",
           b.tls != NULL ? "TLS" : "plaintext", b.rounds);
    printf("%-40s %10s %10s %10s\n", "", "median", "p99", "MAD");
    report("lookup 16,384 blocks: strata", b.t_st, b.rounds, "ms", &s_lk);
    report("lookup 16,384 blocks: strata, every hash", b.t_full, b.rounds, "ms", &s_full);
    if (b.lookup_only) {
        st_client_close(b.c);
        redisFree(b.rc);
        bench_redis_stop(&rd);
        tc_stop_all(&cl);
        return 0;
    }
    report("lookup 16,384 blocks: redis EXISTS x16384", b.t_rd, b.rounds, "ms", &s_rlk);
    if (bd_objects(&b, &s_put, &s_rput, &s_get, &s_rget) != 0) {
        return 1;
    }

    printf("\nratios (redis time / strata time; above 1: strata faster)\n");
    printf("  lookup median %.2fx, p99 %.2fx (goal: p99 under 2 ms and faster than redis)\n",
           s_rlk.median / s_lk.median, s_rlk.p99 / s_lk.p99);
    printf("  put 64 KiB median %.2fx, get 64 KiB median %.2fx\n", s_rput.median / s_put.median,
           s_rget.median / s_get.median);

    st_client_close(b.c);
    redisFree(b.rc);
    bench_redis_stop(&rd);
    tc_stop_all(&cl);
    free(b.chain), free(b.t_st), free(b.t_rd), free(b.t_full), free(b.obj), free(b.back);
    return 0;
}
