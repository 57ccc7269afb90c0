/*
 * prefill.c - chunked prefill (docs/engine.md, "Chunked prefill"): a span of
 * tokens goes through the model layer by layer instead of token by token.
 * The projections and the feed-forward are matrix products over the span,
 * each KDA layer runs its recurrence over the span's projected rows, and in
 * each DSA layer every token of the span first writes its row, key and
 * block summary, then each one selects and attends over the keys it may
 * see: its own position and those before it (text), or the image's end (an
 * image's tokens, en_seq_forward_span). A span on the CUDA path runs
 * entirely on the device (engine/prefill_cuda.c), with the chunked form of
 * the KDA recurrence.
 *
 * What equals what: en_matmul sums in en_matvec's order, the KDA recurrence
 * runs token by token as st_seq_forward runs it, and the DSA selection is
 * exact (block summaries that already hold the span's later keys are still
 * upper bounds), so a span on the CPU equals the token-by-token path bit
 * for bit. The CUDA path's span has its own rounding.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "en_internal.h"
#include "log.h"
#include "strata/kernels.h"

#define EN_SPAN_MAX 1024 /* tokens a span computes at once (st_seq_prefill cuts longer ones) */
#define EN_Q_TILE   32   /* tokens whose DSA queries are held at once */

static size_t en_min(size_t a, size_t b)
{
    return a < b ? a : b;
}

void en_matmul(const float *W, const float *X, size_t n, int in, int out, float *Y)
{
    enum { RT = 8, OT = 512 };

    for (size_t r0 = 0; r0 < n; r0 += RT) {
        size_t rn = en_min(RT, n - r0);

        for (int o0 = 0; o0 < out; o0 += OT) {
            int on = out - o0 < OT ? out - o0 : OT;

            for (size_t r = 0; r < rn; r++) {
                memset(Y + (r0 + r) * (size_t)out + (size_t)o0, 0, sizeof(float) * (size_t)on);
            }
            for (int i = 0; i < in; i++) {
                const float *restrict w = W + (size_t)i * (size_t)out + (size_t)o0;

                for (size_t r = 0; r < rn; r++) {
                    float xi = X[(r0 + r) * (size_t)in + (size_t)i];
                    float *restrict y = Y + (r0 + r) * (size_t)out + (size_t)o0;

                    for (int o = 0; o < on; o++) {
                        y[o] += xi * w[o];
                    }
                }
            }
        }
    }
}

/* A KDA layer over n tokens: xn, att are n x d_model. */
static st_status_t en_span_kda(st_seq_t *s, const en_layer_t *L, size_t n, const float *xn,
                               float *att)
{
    const st_model_config_t *c = &s->m->cfg;
    int d = (int)c->d_model, H = (int)c->kda_heads, hd = (int)c->kda_head_dim, hk = H * hd;
    size_t nh = n * (size_t)hk;
    float *state = s->kda + (size_t)L->sub * (size_t)H * (size_t)hd * (size_t)hd;
    float *q = malloc(sizeof(float) * (5 * nh + n * (size_t)H));
    float *k, *v, *g, *beta, *o;
    st_status_t r;

    if (!q) {
        return ST_ERR_NOMEM;
    }
    k = q + nh, v = k + nh, g = v + nh, o = g + nh, beta = o + nh;
    en_matmul(L->kq, xn, n, d, hk, q);
    en_matmul(L->kk, xn, n, d, hk, k);
    en_matmul(L->kv, xn, n, d, hk, v);
    en_matmul(L->kg, xn, n, d, hk, g);
    en_matmul(L->kb, xn, n, d, H, beta);
    for (size_t i = 0; i < nh; i++) {
        g[i] = -en_softplus(g[i] - 1.0f);
    }
    for (size_t i = 0; i < n * (size_t)H; i++) {
        beta[i] = 1.0f / (1.0f + expf(-beta[i]));
    }
    /* The recurrence token by token: on the CPU it costs a few thousand flops a token and
     * head, fewer than the chunked form (st_cpu_kda_prefill), and keeps a span bit for bit
     * equal to the token-by-token path. */
    r = ST_OK;
    for (size_t j = 0; r == ST_OK && j < n; j++) {
        size_t t = j * (size_t)hk;

        r = st_cpu_kda_decode(state, q + t, k + t, v + t, g + t, beta + j * (size_t)H, H, hd, hd,
                              EN_G_LO, o + t);
    }
    if (r == ST_OK) {
        en_matmul(L->ko, o, n, hk, d, att);
    }
    free(q);
    return r;
}

/* Every token of the span writes its latent row (rope part rotated), key and summary. */
static void en_span_dsa_write(st_seq_t *s, const en_layer_t *L, size_t pos0, size_t n,
                              const float *xn, float *wk)
{
    const st_model_config_t *c = &s->m->cfg;
    int d = (int)c->d_model, row = s->m->row, dv = (int)c->dsa_latent, di = (int)c->idx_dim;
    size_t B = c->block_tokens;

    en_matmul(L->dkv, xn, n, d, row, wk);
    for (size_t j = 0; j < n; j++) {
        float *dst = en_kv_row(s, L->sub, pos0 + j);

        memcpy(dst, wk + j * (size_t)row, sizeof(float) * (size_t)row);
        en_rope(dst + dv, (int)c->dsa_rope, pos0 + j);
    }
    en_matmul(L->dik, xn, n, d, di, wk);
    for (size_t j = 0; j < n; j++) {
        size_t pos = pos0 + j;
        float *key = en_key_row(s, L->sub, pos);

        memcpy(key, wk + j * (size_t)di, sizeof(float) * (size_t)di);
        en_summary_add(en_summary_of(s, L->sub, pos / B), key, di, pos % B == 0);
    }
}

/* A DSA layer over n tokens; key_end 0: causal (each token sees [0, pos]). */
static st_status_t en_span_dsa(st_seq_t *s, const en_layer_t *L, size_t pos0, size_t n,
                               size_t key_end, const float *xn, float *att)
{
    const st_model_config_t *c = &s->m->cfg;
    int d = (int)c->d_model, row = s->m->row, H = (int)c->dsa_heads, dv = (int)c->dsa_latent;
    int Hi = (int)c->idx_heads, di = (int)c->idx_dim, rope = (int)c->dsa_rope;
    size_t niq = (size_t)Hi * (size_t)di, nq = (size_t)H * (size_t)row, no = (size_t)H * dv;
    size_t tile = en_min(EN_Q_TILE, n);
    size_t wk_n = n * (size_t)(row > di ? row : di);
    size_t total = n * (niq + (size_t)Hi) + tile * nq + n * no;
    float *iq = malloc(sizeof(float) * (total > wk_n ? total : wk_n));
    float *w, *q, *o;
    float wscale = (float)(1.0 / sqrt((double)Hi));
    st_status_t r = ST_OK;

    if (!iq) {
        return ST_ERR_NOMEM;
    }
    en_span_dsa_write(s, L, pos0, n, xn, iq);
    w = iq + n * niq, q = w + n * (size_t)Hi, o = q + tile * nq;
    en_matmul(L->diq, xn, n, d, (int)niq, iq);
    en_matmul(L->diw, xn, n, d, Hi, w);
    for (size_t i = 0; i < n * (size_t)Hi; i++) {
        w[i] *= wscale;
    }
    for (size_t j0 = 0; r == ST_OK && j0 < n; j0 += tile) {
        size_t tn = en_min(tile, n - j0);

        en_matmul(L->dq, xn + j0 * (size_t)d, tn, d, (int)nq, q);
        for (size_t j = 0; j < tn; j++) {
            for (int h = 0; h < H; h++) {
                en_rope(q + j * nq + (size_t)h * (size_t)row + (size_t)dv, rope, pos0 + j0 + j);
            }
        }
        for (size_t j = j0; r == ST_OK && j < j0 + tn; j++) {
            size_t pos = pos0 + j;

            memcpy(s->tmp, iq + j * niq, sizeof(float) * niq);
            memcpy(s->w, w + j * (size_t)Hi, sizeof(float) * (size_t)Hi);
            memcpy(s->q, q + (j - j0) * nq, sizeof(float) * nq);
            r = en_dsa_attend_sel(s, L, pos, key_end ? key_end : pos + 1, 1);
            memcpy(o + j * no, s->o, sizeof(float) * no);
        }
    }
    if (r == ST_OK) {
        en_matmul(L->dout, o, n, (int)no, d, att);
    }
    free(iq);
    return r;
}

/* The feed-forward of n tokens: xn (n x d) in, x (n x d) out. */
static st_status_t en_span_ffn(const st_seq_t *s, const en_layer_t *L, size_t n, const float *xn,
                               float *x)
{
    const st_model_config_t *c = &s->m->cfg;
    size_t d = c->d_model, F = c->ffn_hidden, E = (size_t)s->m->n_exp;
    size_t K = L->router ? c->moe_topk : 1, nk = n * K;
    /* router n x E | weights nk | experts nk | rows nk | outputs nk x d | gather, h1, h3 */
    float *rl = malloc(sizeof(float) * (n * E + nk + nk * d + nk * d + 2 * nk * F));
    int *idx = malloc(sizeof(int) * 2 * nk), *who = idx + nk;
    float *wt, *out, *g, *h1, *h3;

    if (!rl || !idx) {
        free(rl);
        free(idx);
        return ST_ERR_NOMEM;
    }
    wt = rl + n * E, out = wt + nk, g = out + nk * d, h1 = g + nk * d, h3 = h1 + nk * F;
    if (L->router) {
        en_matmul(L->router, xn, n, (int)d, (int)E, rl);
        for (size_t t = 0; t < n; t++) {
            en_moe_route(rl + t * E, (int)E, (int)K, idx + t * K, wt + t * K);
        }
    } else {
        for (size_t t = 0; t < n; t++) {
            idx[t] = 0;
            wt[t] = 1.0f;
        }
    }
    for (size_t e = 0; e < (L->router ? E : 1); e++) {
        size_t m = 0;

        for (size_t i = 0; i < nk; i++) {
            if ((size_t)idx[i] == e) {
                who[m] = (int)i;
                memcpy(g + m * d, xn + (i / K) * d, sizeof(float) * d);
                m++;
            }
        }
        if (m == 0) {
            continue;
        }
        en_matmul(L->w1[e], g, m, (int)d, (int)F, h1);
        en_matmul(L->w3[e], g, m, (int)d, (int)F, h3);
        for (size_t i = 0; i < m * F; i++) {
            float a = h1[i];

            h1[i] = a / (1.0f + expf(-a)) * h3[i]; /* SiLU gate */
        }
        en_matmul(L->w2[e], h1, m, (int)F, (int)d, g);
        for (size_t i = 0; i < m; i++) {
            memcpy(out + (size_t)who[i] * d, g + i * d, sizeof(float) * d);
        }
    }
    /* Each token sums its experts in routing order, as en_ffn does. */
    for (size_t t = 0; t < n; t++) {
        float *y = x + t * d;

        memset(y, 0, sizeof(float) * d);
        for (size_t j = 0; j < K; j++) {
            const float *p = out + (t * K + j) * d;

            for (size_t i = 0; i < d; i++) {
                y[i] += wt[t * K + j] * p[i];
            }
        }
    }
    free(rl);
    free(idx);
    return ST_OK;
}

/* One layer's attention over the span on the CPU. */
static st_status_t en_span_attn(st_seq_t *s, const en_layer_t *L, size_t pos0, size_t n,
                                size_t key_end, const float *xn, float *att)
{
    return L->kind == 'K' ? en_span_kda(s, L, n, xn, att)
                          : en_span_dsa(s, L, pos0, n, key_end, xn, att);
}

/*
 * Runs n tokens at [len, len + n) layer by layer: text (tokens, causal,
 * key_end 0) or an image's (emb, the placeholder id, key_end its end).
 * logits (may be NULL) gets the last token's.
 */
static st_status_t en_seq_span(st_seq_t *seq, const uint32_t *tokens, const float *emb, size_t n,
                               size_t key_end, float *logits)
{
    const st_model_t *m = seq->m;
    size_t d = m->cfg.d_model, pos0 = seq->len;
    float *x, *res, *xn, *att;
    st_status_t r;

    if (seq->dev) {
        lg_error("an image span on the CUDA path is not supported");
        return ST_ERR_UNSUPPORTED;
    }
    r = en_seq_reserve(seq, key_end ? key_end : pos0 + n);
    if (r != ST_OK) {
        return r;
    }
    x = malloc(sizeof(float) * 4 * n * d);
    if (!x) {
        return ST_ERR_NOMEM;
    }
    res = x + n * d, xn = res + n * d, att = xn + n * d;
    for (size_t j = 0; j < n; j++) {
        const float *e = emb ? emb + j * d : m->emb + (size_t)tokens[j] * d;

        memcpy(x + j * d, e, sizeof(float) * d);
    }
    memset(res, 0, sizeof(float) * n * d);
    for (int l = 0; r == ST_OK && l < m->n_layers; l++) {
        const en_layer_t *L = &m->layer[l];

        st_cpu_rmsnorm_residual(x, res, L->ln_attn, (int)n, (int)d, EN_EPS, xn);
        r = en_span_attn(seq, L, pos0, n, key_end, xn, att);
        if (r == ST_OK) {
            st_cpu_rmsnorm_residual(att, res, L->ln_ffn, (int)n, (int)d, EN_EPS, xn);
            r = en_span_ffn(seq, L, n, xn, x);
        }
        if (r != ST_OK && r != ST_ERR_UNAVAILABLE) { /* lost rows: the engine's (en_step) */
            lg_error("span forward failed layer=%d pos=%zu tokens=%zu status=%s", l, pos0, n,
                     st_status_name(r));
        }
    }
    if (r == ST_OK && logits) {
        st_cpu_rmsnorm_residual(x + (n - 1) * d, res + (n - 1) * d, m->ln_final, 1, (int)d, EN_EPS,
                                seq->xn);
        en_matvec(m->w_out, seq->xn, (int)d, (int)m->cfg.vocab, logits);
    }
    free(x);
    if (r == ST_OK) {
        uint32_t ph = st_model_image_token(m);

        for (size_t j = 0; j < n; j++) {
            seq->tokens[pos0 + j] = tokens ? tokens[j] : ph;
        }
        seq->len = pos0 + n;
    }
    return r;
}

/* A text span on the CUDA path (engine/prefill_cuda.c). */
static st_status_t en_seq_span_dev(st_seq_t *seq, const uint32_t *tokens, size_t n, float *logits)
{
    size_t pos0 = seq->len;
    st_status_t r = en_seq_reserve(seq, pos0 + n);

    if (r == ST_OK) {
        r = en_dev_forward_span(seq, tokens, n, logits);
    }
    if (r == ST_OK) {
        memcpy(seq->tokens + pos0, tokens, sizeof(uint32_t) * n);
        seq->len = pos0 + n;
    }
    return r;
}

st_status_t en_seq_forward_span(st_seq_t *seq, const float *emb, size_t n, size_t key_end,
                                float *logits)
{
    if (n == 0 || key_end < seq->len + n) {
        return ST_ERR_INVALID;
    }
    return en_seq_span(seq, NULL, emb, n, key_end, logits);
}

int en_seq_chunkable(const st_seq_t *seq)
{
    return seq->ring == 0 && !seq->kwin;
}

st_status_t st_seq_prefill(st_seq_t *seq, const uint32_t *tokens, size_t n, float *logits)
{
    st_status_t r = ST_OK;

    if (!seq || !tokens || n == 0) {
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        if (tokens[i] >= seq->m->cfg.vocab) {
            lg_error("token out of range index=%zu token=%u vocab=%u", i, tokens[i],
                     seq->m->cfg.vocab);
            return ST_ERR_INVALID;
        }
    }
    if (!en_seq_chunkable(seq)) {
        /* A bounded pool or a keys window: token by token (docs/engine.md). */
        for (size_t i = 0; r == ST_OK && i < n; i++) {
            r = st_seq_forward(seq, tokens[i], i + 1 == n ? logits : NULL);
        }
        return r;
    }
    for (size_t i = 0; r == ST_OK && i < n; i += EN_SPAN_MAX) {
        size_t k = en_min(EN_SPAN_MAX, n - i);

        float *lg = i + k == n ? logits : NULL;

        r = seq->dev ? en_seq_span_dev(seq, tokens + i, k, lg)
                     : en_seq_span(seq, tokens + i, NULL, k, 0, lg);
    }
    return r;
}
