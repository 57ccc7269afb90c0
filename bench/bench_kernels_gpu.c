/*
 * bench_kernels_gpu.c - the CUDA kernels on the device against its limits,
 * measured in the same run: HBM bandwidth (a device-to-device copy) and the
 * bf16 tensor rate (a cuBLAS 8192^3 GEMM). Prints one line per result.
 * Usage: bench_kernels_gpu [reps [attn|indexer|kda [limits]]]   (docs/performance.md,
 * "Kernels"); a section name runs only that section (for profiling one kernel under ncu), with
 * the nominal limits unless "limits" follows it. Variant knobs
 * (docs/kernels.md) are timed side by side.
 */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "strata/kernels.h"

#define CK(x)                                                               \
    do {                                                                    \
        if ((x) != 0) {                                                     \
            fprintf(stderr, "bench: %s failed at line %d\n", #x, __LINE__); \
            exit(1);                                                        \
        }                                                                   \
    } while (0)

static int reps = 20;
static cudaEvent_t ev0, ev1;

typedef void (*bench_fn)(void *ctx);

/* Median seconds of reps timed runs after two warm-ups. */
static double time_gpu(bench_fn fn, void *ctx)
{
    double *t = malloc(sizeof(double) * reps);
    fn(ctx);
    fn(ctx);
    for (int i = 0; i < reps; i++) {
        float ms = 0;
        CK(cudaEventRecord(ev0, 0));
        fn(ctx);
        CK(cudaEventRecord(ev1, 0));
        CK(cudaEventSynchronize(ev1));
        CK(cudaEventElapsedTime(&ms, ev0, ev1));
        t[i] = ms * 1e-3;
    }
    CK(cudaGetLastError());
    bench_stats_t st;
    bench_stats(t, reps, &st);
    free(t);
    return st.median;
}

static uint64_t rng = 88172645463325252ull;
static float frand(float lo, float hi)
{
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}

static void *dmalloc(size_t bytes)
{
    void *p = NULL;
    CK(cudaMalloc(&p, bytes));
    return p;
}

static void *dcopy(const void *h, size_t bytes)
{
    void *p = dmalloc(bytes);
    CK(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
    return p;
}

/* ---- limits ---- */
typedef struct {
    void *a, *b;
    size_t n;
} copy_ctx;
static void run_copy(void *c)
{
    copy_ctx *x = c;
    CK(cudaMemcpyAsync(x->b, x->a, x->n, cudaMemcpyDeviceToDevice, 0));
}

typedef struct {
    cublasHandle_t h;
    void *a, *b, *c;
    int n;
} gemm_ctx;
static void run_gemm(void *c)
{
    gemm_ctx *x = c;
    float one = 1.0f, zero = 0.0f;
    CK(cublasGemmEx(x->h, CUBLAS_OP_N, CUBLAS_OP_N, x->n, x->n, x->n, &one, x->a, CUDA_R_16BF, x->n,
                    x->b, CUDA_R_16BF, x->n, &zero, x->c, CUDA_R_16BF, x->n, CUBLAS_COMPUTE_32F,
                    CUBLAS_GEMM_DEFAULT));
}

/* ---- sparse decode attention ---- */
typedef struct {
    uint16_t *q;
    const uint16_t **rows;
    float *out, *lse;
    int batch, heads, n_rows;
} attn_ctx;
static void run_attn(void *c)
{
    attn_ctx *x = c;
    CK(st_cuda_sparse_attn_bf16(x->q, x->batch, x->heads, x->rows, x->n_rows, 0.0723f, x->out,
                                x->lse, NULL));
}

/* ---- indexer ---- */
typedef struct {
    float *q, *w, *scale, *summary, *scores, *bound;
    uint8_t *k8;
    int n_keys, k;
    void *ws;
    size_t wsb;
    int32_t *idx;
    cudaStream_t stream;
    cudaGraphExec_t graph;
} idx_ctx;
static void run_topk(void *c)
{
    idx_ctx *x = c;
    CK(st_cuda_indexer_topk_fp8(x->q, x->w, 64, x->k8, x->scale, x->summary, x->n_keys, 64, x->k,
                                x->ws, x->wsb, x->idx, NULL, x->stream));
}
static void run_graph(void *c)
{
    idx_ctx *x = c;
    CK(cudaGraphLaunch(x->graph, x->stream));
}
static void run_dense(void *c)
{
    idx_ctx *x = c;
    CK(st_cuda_indexer_scores_fp8(x->q, x->w, 1, 64, 128, x->k8, x->scale, x->n_keys, x->scores,
                                  NULL));
}
static void run_bounds(void *c)
{
    idx_ctx *x = c;
    CK(st_cuda_block_bounds(x->q, x->w, 64, 128, x->summary, x->n_keys / 64, x->bound, NULL));
}

/* ---- KDA ---- */
typedef struct {
    float *state, *q, *k, *v, *g, *beta, *out;
    int heads, n_tok;
} kda_ctx;
static void run_kda_decode(void *c)
{
    kda_ctx *x = c;
    CK(st_cuda_kda_decode(x->state, x->q, x->k, x->v, x->g, x->beta, x->heads, 128, 128, -5.0f,
                          x->out, NULL));
}
static void run_kda_prefill(void *c)
{
    kda_ctx *x = c;
    CK(st_cuda_kda_prefill(x->state, x->q, x->k, x->v, x->g, x->beta, x->n_tok, x->heads, 128, 128,
                           -5.0f, x->out, NULL));
}

static float *dev_random(size_t n, float lo, float hi)
{
    float *h = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
        h[i] = frand(lo, hi);
    }
    float *d = dcopy(h, sizeof(float) * n);
    free(h);
    return d;
}

/* Times fn with the environment variable name set to value (NULL: unset). */
static double time_variant(bench_fn fn, void *ctx, const char *name, const char *value)
{
    if (value) {
        setenv(name, value, 1);
    } else {
        unsetenv(name);
    }
    double t = time_gpu(fn, ctx);
    unsetenv(name);
    return t;
}

/* Random bf16 values in [-1, 1) (the high half of random floats). */
static void fill_bf16(uint16_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float f = frand(-1, 1);
        uint32_t u;
        memcpy(&u, &f, 4);
        p[i] = (uint16_t)(u >> 16);
    }
}

/* The device's limits, measured: HBM copy bandwidth (*bw, bytes/s) and the
 * bf16 tensor rate (*rate, FLOP/s). */
static void bench_limits(double *bw, double *rate)
{
    copy_ctx cc = {dmalloc(2ull << 30), dmalloc(2ull << 30), 2ull << 30};
    CK(cudaMemset(cc.a, 1, cc.n));
    double t = time_gpu(run_copy, &cc);
    *bw = 2.0 * cc.n / t;
    printf("limit hbm_copy_bw=%.0f GB/s (read+write of %zu MiB in %.1f us)\n", *bw / 1e9,
           cc.n >> 20, t * 1e6);
    cudaFree(cc.a), cudaFree(cc.b);
    gemm_ctx gc = {NULL, NULL, NULL, NULL, 8192};
    CK(cublasCreate(&gc.h));
    size_t gbytes = (size_t)gc.n * gc.n * 2;
    uint16_t *hb = malloc(gbytes);
    fill_bf16(hb, (size_t)gc.n * gc.n);
    gc.a = dcopy(hb, gbytes), gc.b = dcopy(hb, gbytes), gc.c = dmalloc(gbytes);
    free(hb);
    t = time_gpu(run_gemm, &gc);
    *rate = 2.0 * gc.n * (double)gc.n * gc.n / t;
    printf("limit bf16_tensor=%.0f TFLOP/s (cuBLAS %d^3 GEMM, random data)\n", *rate / 1e12, gc.n);
    cudaFree(gc.a), cudaFree(gc.b), cudaFree(gc.c);
    cublasDestroy(gc.h);
}

/* Sparse decode attention: batch 64, 128 heads, 2048 rows of 576 bf16, scattered. */
static void bench_attn(double bw, double rate)
{
    int B = 64, H = 128, R = 2048;
    size_t pool_rows = (size_t)B * R;
    uint16_t *pool = dmalloc(pool_rows * 576 * 2);
    uint16_t *hrow = malloc(pool_rows * 576 * 2);
    fill_bf16(hrow, pool_rows * 576);
    CK(cudaMemcpy(pool, hrow, pool_rows * 576 * 2, cudaMemcpyHostToDevice));
    uint16_t *q = dcopy(hrow, (size_t)B * H * 576 * 2);
    free(hrow);
    const uint16_t **hp = malloc(sizeof(void *) * pool_rows);
    int32_t *perm = malloc(sizeof(int32_t) * pool_rows);
    for (size_t i = 0; i < pool_rows; i++) {
        perm[i] = (int32_t)i;
    }
    for (size_t i = pool_rows - 1; i > 0; i--) {
        size_t j = (size_t)(frand(0, 1) * (i + 1)) % (i + 1);
        int32_t x = perm[i];
        perm[i] = perm[j], perm[j] = x;
    }
    for (size_t i = 0; i < pool_rows; i++) {
        hp[i] = pool + (size_t)perm[i] * 576;
    }
    attn_ctx ac = {q,
                   dcopy(hp, sizeof(void *) * pool_rows),
                   dmalloc((size_t)B * H * 512 * 4),
                   dmalloc((size_t)B * H * 4),
                   B,
                   H,
                   R};
    double bytes = (double)pool_rows * 576 * 2 + (double)B * H * 576 * 2 + (double)B * H * 512 * 4 +
                   (double)B * H * 4 + (double)pool_rows * 8;
    double flops = 2.0 * B * H * (double)R * (576 + 512);
    double roof = fmax(bytes / bw, flops / rate);
    double t = time_gpu(run_attn, &ac);
    printf("sparse_attn batch=%d heads=%d rows=%d: %.1f us, %.0f TFLOP/s, %.0f GB/s; "
           "roofline %.1f us (bytes %.1f us, flops %.1f us) -> %.0f%% of roofline\n",
           B, H, R, t * 1e6, flops / t / 1e12, bytes / t / 1e9, roof * 1e6, bytes / bw * 1e6,
           flops / rate * 1e6, 100.0 * roof / t);
    /* The variants (docs/kernels.md §3): the serial loop, and the L2 prefetch distance. */
    static const char *attn_knobs[][2] = {{"STRATA_KN_ATTN", "serial"},
                                          {"STRATA_KN_ATTN_PF", "1"},
                                          {"STRATA_KN_ATTN_PF", "2"},
                                          {"STRATA_KN_ATTN_PF", "3"}};
    for (int kv = 0; kv < 4; kv++) {
        double tv = time_variant(run_attn, &ac, attn_knobs[kv][0], attn_knobs[kv][1]);
        printf("sparse_attn %s=%s: %.1f us -> %.0f%% of roofline\n", attn_knobs[kv][0],
               attn_knobs[kv][1], tv * 1e6, 100.0 * roof / tv);
    }
    cudaFree(pool), cudaFree(q), cudaFree((void *)ac.rows), cudaFree(ac.out), cudaFree(ac.lse);
    free(hp), free(perm);
}

/* The indexer's variants, one or two knobs at a time (docs/kernels.md). The
 * default (auto) takes the dense path; the seed knob only acts on the
 * two-stage path. */
static void bench_topk_variants(idx_ctx *ic, int structured)
{
    static const char *knobs[][4] = {{"STRATA_KN_TOPK", "dense", NULL, NULL},
                                     {"STRATA_KN_TOPK", "twostage", NULL, NULL},
                                     {"STRATA_KN_DENSE_RING", "3", NULL, NULL},
                                     {"STRATA_KN_SCORER", "mma", NULL, NULL},
                                     {"STRATA_KN_SCORER", "mma", "STRATA_KN_TOPK", "twostage"},
                                     {"STRATA_KN_SEED", "1", "STRATA_KN_TOPK", "twostage"},
                                     {"STRATA_KN_SEED", "4", "STRATA_KN_TOPK", "twostage"},
                                     {"STRATA_KN_SEED", "8", "STRATA_KN_TOPK", "twostage"}};
    for (int kv = 0; kv < 8; kv++) {
        if (knobs[kv][2]) {
            setenv(knobs[kv][2], knobs[kv][3], 1);
        }
        double tv = time_variant(run_topk, ic, knobs[kv][0], knobs[kv][1]);
        printf("  indexer_topk keys=%s %s=%s%s%s%s%s: %.1f us",
               structured ? "structured" : "random", knobs[kv][0], knobs[kv][1],
               knobs[kv][2] ? " " : "", knobs[kv][2] ? knobs[kv][2] : "", knobs[kv][2] ? "=" : "",
               knobs[kv][2] ? knobs[kv][3] : "", tv * 1e6);
        if (kv == 3) {
            printf("; dense fp8 scoring alone %.1f us",
                   time_variant(run_dense, ic, knobs[kv][0], knobs[kv][1]) * 1e6);
        }
        printf("\n");
        if (knobs[kv][2]) {
            unsetenv(knobs[kv][2]);
        }
    }
}

/* Each path captured once as a CUDA graph: no launch gaps between its
 * kernels. tgr[0]: the dense path, tgr[1]: the two-stage one. */
static void bench_topk_graphs(idx_ctx *ic, double tgr[2])
{
    for (int path = 0; path < 2; path++) {
        setenv("STRATA_KN_TOPK", path ? "twostage" : "dense", 1);
        cudaGraph_t g;
        CK(cudaStreamCreate(&ic->stream));
        CK(cudaStreamBeginCapture(ic->stream, cudaStreamCaptureModeRelaxed));
        run_topk(ic);
        CK(cudaStreamEndCapture(ic->stream, &g));
        CK(cudaGraphInstantiate(&ic->graph, g, 0));
        tgr[path] = time_gpu(run_graph, ic);
        CK(cudaGraphExecDestroy(ic->graph));
        CK(cudaGraphDestroy(g));
        CK(cudaStreamDestroy(ic->stream));
        ic->stream = NULL;
        unsetenv("STRATA_KN_TOPK");
    }
}

/* Indexer + exact top-k over 1M tokens, one query, 64 heads, k = 2048: both paths. */
static void bench_indexer(double bw)
{
    int N = 1 << 20, nb = N / 64;
    uint8_t *hk = malloc((size_t)N * 128);
    float *hs = malloc(sizeof(float) * N);
    for (size_t i = 0; i < (size_t)N * 128; i++) {
        int sg = frand(0, 1) < 0.5f, ex = 4 + (int)(frand(0, 1) * 6) % 6;
        hk[i] = (uint8_t)(sg << 7 | ex << 3 | ((int)(frand(0, 8)) & 7));
    }
    idx_ctx ic;
    ic.n_keys = N, ic.k = 2048;
    ic.q = dev_random(64 * 128, -1, 1), ic.w = dev_random(64, -0.2f, 1);
    ic.k8 = dcopy(hk, (size_t)N * 128);
    ic.summary = dmalloc((size_t)nb * 2 * 128 * 4);
    ic.scores = dmalloc((size_t)N * 4), ic.bound = dmalloc((size_t)nb * 4);
    ic.wsb = st_cuda_indexer_topk_workspace(N, 64), ic.ws = dmalloc(ic.wsb);
    ic.idx = dmalloc(4 * 2048);
    double read_all = ((double)N * 132) / bw;
    for (int structured = 0; structured < 2; structured++) {
        for (int b = 0; b < nb; b++) {
            /* structured: 2% of the blocks hold keys 200x larger than the rest (a stand-in for
                 * the locality of real attention); random: every block alike, nothing prunes */
            float boost = structured ? (frand(0, 1) < 0.02f ? 4.0f : 0.02f) : 1.0f;
            for (int r = b * 64; r < (b + 1) * 64; r++) {
                hs[r] = boost * frand(0.01f, 0.05f);
            }
        }
        ic.scale = dcopy(hs, sizeof(float) * N);
        CK(st_cuda_block_summary_fp8(ic.k8, ic.scale, N, 128, 64, ic.summary, NULL));
        ic.stream = NULL;
        double tt = time_gpu(run_topk, &ic), td = time_gpu(run_dense, &ic);
        double tb = time_gpu(run_bounds, &ic);
        double tgr[2];

        bench_topk_variants(&ic, structured);
        bench_topk_graphs(&ic, tgr);
        printf("indexer_topk 1M tokens k=2048 keys=%s: default (auto) %.1f us; as a CUDA graph: "
               "dense path %.1f us, two-stage %.1f us (goal < 100); dense fp8 scoring alone "
               "%.1f us; block bounds alone %.1f us; reading every key once %.1f us\n",
               structured ? "structured" : "random", tt * 1e6, tgr[0] * 1e6, tgr[1] * 1e6, td * 1e6,
               tb * 1e6, read_all * 1e6);
        cudaFree(ic.scale);
    }
    free(hk), free(hs);
    cudaFree(ic.q), cudaFree(ic.w), cudaFree(ic.k8), cudaFree(ic.summary);
    cudaFree(ic.scores), cudaFree(ic.bound), cudaFree(ic.ws), cudaFree(ic.idx);
}

/* KDA: decode step for 16 sequences x 96 heads; chunked prefill of 8192 tokens x 96 heads. */
static void bench_kda(double bw)
{
    int Hd = 16 * 96;
    kda_ctx kc = {dev_random((size_t)Hd * 128 * 128, -0.1f, 0.1f),
                  dev_random(Hd * 128, -1, 1),
                  dev_random(Hd * 128, -1, 1),
                  dev_random(Hd * 128, -1, 1),
                  dev_random(Hd * 128, -1, 0),
                  dev_random(Hd, 0, 1),
                  dmalloc(Hd * 128 * 4),
                  Hd,
                  1};
    double t = time_gpu(run_kda_decode, &kc);
    double bytes = 2.0 * Hd * 128 * 128 * 4;
    printf("kda_decode %d heads (16 seqs x 96): %.1f us per step, %.0f GB/s state traffic "
           "(%.0f%% of copy bandwidth)\n",
           Hd, t * 1e6, bytes / t / 1e9, 100.0 * bytes / t / bw);
    cudaFree(kc.state), cudaFree(kc.q), cudaFree(kc.k), cudaFree(kc.v), cudaFree(kc.g);
    cudaFree(kc.beta), cudaFree(kc.out);
    int T = 8192, Hp = 96;
    size_t nk = (size_t)T * Hp * 128;
    kda_ctx pc = {dev_random((size_t)Hp * 128 * 128, -0.1f, 0.1f),
                  dev_random(nk, -1, 1),
                  dev_random(nk, -1, 1),
                  dev_random(nk, -1, 1),
                  dev_random(nk, -1, 0),
                  dev_random((size_t)T * Hp, 0, 1),
                  dmalloc(nk * 4),
                  Hp,
                  T};
    int saved = reps;
    reps = 5;
    t = time_gpu(run_kda_prefill, &pc);
    reps = saved;
    printf("kda_prefill %d tokens x %d heads, chunk 64: %.1f ms, %.2f us per token "
           "(all heads)\n",
           T, Hp, t * 1e3, t * 1e6 / T);
    /* The same tokens by the recurrent step, for comparison (96 heads, one sequence). */
    kda_ctx rc = pc;
    rc.n_tok = 1;
    t = time_gpu(run_kda_decode, &rc);
    printf("kda_decode 96 heads (1 seq): %.2f us per token, i.e. recurrent prefill would "
           "take %.1f ms for %d tokens\n",
           t * 1e6, t * 1e3 * T, T);
    cudaFree(pc.state), cudaFree(pc.q), cudaFree(pc.k), cudaFree(pc.v), cudaFree(pc.g);
    cudaFree(pc.beta), cudaFree(pc.out);
}

int main(int argc, char **argv)
{
    const char *only = argc > 2 ? argv[2] : NULL;
    if (argc > 1) {
        reps = atoi(argv[1]) > 0 ? atoi(argv[1]) : reps;
    }
    if (st_cuda_available() != ST_OK) {
        printf("SKIP: no usable CUDA device\n");
        return 77;
    }
    struct cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    CK(cudaEventCreate(&ev0));
    CK(cudaEventCreate(&ev1));

    /* Limits (skipped when one section runs alone, unless a third argument "limits" asks for
     * them: nominal values then). */
    double bw = 4.2e12, rate = 782e12;
    if (!only || (argc > 3 && strcmp(argv[3], "limits") == 0)) {
        bench_limits(&bw, &rate);
    }

    if (!only || strcmp(only, "attn") == 0) {
        bench_attn(bw, rate);
    }

    if (!only || strcmp(only, "indexer") == 0) {
        bench_indexer(bw);
    }

    if (!only || strcmp(only, "kda") == 0) {
        bench_kda(bw);
    }
    return 0;
}
