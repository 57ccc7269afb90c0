/*
 * attn.c - sparse attention partial over selected rows (MLA in MQA mode) and
 * the log-sum-exp merge of partials, in fp32 C.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kn_internal.h"

/*
 * Rows are visited once each (row-outer loops), so every selected row, wherever
 * it lives, is read from memory twice in all: once for the scores, once for
 * the values, whatever the number of heads.
 */
st_status_t st_cpu_sparse_attn(const float *q, int n_heads, int d_qk, int d_v,
                               const float *const *rows, int n_rows, float scale, float *out,
                               float *lse)
{
    if (!kn_attn_args_ok(q, n_heads, d_qk, d_v, rows, n_rows, out, lse)) {
        return ST_ERR_INVALID;
    }
    memset(out, 0, sizeof(float) * (size_t)n_heads * d_v);
    if (n_rows == 0) {
        for (int h = 0; h < n_heads; h++) {
            lse[h] = -INFINITY;
        }
        return ST_OK;
    }
    float *s = malloc(sizeof(float) * (size_t)n_rows * n_heads); /* s[r][h] */
    float *m = malloc(sizeof(float) * 2 * (size_t)n_heads);
    if (!s || !m) {
        free(s);
        free(m);
        return ST_ERR_NOMEM;
    }
    float *sum = m + n_heads;
    for (int h = 0; h < n_heads; h++) {
        m[h] = -INFINITY;
        sum[h] = 0.0f;
    }
    for (int r = 0; r < n_rows; r++) {
        for (int h = 0; h < n_heads; h++) {
            float v = scale * kn_ops.dot(q + (size_t)h * d_qk, rows[r], d_qk);
            s[(size_t)r * n_heads + h] = v;
            m[h] = v > m[h] ? v : m[h];
        }
    }
    for (int r = 0; r < n_rows; r++) {
        float *sr = s + (size_t)r * n_heads;
        for (int h = 0; h < n_heads; h++) {
            sr[h] -= m[h];
        }
        kn_exp_neg(sr, sr, n_heads);
        for (int h = 0; h < n_heads; h++) {
            sum[h] += sr[h];
            kn_ops.axpy(sr[h], rows[r], out + (size_t)h * d_v, d_v);
        }
    }
    for (int h = 0; h < n_heads; h++) {
        kn_ops.scale(1.0f / sum[h], out + (size_t)h * d_v, d_v);
        lse[h] = m[h] + logf(sum[h]);
    }
    free(s);
    free(m);
    return ST_OK;
}

st_status_t st_cpu_lse_merge(float *out_a, float *lse_a, const float *out_b, const float *lse_b,
                             int n_heads, int d_v)
{
    if (!out_a || !lse_a || !out_b || !lse_b || n_heads <= 0 || d_v <= 0) {
        return ST_ERR_INVALID;
    }
    for (int h = 0; h < n_heads; h++) {
        float la = lse_a[h], lb = lse_b[h];
        float *oa = out_a + (size_t)h * d_v;
        const float *ob = out_b + (size_t)h * d_v;
        if (lb == -INFINITY) {
            continue; /* b is empty: a stays as it is */
        }
        if (la == -INFINITY) {
            memcpy(oa, ob, sizeof(float) * d_v);
            lse_a[h] = lb;
            continue;
        }
        float mx = la > lb ? la : lb;
        float ea = expf(la - mx), eb = expf(lb - mx);
        float tot = ea + eb;
        float wa = ea / tot, wb = eb / tot;
        for (int c = 0; c < d_v; c++) {
            oa[c] = wa * oa[c] + wb * ob[c];
        }
        lse_a[h] = mx + logf(tot);
    }
    return ST_OK;
}
