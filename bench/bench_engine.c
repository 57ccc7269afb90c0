/*
 * bench_engine.c - time to first token of the reference model, computed in
 * full against resumed from one stratad on loopback: a prompt of N tokens
 * (whole blocks) is written by a first turn, then the same prompt plus a
 * 32-token tail is answered by resuming every block and computing the tail.
 * Prints the medians, the speedup and the bytes fetched per resume.
 *
 * usage: bench_engine [STRATAD] [TOKENS=2048] [REPS=5]   (or $STRATAD)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "cluster.h"
#include "strata/engine.h"

#define TAIL 32

static double run_ms(st_engine_t *e, const uint32_t *tok, size_t n, st_engine_stats_t *s)
{
    uint64_t t0 = bench_now_ns();

    if (st_engine_run(e, tok, n, 0, NULL, NULL, s) != ST_OK) {
        fprintf(stderr, "st_engine_run failed\n");
        exit(1);
    }
    return (double)(bench_now_ns() - t0) / 1e6;
}

int main(int argc, char **argv)
{
    const char *stratad = argc > 1 ? argv[1] : getenv("STRATAD");
    size_t n = argc > 2 ? (size_t)atol(argv[2]) : 2048;
    int reps = argc > 3 ? atoi(argv[3]) : 5;
    tc_cluster_t cl;
    st_client_params_t p = {0};
    st_client_t *c = NULL;
    st_model_config_t mc;
    st_model_t *m = NULL;
    st_engine_t *ref = NULL, *eng = NULL;
    st_engine_params_t ep = {.field_mask = ST_ENGINE_FIELD_CLIENT};
    st_engine_stats_t s = {0};
    double cold[64], warm[64], first;
    bench_stats_t sc, sw;
    uint32_t *tok;
    size_t obj_bytes;

    if (!stratad || n < 64 || n % 64 != 0 || reps < 1 || reps > 64) {
        fprintf(stderr, "usage: bench_engine STRATAD [TOKENS (a multiple of 64)] [REPS 1..64]\n");
        return 2;
    }
    tok = malloc(sizeof(uint32_t) * (n + TAIL));
    if (!tok) {
        return 1;
    }
    for (size_t i = 0; i < n + TAIL; i++) {
        tok[i] = (uint32_t)((i + 1) * 2654435761u >> 9) % 512;
    }
    if (tc_start(&cl, stratad, 1, NULL) != 0) {
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_MODEL;
    p.nodes = cl.peers;
    p.model = "bench-reference-hybrid";
    st_model_config_default(&mc);
    if (st_client_connect(&p, &c) != ST_OK || st_model_create(&mc, &m) != ST_OK ||
        st_engine_create(m, NULL, &ref) != ST_OK) {
        fprintf(stderr, "setup failed\n");
        tc_stop_all(&cl);
        return 1;
    }
    ep.client = c;
    if (st_engine_create(m, &ep, &eng) != ST_OK) {
        tc_stop_all(&cl);
        return 1;
    }
    first = run_ms(eng, tok, n, &s);
    printf("engine: default shape (%s, d_model %u, top-k %u), %zu-token prompt, 1 stratad, "
           "inline transport\n",
           mc.pattern, mc.d_model, mc.topk, n);
    printf("  turn 1, computed and written: %.1f ms (%llu objects, %llu failures)\n", first,
           (unsigned long long)s.objects_written, (unsigned long long)s.write_failures);
    for (int r = 0; r < reps; r++) {
        cold[r] = run_ms(ref, tok, n + TAIL, NULL);
        warm[r] = run_ms(eng, tok, n + TAIL, &s);
        if (s.resumed_blocks != n / 64 || s.computed_tokens != TAIL) {
            fprintf(stderr, "resume did not cover the prompt: resumed=%llu computed=%llu\n",
                    (unsigned long long)s.resumed_blocks, (unsigned long long)s.computed_tokens);
            return 1;
        }
    }
    bench_stats(cold, (size_t)reps, &sc);
    bench_stats(warm, (size_t)reps, &sw);
    /* Per resumed block: KV and IDX of the two DSA layers; plus one checkpoint. */
    obj_bytes = (n / 64) * 2 * (64 * 80 * 4 + 66 * 32 * 4) + 32 + 2 * 2 * 32 * 32 * 4;
    printf("  TTFT of %zu tokens, computed in full: median %.1f ms (mad %.1f), %.0f tokens/s\n",
           n + TAIL, sc.median, sc.mad, (double)(n + TAIL) / sc.median * 1e3);
    printf("  TTFT resumed (%zu blocks fetched, %.2f MB, %d tokens computed): median %.2f ms "
           "(mad %.2f)\n",
           n / 64, (double)obj_bytes / 1e6, TAIL, sw.median, sw.mad);
    {
        /* The tail's compute, estimated at the full run's mean cost per token. */
        double tail_ms = sc.median / (double)(n + TAIL) * TAIL, fetch_ms = sw.median - tail_ms;

        printf("  speedup %.1fx; the fetch took about %.1f ms (%.2f GB/s) beside about %.1f ms "
               "of tail compute\n",
               sc.median / sw.median, fetch_ms,
               fetch_ms > 0 ? (double)obj_bytes / (fetch_ms * 1e6) : 0.0, tail_ms);
    }
    st_engine_free(eng);
    st_engine_free(ref);
    st_model_free(m);
    st_client_close(c);
    tc_stop_all(&cl);
    free(tok);
    return 0;
}
