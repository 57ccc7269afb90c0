/*
 * prefill_cuda.c - a prefill span on the CUDA path (docs/engine.md, "Chunked
 * prefill"). Where the token-by-token path keeps the small projections, the
 * norms and the feed-forward on the CPU (one token's are too small to pay a
 * launch), a span runs all of it on the device, layer by layer, as matrix
 * products over the span's rows (engine/span_cuda.cu): the residual stream
 * stays in device memory from the embedding rows to the last layer, and
 * only the last row comes back for the logits.
 *
 * Per DSA layer: the span's latent rows and indexer keys (fp32, rope
 * applied) are computed, copied to the host stores (what the objects are
 * made of) and ingested into the device copies (bf16 rows, fp8 keys, block
 * summaries); then every token's top-k runs over the keys up to its own
 * position (one launch each, no host round trip), ties are resolved against
 * a tile's scores as on the token path, and the attention runs batched over
 * the tokens that select the full k. Per KDA layer the chunked recurrence
 * (st_cuda_kda_prefill) runs over the span. The feed-forward computes every
 * expert for every token of the span and combines each token's chosen ones
 * in routing order (the experts are few; a dense product beats a gather).
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "en_cuda.h"
#include "en_dev.h"
#include "strata/kernels.h"

#define EN_SCORE_TILE 64 /* queries scored together to resolve their ties */

/* The device copy of a weight of the model's arena. */
#define EN_WD(dev, m, p) ((dev)->w_dev + ((p) - (m)->arena))

#define EN_MM(W, X, n, in, out, Y)                                                         \
    EN_ST(en_cu_matmul(EN_WD(dev, m, (W)), (X), (n), (int)(in), (int)(out), dev->smm, (Y), \
                       dev->stream))

static void en_span_free(struct en_dev *dev)
{
    float **f[] = {&dev->sx,   &dev->sres, &dev->sxn,  &dev->satt, &dev->srow, &dev->skey,
                   &dev->siq,  &dev->sw,   &dev->scs,  &dev->sqf,  &dev->soa,  &dev->slse,
                   &dev->sk_q, &dev->sk_k, &dev->sk_v, &dev->sk_g, &dev->sk_b, &dev->sk_o,
                   &dev->srl,  &dev->swt,  &dev->sh1,  &dev->sh3,  &dev->seo,  &dev->smm};

    for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
        en_dfree(*f[i]);
        *f[i] = NULL;
    }
    en_dfree(dev->sqb);
    en_dfree(dev->ssel);
    en_dfree(dev->ssel_raw);
    en_dfree(dev->sidx);
    en_dfree((void *)dev->sptr);
    en_dfree(dev->scnt);
    dev->sqb = NULL;
    dev->ssel = dev->ssel_raw = NULL;
    dev->sidx = NULL;
    dev->sptr = NULL;
    dev->scnt = NULL;
    float **h[] = {&dev->h_sx, &dev->h_scs, &dev->h_last};
    for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++) {
        if (*h[i]) {
            cudaFreeHost(*h[i]);
        }
        *h[i] = NULL;
    }
    dev->span_cap = 0;
}

void en_dev_span_release(struct en_dev *dev)
{
    en_span_free(dev);
    en_dfree(dev->sscores);
    en_dfree(dev->w_dev);
    dev->sscores = dev->w_dev = NULL;
    dev->span_keys = 0;
}

/* Scratch floats of the largest of the span's matrix products. */
static size_t en_span_mm_scratch(const st_model_t *m, size_t n)
{
    const st_model_config_t *c = &m->cfg;
    int d = (int)c->d_model, row = m->row, hk = (int)c->kda_heads * EN_KD;
    int shapes[][2] = {{d, (int)c->dsa_heads * row},
                       {(int)(c->dsa_heads * c->dsa_latent), d},
                       {d, row},
                       {d, EN_KD},
                       {d, (int)c->idx_heads * EN_KD},
                       {d, (int)c->idx_heads},
                       {d, hk},
                       {d, (int)c->kda_heads},
                       {hk, d},
                       {d, m->n_exp},
                       {d, (int)c->ffn_hidden},
                       {(int)c->ffn_hidden, d}};
    size_t most = 0;

    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        size_t s = en_cu_matmul_scratch(n, shapes[i][0], shapes[i][1]);

        most = s > most ? s : most;
    }
    return most;
}

/* Uploads the weights (at the first span) and grows the span's buffers to n tokens and the
 * scores tile to the sequence's capacity. */
static st_status_t en_span_bufs(st_seq_t *seq, size_t n)
{
    struct en_dev *dev = seq->dev;
    const st_model_t *m = seq->m;
    const st_model_config_t *c = &m->cfg;
    size_t d = c->d_model, row = (size_t)m->row, H = c->dsa_heads, dv = c->dsa_latent;
    size_t Hi = c->idx_heads, hk = (size_t)c->kda_heads * EN_KD, K = c->topk;
    size_t E = (size_t)m->n_exp, F = c->ffn_hidden, kk = c->moe_experts ? c->moe_topk : 1;
    size_t rope = c->dsa_rope, f = sizeof(float);
    st_status_t r = ST_OK;

    if (!dev->w_dev) {
        EN_ST(en_dmalloc(&dev->w_dev, m->n_weights * f));
        EN_CU(cudaMemcpy(dev->w_dev, m->arena, m->n_weights * f, cudaMemcpyHostToDevice));
    }
    if (seq->cap > dev->span_keys) {
        en_dfree(dev->sscores);
        dev->sscores = NULL;
        dev->span_keys = 0;
        EN_ST(en_dmalloc(&dev->sscores, (size_t)EN_SCORE_TILE * seq->cap * f));
        dev->span_keys = seq->cap;
    }
    if (n <= dev->span_cap) {
        return ST_OK;
    }
    en_span_free(dev);
    dev->smm_floats = en_span_mm_scratch(m, n);
    struct {
        void *p;
        size_t bytes;
    } t[] = {
        {&dev->sx, n * d * f},
        {&dev->sres, n * d * f},
        {&dev->sxn, n * d * f},
        {&dev->satt, n * d * f},
        {&dev->srow, n * row * f},
        {&dev->skey, n * EN_KD * f},
        {&dev->siq, n * Hi * EN_KD * f},
        {&dev->sw, n * Hi * f},
        {&dev->scs, n * rope * f},
        {&dev->sqf, n * H * row * f},
        {&dev->sqb, n * H * row * sizeof(uint16_t)},
        {&dev->soa, n * H * dv * f},
        {&dev->slse, n * H * f},
        {&dev->ssel, n * K * sizeof(int32_t)},
        {&dev->ssel_raw, n * K * sizeof(int32_t)},
        {&dev->sptr, n * K * sizeof(void *)},
        {&dev->scnt, n * sizeof(uint32_t)},
        {&dev->sk_q, n * hk * f},
        {&dev->sk_k, n * hk * f},
        {&dev->sk_v, n * hk * f},
        {&dev->sk_g, n * hk * f},
        {&dev->sk_b, n * c->kda_heads * f},
        {&dev->sk_o, n * hk * f},
        {&dev->srl, n * E * f},
        {&dev->sidx, n * kk * sizeof(int)},
        {&dev->swt, n * kk * f},
        {&dev->sh1, n * F * f},
        {&dev->sh3, n * F * f},
        {&dev->seo, E * n * d * f},
        {&dev->smm, (dev->smm_floats + 1) * f},
    };
    for (size_t i = 0; r == ST_OK && i < sizeof(t) / sizeof(t[0]); i++) {
        r = en_dmalloc(t[i].p, t[i].bytes);
    }
    r = r == ST_OK ? en_hmalloc(&dev->h_sx, n * d * f) : r;
    r = r == ST_OK ? en_hmalloc(&dev->h_scs, n * rope * f) : r;
    r = r == ST_OK ? en_hmalloc(&dev->h_last, 2 * d * f) : r;
    if (r != ST_OK) {
        en_span_free(dev);
        return r;
    }
    dev->span_cap = n;
    return ST_OK;
}

static st_status_t en_span_kda(st_seq_t *s, const en_layer_t *L, size_t n)
{
    struct en_dev *dev = s->dev;
    const st_model_t *m = s->m;
    const st_model_config_t *c = &m->cfg;
    size_t d = c->d_model, H = c->kda_heads, hk = H * EN_KD;
    float *state = dev->kda + (size_t)L->sub * H * EN_KD * EN_KD;

    EN_MM(L->kq, dev->sxn, n, d, hk, dev->sk_q);
    EN_MM(L->kk, dev->sxn, n, d, hk, dev->sk_k);
    EN_MM(L->kv, dev->sxn, n, d, hk, dev->sk_v);
    EN_MM(L->kg, dev->sxn, n, d, hk, dev->sk_g);
    EN_MM(L->kb, dev->sxn, n, d, H, dev->sk_b);
    EN_ST(en_cu_kda_gates(dev->sk_g, n * hk, dev->sk_b, n * H, dev->stream));
    EN_ST(st_cuda_kda_prefill(state, dev->sk_q, dev->sk_k, dev->sk_v, dev->sk_g, dev->sk_b, (int)n,
                              (int)H, EN_KD, EN_KD, EN_G_LO, dev->sk_o, dev->stream));
    EN_MM(L->ko, dev->sk_o, n, hk, d, dev->satt);
    return ST_OK;
}

/* The span's rows and keys: computed, copied to the host stores, ingested on the device. */
static st_status_t en_span_dsa_write(st_seq_t *s, const en_layer_t *L, size_t pos0, size_t n)
{
    struct en_dev *dev = s->dev;
    const st_model_t *m = s->m;
    const st_model_config_t *c = &m->cfg;
    en_dev_dsa_t *e = &dev->dsa[L->sub];
    size_t d = c->d_model, row = (size_t)m->row, B = c->block_tokens, b0 = pos0 / B;

    EN_MM(L->dkv, dev->sxn, n, d, row, dev->srow);
    EN_ST(en_cu_rope_rows(dev->srow, n, (int)row, (int)c->dsa_latent, (int)c->dsa_rope, dev->scs,
                          dev->stream));
    EN_MM(L->dik, dev->sxn, n, d, EN_KD, dev->skey);
    EN_CU(cudaMemcpyAsync(en_kv_row(s, L->sub, pos0), dev->srow, n * row * sizeof(float),
                          cudaMemcpyDeviceToHost, dev->stream));
    EN_CU(cudaMemcpyAsync(en_key_row(s, L->sub, pos0), dev->skey, n * EN_KD * sizeof(float),
                          cudaMemcpyDeviceToHost, dev->stream));
    EN_ST(en_cu_rows_bf16(dev->srow, n, pos0, (int)row, (int)B, 0, e->rows, dev->stream));
    EN_ST(en_cu_keys_fp8(dev->skey, n, pos0, e->keys8, e->scale, dev->stream));
    EN_ST(st_cuda_block_summary_fp8(e->keys8 + b0 * B * EN_KD, e->scale + b0 * B,
                                    (int)(pos0 + n - b0 * B), EN_KD, (int)B,
                                    e->summary + b0 * 2u * EN_KD, dev->stream));
    return ST_OK;
}

/* Each token's top-k over the keys [0, pos], its ties resolved, its row pointers. */
static st_status_t en_span_select(st_seq_t *s, const en_layer_t *L, size_t pos0, size_t n)
{
    struct en_dev *dev = s->dev;
    const st_model_config_t *c = &s->m->cfg;
    en_dev_dsa_t *e = &dev->dsa[L->sub];
    size_t Hi = c->idx_heads, K = c->topk, B = c->block_tokens;

    for (size_t j0 = 0; j0 < n; j0 += EN_SCORE_TILE) {
        size_t tn = n - j0 < EN_SCORE_TILE ? n - j0 : EN_SCORE_TILE, nkeys = pos0 + j0 + tn;

        EN_ST(st_cuda_indexer_scores_fp8(dev->siq + j0 * Hi * EN_KD, dev->sw + j0 * Hi, (int)tn,
                                         (int)Hi, EN_KD, e->keys8, e->scale, (int)nkeys,
                                         dev->sscores, dev->stream));
        for (size_t j = j0; j < j0 + tn; j++) {
            size_t pos = pos0 + j;
            int k = (int)(K < pos + 1 ? K : pos + 1);

            EN_ST(st_cuda_indexer_topk_fp8(dev->siq + j * Hi * EN_KD, dev->sw + j * Hi, (int)Hi,
                                           e->keys8, e->scale, e->summary, (int)pos + 1, (int)B, k,
                                           dev->ws, dev->ws_bytes, dev->ssel_raw + j * K, NULL,
                                           dev->stream));
            EN_ST(en_cu_select_ties(dev->sscores + (j - j0) * nkeys, (int)pos + 1,
                                    dev->ssel_raw + j * K, k, dev->ties, dev->tau,
                                    dev->ssel + j * K, dev->stream));
            EN_ST(en_cu_row_ptrs(dev->ssel + j * K, k, e->rows, s->m->row, (int)B, pos / B,
                                 dev->sptr + j * K, dev->scnt + j, dev->stream));
        }
    }
    return ST_OK;
}

static st_status_t en_span_dsa(st_seq_t *s, const en_layer_t *L, size_t pos0, size_t n)
{
    struct en_dev *dev = s->dev;
    const st_model_t *m = s->m;
    const st_model_config_t *c = &m->cfg;
    size_t d = c->d_model, row = (size_t)m->row, H = c->dsa_heads, dv = c->dsa_latent;
    size_t Hi = c->idx_heads, K = c->topk, jf;
    float scale = (float)(1.0 / sqrt((double)row));
    st_status_t r = en_span_dsa_write(s, L, pos0, n);

    if (r != ST_OK) {
        return r;
    }
    EN_MM(L->diq, dev->sxn, n, d, Hi * EN_KD, dev->siq);
    EN_MM(L->diw, dev->sxn, n, d, Hi, dev->sw);
    EN_ST(en_cu_scale(dev->sw, n * Hi, (float)(1.0 / sqrt((double)Hi)), dev->stream));
    EN_MM(L->dq, dev->sxn, n, d, H * row, dev->sqf);
    EN_ST(en_cu_q_bf16_n(dev->sqf, dev->scs, n, (int)H, (int)row, (int)dv, dev->sqb, dev->stream));
    r = en_span_select(s, L, pos0, n);
    if (r != ST_OK) {
        return r;
    }
    /* Tokens that see fewer than k rows (the sequence's first k) one by one, the rest batched. */
    jf = pos0 + 1 >= K ? 0 : K - 1 - pos0;
    jf = jf < n ? jf : n;
    for (size_t j = 0; j < jf; j++) {
        EN_ST(st_cuda_sparse_attn_bf16(dev->sqb + j * H * row, 1, (int)H, dev->sptr + j * K,
                                       (int)(pos0 + j + 1), scale, dev->soa + j * H * dv,
                                       dev->slse + j * H, dev->stream));
    }
    if (jf < n) {
        EN_ST(st_cuda_sparse_attn_bf16(dev->sqb + jf * H * row, (int)(n - jf), (int)H,
                                       dev->sptr + jf * K, (int)K, scale, dev->soa + jf * H * dv,
                                       dev->slse + jf * H, dev->stream));
    }
    EN_MM(L->dout, dev->soa, n, H * dv, d, dev->satt);
    return ST_OK;
}

/* The feed-forward of the span: every expert over every token, then each token's in order. */
static st_status_t en_span_ffn(st_seq_t *s, const en_layer_t *L, size_t n)
{
    struct en_dev *dev = s->dev;
    const st_model_t *m = s->m;
    const st_model_config_t *c = &m->cfg;
    size_t d = c->d_model, F = c->ffn_hidden, E = (size_t)m->n_exp;
    int k = L->router ? (int)c->moe_topk : 1;

    if (L->router) {
        EN_MM(L->router, dev->sxn, n, d, E, dev->srl);
        EN_ST(en_cu_moe_route(dev->srl, n, (int)E, k, dev->sidx, dev->swt, dev->stream));
    }
    for (size_t e = 0; e < E; e++) {
        EN_MM(L->w1[e], dev->sxn, n, d, F, dev->sh1);
        EN_MM(L->w3[e], dev->sxn, n, d, F, dev->sh3);
        EN_ST(en_cu_silu_gate(dev->sh1, dev->sh3, n * F, dev->stream));
        EN_MM(L->w2[e], dev->sh1, n, F, d, dev->seo + e * n * d);
    }
    EN_ST(en_cu_moe_combine(dev->seo, n, (int)d, k, L->router ? dev->sidx : NULL, dev->swt, dev->sx,
                            dev->stream));
    return ST_OK;
}

/* The span's layers on the device, from the embedding rows in dev->sx. */
static st_status_t en_span_layers(st_seq_t *s, size_t pos0, size_t n)
{
    struct en_dev *dev = s->dev;
    const st_model_t *m = s->m;
    size_t d = m->cfg.d_model;
    st_status_t r = ST_OK;

    EN_CU(cudaMemsetAsync(dev->sres, 0, n * d * sizeof(float), dev->stream));
    for (int l = 0; r == ST_OK && l < m->n_layers; l++) {
        const en_layer_t *L = &m->layer[l];

        EN_ST(st_cuda_rmsnorm_residual(dev->sx, dev->sres, EN_WD(dev, m, L->ln_attn), (int)n,
                                       (int)d, EN_EPS, dev->sxn, dev->stream));
        r = L->kind == 'K' ? en_span_kda(s, L, n) : en_span_dsa(s, L, pos0, n);
        if (r != ST_OK) {
            lg_error("device span failed layer=%d pos=%zu tokens=%zu status=%s", l, pos0, n,
                     st_status_name(r));
            return r;
        }
        EN_ST(st_cuda_rmsnorm_residual(dev->satt, dev->sres, EN_WD(dev, m, L->ln_ffn), (int)n,
                                       (int)d, EN_EPS, dev->sxn, dev->stream));
        r = en_span_ffn(s, L, n);
    }
    return r;
}

st_status_t en_dev_forward_span(st_seq_t *s, const uint32_t *tokens, size_t n, float *logits)
{
    struct en_dev *dev = s->dev;
    const st_model_t *m = s->m;
    const st_model_config_t *c = &m->cfg;
    size_t d = c->d_model, pos0 = s->len, B = c->block_tokens, rope = c->dsa_rope;
    st_status_t r;

    if (s->ring) {
        lg_error("a device span needs every block local ring=%zu", s->ring);
        return ST_ERR_INTERNAL;
    }
    dev->cur = (size_t)-1; /* en_dev_begin grows the stores to seq->cap */
    r = en_dev_begin(s, pos0);
    r = r == ST_OK ? en_span_bufs(s, n) : r;
    if (r != ST_OK) {
        return r;
    }
    for (size_t j = 0; j < n; j++) {
        memcpy(dev->h_sx + j * d, m->emb + (size_t)tokens[j] * d, sizeof(float) * d);
        en_dv_rope_table(dev->h_scs + j * rope, (int)rope, pos0 + j);
    }
    EN_CU(cudaMemcpyAsync(dev->sx, dev->h_sx, n * d * sizeof(float), cudaMemcpyHostToDevice,
                          dev->stream));
    EN_CU(cudaMemcpyAsync(dev->scs, dev->h_scs, n * rope * sizeof(float), cudaMemcpyHostToDevice,
                          dev->stream));
    r = en_span_layers(s, pos0, n);
    if (r == ST_OK) {
        EN_CU(cudaMemcpyAsync(dev->h_last, dev->sx + (n - 1) * d, d * sizeof(float),
                              cudaMemcpyDeviceToHost, dev->stream));
        EN_CU(cudaMemcpyAsync(dev->h_last + d, dev->sres + (n - 1) * d, d * sizeof(float),
                              cudaMemcpyDeviceToHost, dev->stream));
    }
    cudaError_t ce = cudaStreamSynchronize(dev->stream);
    if (r != ST_OK || ce != cudaSuccess) {
        dev->cur = (size_t)-1;
        dev->len = 0;
        dev->kda_valid = 0;
        return r != ST_OK ? r : en_cu_ok(ce, "device span");
    }
    /* The host stores' block summaries, from the keys the span wrote there. */
    for (int l = 0; l < m->n_dsa; l++) {
        for (size_t j = 0; j < n; j++) {
            size_t pos = pos0 + j;

            en_summary_add(en_summary_of(s, l, pos / B), en_key_row(s, l, pos), EN_KD,
                           pos % B == 0);
        }
    }
    if (logits) {
        st_cpu_rmsnorm_residual(dev->h_last, dev->h_last + d, m->ln_final, 1, (int)d, EN_EPS,
                                s->xn);
        en_matvec(m->w_out, s->xn, (int)d, (int)c->vocab, logits);
    }
    dev->kda_newer = m->n_kda > 0;
    dev->len = pos0 + n;
    dev->cur = (size_t)-1;
    return ST_OK;
}
