/*
 * seq.c - the state of one sequence (tokens, per DSA layer the latent rows,
 * indexer keys and block summaries, per KDA layer the recurrent state) and
 * its serialisation into cache objects (layouts in docs/engine.md).
 */
#include <stdlib.h>
#include <string.h>

#include "en_internal.h"
#include "st_log.h"

static size_t en_max(size_t a, size_t b)
{
    return a > b ? a : b;
}

st_status_t st_seq_create(const st_model_t *model, st_seq_t **seq_p)
{
    const st_model_config_t *c;
    st_seq_t *s;
    size_t S, hk, kda;

    if (!model || !seq_p) {
        return ST_ERR_INVALID;
    }
    c = &model->cfg;
    hk = (size_t)c->kda_heads * c->kda_head_dim;
    S = en_max(c->d_model, hk);
    S = en_max(S, (size_t)c->dsa_heads * (size_t)model->row);
    S = en_max(S, (size_t)c->idx_heads * c->idx_dim);
    S = en_max(S, c->ffn_hidden);
    S = en_max(S, 256);
    s = calloc(1, sizeof(*s));
    if (!s) {
        return ST_ERR_NOMEM;
    }
    s->m = model;
    kda = (size_t)model->n_kda * hk * c->kda_head_dim;
    s->dsa = calloc((size_t)model->n_dsa + 1, sizeof(*s->dsa));
    s->kda = calloc(kda + 1, sizeof(float));
    /* One block of scratch vectors of S floats each. */
    s->x = malloc(sizeof(float) * S * 15);
    s->sel = malloc(sizeof(int32_t) * (c->topk + 1));
    s->remote = malloc(sizeof(int32_t) * (c->topk + 1));
    s->stage = malloc(sizeof(float) * ((size_t)c->topk + 1) * (size_t)model->row);
    s->rows_a = malloc(sizeof(float *) * (c->topk + 1));
    s->rows_b = malloc(sizeof(float *) * (c->topk + 1));
    if (!s->dsa || !s->kda || !s->x || !s->sel || !s->remote || !s->stage || !s->rows_a ||
        !s->rows_b) {
        st_seq_free(s);
        return ST_ERR_NOMEM;
    }
    {
        float **v[] = {&s->res, &s->xn,   &s->att, &s->tmp, &s->q,  &s->k,  &s->v,
                       &s->g,   &s->beta, &s->o,   &s->w,   &s->h1, &s->h3, &s->router};

        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
            *v[i] = s->x + S * (i + 1);
        }
    }
    /* The second attention partial and both log-sum-exps. */
    s->out_b = malloc(sizeof(float) * ((size_t)c->dsa_heads * c->dsa_latent + 1));
    s->lse_a = malloc(sizeof(float) * (c->dsa_heads + 1));
    s->lse_b = malloc(sizeof(float) * (c->dsa_heads + 1));
    if (!s->out_b || !s->lse_a || !s->lse_b) {
        st_seq_free(s);
        return ST_ERR_NOMEM;
    }
    *seq_p = s;
    return ST_OK;
}

void st_seq_free(st_seq_t *seq)
{
    if (!seq) {
        return;
    }
    if (seq->dsa) {
        for (int l = 0; l < seq->m->n_dsa; l++) {
            free(seq->dsa[l].kv);
            free(seq->dsa[l].keys);
            free(seq->dsa[l].summary);
        }
    }
    free(seq->dsa);
    free(seq->kda);
    free(seq->tokens);
    free(seq->x);
    free(seq->sel);
    free(seq->remote);
    free(seq->stage);
    free(seq->rows_a);
    free(seq->rows_b);
    free(seq->out_b);
    free(seq->lse_a);
    free(seq->lse_b);
    en_dev_free(seq->dev);
    free(seq);
}

void st_seq_reset(st_seq_t *seq)
{
    const st_model_config_t *c = &seq->m->cfg;

    seq->len = 0;
    seq->rows_local = seq->rows_remote = 0;
    memset(seq->kda, 0,
           sizeof(float) * (size_t)seq->m->n_kda * c->kda_heads * c->kda_head_dim *
               c->kda_head_dim);
    if (seq->dev) {
        en_dev_invalidate(seq); /* the host stores are the reference again */
    }
}

size_t st_seq_length(const st_seq_t *seq)
{
    return seq->len;
}

st_status_t en_seq_reserve(st_seq_t *seq, size_t n)
{
    const st_model_t *m = seq->m;
    size_t B = m->cfg.block_tokens, cap, di = m->cfg.idx_dim;
    uint32_t *t;

    if (n <= seq->cap) {
        return ST_OK;
    }
    cap = seq->cap ? seq->cap : 4 * B;
    while (cap < n) {
        cap *= 2;
    }
    cap = (cap + B - 1) / B * B; /* whole blocks, so summaries and imports fit */
    t = realloc(seq->tokens, sizeof(uint32_t) * cap);
    if (!t) {
        return ST_ERR_NOMEM;
    }
    seq->tokens = t;
    for (int l = 0; l < m->n_dsa; l++) {
        en_dsa_store_t *d = &seq->dsa[l];
        float *keys, *sum;

        if (seq->ring == 0) {
            float *kv = realloc(d->kv, sizeof(float) * cap * (size_t)m->row);

            if (!kv) {
                return ST_ERR_NOMEM;
            }
            d->kv = kv;
        }
        keys = realloc(d->keys, sizeof(float) * cap * di);
        if (!keys) {
            return ST_ERR_NOMEM;
        }
        d->keys = keys;
        sum = realloc(d->summary, sizeof(float) * (cap / B) * 2 * di);
        if (!sum) {
            return ST_ERR_NOMEM;
        }
        d->summary = sum;
    }
    /* Only now is every store at least cap long. */
    seq->cap = cap;
    return ST_OK;
}

st_status_t en_seq_set_ring(st_seq_t *seq, size_t ring)
{
    const st_model_t *m = seq->m;
    size_t B = m->cfg.block_tokens;

    if (ring == 1) {
        return ST_ERR_INVALID;
    }
    st_seq_reset(seq);
    if (ring == seq->ring) {
        return ST_OK;
    }
    for (int l = 0; l < m->n_dsa; l++) {
        free(seq->dsa[l].kv);
        seq->dsa[l].kv = NULL;
    }
    seq->ring = ring;
    /* The keys and summaries keep their capacity; the rows start over. */
    for (int l = 0; l < m->n_dsa; l++) {
        size_t n = ring ? ring * B : seq->cap;

        seq->dsa[l].kv = malloc(sizeof(float) * (n + 1) * (size_t)m->row);
        if (!seq->dsa[l].kv) {
            /* Leave a consistent, empty unbounded sequence behind. */
            for (int j = 0; j < m->n_dsa; j++) {
                free(seq->dsa[j].kv);
                seq->dsa[j].kv = NULL;
                free(seq->dsa[j].keys);
                seq->dsa[j].keys = NULL;
                free(seq->dsa[j].summary);
                seq->dsa[j].summary = NULL;
            }
            seq->cap = 0;
            seq->ring = 0;
            return ST_ERR_NOMEM;
        }
    }
    return ST_OK;
}

float *en_kv_row(const st_seq_t *seq, int l, size_t t)
{
    const st_model_t *m = seq->m;
    size_t B = m->cfg.block_tokens;

    if (seq->ring == 0) {
        return seq->dsa[l].kv + t * (size_t)m->row;
    }
    return seq->dsa[l].kv + ((t / B) % seq->ring * B + t % B) * (size_t)m->row;
}

/* ---------------------------------------------------------- objects -- */

size_t en_kv_bytes(const st_model_t *m)
{
    return (size_t)m->cfg.block_tokens * (size_t)m->row * sizeof(float);
}

size_t en_idx_bytes(const st_model_t *m)
{
    return ((size_t)m->cfg.block_tokens + 2) * m->cfg.idx_dim * sizeof(float);
}

size_t en_kda_bytes(const st_model_t *m)
{
    const st_model_config_t *c = &m->cfg;

    return EN_KDA_HEADER +
           (size_t)m->n_kda * c->kda_heads * c->kda_head_dim * c->kda_head_dim * sizeof(float);
}

void en_export_kv(const st_seq_t *seq, int l, size_t b, void *dst)
{
    const st_model_t *m = seq->m;

    memcpy(dst, en_kv_row(seq, l, b * m->cfg.block_tokens), en_kv_bytes(m));
}

void en_export_idx(const st_seq_t *seq, int l, size_t b, void *dst)
{
    const st_model_t *m = seq->m;
    size_t B = m->cfg.block_tokens, di = m->cfg.idx_dim;
    size_t rows = B * di * sizeof(float);

    memcpy(dst, seq->dsa[l].keys + b * B * di, rows);
    memcpy((char *)dst + rows, seq->dsa[l].summary + b * 2 * di, 2 * di * sizeof(float));
}

static void en_put_u16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, 2);
}

static void en_put_u32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void en_put_u64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

void en_export_kda(const st_seq_t *seq, void *dst)
{
    const st_model_t *m = seq->m;
    uint8_t *p = dst;

    memset(p, 0, EN_KDA_HEADER);
    en_put_u32(p, EN_KDA_MAGIC);
    en_put_u16(p + 4, EN_KDA_VERSION);
    en_put_u16(p + 6, (uint16_t)m->n_kda);
    en_put_u32(p + 8, m->cfg.kda_heads);
    en_put_u32(p + 12, m->cfg.kda_head_dim);
    en_put_u64(p + 16, (uint64_t)seq->len);
    en_put_u64(p + 24, m->fingerprint);
    if (seq->dev) {
        en_dev_kda_pull(seq); /* the device's states are the newer ones */
    }
    memcpy(p + EN_KDA_HEADER, seq->kda, en_kda_bytes(m) - EN_KDA_HEADER);
}

st_status_t en_import_kv(st_seq_t *seq, int l, size_t b, const void *src, size_t len)
{
    const st_model_t *m = seq->m;
    st_status_t r;

    if (len != en_kv_bytes(m)) {
        return ST_ERR_INVALID;
    }
    r = en_seq_reserve(seq, (b + 1) * m->cfg.block_tokens);
    if (r == ST_OK) {
        memcpy(en_kv_row(seq, l, b * m->cfg.block_tokens), src, len);
    }
    return r;
}

st_status_t en_import_idx(st_seq_t *seq, int l, size_t b, const void *src, size_t len)
{
    const st_model_t *m = seq->m;
    size_t B = m->cfg.block_tokens, di = m->cfg.idx_dim, rows = B * di * sizeof(float);
    st_status_t r;

    if (len != en_idx_bytes(m)) {
        return ST_ERR_INVALID;
    }
    r = en_seq_reserve(seq, (b + 1) * B);
    if (r == ST_OK) {
        memcpy(seq->dsa[l].keys + b * B * di, src, rows);
        memcpy(seq->dsa[l].summary + b * 2 * di, (const char *)src + rows, 2 * di * sizeof(float));
    }
    return r;
}

st_status_t en_import_kda(st_seq_t *seq, size_t tokens, const void *src, size_t len)
{
    const st_model_t *m = seq->m;
    const uint8_t *p = src;
    uint32_t magic, heads, hd;
    uint16_t ver, n;
    uint64_t at, fp;

    if (len != en_kda_bytes(m)) {
        return ST_ERR_INVALID;
    }
    memcpy(&magic, p, 4);
    memcpy(&ver, p + 4, 2);
    memcpy(&n, p + 6, 2);
    memcpy(&heads, p + 8, 4);
    memcpy(&hd, p + 12, 4);
    memcpy(&at, p + 16, 8);
    memcpy(&fp, p + 24, 8);
    if (magic != EN_KDA_MAGIC || ver != EN_KDA_VERSION || n != m->n_kda ||
        heads != m->cfg.kda_heads || hd != m->cfg.kda_head_dim || at != tokens ||
        fp != m->fingerprint) {
        st_warn("KDA checkpoint does not fit this model and position tokens=%zu stored_at=%llu "
                "fingerprint=%016llx model=%016llx",
                tokens, (unsigned long long)at, (unsigned long long)fp,
                (unsigned long long)m->fingerprint);
        return ST_ERR_CORRUPT;
    }
    memcpy(seq->kda, p + EN_KDA_HEADER, len - EN_KDA_HEADER);
    if (seq->dev) {
        en_dev_invalidate(seq);
    }
    return ST_OK;
}

void en_seq_set_prefix(st_seq_t *seq, const uint32_t *tokens, size_t n)
{
    memcpy(seq->tokens, tokens, n * sizeof(uint32_t));
    seq->len = n;
    if (seq->dev) {
        en_dev_invalidate(seq); /* the device copies follow at the next token */
    }
}
