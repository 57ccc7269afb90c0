/*
 * model.c - the reference hybrid model: shape checks, deterministic
 * synthetic weights, and the forward pass of one token (docs/engine.md).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "en_internal.h"
#include "log.h"
#include "strata/kernels.h"

void st_model_config_default(st_model_config_t *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    strcpy(cfg->pattern, "KDKD");
    cfg->d_model = 128;
    cfg->vocab = 512;
    cfg->block_tokens = 64;
    cfg->kda_heads = 2;
    cfg->kda_head_dim = 32;
    cfg->dsa_heads = 4;
    cfg->dsa_latent = 64;
    cfg->dsa_rope = 16;
    cfg->idx_heads = 4;
    cfg->idx_dim = 32;
    cfg->topk = 128;
    cfg->ffn_hidden = 128;
    cfg->moe_experts = 4;
    cfg->moe_topk = 2;
    cfg->seed = 1;
}

float en_rand(uint64_t seed, uint64_t tensor, uint64_t index)
{
    uint64_t key[2] = {tensor, index};
    uint64_t h = XXH3_64bits_withSeed(key, sizeof(key), seed);

    return (float)((double)(h >> 40) * (1.0 / 8388608.0) - 1.0); /* 24 bits -> [-1, 1) */
}

/* ------------------------------------------------------------ shape -- */

static int en_check(const char *field, uint64_t v, uint64_t lo, uint64_t hi)
{
    if (v < lo || v > hi) {
        lg_error("model config refused field=%s value=%llu min=%llu max=%llu", field,
                 (unsigned long long)v, (unsigned long long)lo, (unsigned long long)hi);
        return -1;
    }
    return 0;
}

static st_status_t en_validate(const st_model_config_t *c, int *n_kda, int *n_dsa)
{
    size_t n = strnlen(c->pattern, sizeof(c->pattern));
    int bad = 0;

    *n_kda = *n_dsa = 0;
    if (n == 0 || n > ST_MODEL_MAX_LAYERS) {
        lg_error("model config refused field=pattern reason=\"1 to %d letters K or D\"",
                 ST_MODEL_MAX_LAYERS);
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        if (c->pattern[i] == 'K') {
            (*n_kda)++;
        } else if (c->pattern[i] == 'D') {
            (*n_dsa)++;
        } else {
            lg_error("model config refused field=pattern position=%zu letter=0x%02x "
                     "reason=\"only K (KDA) and D (DSA)\"",
                     i, (unsigned)(unsigned char)c->pattern[i]);
            return ST_ERR_INVALID;
        }
    }
    bad |= en_check("d_model", c->d_model, 8, 16384);
    bad |= en_check("vocab", c->vocab, 2, 1u << 22);
    bad |= en_check("block_tokens", c->block_tokens, 16, 4096);
    if (!bad && c->block_tokens % 16 != 0) {
        lg_error("model config refused field=block_tokens value=%u reason=\"a multiple of 16\"",
                 c->block_tokens);
        bad = 1;
    }
    if (*n_kda > 0) {
        bad |= en_check("kda_heads", c->kda_heads, 1, 256);
        bad |= en_check("kda_head_dim", c->kda_head_dim, 1, 512);
    }
    if (*n_dsa > 0) {
        bad |= en_check("dsa_heads", c->dsa_heads, 1, 256);
        bad |= en_check("dsa_latent", c->dsa_latent, 1, 4096);
        bad |= en_check("dsa_rope", c->dsa_rope, 0, 1024);
        if (c->dsa_rope % 2 != 0) {
            lg_error("model config refused field=dsa_rope value=%u reason=\"even\"", c->dsa_rope);
            bad = 1;
        }
        bad |= en_check("idx_heads", c->idx_heads, 1, 64);
        bad |= en_check("idx_dim", c->idx_dim, 1, 1024);
        bad |= en_check("topk", c->topk, 1, 1u << 20);
    }
    bad |= en_check("ffn_hidden", c->ffn_hidden, 1, 65536);
    bad |= en_check("moe_experts", c->moe_experts, 0, 256);
    if (c->moe_experts > 0) {
        bad |= en_check("moe_topk", c->moe_topk, 1, c->moe_experts);
    }
    return bad ? ST_ERR_INVALID : ST_OK;
}

/* ---------------------------------------------------------- weights -- */

typedef struct en_alloc {
    float *base; /* NULL: only count */
    size_t used;
    uint64_t seed;
    uint64_t tensor;
} en_alloc_t;

/* Takes n floats for the next tensor and fills them: scale * U[-1,1) + bias. */
static float *en_tensor(en_alloc_t *a, size_t n, float scale, float bias)
{
    float *t = a->base ? a->base + a->used : NULL;
    uint64_t id = a->tensor++;

    if (t) {
        for (size_t i = 0; i < n; i++) {
            t[i] = bias + scale * en_rand(a->seed, id, i);
        }
    }
    a->used += n;
    return t;
}

static float en_fan(size_t in)
{
    return (float)(1.0 / sqrt((double)in));
}

static void en_layout(st_model_t *m, en_alloc_t *a)
{
    const st_model_config_t *c = &m->cfg;
    size_t d = c->d_model, F = c->ffn_hidden;
    size_t hk = (size_t)c->kda_heads * c->kda_head_dim;
    size_t dq = (size_t)c->dsa_heads * (size_t)m->row;
    size_t di = (size_t)c->idx_heads * c->idx_dim;

    m->emb = en_tensor(a, (size_t)c->vocab * d, 1.0f, 0.0f);
    for (int l = 0; l < m->n_layers; l++) {
        en_layer_t *L = &m->layer[l];

        a->tensor = 1000u * (uint64_t)(l + 1); /* ids do not depend on other layers */
        L->ln_attn = en_tensor(a, d, 0.1f, 1.0f);
        L->ln_ffn = en_tensor(a, d, 0.1f, 1.0f);
        if (L->kind == 'K') {
            L->kq = en_tensor(a, d * hk, en_fan(d), 0.0f);
            L->kk = en_tensor(a, d * hk, en_fan(d), 0.0f);
            L->kv = en_tensor(a, d * hk, en_fan(d), 0.0f);
            L->kg = en_tensor(a, d * hk, en_fan(d), 0.0f);
            L->kb = en_tensor(a, d * c->kda_heads, en_fan(d), 0.0f);
            L->ko = en_tensor(a, hk * d, en_fan(hk), 0.0f);
        } else {
            L->dkv = en_tensor(a, d * (size_t)m->row, en_fan(d), 0.0f);
            L->dq = en_tensor(a, d * dq, en_fan(d), 0.0f);
            L->dik = en_tensor(a, d * c->idx_dim, en_fan(d), 0.0f);
            L->diq = en_tensor(a, d * di, en_fan(d), 0.0f);
            L->diw = en_tensor(a, d * c->idx_heads, en_fan(d), 0.0f);
            L->dout = en_tensor(a, (size_t)c->dsa_heads * c->dsa_latent * d,
                                en_fan((size_t)c->dsa_heads * c->dsa_latent), 0.0f);
        }
        L->router = c->moe_experts ? en_tensor(a, d * c->moe_experts, en_fan(d), 0.0f) : NULL;
        for (int e = 0; e < m->n_exp; e++) {
            float *w1 = en_tensor(a, d * F, en_fan(d), 0.0f);
            float *w3 = en_tensor(a, d * F, en_fan(d), 0.0f);
            float *w2 = en_tensor(a, F * d, en_fan(F), 0.0f);

            if (a->base) {
                L->w1[e] = w1;
                L->w3[e] = w3;
                L->w2[e] = w2;
            }
        }
    }
    a->tensor = 999u;
    m->ln_final = en_tensor(a, d, 0.1f, 1.0f);
    m->w_out = en_tensor(a, d * c->vocab, en_fan(d), 0.0f);
    /* The vision encoder (docs/engine.md, "Images"): ids of their own, so
     * adding it changed none of the tensors above. */
    a->tensor = 900u;
    m->vis_w1 = en_tensor(a, (size_t)EN_VIS_IN * EN_VIS_HIDDEN(m), en_fan(EN_VIS_IN), 0.0f);
    m->vis_w2 = en_tensor(a, EN_VIS_HIDDEN(m) * d, en_fan(EN_VIS_HIDDEN(m)), 0.0f);
    for (int k = 0; k < EN_VIS_DEPTH; k++) {
        size_t hv = EN_VIS_HIDDEN(m);

        m->vis_up[k] = en_tensor(a, hv * EN_VIS_WIDE * hv, en_fan(hv), 0.0f);
        m->vis_down[k] = en_tensor(a, EN_VIS_WIDE * hv * hv, 0.5f * en_fan(EN_VIS_WIDE * hv), 0.0f);
    }
}

st_status_t st_model_create(const st_model_config_t *cfg, st_model_t **model_p)
{
    st_model_t *m;
    en_alloc_t a = {0};
    int n_kda, n_dsa;
    st_status_t s;

    if (!cfg || !model_p) {
        lg_error("st_model_create: NULL argument");
        return ST_ERR_INVALID;
    }
    s = en_validate(cfg, &n_kda, &n_dsa);
    if (s != ST_OK) {
        return s;
    }
    m = calloc(1, sizeof(*m));
    if (!m) {
        return ST_ERR_NOMEM;
    }
    m->cfg = *cfg;
    m->n_layers = (int)strnlen(cfg->pattern, sizeof(cfg->pattern));
    m->n_kda = n_kda;
    m->n_dsa = n_dsa;
    m->row = (int)(cfg->dsa_latent + cfg->dsa_rope);
    m->n_exp = cfg->moe_experts ? (int)cfg->moe_experts : 1;
    m->ptrs = calloc((size_t)m->n_layers * 3 * (size_t)m->n_exp, sizeof(float *));
    if (!m->ptrs) {
        goto err_nomem;
    }
    for (int l = 0, nk = 0, nd = 0; l < m->n_layers; l++) {
        en_layer_t *L = &m->layer[l];

        L->kind = cfg->pattern[l];
        L->sub = L->kind == 'K' ? nk++ : nd++;
        L->w1 = m->ptrs + (size_t)l * 3 * (size_t)m->n_exp;
        L->w3 = L->w1 + m->n_exp;
        L->w2 = L->w3 + m->n_exp;
    }
    a.seed = cfg->seed;
    en_layout(m, &a); /* count */
    m->arena = malloc(a.used * sizeof(float));
    if (!m->arena) {
        lg_error("model weights do not fit floats=%zu", a.used);
        goto err_nomem;
    }
    m->n_weights = a.used;
    a.base = m->arena;
    a.used = 0;
    a.tensor = 0;
    en_layout(m, &a); /* assign and fill */
    {
        /* The fingerprint covers the shape and the seed (the weights follow),
         * field by field so that no padding byte enters it. */
        uint64_t f[17] = {(uint64_t)m->n_layers,
                          cfg->d_model,
                          cfg->vocab,
                          cfg->block_tokens,
                          cfg->kda_heads,
                          cfg->kda_head_dim,
                          cfg->dsa_heads,
                          cfg->dsa_latent,
                          cfg->dsa_rope,
                          cfg->idx_heads,
                          cfg->idx_dim,
                          cfg->topk,
                          cfg->ffn_hidden,
                          cfg->moe_experts,
                          cfg->moe_experts ? cfg->moe_topk : 0,
                          cfg->seed,
                          EN_KDA_VERSION};
        XXH3_state_t st;

        XXH3_64bits_reset(&st);
        XXH3_64bits_update(&st, cfg->pattern, (size_t)m->n_layers);
        XXH3_64bits_update(&st, f, sizeof(f));
        m->fingerprint = XXH3_64bits_digest(&st);
    }
    *model_p = m;
    return ST_OK;

err_nomem:
    free(m->ptrs);
    free(m);
    return ST_ERR_NOMEM;
}

void st_model_free(st_model_t *model)
{
    if (model) {
        free(model->arena);
        free(model->ptrs);
        free(model);
    }
}

const st_model_config_t *st_model_config(const st_model_t *model)
{
    return &model->cfg;
}

uint64_t st_model_fingerprint(const st_model_t *model)
{
    return model->fingerprint;
}

/* ---------------------------------------------------------- forward -- */

void en_summary_add(float *sum, const float *key, int di, int first)
{
    for (int j = 0; j < di; j++) {
        if (first) {
            sum[j] = sum[di + j] = key[j];
        } else {
            sum[j] = key[j] < sum[j] ? key[j] : sum[j];
            sum[di + j] = key[j] > sum[di + j] ? key[j] : sum[di + j];
        }
    }
}

st_status_t en_rows_remote_start(st_seq_t *s, int layer, size_t nr, st_status_t *rf_p)
{
    st_status_t r;

    if (nr == 0) {
        return ST_OK;
    }
    if (!s->rowsrc.start) {
        lg_error("rows outside the local pool and no source for them layer=%d rows=%zu", layer, nr);
        return ST_ERR_INTERNAL;
    }
    r = s->rowsrc.start(s->rowsrc.arg, layer, s->remote, nr, s->stage);
    if (r != ST_OK) {
        return r;
    }
    if (s->rowsrc.serial) {
        *rf_p = s->rowsrc.finish(s->rowsrc.arg); /* measurement: no overlap */
    }
    return ST_OK;
}

/* y[0..out) = sum_i x[i] * W[i][0..out) (W stored [in][out]). */
void en_matvec(const float *W, const float *x, int in, int out, float *y)
{
    memset(y, 0, sizeof(float) * (size_t)out);
    for (int i = 0; i < in; i++) {
        const float *w = W + (size_t)i * (size_t)out;
        float xi = x[i];

        for (int o = 0; o < out; o++) {
            y[o] += xi * w[o];
        }
    }
}

/* Rotates the pairs of v[0..n) by angles pos * 10000^(-2i/n). */
void en_rope(float *v, int n, size_t pos)
{
    for (int i = 0; i < n / 2; i++) {
        double theta = (double)pos * pow(10000.0, -2.0 * i / (double)n);
        float c = (float)cos(theta), s = (float)sin(theta);
        float a = v[2 * i], b = v[2 * i + 1];

        v[2 * i] = a * c - b * s;
        v[2 * i + 1] = a * s + b * c;
    }
}

float en_softplus(float x)
{
    return x > 20.0f ? x : log1pf(expf(x));
}

void en_moe_route(const float *logits, int n, int k, int *idx, float *weight)
{
    float mx, sum = 0.0f;

    for (int j = 0; j < k; j++) {
        int best = -1;

        for (int e = 0; e < n; e++) {
            int taken = 0;

            for (int t = 0; t < j; t++) {
                taken |= idx[t] == e;
            }
            if (!taken && (best < 0 || logits[e] > logits[best])) {
                best = e;
            }
        }
        idx[j] = best;
    }
    mx = logits[idx[0]];
    for (int j = 0; j < k; j++) {
        weight[j] = expf(logits[idx[j]] - mx);
        sum += weight[j];
    }
    for (int j = 0; j < k; j++) {
        weight[j] /= sum;
    }
}

static st_status_t en_kda_layer(st_seq_t *s, const en_layer_t *L)
{
    const st_model_config_t *c = &s->m->cfg;
    int d = (int)c->d_model, H = (int)c->kda_heads, hd = (int)c->kda_head_dim, hk = H * hd;
    float *state = s->kda + (size_t)L->sub * (size_t)H * (size_t)hd * (size_t)hd;
    st_status_t st;

    en_matvec(L->kq, s->xn, d, hk, s->q);
    en_matvec(L->kk, s->xn, d, hk, s->k);
    en_matvec(L->kv, s->xn, d, hk, s->v);
    en_matvec(L->kg, s->xn, d, hk, s->g);
    en_matvec(L->kb, s->xn, d, H, s->beta);
    for (int i = 0; i < hk; i++) {
        s->g[i] = -en_softplus(s->g[i] - 1.0f); /* log-decay <= 0, about -0.3 */
    }
    for (int h = 0; h < H; h++) {
        s->beta[h] = 1.0f / (1.0f + expf(-s->beta[h]));
    }
    st = st_cpu_kda_decode(state, s->q, s->k, s->v, s->g, s->beta, H, hd, hd, EN_G_LO, s->o);
    if (st != ST_OK) {
        return st;
    }
    en_matvec(L->ko, s->o, hk, d, s->att);
    return ST_OK;
}

/* The attention query of DSA layer L at pos into s->q (rope part rotated). */
static void en_dsa_query(st_seq_t *s, const en_layer_t *L, size_t pos)
{
    const st_model_config_t *c = &s->m->cfg;
    int row = s->m->row, dv = (int)c->dsa_latent;

    en_matvec(L->dq, s->xn, (int)c->d_model, (int)c->dsa_heads * row, s->q);
    for (int h = 0; h < (int)c->dsa_heads; h++) {
        en_rope(s->q + (size_t)h * (size_t)row + dv, (int)c->dsa_rope, pos);
    }
}

/* The token at pos writes its latent row (rope part rotated), indexer key
 * and its block's summary into the layer's stores, from s->xn. */
static void en_dsa_write(st_seq_t *s, const en_layer_t *L, size_t pos)
{
    const st_model_t *m = s->m;
    const st_model_config_t *c = &m->cfg;
    int d = (int)c->d_model, row = m->row, dv = (int)c->dsa_latent;
    int di = (int)c->idx_dim, B = (int)c->block_tokens;
    float *kv_row = en_kv_row(s, L->sub, pos);
    float *key = en_key_row(s, L->sub, pos);
    float *sum = en_summary_of(s, L->sub, pos / (size_t)B);

    en_matvec(L->dkv, s->xn, d, row, kv_row);
    en_rope(kv_row + dv, (int)c->dsa_rope, pos);
    en_matvec(L->dik, s->xn, d, di, key);
    en_summary_add(sum, key, di, pos % (size_t)B == 0);
}

/*
 * The selection and attention of the token at pos over the keys [0,
 * n_keys): pos + 1 for text (causal), the image's end for an image token
 * (docs/engine.md, "Images"). The indexer query and head weights are in
 * s->tmp and s->w; the attention query in s->q when q_ready, else it is
 * computed here from s->xn (while a Score call is in flight, when there is
 * one). Writes the heads' latent outputs to s->o.
 */
st_status_t en_dsa_attend_sel(st_seq_t *s, const en_layer_t *L, size_t pos, size_t n_keys,
                              int q_ready)
{
    const st_model_t *m = s->m;
    const st_model_config_t *c = &m->cfg;
    int row = m->row, H = (int)c->dsa_heads, dv = (int)c->dsa_latent, B = (int)c->block_tokens;
    int k = 0, na = 0, nb = 0, pending = 0;
    st_status_t r;

    r = en_dsa_select_start(s, L, n_keys, &k, &pending);
    if (pending && !q_ready) {
        en_dsa_query(s, L, pos); /* while the cluster scores the history */
        q_ready = 1;
    }
    r = en_dsa_select_finish(s, L, pos, n_keys, k, pending, r);
    if (r != ST_OK) {
        return r;
    }
    /*
     * Rows of closed blocks (those the cache holds) and of the open block:
     * two partials, merged by their log-sum-exp. Closed blocks outside the
     * local pool are read through rowsrc while the local partials compute,
     * and their partial is merged last (docs/engine.md, "Overlap").
     */
    /* open: the last block with rows (the image's last, for an image
     * token), which decides what the local pool holds. */
    size_t nr = 0, Bz = (size_t)B, blk = pos / Bz, open = (n_keys - 1) / Bz;

    for (int i = 0; i < k; i++) {
        size_t t = (size_t)s->sel[i], b = t / Bz;
        const float *p;

        if (b == blk) {
            s->rows_b[nb++] = en_kv_row(s, L->sub, t);
            continue;
        }
        if (en_block_local(s, b, open)) {
            p = en_kv_row(s, L->sub, t);
        } else if (s->rowsrc.local && (p = s->rowsrc.local(s->rowsrc.arg, L->sub, b)) != NULL) {
            p += (t % Bz) * (size_t)row;
        } else {
            s->remote[nr++] = (int32_t)t;
            continue;
        }
        s->rows_a[na++] = p;
    }
    s->rows_local += (uint64_t)na;
    s->rows_remote += (uint64_t)nr;
    /* Ascending positions: rows of one block together. */
    for (size_t i = 1; i < nr; i++) {
        int32_t v = s->remote[i];
        size_t j = i;

        for (; j > 0 && s->remote[j - 1] > v; j--) {
            s->remote[j] = s->remote[j - 1];
        }
        s->remote[j] = v;
    }
    st_status_t rf = ST_OK;
    r = en_rows_remote_start(s, L->sub, nr, &rf);
    if (r != ST_OK) {
        return r;
    }
    if (!q_ready) {
        en_dsa_query(s, L, pos);
    }
    float scale = (float)(1.0 / sqrt((double)row));

    r = st_cpu_sparse_attn(s->q, H, row, dv, s->rows_a, na, scale, s->o, s->lse_a);
    if (r == ST_OK) {
        r = st_cpu_sparse_attn(s->q, H, row, dv, s->rows_b, nb, scale, s->out_b, s->lse_b);
    }
    if (r == ST_OK) {
        r = st_cpu_lse_merge(s->o, s->lse_a, s->out_b, s->lse_b, H, dv);
    }
    if (nr > 0) {
        if (!s->rowsrc.serial) {
            rf = s->rowsrc.finish(s->rowsrc.arg); /* always, so nothing stays in flight */
        }
        r = r != ST_OK ? r : rf;
        for (size_t i = 0; r == ST_OK && i < nr; i++) {
            s->rows_a[i] = s->stage + i * (size_t)row;
        }
        if (r == ST_OK) {
            r = st_cpu_sparse_attn(s->q, H, row, dv, s->rows_a, (int)nr, scale, s->out_b, s->lse_b);
        }
        if (r == ST_OK) {
            r = st_cpu_lse_merge(s->o, s->lse_a, s->out_b, s->lse_b, H, dv);
        }
    }
    return r;
}

/* The indexer query of DSA layer L into s->tmp and its head weights (scaled) into s->w. */
static void en_dsa_iq(st_seq_t *s, const en_layer_t *L)
{
    const st_model_config_t *c = &s->m->cfg;
    int d = (int)c->d_model, Hi = (int)c->idx_heads, di = (int)c->idx_dim;
    float wscale = (float)(1.0 / sqrt((double)Hi));

    en_matvec(L->diq, s->xn, d, Hi * di, s->tmp);
    en_matvec(L->diw, s->xn, d, Hi, s->w);
    for (int j = 0; j < Hi; j++) {
        s->w[j] *= wscale;
    }
}

/* The attention of the token at pos over the keys [0, n_keys), from s->xn into s->att. */
static st_status_t en_dsa_attend(st_seq_t *s, const en_layer_t *L, size_t pos, size_t n_keys)
{
    const st_model_config_t *c = &s->m->cfg;
    st_status_t r;

    en_dsa_iq(s, L);
    r = en_dsa_attend_sel(s, L, pos, n_keys, 0);
    if (r != ST_OK) {
        return r;
    }
    en_matvec(L->dout, s->o, (int)c->dsa_heads * (int)c->dsa_latent, (int)c->d_model, s->att);
    return ST_OK;
}

static st_status_t en_dsa_layer(st_seq_t *s, const en_layer_t *L, size_t pos)
{
    en_dsa_write(s, L, pos);
    return en_dsa_attend(s, L, pos, pos + 1);
}

static void en_ffn(st_seq_t *s, const en_layer_t *L)
{
    const st_model_config_t *c = &s->m->cfg;
    int d = (int)c->d_model, F = (int)c->ffn_hidden;
    int idx[256], n = 1;
    float wt[256];

    if (L->router) {
        en_matvec(L->router, s->xn, d, (int)c->moe_experts, s->router);
        en_moe_route(s->router, (int)c->moe_experts, (int)c->moe_topk, idx, wt);
        n = (int)c->moe_topk;
    } else {
        idx[0] = 0;
        wt[0] = 1.0f;
    }
    memset(s->x, 0, sizeof(float) * (size_t)d);
    for (int j = 0; j < n; j++) {
        int e = idx[j];

        en_matvec(L->w1[e], s->xn, d, F, s->h1);
        en_matvec(L->w3[e], s->xn, d, F, s->h3);
        for (int i = 0; i < F; i++) {
            float a = s->h1[i];

            s->h1[i] = a / (1.0f + expf(-a)) * s->h3[i]; /* SiLU gate */
        }
        en_matvec(L->w2[e], s->h1, F, d, s->tmp);
        for (int i = 0; i < d; i++) {
            s->x[i] += wt[j] * s->tmp[i];
        }
    }
}

/* st_seq_forward's start: the token checked, room for it, its embedding row in seq->x. */
static st_status_t en_fwd_open(st_seq_t *seq, uint32_t token, size_t *pos_p)
{
    const st_model_t *m = seq->m;
    int d = (int)m->cfg.d_model;
    size_t pos = seq->len;
    st_status_t r;

    if (token >= m->cfg.vocab) {
        lg_error("token out of range token=%u vocab=%u", token, m->cfg.vocab);
        return ST_ERR_INVALID;
    }
    r = en_seq_reserve(seq, pos + 1);
    if (r != ST_OK) {
        return r;
    }
    en_seq_slide(seq, pos / m->cfg.block_tokens); /* the keys window, when there is one */
    memcpy(seq->x, m->emb + (size_t)token * (size_t)d, sizeof(float) * (size_t)d);
    memset(seq->res, 0, sizeof(float) * (size_t)d);
    *pos_p = pos;
    return ST_OK;
}

/* A layer's failure, logged (lost remote rows are the engine's to handle and log). */
static st_status_t en_fwd_failed(int l, size_t pos, st_status_t r)
{
    if (r != ST_ERR_UNAVAILABLE) {
        lg_error("forward failed layer=%d pos=%zu status=%s", l, pos, st_status_name(r));
    }
    return r;
}

/* After the attention of layer L: the feed-forward sublayer. */
static void en_fwd_ffn(st_seq_t *seq, const en_layer_t *L)
{
    st_cpu_rmsnorm_residual(seq->att, seq->res, L->ln_ffn, 1, (int)seq->m->cfg.d_model, EN_EPS,
                            seq->xn);
    en_ffn(seq, L);
}

/* st_seq_forward's end: the final norm, the logits when asked for, the token kept. */
static void en_fwd_close(st_seq_t *seq, uint32_t token, size_t pos, float *logits)
{
    const st_model_t *m = seq->m;
    int d = (int)m->cfg.d_model;

    st_cpu_rmsnorm_residual(seq->x, seq->res, m->ln_final, 1, d, EN_EPS, seq->xn);
    if (logits) {
        en_matvec(m->w_out, seq->xn, d, (int)m->cfg.vocab, logits);
    }
    seq->tokens[pos] = token;
    seq->len = pos + 1;
}

st_status_t st_seq_forward(st_seq_t *seq, uint32_t token, float *logits)
{
    const st_model_t *m;
    size_t pos;
    st_status_t r;

    if (!seq) {
        return ST_ERR_INVALID;
    }
    m = seq->m;
    r = en_fwd_open(seq, token, &pos);
    if (r != ST_OK) {
        return r;
    }
    for (int l = 0; l < m->n_layers; l++) {
        const en_layer_t *L = &m->layer[l];

        st_cpu_rmsnorm_residual(seq->x, seq->res, L->ln_attn, 1, (int)m->cfg.d_model, EN_EPS,
                                seq->xn);
        if (seq->dev) {
            r = en_dev_layer(seq, L, pos); /* the CUDA path: engine/model_cuda.c */
        } else {
            r = L->kind == 'K' ? en_kda_layer(seq, L) : en_dsa_layer(seq, L, pos);
        }
        if (r != ST_OK) {
            return en_fwd_failed(l, pos, r);
        }
        en_fwd_ffn(seq, L);
    }
    en_fwd_close(seq, token, pos, logits);
    return ST_OK;
}

st_status_t st_seq_forward_batch(st_seq_t *const *seqs, size_t n, const uint32_t *tokens,
                                 float *const *logits)
{
    const st_model_t *m;
    size_t *pos;
    st_status_t r = ST_OK;

    if (!seqs || !tokens || n == 0 || !seqs[0]) {
        return ST_ERR_INVALID;
    }
    m = seqs[0]->m;
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; seqs[i] && j < i; j++) {
            if (seqs[j] == seqs[i]) {
                lg_error("batched forward refused: a sequence twice index=%zu index=%zu", j, i);
                return ST_ERR_INVALID;
            }
        }
        if (!seqs[i] || seqs[i]->m != m) {
            lg_error("batched forward refused: sequence %zu is %s", i,
                     seqs[i] ? "of another model" : "NULL");
            return ST_ERR_INVALID;
        }
    }
    pos = malloc(sizeof(*pos) * n);
    if (!pos) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; r == ST_OK && i < n; i++) {
        r = en_fwd_open(seqs[i], tokens[i], &pos[i]);
    }
    /* Layer by layer: every sequence's device work queued, then each waited for in turn. */
    for (int l = 0; r == ST_OK && l < m->n_layers; l++) {
        const en_layer_t *L = &m->layer[l];
        size_t issued = 0;

        for (; r == ST_OK && issued < n; issued++) {
            st_seq_t *s = seqs[issued];

            st_cpu_rmsnorm_residual(s->x, s->res, L->ln_attn, 1, (int)m->cfg.d_model, EN_EPS,
                                    s->xn);
            if (s->dev) {
                r = en_dev_layer_issue(s, L, pos[issued]);
            } else {
                r = L->kind == 'K' ? en_kda_layer(s, L) : en_dsa_layer(s, L, pos[issued]);
            }
            if (r != ST_OK) {
                r = en_fwd_failed(l, pos[issued], r);
                break; /* seqs[issued] has nothing in flight */
            }
        }
        for (size_t i = 0; i < issued; i++) {
            st_status_t rf = seqs[i]->dev ? en_dev_layer_finish(seqs[i], L) : ST_OK;

            r = r != ST_OK ? r : rf != ST_OK ? en_fwd_failed(l, pos[i], rf) : ST_OK;
            if (r == ST_OK) {
                en_fwd_ffn(seqs[i], L);
            }
        }
    }
    for (size_t i = 0; r == ST_OK && i < n; i++) {
        en_fwd_close(seqs[i], tokens[i], pos[i], logits ? logits[i] : NULL);
    }
    free(pos);
    return r;
}

uint32_t st_model_image_token(const st_model_t *model)
{
    return model->cfg.vocab - 1;
}
