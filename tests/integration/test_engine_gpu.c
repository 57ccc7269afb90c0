/*
 * test_engine_gpu.c - the engine's CUDA path (docs/engine.md, "The CUDA
 * path") against its CPU path and against itself, with three real stratad
 * on loopback. Exits 77 (skip) when no CUDA device is usable, after the
 * checks that need none (the device option's refusals).
 *
 * Model: st_model_config_gpu() (DSA 64 heads over rows of 512 + 64, indexer
 * and KDA heads of 128, top-k 128, d_model 128). Comparisons, each
 * max |logit - ref| / max |ref|:
 *  - GPU against CPU, same tokens, no cache: <= TOL_DEV (bf16 rows and
 *    query, fp8 indexer keys: a near-tie of the indexer may select another
 *    row), and the N_DEC greedy decode ids equal (both paths are
 *    deterministic, so this holds or fails the same way at every run);
 *  - GPU resumed from the cache against a GPU full recompute: <= TOL_SAME
 *    (the device state is rebuilt from the same fp32 host rows: same bf16,
 *    same fp8; the selection's ties resolved by row and sorted before
 *    attention; measured 0);
 *  - GPU with a bounded pool (remote rows as a second partial) against the
 *    GPU full recompute: <= TOL_DEV (the partials split the bf16 softmax);
 *  - objects written by the GPU engine resumed by a CPU engine, and the
 *    reverse: every resumable block loads, logits within TOL_DEV of the
 *    resuming device's full recompute;
 *  - batched decode (st_engine_run_batch): 8 GPU engines with the cluster,
 *    prompts resuming the same written history with tails of their own,
 *    decoded in lockstep, against each engine alone: logits and ids equal
 *    bit for bit (the batch only interleaves the sequences' streams).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "fail_count.h"
#include "strata/engine.h"
#include "strata/kernels.h"

#define N_NODES  3
#define VOCAB    512
#define TOL_SAME 1e-5
#define TOL_DEV  2e-2
#define N_DEC    16

static int failures;

typedef struct fixture {
    tc_cluster_t cl;
    st_client_t *client;
    st_model_t *model;
    st_engine_t *cpu, *gpu;     /* no cache */
    st_engine_t *cpu_c, *gpu_c; /* with the cluster */
} fixture_t;

static uint32_t *prompt(size_t n, uint32_t salt)
{
    uint32_t *t = malloc(sizeof(uint32_t) * n);

    for (size_t i = 0; t && i < n; i++) {
        t[i] = (uint32_t)(((i + 1) * 2654435761u) ^ (salt * 2246822519u)) % VOCAB;
    }
    return t;
}

static double rel_diff(const float *a, const float *ref)
{
    double diff = 0.0, mx = 0.0;

    for (int v = 0; v < VOCAB; v++) {
        diff = fmax(diff, fabs((double)a[v] - ref[v]));
        mx = fmax(mx, fabs((double)ref[v]));
    }
    return mx > 0.0 ? diff / mx : INFINITY;
}

static st_engine_t *engine(fixture_t *f, uint32_t device, int cached, uint32_t local_blocks)
{
    st_engine_params_t p = {0};
    st_engine_t *e = NULL;
    st_status_t s;

    p.field_mask = ST_ENGINE_FIELD_DEVICE;
    p.device = device;
    if (cached) {
        p.field_mask |= ST_ENGINE_FIELD_CLIENT | ST_ENGINE_FIELD_KDA_INTERVAL;
        p.client = f->client;
        p.kda_interval = 4;
    }
    if (local_blocks) {
        p.field_mask |= ST_ENGINE_FIELD_LOCAL_BLOCKS;
        p.local_blocks = local_blocks;
    }
    s = st_engine_create(f->model, &p, &e);
    CHECK(s == ST_OK, "engine device=%u cached=%d local_blocks=%u: %s", device, cached,
          local_blocks, st_status_name(s));
    return e;
}

/* The device option's refusals: they need no device. */
static void test_refusals(void)
{
    st_model_config_t mc;
    st_model_t *m = NULL;
    st_engine_params_t p = {.field_mask = ST_ENGINE_FIELD_DEVICE};
    st_engine_t *e = NULL;

    st_model_config_gpu(&mc);
    mc.dsa_heads = 32; /* not a multiple of 64 */
    CHECK(st_model_create(&mc, &m) == ST_OK, "model with 32 DSA heads");
    p.device = ST_ENGINE_DEVICE_CUDA;
    CHECK(st_engine_create(m, &p, &e) == ST_ERR_INVALID, "cuda with 32 DSA heads is refused");
    p.device = ST_ENGINE_DEVICE_AUTO;
    CHECK(st_engine_create(m, &p, &e) == ST_OK, "auto with 32 DSA heads");
    CHECK(e && st_engine_device_used(e) == ST_ENGINE_DEVICE_CPU, "auto falls back to the CPU");
    st_engine_free(e);
    st_model_free(m);
    printf("# refusals checked\n");
}

/* GPU against CPU: same model and tokens, no cache. */
static void test_gpu_vs_cpu(fixture_t *f)
{
    uint32_t *t = prompt(700, 1), ic[N_DEC], ig[N_DEC];
    float lc[VOCAB], lg[VOCAB];
    st_engine_stats_t sc, sg;
    double d;
    int same = 0;

    CHECK(st_engine_run(f->cpu, t, 700, N_DEC, lc, ic, &sc) == ST_OK, "cpu run");
    CHECK(st_engine_run(f->gpu, t, 700, N_DEC, lg, ig, &sg) == ST_OK, "gpu run");
    d = rel_diff(lg, lc);
    while (same < N_DEC && ic[same] == ig[same]) {
        same++;
    }
    printf("# gpu vs cpu: 700 tokens rel_diff=%.3g greedy ids equal for %d of %d steps; "
           "cpu ttft %.1f ms decode %.2f ms/tok, gpu ttft %.1f ms decode %.2f ms/tok\n",
           d, same, N_DEC, sc.ttft_us / 1e3, sc.decode_us / 1e3 / N_DEC, sg.ttft_us / 1e3,
           sg.decode_us / 1e3 / N_DEC);
    CHECK(d <= TOL_DEV, "gpu vs cpu logits rel_diff %.3g > %g", d, TOL_DEV);
    CHECK(same == N_DEC, "greedy ids fork after %d of %d steps", same, N_DEC);
    CHECK(sc.rows_local > 0, "rows counted local: cpu %llu", (unsigned long long)sc.rows_local);
    {
        /* The chunked prefill on the device against the device's token-by-token path. */
        st_engine_params_t p = {.field_mask =
                                    ST_ENGINE_FIELD_DEVICE | ST_ENGINE_FIELD_PREFILL_CHUNK,
                                .device = ST_ENGINE_DEVICE_CUDA,
                                .prefill_chunk = 1};
        st_engine_t *tk = NULL;
        float lt[VOCAB];
        uint32_t it[N_DEC];
        st_engine_stats_t st;

        CHECK(st_engine_create(f->model, &p, &tk) == ST_OK, "gpu token-by-token engine");
        if (tk) {
            CHECK(st_engine_run(tk, t, 700, N_DEC, lt, it, &st) == ST_OK, "gpu token run");
            d = rel_diff(lg, lt);
            same = 0;
            while (same < N_DEC && it[same] == ig[same]) {
                same++;
            }
            printf("# gpu chunked vs gpu token by token: 700 tokens rel_diff=%.3g greedy ids equal "
                   "for %d of %d steps; ttft %.1f ms vs %.1f ms\n",
                   d, same, N_DEC, sg.ttft_us / 1e3, st.ttft_us / 1e3);
            CHECK(d <= TOL_DEV, "gpu chunked vs token logits rel_diff %.3g > %g", d, TOL_DEV);
            CHECK(same == N_DEC, "chunked and token greedy ids fork after %d of %d steps", same,
                  N_DEC);
            st_engine_free(tk);
        }
    }
    free(t);
}

/* Runs tok on e and on ref (a full recompute); returns e's stats and the difference. */
static st_engine_stats_t run_vs(st_engine_t *e, st_engine_t *ref, const uint32_t *tok, size_t n,
                                double tol, const char *what)
{
    float l[VOCAB], lr[VOCAB];
    uint32_t ids[4], idr[4];
    st_engine_stats_t s = {0}, sr;
    double d;

    CHECK(st_engine_run(e, tok, n, 4, l, ids, &s) == ST_OK, "%s: run", what);
    CHECK(st_engine_run(ref, tok, n, 4, lr, idr, &sr) == ST_OK, "%s: reference", what);
    d = rel_diff(l, lr);
    printf("# %-34s tokens=%zu resumed_blocks=%llu computed=%llu misses=%llu rows local=%llu "
           "remote=%llu written=%llu rel_diff=%.3g ttft=%.1f ms\n",
           what, n, (unsigned long long)s.resumed_blocks, (unsigned long long)s.computed_tokens,
           (unsigned long long)s.fetch_misses, (unsigned long long)s.rows_local,
           (unsigned long long)s.rows_remote, (unsigned long long)s.objects_written, d,
           s.ttft_us / 1e3);
    CHECK(d <= tol, "%s: rel_diff %.3g > %g", what, d, tol);
    if (tol <= TOL_SAME) {
        CHECK(memcmp(ids, idr, sizeof(ids)) == 0, "%s: greedy ids differ", what);
    }
    CHECK(s.write_failures == 0, "%s: %llu writes failed", what,
          (unsigned long long)s.write_failures);
    return s;
}

/*
 * The GPU engine writes a turn; it resumes it (equal to its full recompute),
 * with a bounded pool (remote rows), and a CPU engine resumes it too.
 */
static void test_gpu_objects(fixture_t *f)
{
    uint32_t *t = prompt(900, 2);
    st_engine_stats_t s;
    st_engine_t *pool;

    s = run_vs(f->gpu_c, f->gpu, t, 600, TOL_SAME, "gpu turn 1 (cold, writes)");
    CHECK(s.resumed_blocks == 0 && s.objects_written == 9 * 2 * 2 + 3,
          "turn 1 resumed %llu blocks, wrote %llu objects", (unsigned long long)s.resumed_blocks,
          (unsigned long long)s.objects_written);
    s = run_vs(f->gpu_c, f->gpu, t, 900, TOL_SAME, "gpu turn 2 (resumes turn 1)");
    CHECK(s.resumed_blocks == 9 && s.computed_tokens == 900 - 9 * 64 && s.fetch_misses == 0,
          "gpu turn 2 resumed %llu blocks", (unsigned long long)s.resumed_blocks);
    pool = engine(f, ST_ENGINE_DEVICE_CUDA, 1, 2);
    if (pool) {
        s = run_vs(pool, f->gpu, t, 900, TOL_DEV, "gpu pool 2 blocks (resumes)");
        CHECK(s.resumed_blocks == 14 && s.rows_remote > 0 && s.pool_fallbacks == 0,
              "gpu pool: resumed %llu blocks, %llu remote rows, %llu fallbacks",
              (unsigned long long)s.resumed_blocks, (unsigned long long)s.rows_remote,
              (unsigned long long)s.pool_fallbacks);
        st_engine_free(pool);
    }
    /* A CPU engine resumes what the GPU engine stored (the same namespace and model). */
    s = run_vs(f->cpu_c, f->cpu, t, 900, TOL_DEV, "cpu resumes the gpu's objects");
    CHECK(s.resumed_blocks == 14 && s.fetch_misses == 0, "cpu resumed %llu blocks, %llu misses",
          (unsigned long long)s.resumed_blocks, (unsigned long long)s.fetch_misses);
    free(t);
}

/* The reverse: a CPU turn, then the GPU engine resumes it (and a pooled cold GPU run). */
static void test_cpu_objects(fixture_t *f)
{
    uint32_t *t = prompt(900, 3), *c = prompt(600, 4);
    st_engine_stats_t s;
    st_engine_t *pool;

    s = run_vs(f->cpu_c, f->cpu, t, 600, TOL_SAME, "cpu turn 1 (cold, writes)");
    s = run_vs(f->gpu_c, f->gpu, t, 900, TOL_DEV, "gpu resumes the cpu's objects");
    CHECK(s.resumed_blocks == 9 && s.fetch_misses == 0, "gpu resumed %llu blocks, %llu misses",
          (unsigned long long)s.resumed_blocks, (unsigned long long)s.fetch_misses);
    pool = engine(f, ST_ENGINE_DEVICE_CUDA, 1, 2);
    if (pool) {
        /* Blocks leave the pool while the prompt computes and are read back. */
        s = run_vs(pool, f->gpu, c, 600, TOL_DEV, "gpu pool 2 blocks (cold)");
        CHECK(s.resumed_blocks == 0 && s.rows_remote > 0 && s.pool_fallbacks == 0,
              "gpu pool cold: %llu remote rows, %llu fallbacks", (unsigned long long)s.rows_remote,
              (unsigned long long)s.pool_fallbacks);
        st_engine_free(pool);
    }
    free(t);
    free(c);
}

/* Batched decode on the device against each engine alone. */
static void test_gpu_batch(fixture_t *f)
{
    enum { NB = 8, HIST = 576, TAILN = 40 };
    uint32_t *hist = prompt(HIST, 7), *tok[NB], *ids[NB], alone[N_DEC];
    size_t n[NB];
    float *lg[NB], la[VOCAB];
    st_engine_t *e[NB];
    st_engine_stats_t st[NB], s1;
    int bad = 0;

    /* The history written once, so that every prompt resumes it. */
    CHECK(st_engine_run(f->gpu_c, hist, HIST, 0, NULL, NULL, &s1) == ST_OK, "batch: history");
    for (int i = 0; i < NB; i++) {
        uint32_t *tail = prompt(TAILN + (size_t)i, 100 + (uint32_t)i);

        e[i] = engine(f, ST_ENGINE_DEVICE_CUDA, 1, 0);
        n[i] = HIST + TAILN + (size_t)i;
        tok[i] = malloc(sizeof(uint32_t) * n[i]);
        ids[i] = calloc(N_DEC, sizeof(uint32_t));
        lg[i] = malloc(sizeof(float) * VOCAB);
        memcpy(tok[i], hist, sizeof(uint32_t) * HIST);
        memcpy(tok[i] + HIST, tail, sizeof(uint32_t) * (TAILN + (size_t)i));
        free(tail);
    }
    CHECK(st_engine_run_batch(e, NB, (const uint32_t *const *)tok, n, N_DEC, lg, ids, st) == ST_OK,
          "batch: st_engine_run_batch");
    for (int i = 0; i < NB; i++) {
        CHECK(st[i].resumed_blocks == HIST / 64, "batch: engine %d resumed %llu blocks", i,
              (unsigned long long)st[i].resumed_blocks);
        CHECK(st_engine_run(e[i], tok[i], n[i], N_DEC, la, alone, &s1) == ST_OK, "batch: alone %d",
              i);
        bad += memcmp(la, lg[i], sizeof(la)) != 0 || memcmp(alone, ids[i], sizeof(alone)) != 0;
    }
    CHECK(bad == 0, "batch: %d of %d engines differ from their runs alone", bad, NB);
    printf("# gpu batch of %d                    resumed=%llu blocks each, decode %.3f ms/step "
           "(%.0f tokens/s), alone %.3f ms/token; %d differ\n",
           NB, (unsigned long long)st[0].resumed_blocks, st[0].decode_us / 1e3 / N_DEC,
           NB * N_DEC / (st[0].decode_us / 1e6), s1.decode_us / 1e3 / N_DEC, bad);
    for (int i = 0; i < NB; i++) {
        st_engine_free(e[i]);
        free(tok[i]), free(ids[i]), free(lg[i]);
    }
    free(hist);
}

int main(int argc, char **argv)
{
    fixture_t f = {0};
    st_client_params_t p = {0};
    st_model_config_t mc;

    if (argc < 2) {
        fprintf(stderr, "usage: test_engine_gpu PATH-TO-STRATAD\n");
        return 2;
    }
    test_refusals();
    if (st_cuda_available() != ST_OK) {
        printf("SKIP: no usable CUDA device (cudaGetDeviceCount found none); the engine's CUDA "
               "path needs one\n");
        return failures ? 1 : 77;
    }
    if (tc_start(&f.cl, argv[1], N_NODES, "--segment-blocks 4") != 0) {
        printf("FAIL: the cluster did not start\n");
        return 1;
    }
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL |
                   ST_CLIENT_FIELD_HEALTH_INTERVAL | ST_CLIENT_FIELD_TIMEOUT;
    p.nodes = f.cl.peers;
    p.tenant = "acme";
    p.model = "reference-gpu";
    p.health_interval_ms = 100;
    p.timeout_ms = 30000;
    CHECK(st_client_connect(&p, &f.client) == ST_OK, "connect");
    st_model_config_gpu(&mc);
    CHECK(st_model_create(&mc, &f.model) == ST_OK, "gpu shape");
    f.cpu = engine(&f, ST_ENGINE_DEVICE_CPU, 0, 0);
    f.gpu = engine(&f, ST_ENGINE_DEVICE_CUDA, 0, 0);
    f.cpu_c = engine(&f, ST_ENGINE_DEVICE_CPU, 1, 0);
    f.gpu_c = engine(&f, ST_ENGINE_DEVICE_CUDA, 1, 0);
    if (failures == 0) {
        CHECK(st_engine_device_used(f.gpu) == ST_ENGINE_DEVICE_CUDA, "gpu engine on cuda");
        test_gpu_vs_cpu(&f);
        test_gpu_objects(&f);
        test_cpu_objects(&f);
        test_gpu_batch(&f);
    }
    st_engine_free(f.gpu_c);
    st_engine_free(f.cpu_c);
    st_engine_free(f.gpu);
    st_engine_free(f.cpu);
    st_model_free(f.model);
    st_client_close(f.client);
    tc_stop_all(&f.cl);
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
