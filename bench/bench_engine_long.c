/*
 * bench_engine_long.c - the engine at long context against three stratad on
 * loopback, over a one-sided transport (issue #8's three measurements):
 *
 *  (a) time to first token of turn 2 with a HISTORY-token first turn cached,
 *      against computing it in full without the cache, in the same run;
 *  (b) overlap efficiency T(pipelined) / max(T(fetch only), T(compute only))
 *      at several local fractions, per decoded token: T(compute only) is the
 *      decode with every block local, T(fetch only) the decode with the rows
 *      read before the local partials (serial_rows) minus T(compute only);
 *      the three runs of a fraction alternate, REPS rounds of all-local,
 *      pipelined, serial, so that a shared machine's load falls on all three;
 *  (c) decode time per token with 10% of the blocks local against 100%.
 *
 * The model is the default hybrid shape (KDKD, d_model 128, top-k 128) with a
 * lighter indexer (1 head of 16) so that computing a 128K history in full on
 * a CPU core takes minutes, not an hour; the indexer's cost is linear in the
 * history for both sides, so it does not flatter either one.
 *
 * usage: bench_engine_long STRATAD [HISTORY=131072] [DECODE=32] [REPS=3] [TRANSPORT=ucx]
 * (BENCH_NO_FULL=1 in the environment skips (a)'s full recompute, for iterating on (b), (c).)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cluster.h"
#include "strata/engine.h"

#define TAIL 32

static st_model_t *model;
static st_client_t *client;

static st_engine_t *engine(uint32_t local_blocks, int serial)
{
    st_engine_params_t ep = {0};
    st_engine_t *e = NULL;

    ep.field_mask =
        ST_ENGINE_FIELD_CLIENT | ST_ENGINE_FIELD_LOCAL_BLOCKS | ST_ENGINE_FIELD_SERIAL_ROWS;
    ep.client = client;
    ep.local_blocks = local_blocks;
    ep.serial_rows = (uint32_t)serial;
    if (st_engine_create(model, &ep, &e) != ST_OK) {
        fprintf(stderr, "engine create failed\n");
        exit(1);
    }
    return e;
}

static double run(st_engine_t *e, const uint32_t *tok, size_t n, uint32_t n_decode,
                  st_engine_stats_t *s)
{
    uint32_t *ids = malloc(sizeof(uint32_t) * (n_decode + 1));
    uint64_t t0 = bench_now_ns();

    if (!ids || st_engine_run(e, tok, n, n_decode, NULL, ids, s) != ST_OK) {
        fprintf(stderr, "st_engine_run failed\n");
        exit(1);
    }
    free(ids);
    return (double)(bench_now_ns() - t0) / 1e6;
}

/* Decode ms per token of one run. */
static double decode_once(st_engine_t *e, const uint32_t *tok, size_t n, uint32_t n_decode,
                          st_engine_stats_t *last)
{
    run(e, tok, n, n_decode, last);
    return (double)last->decode_us / 1e3 / n_decode;
}

/* Median decode ms per token over reps runs of the same request. */
static double decode_ms(st_engine_t *e, const uint32_t *tok, size_t n, uint32_t n_decode, int reps,
                        double *mad, st_engine_stats_t *last)
{
    double v[16];
    bench_stats_t bs;

    for (int r = 0; r < reps; r++) {
        run(e, tok, n, n_decode, last);
        v[r] = (double)last->decode_us / 1e3 / n_decode;
    }
    bench_stats(v, (size_t)reps, &bs);
    *mad = bs.mad;
    return bs.median;
}

int main(int argc, char **argv)
{
    const char *stratad = argc > 1 ? argv[1] : getenv("STRATAD");
    size_t hist = argc > 2 ? (size_t)atol(argv[2]) : 131072;
    uint32_t n_dec = argc > 3 ? (uint32_t)atoi(argv[3]) : 32;
    int reps = argc > 4 ? atoi(argv[4]) : 3;
    const char *transport = argc > 5 ? argv[5] : "ucx";
    size_t n = hist + TAIL, blocks = hist / 64;
    st_client_params_t p = {0};
    st_model_config_t mc;
    st_engine_stats_t s;
    tc_cluster_t cl;
    uint32_t *tok;
    char extra[128];

    if (!stratad || hist < 1024 || hist % 64 != 0 || n_dec < 1 || reps < 1 || reps > 16) {
        fprintf(stderr, "usage: bench_engine_long STRATAD [HISTORY (a multiple of 64, >= 1024)] "
                        "[DECODE >= 1] [REPS 1..16] [TRANSPORT ucx|libfabric|inline]\n");
        return 2;
    }
    tok = malloc(sizeof(uint32_t) * n);
    for (size_t i = 0; tok && i < n; i++) {
        tok[i] = (uint32_t)((i + 1) * 2654435761u >> 9) % 512;
    }
    snprintf(extra, sizeof(extra), "--memory-limit 1G --transport %s",
             strcmp(transport, "inline") == 0 ? "ucx" : transport);
    if (!tok || tc_start(&cl, stratad, 3, extra) != 0) {
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_MODEL | ST_CLIENT_FIELD_TIMEOUT |
                   (strcmp(transport, "inline") ? ST_CLIENT_FIELD_TRANSPORT : 0);
    p.nodes = cl.peers;
    p.model = "bench-long";
    p.timeout_ms = 60000;
    p.transport = transport;
    st_model_config_default(&mc);
    mc.idx_heads = 1;
    mc.idx_dim = 16;
    if (st_client_connect(&p, &client) != ST_OK || st_model_create(&mc, &model) != ST_OK) {
        fprintf(stderr, "setup failed\n");
        tc_stop_all(&cl);
        return 1;
    }
    printf("engine at long context: %s, d_model %u, top-k %u, indexer %ux%u; %zu-token history "
           "+ %d-token turn; 3 stratad, %s transport\n",
           mc.pattern, mc.d_model, mc.topk, mc.idx_heads, mc.idx_dim, hist, TAIL, transport);
    fflush(stdout);

    /* (a) */
    st_engine_t *full = engine(0, 0), *nocache = NULL;
    double t1 = run(full, tok, hist, 0, &s), tref, tres, tpool;

    printf("  turn 1 (%zu tokens computed and written): %.1f s, %llu objects\n", hist, t1 / 1e3,
           (unsigned long long)s.objects_written);
    fflush(stdout);
    if (st_engine_create(model, NULL, &nocache) != ST_OK) {
        return 1;
    }
    if (getenv("BENCH_NO_FULL")) { /* iterating on (b)/(c): no full recompute */
        tref = 0.0;
        printf("(a) the full recompute skipped (BENCH_NO_FULL)\n");
    } else {
        tref = run(nocache, tok, n, 0, &s);
        printf("(a) TTFT of turn 2 (%zu tokens), computed in full without the cache: %.1f s\n", n,
               tref / 1e3);
    }
    {
        double v[16], w[16];
        bench_stats_t bv, bw;
        st_engine_t *pool = engine((uint32_t)(blocks / 10), 0);
        st_engine_stats_t sp;

        for (int r = 0; r < reps; r++) {
            v[r] = run(full, tok, n, 0, &s);
            w[r] = run(pool, tok, n, 0, &sp);
        }
        bench_stats(v, (size_t)reps, &bv);
        bench_stats(w, (size_t)reps, &bw);
        tres = bv.median;
        tpool = bw.median;
        printf("    resumed, every block local:  %.1f ms median (mad %.1f), %llu blocks, %.1f MB "
               "fetched, %llu tokens computed: %.0fx faster\n",
               tres, bv.mad, (unsigned long long)s.resumed_blocks, s.bytes_fetched / 1e6,
               (unsigned long long)s.computed_tokens, tref / tres);
        printf("    resumed, 10%% of blocks local: %.1f ms median (mad %.1f), %.1f MB fetched: "
               "%.0fx faster\n",
               tpool, bw.mad, sp.bytes_fetched / 1e6, tref / tpool);
        st_engine_free(pool);
    }
    fflush(stdout);

    /* (b) and (c): decode after the resume. */
    {
        const double fr[] = {0.5, 0.25, 0.1, 0.05};
        double mad, mad2, mad3, tc = decode_ms(full, tok, n, n_dec, reps, &mad, &s);

        printf("(c)/(b) decode at %zu tokens of context, %u tokens, median of %d runs:\n", n, n_dec,
               reps);
        printf("    100%% local: %.3f ms/token (mad %.3f)\n", tc, mad);
        for (int i = 0; i < 4; i++) {
            uint32_t lb = (uint32_t)(blocks * fr[i]);
            st_engine_t *pe = engine(lb, 0), *se = engine(lb, 1);
            st_engine_stats_t sp, ss, sa;
            double va[16], vp[16], vs[16], ta, tp, ts, mad1;
            bench_stats_t b;

            for (int r = 0; r < reps; r++) { /* alternating: the same load on all three */
                va[r] = decode_once(full, tok, n, n_dec, &sa);
                vp[r] = decode_once(pe, tok, n, n_dec, &sp);
                vs[r] = decode_once(se, tok, n, n_dec, &ss);
            }
            bench_stats(va, (size_t)reps, &b);
            ta = b.median, mad1 = b.mad;
            bench_stats(vp, (size_t)reps, &b);
            tp = b.median, mad2 = b.mad;
            bench_stats(vs, (size_t)reps, &b);
            ts = b.median, mad3 = b.mad;
            double tf = ts - ta > 0 ? ts - ta : 0.0, lo = tf > ta ? tf : ta;
            double hit = (double)sp.rows_local / (double)(sp.rows_local + sp.rows_remote + 1e-9);

            /* rows_* count the 32 tail tokens of the prompt and the decoded ones. */
            printf("    %4.0f%% local (%u blocks): all-local %.3f (mad %.3f), pipelined %.3f "
                   "ms/token (mad %.3f), serial %.3f (mad %.3f) -> fetch only %.3f; overlap "
                   "efficiency %.2f; %.2fx the all-local decode; local row hit rate %.2f, %.0f "
                   "remote rows and %.1f us of row reads (engine's timer) per computed token\n",
                   fr[i] * 100, lb, ta, mad1, tp, mad2, ts, mad3, tf, tp / lo, tp / ta, hit,
                   (double)sp.rows_remote / (double)(n_dec + TAIL),
                   (double)sp.rows_us / (double)(n_dec + TAIL));
            fflush(stdout);
            st_engine_free(pe);
            st_engine_free(se);
        }
    }
    st_engine_free(full);
    st_engine_free(nocache);
    st_model_free(model);
    st_client_close(client);
    tc_stop_all(&cl);
    free(tok);
    return 0;
}
