/*
 * seq.c - the state of one sequence (tokens, per DSA layer the latent rows,
 * indexer keys and block summaries, per KDA layer the recurrent state) and
 * its serialisation into cache objects (layouts in docs/engine.md).
 */
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "en_internal.h"
#include "log.h"

static size_t en_max(size_t a, size_t b)
{
    return a > b ? a : b;
}

/*
 * The rows and keys stores. On the CUDA path (seq->pinned) they are pinned
 * host memory, so the transport lands a resume's objects in them and the
 * device copies from them without another copy; whoever registered a store
 * with the transport hears of it before it goes (seq->on_store_free).
 */
static void *en_store_alloc(const st_seq_t *seq, size_t bytes)
{
    return en_host_alloc(bytes, seq->pinned);
}

static void en_store_free(const st_seq_t *seq, void *p)
{
    if (p && seq->on_store_free) {
        seq->on_store_free(seq->on_store_arg, p);
    }
    en_host_free(p, seq->pinned);
}

/* Grows store p to bytes, keeping its first keep bytes; NULL (p kept) when out of memory. */
static void *en_store_grow(const st_seq_t *seq, void *p, size_t keep, size_t bytes)
{
    void *q;

    if (!seq->pinned) {
        if (p && seq->on_store_free) {
            seq->on_store_free(seq->on_store_arg, p); /* realloc may move it */
        }
        return realloc(p, bytes);
    }
    q = en_host_alloc(bytes, 1);
    if (q && p) {
        memcpy(q, p, keep);
        en_store_free(seq, p);
    }
    return q;
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
    s->lsel = malloc(sizeof(int32_t) * (c->topk + 1));
    s->lsc = malloc(sizeof(float) * (c->topk + 1));
    if (!s->dsa || !s->kda || !s->x || !s->sel || !s->remote || !s->stage || !s->rows_a ||
        !s->rows_b || !s->lsel || !s->lsc) {
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
    en_dev_free(seq->dev); /* first: it lets go of the stage it pinned */
    seq->dev = NULL;
    if (seq->dsa) {
        for (int l = 0; l < seq->m->n_dsa; l++) {
            en_store_free(seq, seq->dsa[l].kv);
            en_store_free(seq, seq->dsa[l].keys);
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
    free(seq->lsel);
    free(seq->lsc);
    free(seq->out_b);
    free(seq->lse_a);
    free(seq->lse_b);
    free(seq);
}

void st_seq_reset(st_seq_t *seq)
{
    const st_model_config_t *c = &seq->m->cfg;

    seq->len = 0;
    seq->kbase = 0;
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
            float *kv = en_store_grow(seq, d->kv, sizeof(float) * seq->cap * (size_t)m->row,
                                      sizeof(float) * cap * (size_t)m->row);

            if (!kv) {
                return ST_ERR_NOMEM;
            }
            d->kv = kv;
        }
        if (seq->kwin) {
            continue; /* the keys window has its fixed size (en_seq_set_ring) */
        }
        keys = en_store_grow(seq, d->keys, sizeof(float) * seq->cap * di, sizeof(float) * cap * di);
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

/* Frees every DSA layer's keys and summaries (the stores grow again from 0). */
static void en_seq_drop_keys(st_seq_t *seq)
{
    for (int l = 0; l < seq->m->n_dsa; l++) {
        en_store_free(seq, seq->dsa[l].keys);
        seq->dsa[l].keys = NULL;
        free(seq->dsa[l].summary);
        seq->dsa[l].summary = NULL;
    }
    seq->cap = 0;
}

st_status_t en_seq_set_ring(st_seq_t *seq, size_t ring)
{
    const st_model_t *m = seq->m;
    size_t B = m->cfg.block_tokens, di = m->cfg.idx_dim;
    int kwin = ring > 0 && seq->score.start != NULL;

    if (ring == 1) {
        return ST_ERR_INVALID;
    }
    st_seq_reset(seq);
    if (ring == seq->ring && kwin == seq->kwin) {
        return ST_OK;
    }
    for (int l = 0; l < m->n_dsa; l++) {
        en_store_free(seq, seq->dsa[l].kv);
        seq->dsa[l].kv = NULL;
    }
    if (kwin != seq->kwin || kwin) {
        en_seq_drop_keys(seq); /* another layout of the keys */
    }
    seq->ring = ring;
    seq->kwin = kwin;
    /* Unless the layout changed, the keys and summaries keep their capacity;
     * the rows start over. */
    for (int l = 0; l < m->n_dsa; l++) {
        size_t n = ring ? ring * B : seq->cap;

        seq->dsa[l].kv = en_store_alloc(seq, sizeof(float) * (n + 1) * (size_t)m->row);
        if (kwin && seq->dsa[l].kv) {
            seq->dsa[l].keys = en_store_alloc(seq, sizeof(float) * (ring * B * di + 1));
            seq->dsa[l].summary = malloc(sizeof(float) * (ring * 2 * di + 1));
        }
        if (!seq->dsa[l].kv || (kwin && (!seq->dsa[l].keys || !seq->dsa[l].summary))) {
            /* Leave a consistent, empty unbounded sequence behind. */
            for (int j = 0; j < m->n_dsa; j++) {
                en_store_free(seq, seq->dsa[j].kv);
                seq->dsa[j].kv = NULL;
                en_store_free(seq, seq->dsa[j].keys);
                seq->dsa[j].keys = NULL;
                free(seq->dsa[j].summary);
                seq->dsa[j].summary = NULL;
            }
            seq->cap = 0;
            seq->ring = 0;
            seq->kwin = 0;
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

float *en_key_row(const st_seq_t *seq, int l, size_t t)
{
    const st_model_config_t *c = &seq->m->cfg;

    return seq->dsa[l].keys + (t - (seq->kwin ? seq->kbase * c->block_tokens : 0)) * c->idx_dim;
}

float *en_summary_of(const st_seq_t *seq, int l, size_t b)
{
    return seq->dsa[l].summary + (b - (seq->kwin ? seq->kbase : 0)) * 2u * seq->m->cfg.idx_dim;
}

void en_seq_window(st_seq_t *seq, size_t open)
{
    if (seq->kwin) {
        seq->kbase = open + 1 > seq->ring ? open + 1 - seq->ring : 0;
    }
}

void en_seq_slide(st_seq_t *seq, size_t open)
{
    const st_model_config_t *c = &seq->m->cfg;
    size_t shift, keep, kb = (size_t)c->block_tokens * c->idx_dim, sb = 2u * c->idx_dim;

    if (!seq->kwin || open < seq->kbase + seq->ring) {
        return;
    }
    shift = open + 1 - seq->ring - seq->kbase;
    keep = shift < seq->ring ? seq->ring - shift : 0;
    for (int l = 0; keep > 0 && l < seq->m->n_dsa; l++) {
        en_dsa_store_t *d = &seq->dsa[l];

        memmove(d->keys, d->keys + shift * kb, keep * kb * sizeof(float));
        memmove(d->summary, d->summary + shift * sb, keep * sb * sizeof(float));
    }
    seq->kbase += shift;
}

st_status_t en_seq_keys_full(st_seq_t *seq, size_t *kbase_p)
{
    const st_model_t *m = seq->m;
    size_t B = m->cfg.block_tokens, di = m->cfg.idx_dim, cap = seq->cap;
    size_t base = seq->kbase, nb = cap / B - base;
    float **keys = calloc((size_t)m->n_dsa + 1, sizeof(float *));
    float **sums = calloc((size_t)m->n_dsa + 1, sizeof(float *));
    int ok = keys && sums;

    if (!seq->kwin) {
        free(keys);
        free(sums);
        *kbase_p = 0;
        return ST_OK;
    }
    nb = nb < seq->ring ? nb : seq->ring; /* the window's blocks inside the capacity */
    for (int l = 0; ok && l < m->n_dsa; l++) {
        keys[l] = en_store_alloc(seq, sizeof(float) * cap * di + 1);
        sums[l] = malloc(sizeof(float) * (cap / B) * 2 * di + 1);
        ok = keys[l] && sums[l];
    }
    if (!ok) {
        for (int l = 0; keys && sums && l < m->n_dsa; l++) {
            en_store_free(seq, keys[l]);
            free(sums[l]);
        }
        free(keys);
        free(sums);
        lg_error("no memory for the history's indexer keys tokens=%zu", cap);
        return ST_ERR_NOMEM;
    }
    for (int l = 0; l < m->n_dsa; l++) {
        en_dsa_store_t *d = &seq->dsa[l];

        memcpy(keys[l] + base * B * di, d->keys, sizeof(float) * nb * B * di);
        memcpy(sums[l] + base * 2 * di, d->summary, sizeof(float) * nb * 2 * di);
        en_store_free(seq, d->keys);
        free(d->summary);
        d->keys = keys[l];
        d->summary = sums[l];
    }
    free(keys);
    free(sums);
    seq->kwin = 0;
    seq->kbase = 0;
    *kbase_p = base;
    return ST_OK;
}

size_t en_seq_keys_bytes(const st_seq_t *seq)
{
    const st_model_config_t *c = &seq->m->cfg;
    size_t B = c->block_tokens, blocks = seq->kwin ? seq->ring : seq->cap / B;

    return (size_t)seq->m->n_dsa * blocks * (B + 2) * c->idx_dim * sizeof(float);
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

    memcpy(dst, en_key_row(seq, l, b * B), rows);
    memcpy((char *)dst + rows, en_summary_of(seq, l, b), 2 * di * sizeof(float));
}

void en_export_kda(const st_seq_t *seq, void *dst)
{
    const st_model_t *m = seq->m;
    uint8_t *p = dst;

    memset(p, 0, EN_KDA_HEADER);
    cm_put_le32(p, EN_KDA_MAGIC);
    cm_put_le16(p + 4, EN_KDA_VERSION);
    cm_put_le16(p + 6, (uint16_t)m->n_kda);
    cm_put_le32(p + 8, m->cfg.kda_heads);
    cm_put_le32(p + 12, m->cfg.kda_head_dim);
    cm_put_le64(p + 16, (uint64_t)seq->len);
    cm_put_le64(p + 24, m->fingerprint);
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
    if (seq->kwin && (b < seq->kbase || b >= seq->kbase + seq->ring)) {
        lg_error("IDX object outside the keys window block=%zu window_first=%zu window=%zu", b,
                 seq->kbase, seq->ring);
        return ST_ERR_INVALID;
    }
    r = en_seq_reserve(seq, (b + 1) * B);
    if (r == ST_OK) {
        memcpy(en_key_row(seq, l, b * B), src, rows);
        memcpy(en_summary_of(seq, l, b), (const char *)src + rows, 2 * di * sizeof(float));
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
        lg_warn("KDA checkpoint does not fit this model and position tokens=%zu stored_at=%llu "
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
