/*
 * ref.c - naive references in double precision. They follow the formulas of
 * docs/kernels.md literally and are used only to check the fast paths.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_internal.h"

st_status_t st_ref_indexer_scores(const float *q, const float *w, int n_q, int n_heads, int dim,
                                  const float *keys, int n_keys, double *scores)
{
    if (!q || !w || !keys || !scores || n_q <= 0 || n_heads <= 0 || dim <= 0 || n_keys <= 0) {
        return ST_ERR_INVALID;
    }
    for (int t = 0; t < n_q; t++) {
        for (int s = 0; s < n_keys; s++) {
            double total = 0.0;
            for (int j = 0; j < n_heads; j++) {
                const float *qj = q + ((size_t)t * n_heads + j) * dim;
                double d = 0.0;
                for (int c = 0; c < dim; c++) {
                    d += (double)qj[c] * keys[(size_t)s * dim + c];
                }
                total += (double)w[(size_t)t * n_heads + j] * (d > 0.0 ? d : 0.0);
            }
            scores[(size_t)t * n_keys + s] = total;
        }
    }
    return ST_OK;
}

st_status_t st_ref_sparse_attn(const float *q, int n_heads, int d_qk, int d_v,
                               const float *const *rows, int n_rows, float scale, double *out,
                               double *lse)
{
    if (!kn_attn_args_ok(q, n_heads, d_qk, d_v, rows, n_rows, out, lse)) {
        return ST_ERR_INVALID;
    }
    double *s = malloc(sizeof(double) * (n_rows > 0 ? n_rows : 1));
    if (!s) {
        return ST_ERR_NOMEM;
    }
    for (int h = 0; h < n_heads; h++) {
        double *o = out + (size_t)h * d_v;
        memset(o, 0, sizeof(double) * d_v);
        if (n_rows == 0) {
            lse[h] = -INFINITY;
            continue;
        }
        double m = -INFINITY;
        for (int r = 0; r < n_rows; r++) {
            double d = 0.0;
            for (int c = 0; c < d_qk; c++) {
                d += (double)q[(size_t)h * d_qk + c] * rows[r][c];
            }
            s[r] = d * scale;
            m = s[r] > m ? s[r] : m;
        }
        double sum = 0.0;
        for (int r = 0; r < n_rows; r++) {
            double p = exp(s[r] - m);
            sum += p;
            for (int c = 0; c < d_v; c++) {
                o[c] += p * rows[r][c];
            }
        }
        for (int c = 0; c < d_v; c++) {
            o[c] /= sum;
        }
        lse[h] = m + log(sum);
    }
    free(s);
    return ST_OK;
}

/* S <- (I - beta k k^T) Diag(a) S + beta k v^T, o = S^T q, literally, per token and head. */
st_status_t st_ref_kda(double *state, const float *q, const float *k, const float *v,
                       const float *g, const float *beta, int n_tok, int n_heads, int dk, int dv,
                       float g_lo, double *out)
{
    if (!state || !q || !k || !v || !g || !beta || !out || n_tok <= 0 || n_heads <= 0 || dk <= 0 ||
        dv <= 0 || !(g_lo <= 0.0f)) {
        return ST_ERR_INVALID;
    }
    double *qn = malloc(sizeof(double) * dk);
    double *kn = malloc(sizeof(double) * dk);
    double *ks = malloc(sizeof(double) * dv);
    if (!qn || !kn || !ks) {
        free(qn);
        free(kn);
        free(ks);
        return ST_ERR_NOMEM;
    }
    for (int t = 0; t < n_tok; t++) {
        for (int h = 0; h < n_heads; h++) {
            size_t th = (size_t)t * n_heads + h;
            double *S = state + (size_t)h * dk * dv;
            double nq = 0.0, nk = 0.0;
            for (int c = 0; c < dk; c++) {
                nq += (double)q[th * dk + c] * q[th * dk + c];
                nk += (double)k[th * dk + c] * k[th * dk + c];
            }
            nq = 1.0 / sqrt(nq + 1e-12);
            nk = 1.0 / sqrt(nk + 1e-12);
            for (int c = 0; c < dk; c++) {
                qn[c] = q[th * dk + c] * nq;
                kn[c] = k[th * dk + c] * nk;
                double gc = g[th * dk + c] < g_lo ? g_lo : g[th * dk + c];
                for (int e = 0; e < dv; e++) {
                    S[(size_t)c * dv + e] *= exp(gc); /* Diag(a) S */
                }
            }
            for (int e = 0; e < dv; e++) { /* ks = k^T (Diag(a) S) */
                double acc = 0.0;
                for (int c = 0; c < dk; c++) {
                    acc += kn[c] * S[(size_t)c * dv + e];
                }
                ks[e] = acc;
            }
            double b = beta[th];
            for (int c = 0; c < dk; c++) {
                for (int e = 0; e < dv; e++) {
                    S[(size_t)c * dv + e] += -b * kn[c] * ks[e] + b * kn[c] * v[th * dv + e];
                }
            }
            for (int e = 0; e < dv; e++) {
                double acc = 0.0;
                for (int c = 0; c < dk; c++) {
                    acc += S[(size_t)c * dv + e] * qn[c];
                }
                out[th * dv + e] = acc;
            }
        }
    }
    free(qn);
    free(kn);
    free(ks);
    return ST_OK;
}

st_status_t st_ref_rmsnorm_residual(const float *x, const float *residual, const float *weight,
                                    int n, int d, float eps, double *residual_out, double *out)
{
    if (!x || !residual || !weight || !residual_out || !out || n <= 0 || d <= 0 || !(eps >= 0)) {
        return ST_ERR_INVALID;
    }
    for (int i = 0; i < n; i++) {
        double ss = 0.0;
        for (int c = 0; c < d; c++) {
            double r = (double)residual[(size_t)i * d + c] + x[(size_t)i * d + c];
            residual_out[(size_t)i * d + c] = r;
            ss += r * r;
        }
        double inv = 1.0 / sqrt(ss / d + eps);
        for (int c = 0; c < d; c++) {
            out[(size_t)i * d + c] = residual_out[(size_t)i * d + c] * inv * weight[c];
        }
    }
    return ST_OK;
}
