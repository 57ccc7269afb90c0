/*
 * kda.c - KDA (gated delta rule, per-channel decay) in fp32 C: the recurrent
 * step for decoding and the chunked WY/UT form for prefill. docs/kernels.md
 * derives the chunked form from the recurrence.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_internal.h"

#define KN_CHUNK 64

static int kn_kda_args_ok(const float *state, const float *q, const float *k, const float *v,
                          const float *g, const float *beta, const float *out, int n_heads, int dk,
                          int dv, float g_lo)
{
    return state && q && k && v && g && beta && out && n_heads > 0 && dk > 0 && dv > 0 &&
           g_lo <= 0.0f;
}

/* dst = src / sqrt(|src|^2 + 1e-12) */
static void kn_l2norm(const float *src, float *dst, int n)
{
    float inv = 1.0f / sqrtf(kn_ops.dot(src, src, n) + 1e-12f);
    for (int c = 0; c < n; c++) {
        dst[c] = src[c] * inv;
    }
}

/* One head, one token. scratch: 2*dk + dv floats. */
static void kn_kda_step(float *S, const float *q, const float *k, const float *v, const float *g,
                        float beta, int dk, int dv, float g_lo, float *o, float *scratch)
{
    float *kn = scratch, *a = scratch + dk, *u = scratch + 2 * dk;
    kn_l2norm(k, kn, dk);
    for (int c = 0; c < dk; c++) {
        a[c] = g[c] < g_lo ? g_lo : g[c];
    }
    kn_exp_neg(a, a, dk);
    /* u = beta (v - S^T Diag(a) k) */
    memset(u, 0, sizeof(float) * dv);
    for (int c = 0; c < dk; c++) {
        kn_ops.axpy(a[c] * kn[c], S + (size_t)c * dv, u, dv);
    }
    for (int e = 0; e < dv; e++) {
        u[e] = beta * (v[e] - u[e]);
    }
    /* S = Diag(a) S + k u^T; o = S^T qn */
    float *qn = a; /* a is no longer needed once S row c is decayed */
    memset(o, 0, sizeof(float) * dv);
    float qinv = 1.0f / sqrtf(kn_ops.dot(q, q, dk) + 1e-12f);
    for (int c = 0; c < dk; c++) {
        float *row = S + (size_t)c * dv;
        kn_ops.scale(a[c], row, dv);
        kn_ops.axpy(kn[c], u, row, dv);
        qn[c] = q[c] * qinv;
        kn_ops.axpy(qn[c], row, o, dv);
    }
}

st_status_t st_cpu_kda_decode(float *state, const float *q, const float *k, const float *v,
                              const float *g, const float *beta, int n_heads, int dk, int dv,
                              float g_lo, float *out)
{
    if (!kn_kda_args_ok(state, q, k, v, g, beta, out, n_heads, dk, dv, g_lo)) {
        return ST_ERR_INVALID;
    }
    float *scratch = malloc(sizeof(float) * (2 * (size_t)dk + dv));
    if (!scratch) {
        return ST_ERR_NOMEM;
    }
    for (int h = 0; h < n_heads; h++) {
        kn_kda_step(state + (size_t)h * dk * dv, q + (size_t)h * dk, k + (size_t)h * dk,
                    v + (size_t)h * dv, g + (size_t)h * dk, beta[h], dk, dv, g_lo,
                    out + (size_t)h * dv, scratch);
    }
    free(scratch);
    return ST_OK;
}

/* Scratch of one chunk of C <= 64 tokens for one head. */
typedef struct kn_chunk {
    float *qn, *kn;  /* C x dk: normalised q, k */
    float *G, *Gl;   /* C x dk: cumulative log-decay as an unevaluated sum G + Gl */
    float *kt, *qt;  /* C x dk: kn * exp(G), qn * exp(G) */
    float *u;        /* C x dv */
    float *M, *P;    /* C x C */
    float *kr;       /* C x dk: kn_j * exp(G_r - G_j), r the last token of j's sub-block */
    float *diff, *e; /* dk: exponents and their exp */
    float *qa, *ka;  /* dk: qn_i, kn_i decayed to a sub-block's end */
} kn_chunk_t;

#define KN_SUB 16 /* sub-blocks of the chunk for the pairwise decays */

/*
 * G_a - G_b for rows a and b of the chunk. The cumulative log-decay reaches
 * -5 x 64 = -320 within a chunk, where one float ulp is 3e-5: a plain difference
 * of two such sums would put that much relative error on e^(G_a - G_b) exactly
 * where it matters (a and b close, the factor near 1). The sums are kept as
 * hi + lo pairs (two-sum), so the difference is good to an ulp of itself.
 */
static inline float kn_gdiff(const kn_chunk_t *w, size_t a, size_t b)
{
    return (w->G[a] - w->G[b]) + (w->Gl[a] - w->Gl[b]);
}

/*
 * M_ij (j < i) and P_ij (j <= i). Within a sub-block of 16 tokens, e^(G_i - G_j) is
 * computed per pair; across sub-blocks it is split at r, the last token of j's sub-block:
 * e^(G_i - G_r) e^(G_r - G_j), both factors <= 1 (so nothing overflows), the first
 * shared by every j of that sub-block, the second by every i. About 90k exps per
 * chunk of 64 instead of 530k.
 */
static void kn_chunk_pairs(int C, int dk, kn_chunk_t *w)
{
    for (int j = 0; j < C; j++) {
        int r = (j / KN_SUB) * KN_SUB + KN_SUB - 1;
        r = r < C ? r : C - 1;
        for (int c = 0; c < dk; c++) {
            w->diff[c] = kn_gdiff(w, (size_t)r * dk + c, (size_t)j * dk + c);
        }
        kn_exp_neg(w->diff, w->e, dk);
        for (int c = 0; c < dk; c++) {
            w->kr[(size_t)j * dk + c] = w->kn[(size_t)j * dk + c] * w->e[c];
        }
    }
    for (int i = 0; i < C; i++) {
        const float *qi = w->qn + (size_t)i * dk;
        const float *ki = w->kn + (size_t)i * dk;
        int si = i / KN_SUB;
        for (int sj = 0; sj < si; sj++) { /* earlier sub-blocks, through their last token */
            size_t r = (size_t)(sj * KN_SUB + KN_SUB - 1) * dk;
            for (int c = 0; c < dk; c++) {
                w->diff[c] = kn_gdiff(w, (size_t)i * dk + c, r + c);
            }
            kn_exp_neg(w->diff, w->e, dk);
            for (int c = 0; c < dk; c++) {
                w->qa[c] = qi[c] * w->e[c];
                w->ka[c] = ki[c] * w->e[c];
            }
            for (int j = sj * KN_SUB; j < sj * KN_SUB + KN_SUB; j++) {
                const float *kj = w->kr + (size_t)j * dk;
                w->P[i * C + j] = kn_ops.dot(w->qa, kj, dk);
                w->M[i * C + j] = kn_ops.dot(w->ka, kj, dk);
            }
        }
        for (int j = si * KN_SUB; j <= i; j++) { /* the same sub-block, pair by pair */
            const float *kj = w->kn + (size_t)j * dk;
            for (int c = 0; c < dk; c++) {
                w->diff[c] = kn_gdiff(w, (size_t)i * dk + c, (size_t)j * dk + c);
            }
            kn_exp_neg(w->diff, w->e, dk);
            for (int c = 0; c < dk; c++) {
                w->e[c] *= kj[c];
            }
            w->P[i * C + j] = kn_ops.dot(qi, w->e, dk);
            w->M[i * C + j] = j < i ? kn_ops.dot(ki, w->e, dk) : 0.0f;
        }
    }
}

/*
 * One chunk of one head. Token i of the chunk reads q + i*tok_stride_k etc.
 * With A_i = exp(G_i) the state after token i is
 *   S_i = Diag(A_i) S_0 + sum_{j<=i} Diag(A_i / A_j) k_j u_j^T,
 *   u_i = beta_i (v_i - S_0^T (A_i * k_i) - sum_{j<i} M_ij u_j),
 *   M_ij = sum_c k_ic k_jc exp(G_ic - G_jc),
 * and o_i = S_0^T (A_i * q_i) + sum_{j<=i} P_ij u_j with P_ij like M_ij over q_i.
 */
static void kn_kda_chunk(float *S, const float *q, const float *k, const float *v, const float *g,
                         const float *beta, size_t sk, size_t sv, size_t sb, int C, int dk, int dv,
                         float g_lo, float *out, kn_chunk_t *w)
{
    for (int i = 0; i < C; i++) {
        kn_l2norm(q + i * sk, w->qn + (size_t)i * dk, dk);
        kn_l2norm(k + i * sk, w->kn + (size_t)i * dk, dk);
        const float *gi = g + i * sk;
        float *Gi = w->G + (size_t)i * dk, *Li = w->Gl + (size_t)i * dk;
        for (int c = 0; c < dk; c++) {
            float gc = gi[c] < g_lo ? g_lo : gi[c];
            float hi = i > 0 ? Gi[c - dk] : 0.0f, lo = i > 0 ? Li[c - dk] : 0.0f;
            float sum = hi + gc, bv = sum - hi; /* two-sum: hi + gc = sum + err exactly */
            float err = (hi - (sum - bv)) + (gc - bv);
            Gi[c] = sum;
            Li[c] = lo + err;
        }
        kn_exp_neg(Gi, w->e, dk);
        for (int c = 0; c < dk; c++) {
            w->kt[(size_t)i * dk + c] = w->kn[(size_t)i * dk + c] * w->e[c];
            w->qt[(size_t)i * dk + c] = w->qn[(size_t)i * dk + c] * w->e[c];
        }
    }
    kn_chunk_pairs(C, dk, w);

    /* u_i by forward substitution (the UT transform applied to V - K~ S_0). */
    for (int i = 0; i < C; i++) {
        float *ui = w->u + (size_t)i * dv;
        memset(ui, 0, sizeof(float) * dv);
        for (int c = 0; c < dk; c++) {
            kn_ops.axpy(w->kt[(size_t)i * dk + c], S + (size_t)c * dv, ui, dv);
        }
        for (int j = 0; j < i; j++) {
            kn_ops.axpy(w->M[i * C + j], w->u + (size_t)j * dv, ui, dv);
        }
        const float *vi = v + i * sv;
        float b = beta[i * sb];
        for (int e = 0; e < dv; e++) {
            ui[e] = b * (vi[e] - ui[e]);
        }
    }
    for (int i = 0; i < C; i++) {
        float *oi = out + i * sv;
        memset(oi, 0, sizeof(float) * dv);
        for (int c = 0; c < dk; c++) {
            kn_ops.axpy(w->qt[(size_t)i * dk + c], S + (size_t)c * dv, oi, dv);
        }
        for (int j = 0; j <= i; j++) {
            kn_ops.axpy(w->P[i * C + j], w->u + (size_t)j * dv, oi, dv);
        }
    }
    /* S_C = Diag(A_C) S_0 + sum_j (k_j * exp(G_C - G_j)) u_j^T */
    const size_t last = (size_t)(C - 1) * dk;
    kn_exp_neg(w->G + last, w->e, dk);
    for (int c = 0; c < dk; c++) {
        kn_ops.scale(w->e[c], S + (size_t)c * dv, dv);
    }
    for (int j = 0; j < C; j++) {
        for (int c = 0; c < dk; c++) {
            w->diff[c] = kn_gdiff(w, last + c, (size_t)j * dk + c);
        }
        kn_exp_neg(w->diff, w->e, dk);
        for (int c = 0; c < dk; c++) {
            kn_ops.axpy(w->kn[(size_t)j * dk + c] * w->e[c], w->u + (size_t)j * dv,
                        S + (size_t)c * dv, dv);
        }
    }
}

st_status_t st_cpu_kda_prefill(float *state, const float *q, const float *k, const float *v,
                               const float *g, const float *beta, int n_tok, int n_heads, int dk,
                               int dv, float g_lo, float *out)
{
    if (!kn_kda_args_ok(state, q, k, v, g, beta, out, n_heads, dk, dv, g_lo) || n_tok <= 0) {
        return ST_ERR_INVALID;
    }
    size_t per_dk = (size_t)KN_CHUNK * dk;
    size_t total = 7 * per_dk + (size_t)KN_CHUNK * dv + 2 * KN_CHUNK * KN_CHUNK + 4 * (size_t)dk;
    float *buf = malloc(sizeof(float) * total);
    if (!buf) {
        return ST_ERR_NOMEM;
    }
    kn_chunk_t w;
    w.qn = buf;
    w.kn = w.qn + per_dk;
    w.G = w.kn + per_dk;
    w.Gl = w.G + per_dk;
    w.kt = w.Gl + per_dk;
    w.qt = w.kt + per_dk;
    w.u = w.qt + per_dk;
    w.M = w.u + (size_t)KN_CHUNK * dv;
    w.P = w.M + KN_CHUNK * KN_CHUNK;
    w.kr = w.P + KN_CHUNK * KN_CHUNK;
    w.diff = w.kr + per_dk;
    w.e = w.diff + dk;
    w.qa = w.e + dk;
    w.ka = w.qa + dk;
    size_t sk = (size_t)n_heads * dk, sv = (size_t)n_heads * dv, sb = (size_t)n_heads;
    for (int h = 0; h < n_heads; h++) {
        for (int t0 = 0; t0 < n_tok; t0 += KN_CHUNK) {
            int C = n_tok - t0 < KN_CHUNK ? n_tok - t0 : KN_CHUNK;
            size_t ok = (size_t)t0 * sk + (size_t)h * dk, ov = (size_t)t0 * sv + (size_t)h * dv;
            kn_kda_chunk(state + (size_t)h * dk * dv, q + ok, k + ok, v + ov, g + ok,
                         beta + (size_t)t0 * sb + h, sk, sv, sb, C, dk, dv, g_lo, out + ov, &w);
        }
    }
    free(buf);
    return ST_OK;
}
