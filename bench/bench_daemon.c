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

int main(int argc, char **argv)
{
    size_t rounds = 50, n_obj = 512;
    int lookup_only = 0;
    tc_cluster_t cl;
    bench_redis_t rd;
    redisContext *rc;
    st_client_params_t p = {0};
    st_client_t *c;
    st_hash_t *chain;
    uint32_t *tok;
    size_t nb;
    double *t_st, *t_rd, *t_full;
    bench_stats_t s_lk, s_full, s_rlk, s_put, s_rput, s_get, s_rget;
    uint8_t *obj, *back;
    char key[64];
    const char *tls = NULL;
    char extra[1200], ca[1024];

    if (argc < 2) {
        fprintf(stderr, "usage: bench_daemon STRATAD [--rounds N] [--objects N] [--lookup-only]\n"
                        "  --lookup-only: lookups back to back, without Redis in between and\n"
                        "                 without the put/get part (for profiles)\n");
        return 2;
    }
    for (int i = 2; i < argc; i++) {
        if (strcmp(argv[i], "--lookup-only") == 0) {
            lookup_only = 1;
            continue;
        }
        if (i + 1 == argc) {
            break;
        }
        if (strcmp(argv[i], "--rounds") == 0) {
            rounds = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--objects") == 0) {
            n_obj = strtoul(argv[i + 1], NULL, 10);
        } else if (strcmp(argv[i], "--tls") == 0) {
            tls = argv[i + 1];
        }
        i++;
    }
    if (rounds == 0 || n_obj == 0) {
        fprintf(stderr, "bench_daemon: rounds and objects must be positive\n");
        return 2;
    }
    snprintf(extra, sizeof(extra), "--memory-limit 2G");
    if (tls != NULL) {
        snprintf(extra, sizeof(extra),
                 "--memory-limit 2G --tls-cert %s/server.pem --tls-key %s/server.key", tls, tls);
        snprintf(ca, sizeof(ca), "%s/ca.pem", tls);
    }
    if (tc_start(&cl, argv[1], 1, extra) != 0) {
        return 1;
    }
    if (bench_redis_start(&rd, 0) != 0 || (rc = bench_redis_connect(&rd)) == NULL) {
        fprintf(stderr, "bench_daemon: no Redis peer (install redis-server)\n");
        tc_stop_all(&cl);
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES;
    p.nodes = cl.node[0].addr;
    if (tls != NULL) {
        p.field_mask |= ST_CLIENT_FIELD_TLS_CA;
        p.tls_ca = ca;
    }
    if (st_client_connect(&p, &c) != ST_OK) {
        fprintf(stderr, "bench_daemon: %s\n", st_client_last_error());
        return 1;
    }
    tok = malloc(sizeof(uint32_t) * N_BLOCKS * 64);
    chain = malloc(sizeof(st_hash_t) * N_BLOCKS);
    t_st = malloc(sizeof(double) * (rounds > n_obj ? rounds : n_obj));
    t_rd = malloc(sizeof(double) * (rounds > n_obj ? rounds : n_obj));
    t_full = malloc(sizeof(double) * rounds);
    obj = malloc(OBJ_BYTES);
    back = malloc(OBJ_BYTES);
    if (!tok || !chain || !t_st || !t_rd || !t_full || !obj || !back) {
        return 1;
    }
    for (size_t i = 0; i < N_BLOCKS * 64; i++) {
        tok[i] = (uint32_t)(XXH3_64bits(&i, sizeof(i)) % 150000);
    }
    st_client_hash(c, tok, N_BLOCKS * 64, NULL, 0, chain, N_BLOCKS, &nb);
    for (size_t i = 0; i < OBJ_BYTES; i++) {
        obj[i] = (uint8_t)(i * 7);
    }

    /* Store the chain: one small KV and IDX object per block and layer 0. */
    {
        st_put_op_t *ops = calloc(N_BLOCKS * 2, sizeof(*ops));
        st_handle_t *h;

        for (size_t b = 0; b < N_BLOCKS; b++) {
            ops[2 * b] = (st_put_op_t){b, ST_KIND_KV, 0, obj, 64, 0, 0};
            ops[2 * b + 1] = (st_put_op_t){b, ST_KIND_IDX, 0, obj + 64, 64, 0, 0};
            snprintf(key, sizeof(key), "blk:%016" PRIx64 "%016" PRIx64, st_hash_lo64(&chain[b]),
                     st_hash_lo64(&chain[b]) ^ b);
            redisAppendCommand(rc, "SET %s %b", key, obj, (size_t)64);
        }
        st_client_put(c, chain, N_BLOCKS, ops, N_BLOCKS * 2, 0, &h);
        st_handle_wait(h, -1);
        st_handle_release(h);
        for (size_t b = 0; b < N_BLOCKS; b++) {
            redisReply *r;

            redisGetReply(rc, (void **)&r);
            freeReplyObject(r);
        }
        free(ops);
    }

    /* Lookup of the whole chain, interleaved with Redis; each round also
     * looks it up with every hash sent (STRATA_LOOKUP_COMPACT=0, the full
     * form), alternating which goes first. */
    for (size_t r = 0; r < rounds; r++) {
        st_lookup_result_t lr;
        uint64_t t0;
        size_t hits = 0;

        for (int pass = 0; pass < 2; pass++) {
            int full = (int)((r + (size_t)pass) % 2);

            setenv("STRATA_LOOKUP_COMPACT", full ? "0" : "1", 1);
            t0 = bench_now_ns();
            st_client_lookup(c, chain, N_BLOCKS, 1, &lr);
            (full ? t_full : t_st)[r] = (double)(bench_now_ns() - t0) / 1e6;
            if (lr.matched_blocks != N_BLOCKS) {
                fprintf(stderr, "bench_daemon: lookup matched %" PRIu64 "\n", lr.matched_blocks);
                return 1;
            }
        }
        unsetenv("STRATA_LOOKUP_COMPACT");
        if (lookup_only) {
            t_rd[r] = 0;
            continue;
        }
        t0 = bench_now_ns();
        for (size_t b = 0; b < N_BLOCKS; b++) {
            snprintf(key, sizeof(key), "blk:%016" PRIx64 "%016" PRIx64, st_hash_lo64(&chain[b]),
                     st_hash_lo64(&chain[b]) ^ b);
            redisAppendCommand(rc, "EXISTS %s", key);
        }
        for (size_t b = 0; b < N_BLOCKS; b++) {
            redisReply *rep;

            redisGetReply(rc, (void **)&rep);
            hits += rep != NULL && rep->integer == 1;
            freeReplyObject(rep);
        }
        t_rd[r] = (double)(bench_now_ns() - t0) / 1e6;
        if (hits != N_BLOCKS) {
            fprintf(stderr, "bench_daemon: redis found %zu\n", hits);
            return 1;
        }
    }
    printf("bench_daemon: one stratad (%s) and one redis-server on loopback, %zu rounds\n",
           tls != NULL ? "TLS" : "plaintext", rounds);
    printf("%-40s %10s %10s %10s\n", "", "median", "p99", "MAD");
    report("lookup 16,384 blocks: strata", t_st, rounds, "ms", &s_lk);
    report("lookup 16,384 blocks: strata, every hash", t_full, rounds, "ms", &s_full);
    if (lookup_only) {
        st_client_close(c);
        redisFree(rc);
        bench_redis_stop(&rd);
        tc_stop_all(&cl);
        return 0;
    }
    report("lookup 16,384 blocks: redis EXISTS x16384", t_rd, rounds, "ms", &s_rlk);

    /* 64 KiB objects, one per call. */
    for (size_t i = 0; i < n_obj; i++) {
        st_put_op_t op = {i % N_BLOCKS, ST_KIND_KDA, 0, obj, OBJ_BYTES, 0, 0};
        st_get_op_t g = {i % N_BLOCKS, ST_KIND_KDA, 0, back, OBJ_BYTES, 0, NULL, 0, 0, 0};
        st_handle_t *h;
        redisReply *rep;
        uint64_t t0;

        obj[0] = (uint8_t)i;
        t0 = bench_now_ns();
        st_client_put(c, chain, N_BLOCKS, &op, 1, 0, &h);
        st_handle_wait(h, -1);
        st_handle_release(h);
        t_st[i] = (double)(bench_now_ns() - t0) / 1e3;
        snprintf(key, sizeof(key), "obj:%zu", i);
        t0 = bench_now_ns();
        rep = redisCommand(rc, "SET %s %b", key, obj, (size_t)OBJ_BYTES);
        t_rd[i] = (double)(bench_now_ns() - t0) / 1e3;
        freeReplyObject(rep);
        (void)g;
    }
    report("put 64 KiB: strata (inline)", t_st, n_obj, "us", &s_put);
    report("put 64 KiB: redis SET", t_rd, n_obj, "us", &s_rput);
    for (size_t i = 0; i < n_obj; i++) {
        st_get_op_t g = {i % N_BLOCKS, ST_KIND_KDA, 0, back, OBJ_BYTES, 0, NULL, 0, 0, 0};
        st_handle_t *h;
        redisReply *rep;
        uint64_t t0;

        t0 = bench_now_ns();
        st_client_get(c, chain, N_BLOCKS, &g, 1, &h);
        st_handle_wait(h, -1);
        st_handle_release(h);
        t_st[i] = (double)(bench_now_ns() - t0) / 1e3;
        if (g.status != ST_OK || g.length != OBJ_BYTES) {
            fprintf(stderr, "bench_daemon: get failed: %s\n", st_strerror(g.status));
            return 1;
        }
        snprintf(key, sizeof(key), "obj:%zu", i);
        t0 = bench_now_ns();
        rep = redisCommand(rc, "GET %s", key);
        t_rd[i] = (double)(bench_now_ns() - t0) / 1e3;
        freeReplyObject(rep);
    }
    report("get 64 KiB: strata (inline)", t_st, n_obj, "us", &s_get);
    report("get 64 KiB: redis GET", t_rd, n_obj, "us", &s_rget);

    printf("\nratios (redis time / strata time; above 1: strata faster)\n");
    printf("  lookup median %.2fx, p99 %.2fx (goal: p99 under 2 ms and faster than redis)\n",
           s_rlk.median / s_lk.median, s_rlk.p99 / s_lk.p99);
    printf("  put 64 KiB median %.2fx, get 64 KiB median %.2fx\n", s_rput.median / s_put.median,
           s_rget.median / s_get.median);

    st_client_close(c);
    redisFree(rc);
    bench_redis_stop(&rd);
    tc_stop_all(&cl);
    free(tok), free(chain), free(t_st), free(t_rd), free(t_full), free(obj), free(back);
    return 0;
}
