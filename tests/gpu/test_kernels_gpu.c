/*
 * test_kernels_gpu.c - the CUDA kernels against the double references (and the
 * CPU kernels) on fresh random inputs. Exits 77 (skip) when no CUDA device is
 * usable. Bounds (docs/kernels.md): fp32 paths 1e-5; fp8 indexer 5e-3 (q in
 * fp16); bf16 attention 1e-2 for the output (P in bf16), 1e-4 for the lse.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strata/kernels.h"
#include "../unit/test_kernels_util.h"
#include "../support/fail_count.h"

static int failures;

#define CUDA_OK(call) CHECK((call) == cudaSuccess, "%s", #call)

static void *dev_copy(const void *host, size_t bytes)
{
    void *d = NULL;
    CUDA_OK(cudaMalloc(&d, bytes));
    if (host) {
        CUDA_OK(cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice));
    }
    return d;
}

static void host_copy(void *host, const void *dev, size_t bytes)
{
    CUDA_OK(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
}

/* e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits. */
static float e4m3_decode(uint8_t b)
{
    int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
    float v = e == 0 ? ldexpf((float)m / 8.0f, -6) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return s ? -v : v;
}

static uint16_t bf16_from(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float bf16_to(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

typedef struct {
    float s;
    int32_t i;
} rank_t;

static int cmp_rank(const void *a, const void *b)
{
    const rank_t *x = a, *y = b;
    if (x->s != y->s) {
        return x->s > y->s ? -1 : 1;
    }
    return x->i - y->i;
}

static int cmp_f32_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

static void test_indexer(void)
{
    int n_q = 2, H = 64, D = 128, N = 5000;
    size_t nqd = (size_t)n_q * H * D;
    float *q = malloc(sizeof(float) * nqd), *w = malloc(sizeof(float) * n_q * H);
    float *keys = malloc(sizeof(float) * N * D), *kscale = malloc(sizeof(float) * N);
    uint8_t *k8 = malloc((size_t)N * D);
    float *s = malloc(sizeof(float) * n_q * N);
    double *ref = malloc(sizeof(double) * n_q * N);
    tk_fill(q, nqd, -1, 1);
    tk_fill(w, (size_t)n_q * H, -1, 1);
    tk_fill(keys, (size_t)N * D, -1, 1);
    float *dq = dev_copy(q, sizeof(float) * nqd), *dw = dev_copy(w, sizeof(float) * n_q * H);
    float *dk = dev_copy(keys, sizeof(float) * N * D),
          *ds = dev_copy(NULL, sizeof(float) * n_q * N);
    CHECK(st_cuda_indexer_scores(dq, dw, n_q, H, D, dk, N, ds, NULL) == ST_OK, "fp32 launch");
    host_copy(s, ds, sizeof(float) * n_q * N);
    st_ref_indexer_scores(q, w, n_q, H, D, keys, N, ref);
    double e = tk_rel_err(s, ref, (size_t)n_q * N);
    printf("# gpu indexer fp32 rel_err=%.3g\n", e);
    CHECK(e <= 1e-5, "fp32 indexer rel_err %.3g", e);

    /* fp8 keys: exponents 4..9 (values 1/8 .. 8), per-row scales. */
    for (size_t i = 0; i < (size_t)N * D; i++) {
        int sg = tk_uniform() < 0.5, ex = 4 + (int)(tk_uniform() * 6), m = (int)(tk_uniform() * 8);
        k8[i] = (uint8_t)(sg << 7 | ex << 3 | m);
    }
    for (int r = 0; r < N; r++) {
        kscale[r] = tk_range(0.01, 0.2);
        for (int c = 0; c < D; c++) {
            keys[(size_t)r * D + c] = e4m3_decode(k8[(size_t)r * D + c]) * kscale[r];
        }
    }
    uint8_t *dk8 = dev_copy(k8, (size_t)N * D);
    float *dsc = dev_copy(kscale, sizeof(float) * N);
    CHECK(st_cuda_indexer_scores_fp8(dq, dw, n_q, H, D, dk8, dsc, N, ds, NULL) == ST_OK, "fp8");
    host_copy(s, ds, sizeof(float) * n_q * N);
    st_ref_indexer_scores(q, w, n_q, H, D, keys, N, ref);
    e = tk_rel_err(s, ref, (size_t)n_q * N);
    printf("# gpu indexer fp8 rel_err=%.3g (bound 5e-3)\n", e);
    CHECK(e <= 5e-3, "fp8 indexer rel_err %.3g", e);

    /* Bounds hold for every row; two-stage top-k equals the exact top-k of the dense scores. */
    int B = 64, nb = (N + B - 1) / B, K = 700;
    for (int structured = 0; structured < 2; structured++) {
        if (structured) {
            for (int b = 0; b < nb; b++) {
                float boost = tk_uniform() < 0.1 ? 4.0f : 0.3f;
                for (int r = b * B; r < N && r < (b + 1) * B; r++) {
                    kscale[r] = boost * tk_range(0.01, 0.05);
                }
            }
            CUDA_OK(cudaMemcpy(dsc, kscale, sizeof(float) * N, cudaMemcpyHostToDevice));
        }
        float *dsum = dev_copy(NULL, sizeof(float) * nb * 2 * D),
              *dbound = dev_copy(NULL, sizeof(float) * nb);
        float *bound = malloc(sizeof(float) * nb);
        CHECK(st_cuda_block_summary_fp8(dk8, dsc, N, D, B, dsum, NULL) == ST_OK, "summary");
        CHECK(st_cuda_block_bounds(dq, dw, H, D, dsum, nb, dbound, NULL) == ST_OK, "bounds");
        CHECK(st_cuda_indexer_scores_fp8(dq, dw, 1, H, D, dk8, dsc, N, ds, NULL) == ST_OK, "fp8");
        host_copy(bound, dbound, sizeof(float) * nb);
        host_copy(s, ds, sizeof(float) * N);
        int bad = 0;
        for (int r = 0; r < N; r++) {
            bad += s[r] > bound[r / B];
        }
        CHECK(bad == 0, "%d rows above their block bound", bad);
        size_t wsb = st_cuda_indexer_topk_workspace(N, B);
        void *ws = dev_copy(NULL, wsb);
        int32_t *didx = dev_copy(NULL, sizeof(int32_t) * K), *idx = malloc(sizeof(int32_t) * K);
        CHECK(st_cuda_indexer_topk_fp8(dq, dw, H, dk8, dsc, dsum, N, B, K, ws, wsb, didx, NULL,
                                       NULL) == ST_OK,
              "topk launch");
        host_copy(idx, didx, sizeof(int32_t) * K);
        rank_t *all = malloc(sizeof(rank_t) * N);
        for (int r = 0; r < N; r++) {
            all[r].s = s[r];
            all[r].i = r;
        }
        qsort(all, N, sizeof(rank_t), cmp_rank);
        int32_t *want = malloc(sizeof(int32_t) * K);
        for (int i = 0; i < K; i++) {
            want[i] = all[i].i;
        }
        qsort(want, K, sizeof(int32_t), cmp_i32);
        qsort(idx, K, sizeof(int32_t), cmp_i32);
        int diff = 0;
        for (int i = 0; i < K; i++) {
            diff += idx[i] != want[i];
        }
        printf("# gpu topk structured=%d k=%d mismatches=%d\n", structured, K, diff);
        CHECK(diff == 0, "gpu two-stage top-k differs from exact top-k in %d rows", diff);
        cudaFree(dsum), cudaFree(dbound), cudaFree(ws), cudaFree(didx);
        free(bound), free(idx), free(all), free(want);
    }
    cudaFree(dq), cudaFree(dw), cudaFree(dk), cudaFree(ds), cudaFree(dk8), cudaFree(dsc);
    free(q), free(w), free(keys), free(kscale), free(k8), free(s), free(ref);
}

enum { AH = 128, DQK = 576, DV = 512 };

static void test_attention(void)
{
    /* Row counts: partial last tile, many tiles, one short tile, exactly one tile, one row past
     * two tiles. */
    const int nbatch = 2, nrow_cases[] = {300, 2048, 7, 64, 129};
    for (int ci = 0; ci < 5; ci++) {
        int NR = nrow_cases[ci], pool_rows = 2 * NR + 8;
        size_t nq = (size_t)nbatch * AH * DQK;
        uint16_t *q = malloc(2 * nq), *pool = malloc((size_t)2 * pool_rows * DQK);
        float *qf = malloc(sizeof(float) * nq), *poolf = malloc(sizeof(float) * pool_rows * DQK);
        for (size_t i = 0; i < nq; i++) {
            q[i] = bf16_from(tk_range(-1, 1));
            qf[i] = bf16_to(q[i]);
        }
        for (size_t i = 0; i < (size_t)pool_rows * DQK; i++) {
            pool[i] = bf16_from(tk_range(-1, 1));
            poolf[i] = bf16_to(pool[i]);
        }
        uint16_t *dq = dev_copy(q, 2 * nq), *dpool = dev_copy(pool, (size_t)2 * pool_rows * DQK);
        /* Row pointers scattered over the buffer, in random order, per batch entry. */
        const uint16_t **rp = malloc(sizeof(void *) * nbatch * NR);
        const float **rf = malloc(sizeof(void *) * nbatch * NR);
        for (int i = 0; i < nbatch * NR; i++) {
            int slot = (int)(tk_uniform() * pool_rows);
            rp[i] = dpool + (size_t)slot * DQK;
            rf[i] = poolf + (size_t)slot * DQK;
        }
        const uint16_t **drp = dev_copy(rp, sizeof(void *) * nbatch * NR);
        size_t no = (size_t)nbatch * AH * DV;
        float *dout = dev_copy(NULL, sizeof(float) * no),
              *dlse = dev_copy(NULL, sizeof(float) * nbatch * AH);
        float *out = malloc(sizeof(float) * no), *lse = malloc(sizeof(float) * nbatch * AH);
        double *rout = malloc(sizeof(double) * no), *rlse = malloc(sizeof(double) * nbatch * AH);
        float scale = 1.0f / sqrtf(192.0f);
        /* Poisoned (NaN) first, so that an unwritten element fails. */
        CUDA_OK(cudaMemset(dout, 0xff, sizeof(float) * no));
        CUDA_OK(cudaMemset(dlse, 0xff, sizeof(float) * nbatch * AH));
        CHECK(st_cuda_sparse_attn_bf16(dq, nbatch, AH, drp, NR, scale, dout, dlse, NULL) == ST_OK,
              "attn launch");
        host_copy(out, dout, sizeof(float) * no);
        host_copy(lse, dlse, sizeof(float) * nbatch * AH);
        for (int b = 0; b < nbatch; b++) {
            st_ref_sparse_attn(qf + (size_t)b * AH * DQK, AH, DQK, DV, rf + (size_t)b * NR, NR,
                               scale, rout + (size_t)b * AH * DV, rlse + (size_t)b * AH);
        }
        double eo = tk_rel_err(out, rout, no), el = tk_rel_err(lse, rlse, (size_t)nbatch * AH);
        printf("# gpu attn rows=%d out rel_err=%.3g lse rel_err=%.3g\n", NR, eo, el);
        CHECK(eo <= 1e-2 && el <= 1e-4, "attention rows=%d out %.3g lse %.3g", NR, eo, el);

        /* Split into three parts at random cuts (one may be empty), merged on the device. */
        int c1 = (int)(tk_uniform() * (NR + 1)), c2 = (int)(tk_uniform() * (NR + 1));
        if (c1 > c2) {
            int t = c1;
            c1 = c2, c2 = t;
        }
        int cuts[4] = {0, c1, c2, NR};
        float *pout = dev_copy(NULL, sizeof(float) * no),
              *plse = dev_copy(NULL, sizeof(float) * nbatch * AH);
        float *aout = dev_copy(NULL, sizeof(float) * no),
              *alse = dev_copy(NULL, sizeof(float) * nbatch * AH);
        for (int part = 2; part >= 0; part--) { /* merged in reverse order */
            int n = cuts[part + 1] - cuts[part];
            const uint16_t **sub = malloc(sizeof(void *) * nbatch * (n > 0 ? n : 1));
            for (int b = 0; b < nbatch; b++) {
                for (int r = 0; r < n; r++) {
                    sub[b * n + r] = rp[b * NR + cuts[part] + r];
                }
            }
            const uint16_t **dsub = dev_copy(sub, sizeof(void *) * nbatch * (n > 0 ? n : 1));
            float *o = part == 2 ? aout : pout, *l = part == 2 ? alse : plse;
            CHECK(st_cuda_sparse_attn_bf16(dq, nbatch, AH, dsub, n, scale, o, l, NULL) == ST_OK,
                  "part");
            if (part != 2) {
                CHECK(st_cuda_lse_merge(aout, alse, pout, plse, nbatch * AH, DV, NULL) == ST_OK,
                      "merge");
            }
            CUDA_OK(cudaDeviceSynchronize());
            cudaFree(dsub);
            free(sub);
        }
        host_copy(out, aout, sizeof(float) * no);
        host_copy(lse, alse, sizeof(float) * nbatch * AH);
        eo = tk_rel_err(out, rout, no), el = tk_rel_err(lse, rlse, (size_t)nbatch * AH);
        printf("# gpu attn split %d/%d/%d merged: out rel_err=%.3g lse rel_err=%.3g\n", c1, c2 - c1,
               NR - c2, eo, el);
        CHECK(eo <= 1e-2 && el <= 1e-4, "split+merge out %.3g lse %.3g", eo, el);
        cudaFree(dq), cudaFree(dpool), cudaFree(drp), cudaFree(dout), cudaFree(dlse);
        cudaFree(pout), cudaFree(plse), cudaFree(aout), cudaFree(alse);
        free(q), free(pool), free(qf), free(poolf), free(rp), free(rf), free(out), free(lse);
        free(rout), free(rlse);
    }
    /* No rows: lse = -inf. */
    uint16_t *dq = dev_copy(NULL, 2 * AH * DQK);
    CUDA_OK(cudaMemset(dq, 0, 2 * AH * DQK));
    float *dout = dev_copy(NULL, sizeof(float) * AH * DV),
          *dlse = dev_copy(NULL, sizeof(float) * AH);
    float lse[AH];
    CHECK(st_cuda_sparse_attn_bf16(dq, 1, AH, NULL, 0, 1.0f, dout, dlse, NULL) == ST_OK, "empty");
    host_copy(lse, dlse, sizeof(lse));
    CHECK(isinf(lse[0]) && lse[0] < 0, "empty partial lse %g", lse[0]);
    CHECK(st_cuda_sparse_attn_bf16(dq, 1, 96, NULL, 0, 1.0f, dout, dlse, NULL) == ST_ERR_INVALID,
          "96 heads must be refused");
    cudaFree(dq), cudaFree(dout), cudaFree(dlse);
}

/*
 * strong: every channel decays at the lower bound for 48 tokens, then hardly at
 * all for 16 (the case where a plain float running sum of the log-decay loses
 * 1e-5; tests/unit/test_kernels_kda.c has the same for the C kernels).
 */
static void test_kda(int T, int strong)
{
    int Hh = 4, D = 128;
    size_t nk = (size_t)T * Hh * D, ns = (size_t)Hh * D * D;
    float *q = malloc(sizeof(float) * nk), *k = malloc(sizeof(float) * nk);
    float *g = malloc(sizeof(float) * nk), *v = malloc(sizeof(float) * nk);
    float *beta = malloc(sizeof(float) * T * Hh), *s0 = malloc(sizeof(float) * ns);
    tk_fill(q, nk, -1, 1), tk_fill(k, nk, -1, 1), tk_fill(g, nk, -6, 0), tk_fill(v, nk, -1, 1);
    tk_fill(beta, (size_t)T * Hh, 0, 1), tk_fill(s0, ns, -1, 1);
    if (strong) {
        size_t head = (size_t)(T - 16) * Hh * D;
        tk_fill(g, head, -5.0, -4.9), tk_fill(g + head, nk - head, -0.05, 0.0);
    }
    double *rs = malloc(sizeof(double) * ns), *ro = malloc(sizeof(double) * nk);
    for (size_t i = 0; i < ns; i++) {
        rs[i] = s0[i];
    }
    st_ref_kda(rs, q, k, v, g, beta, T, Hh, D, D, -5.0f, ro);
    float *dq = dev_copy(q, sizeof(float) * nk), *dk = dev_copy(k, sizeof(float) * nk);
    float *dg = dev_copy(g, sizeof(float) * nk), *dv = dev_copy(v, sizeof(float) * nk);
    float *db = dev_copy(beta, sizeof(float) * T * Hh);
    float *dsc = dev_copy(s0, sizeof(float) * ns), *dsr = dev_copy(s0, sizeof(float) * ns);
    float *doc = dev_copy(NULL, sizeof(float) * nk), *dor = dev_copy(NULL, sizeof(float) * nk);
    CHECK(st_cuda_kda_prefill(dsc, dq, dk, dv, dg, db, T, Hh, D, D, -5.0f, doc, NULL) == ST_OK,
          "prefill");
    for (int t = 0; t < T; t++) {
        size_t o = (size_t)t * Hh * D;
        CHECK(st_cuda_kda_decode(dsr, dq + o, dk + o, dv + o, dg + o, db + (size_t)t * Hh, Hh, D, D,
                                 -5.0f, dor + o, NULL) == ST_OK,
              "decode");
    }
    float *oc = malloc(sizeof(float) * nk), *orr = malloc(sizeof(float) * nk);
    float *sc = malloc(sizeof(float) * ns), *sr = malloc(sizeof(float) * ns);
    host_copy(oc, doc, sizeof(float) * nk), host_copy(orr, dor, sizeof(float) * nk);
    host_copy(sc, dsc, sizeof(float) * ns), host_copy(sr, dsr, sizeof(float) * ns);
    double e[6] = {tk_rel_err(oc, ro, nk), tk_rel_err(sc, rs, ns),    tk_rel_err(orr, ro, nk),
                   tk_rel_err(sr, rs, ns), tk_rel_err_f(oc, orr, nk), tk_rel_err_f(sc, sr, ns)};
    printf("# gpu kda T=%d%s chunked out %.3g state %.3g | recurrent out %.3g state %.3g | "
           "chunked vs recurrent %.3g %.3g\n",
           T, strong ? " strong decay" : "", e[0], e[1], e[2], e[3], e[4], e[5]);
    for (int i = 0; i < 6; i++) {
        CHECK(e[i] <= 1e-5, "kda error %d = %.3g", i, e[i]);
    }
    cudaFree(dq), cudaFree(dk), cudaFree(dg), cudaFree(dv), cudaFree(db), cudaFree(dsc);
    cudaFree(dsr), cudaFree(doc), cudaFree(dor);
    free(q), free(k), free(g), free(v), free(beta), free(s0), free(rs), free(ro), free(oc);
    free(orr), free(sc), free(sr);
}

static void test_rmsnorm(void)
{
    int n = 33, d = 7168;
    size_t nd = (size_t)n * d;
    float *x = malloc(sizeof(float) * nd), *res = malloc(sizeof(float) * nd);
    float *wt = malloc(sizeof(float) * d), *out = malloc(sizeof(float) * nd);
    double *rres = malloc(sizeof(double) * nd), *rout = malloc(sizeof(double) * nd);
    tk_fill(x, nd, -2, 2), tk_fill(res, nd, -2, 2), tk_fill(wt, d, 0.5, 1.5);
    st_ref_rmsnorm_residual(x, res, wt, n, d, 1e-6f, rres, rout);
    float *dx = dev_copy(x, sizeof(float) * nd), *dr = dev_copy(res, sizeof(float) * nd);
    float *dw = dev_copy(wt, sizeof(float) * d), *dout = dev_copy(NULL, sizeof(float) * nd);
    CHECK(st_cuda_rmsnorm_residual(dx, dr, dw, n, d, 1e-6f, dout, NULL) == ST_OK, "rmsnorm");
    host_copy(out, dout, sizeof(float) * nd), host_copy(res, dr, sizeof(float) * nd);
    double eo = tk_rel_err(out, rout, nd), er = tk_rel_err(res, rres, nd);
    printf("# gpu rmsnorm out %.3g residual %.3g\n", eo, er);
    CHECK(eo <= 1e-5 && er <= 1e-5, "rmsnorm %.3g %.3g", eo, er);
    cudaFree(dx), cudaFree(dr), cudaFree(dw), cudaFree(dout);
    free(x), free(res), free(wt), free(out), free(rres), free(rout);
}

/*
 * The selection at a size where every kernel runs many CTAs: n rows of random fp8 keys
 * (structured: 2% of the blocks 200x larger, the rest prunable), k = 2048. Checks that the
 * bounds hold for every row, that the rows equal the exact top-k of the dense fp8 scores and
 * that the returned scores are those rows' dense scores.
 */
static void test_topk_large(int N, int structured)
{
    const int H = 64, D = 128, B = 64, K = 2048, nb = (N + B - 1) / B;
    float *q = malloc(sizeof(float) * H * D), *w = malloc(sizeof(float) * H);
    float *kscale = malloc(sizeof(float) * N), *s = malloc(sizeof(float) * N);
    float *bound = malloc(sizeof(float) * nb), *sc = malloc(sizeof(float) * K);
    uint8_t *k8 = malloc((size_t)N * D);
    int32_t *idx = malloc(sizeof(int32_t) * K), *want = malloc(sizeof(int32_t) * K);
    tk_fill(q, (size_t)H * D, -1, 1);
    tk_fill(w, H, -0.2, 1);
    for (size_t i = 0; i < (size_t)N * D; i++) {
        int sg = tk_uniform() < 0.5, ex = 4 + (int)(tk_uniform() * 6), m = (int)(tk_uniform() * 8);
        k8[i] = (uint8_t)(sg << 7 | ex << 3 | m);
    }
    for (int b = 0; b < nb; b++) {
        float boost = structured ? (tk_uniform() < 0.02 ? 4.0f : 0.02f) : 1.0f;
        for (int r = b * B; r < N && r < (b + 1) * B; r++) {
            kscale[r] = boost * tk_range(0.01, 0.05);
        }
    }
    float *dq = dev_copy(q, sizeof(float) * H * D), *dw = dev_copy(w, sizeof(float) * H);
    float *dsc = dev_copy(kscale, sizeof(float) * N), *ds = dev_copy(NULL, sizeof(float) * N);
    uint8_t *dk8 = dev_copy(k8, (size_t)N * D);
    float *dsum = dev_copy(NULL, sizeof(float) * nb * 2 * D),
          *dbound = dev_copy(NULL, sizeof(float) * nb), *dscore = dev_copy(NULL, sizeof(float) * K);
    size_t wsb = st_cuda_indexer_topk_workspace(N, B);
    void *ws = dev_copy(NULL, wsb);
    int32_t *didx = dev_copy(NULL, sizeof(int32_t) * K);
    CHECK(st_cuda_block_summary_fp8(dk8, dsc, N, D, B, dsum, NULL) == ST_OK, "summary");
    CHECK(st_cuda_block_bounds(dq, dw, H, D, dsum, nb, dbound, NULL) == ST_OK, "bounds");
    CHECK(st_cuda_indexer_scores_fp8(dq, dw, 1, H, D, dk8, dsc, N, ds, NULL) == ST_OK, "fp8");
    CUDA_OK(cudaMemset(didx, 0xff, sizeof(int32_t) * K));
    CHECK(st_cuda_indexer_topk_fp8(dq, dw, H, dk8, dsc, dsum, N, B, K, ws, wsb, didx, dscore,
                                   NULL) == ST_OK,
          "topk launch");
    host_copy(bound, dbound, sizeof(float) * nb);
    host_copy(s, ds, sizeof(float) * N);
    host_copy(idx, didx, sizeof(int32_t) * K);
    host_copy(sc, dscore, sizeof(float) * K);
    int bad = 0, bad_score = 0;
    for (int r = 0; r < N; r++) {
        bad += s[r] > bound[r / B];
    }
    for (int i = 0; i < K; i++) {
        bad_score += idx[i] < 0 || idx[i] >= N || sc[i] != s[idx[i]];
    }
    rank_t *all = malloc(sizeof(rank_t) * N);
    for (int r = 0; r < N; r++) {
        all[r].s = s[r];
        all[r].i = r;
    }
    qsort(all, N, sizeof(rank_t), cmp_rank);
    for (int i = 0; i < K; i++) {
        want[i] = all[i].i;
    }
    qsort(want, K, sizeof(int32_t), cmp_i32);
    qsort(idx, K, sizeof(int32_t), cmp_i32);
    int diff = 0;
    for (int i = 0; i < K; i++) {
        diff += idx[i] != want[i];
    }
    printf("# gpu topk large n=%d structured=%d k=%d: rows above bound %d, mismatches %d, "
           "wrong scores %d\n",
           N, structured, K, bad, diff, bad_score);
    CHECK(bad == 0, "%d rows above their block bound (large)", bad);
    CHECK(diff == 0, "large two-stage top-k differs from exact top-k in %d rows", diff);
    CHECK(bad_score == 0, "large top-k: %d returned scores differ from the dense scores",
          bad_score);
    cudaFree(dq), cudaFree(dw), cudaFree(dsc), cudaFree(ds), cudaFree(dk8), cudaFree(dsum);
    cudaFree(dbound), cudaFree(dscore), cudaFree(ws), cudaFree(didx);
    free(q), free(w), free(kscale), free(s), free(bound), free(sc), free(k8), free(idx);
    free(want), free(all);
}

/*
 * Heavy ties: every row is one of 61 key patterns with the same scale, so about 820 rows share
 * each score and the k-th score is shared by hundreds of rows, some in the top-k and some not.
 * The returned scores, sorted, must equal the k best dense scores, each returned row's dense
 * score must be the score returned with it, and no row may come twice.
 */
static void test_topk_ties(void)
{
    const int H = 64, D = 128, B = 64, K = 2048, N = 50000, P = 61, nb = (N + B - 1) / B;
    float *q = malloc(sizeof(float) * H * D), *w = malloc(sizeof(float) * H);
    float *kscale = malloc(sizeof(float) * N), *s = malloc(sizeof(float) * N);
    float *sc = malloc(sizeof(float) * K), *best = malloc(sizeof(float) * N);
    uint8_t *k8 = malloc((size_t)N * D), *pat = malloc((size_t)P * D);
    int32_t *idx = malloc(sizeof(int32_t) * K);
    tk_fill(q, (size_t)H * D, -1, 1);
    tk_fill(w, H, -0.2, 1);
    for (int i = 0; i < P * D; i++) {
        int sg = tk_uniform() < 0.5, ex = 4 + (int)(tk_uniform() * 6), m = (int)(tk_uniform() * 8);
        pat[i] = (uint8_t)(sg << 7 | ex << 3 | m);
    }
    for (int r = 0; r < N; r++) {
        memcpy(k8 + (size_t)r * D, pat + (size_t)(r % P) * D, D);
        kscale[r] = 0.03f;
    }
    float *dq = dev_copy(q, sizeof(float) * H * D), *dw = dev_copy(w, sizeof(float) * H);
    float *dsc = dev_copy(kscale, sizeof(float) * N), *ds = dev_copy(NULL, sizeof(float) * N);
    uint8_t *dk8 = dev_copy(k8, (size_t)N * D);
    float *dsum = dev_copy(NULL, sizeof(float) * nb * 2 * D), *dscore = dev_copy(NULL, 4 * K);
    size_t wsb = st_cuda_indexer_topk_workspace(N, B);
    void *ws = dev_copy(NULL, wsb);
    int32_t *didx = dev_copy(NULL, sizeof(int32_t) * K);
    CHECK(st_cuda_block_summary_fp8(dk8, dsc, N, D, B, dsum, NULL) == ST_OK, "summary");
    CHECK(st_cuda_indexer_scores_fp8(dq, dw, 1, H, D, dk8, dsc, N, ds, NULL) == ST_OK, "fp8");
    CUDA_OK(cudaMemset(didx, 0xff, sizeof(int32_t) * K));
    CHECK(st_cuda_indexer_topk_fp8(dq, dw, H, dk8, dsc, dsum, N, B, K, ws, wsb, didx, dscore,
                                   NULL) == ST_OK,
          "topk launch");
    host_copy(s, ds, sizeof(float) * N);
    host_copy(idx, didx, sizeof(int32_t) * K);
    host_copy(sc, dscore, sizeof(float) * K);
    int bad_row = 0, bad_score = 0, diff = 0, tied = 0;
    for (int i = 0; i < K; i++) {
        bad_row += idx[i] < 0 || idx[i] >= N;
        bad_score += idx[i] >= 0 && idx[i] < N && sc[i] != s[idx[i]];
    }
    qsort(idx, K, sizeof(int32_t), cmp_i32);
    for (int i = 1; i < K; i++) {
        bad_row += idx[i] == idx[i - 1];
    }
    memcpy(best, s, sizeof(float) * N);
    qsort(best, N, sizeof(float), cmp_f32_desc);
    qsort(sc, K, sizeof(float), cmp_f32_desc);
    for (int i = 0; i < K; i++) {
        diff += sc[i] != best[i];
    }
    for (int r = 0; r < N; r++) {
        tied += s[r] == best[K - 1];
    }
    printf("# gpu topk ties n=%d k=%d: rows sharing the k-th score %d, bad or repeated rows %d, "
           "wrong scores %d, scores differing from the k best %d\n",
           N, K, tied, bad_row, bad_score, diff);
    CHECK(bad_row == 0, "ties: %d bad or repeated rows", bad_row);
    CHECK(bad_score == 0, "ties: %d returned scores differ from the dense scores", bad_score);
    CHECK(diff == 0, "ties: %d returned scores differ from the k best", diff);
    cudaFree(dq), cudaFree(dw), cudaFree(dsc), cudaFree(ds), cudaFree(dk8), cudaFree(dsum);
    cudaFree(dscore), cudaFree(ws), cudaFree(didx);
    free(q), free(w), free(kscale), free(s), free(sc), free(best), free(k8), free(pat), free(idx);
}

/*
 * Runs the indexer checks under one or two settings of variant knobs (docs/kernels.md; name2
 * may be NULL).
 */
static void test_indexer_variant2(const char *name, const char *value, const char *name2,
                                  const char *value2)
{
    printf("# variant %s=%s", name, value);
    if (name2) {
        printf(" %s=%s", name2, value2);
        setenv(name2, value2, 1);
    }
    printf("\n");
    setenv(name, value, 1);
    test_indexer();
    test_topk_large((1 << 18) + 77, 0);
    test_topk_large((1 << 18) + 77, 1);
    test_topk_ties();
    unsetenv(name);
    if (name2) {
        unsetenv(name2);
    }
}

static void test_indexer_variant(const char *name, const char *value)
{
    test_indexer_variant2(name, value, NULL, NULL);
}

/* Runs the attention checks with one variant knob set (docs/kernels.md §3). */
static void test_attention_variant(const char *name, const char *value)
{
    printf("# variant %s=%s\n", name, value);
    setenv(name, value, 1);
    test_attention();
    unsetenv(name);
}

int main(void)
{
    if (st_cuda_available() != ST_OK) {
        printf("SKIP: no usable CUDA device (cudaGetDeviceCount found none); the GPU kernel "
               "tests need one\n");
        return 77;
    }
    tk_seed();
    test_indexer();
    test_topk_large((1 << 18) + 77, 0);
    test_topk_large((1 << 18) + 77, 1);
    test_topk_ties();
    /* The default picks the dense path (docs/kernels.md §2); each path under each knob. */
    test_indexer_variant("STRATA_KN_SCORER", "mma");
    test_indexer_variant("STRATA_KN_DENSE_RING", "3");
    test_indexer_variant("STRATA_KN_TOPK", "twostage");
    test_indexer_variant2("STRATA_KN_TOPK", "twostage", "STRATA_KN_SCORER", "mma");
    test_indexer_variant2("STRATA_KN_TOPK", "twostage", "STRATA_KN_SEED", "1");
    test_attention();
    /* The serial loop, and the warp-specialised one with a near and a far L2 prefetch. */
    test_attention_variant("STRATA_KN_ATTN", "serial");
    test_attention_variant("STRATA_KN_ATTN_PF", "1");
    test_attention_variant("STRATA_KN_ATTN_PF", "5");
    test_kda(150, 0);
    test_kda(64, 1);
    test_rmsnorm();
    CUDA_OK(cudaDeviceSynchronize());
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "PASSED", failures);
    return failures ? 1 : 0;
}
