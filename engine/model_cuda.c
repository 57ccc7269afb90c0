/*
 * model_cuda.c - the CUDA path of the reference model (docs/engine.md, "The
 * CUDA path"): a sequence attached to the device keeps, beside its host
 * stores, device copies of its DSA state (latent rows in bf16, indexer keys
 * in fp8 e4m3 with a scale per row, block summaries) and its KDA states,
 * and runs each layer's attention on the kernels of strata_kernels_cuda.
 *
 * What runs where, per token: the small projections (the token's latent
 * row and indexer key, the indexer query and head weights, KDA's q, k, v,
 * g, beta and output), the norms, the feed-forward and the logits stay on
 * the CPU (the reference shapes have a small d_model); the DSA query and
 * output projections (64 heads x 576 wide), the indexer's top-k, the sparse
 * attention partials, their LSE merge and the KDA recurrence run on the
 * GPU. The host stores (fp32) stay what the objects are made of, so a KV,
 * IDX or KDA object written here is laid out byte for byte as the CPU
 * path's; the device copies follow them: one row and one key per token,
 * and after a resume (imports) the tokens the device lacks in one upload.
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "en_cuda.h"
#include "en_dev.h"
#include "en_internal.h"
#include "log.h"
#include "strata/kernels.h"

size_t en_pad(size_t n)
{
    return (n + EN_PAD - 1) / EN_PAD * EN_PAD;
}

/* Host projections use model.c's en_matvec: identical host rows on both devices. */
/* cs[0..n/2) = cos, cs[n/2..n) = sin of the angles of position pos. */
void en_dv_rope_table(float *cs, int n, size_t pos)
{
    for (int i = 0; i < n / 2; i++) {
        double theta = (double)pos * pow(10000.0, -2.0 * i / (double)n);

        cs[i] = (float)cos(theta);
        cs[n / 2 + i] = (float)sin(theta);
    }
}

static void en_dv_rope(float *v, int n, const float *cs)
{
    for (int i = 0; i < n / 2; i++) {
        float c = cs[i], s = cs[n / 2 + i];
        float a = v[2 * i], b = v[2 * i + 1];

        v[2 * i] = a * c - b * s;
        v[2 * i + 1] = a * s + b * c;
    }
}

static uint16_t en_bf16(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* ------------------------------------------------------------ memory -- */

/* Allocates bytes (at least 16) of device memory, or of pinned host memory (pinned), into *pp;
 * NULL and ST_ERR_NOMEM, logged, when CUDA refuses. */
static st_status_t en_cuda_alloc(void *pp, size_t bytes, int pinned)
{
    size_t n = bytes ? bytes : 16;
    cudaError_t e = pinned ? cudaMallocHost((void **)pp, n) : cudaMalloc((void **)pp, n);

    if (e != cudaSuccess) {
        *(void **)pp = NULL;
        lg_error("%s memory refused bytes=%zu error=\"%s\"", pinned ? "pinned host" : "device",
                 bytes, cudaGetErrorString(e));
        return ST_ERR_NOMEM;
    }
    return ST_OK;
}

st_status_t en_dmalloc(void *pp, size_t bytes)
{
    return en_cuda_alloc(pp, bytes, 0);
}

st_status_t en_hmalloc(void *pp, size_t bytes)
{
    return en_cuda_alloc(pp, bytes, 1);
}

void en_dfree(void *p)
{
    if (p) {
        cudaFree(p);
    }
}

void *en_host_alloc(size_t bytes, int pinned)
{
    void *p = NULL;

    if (!pinned) {
        return malloc(bytes ? bytes : 1);
    }
    return en_hmalloc(&p, bytes) == ST_OK ? p : NULL;
}

void en_host_free(void *p, int pinned)
{
    if (p && pinned) {
        cudaFreeHost(p);
    } else {
        free(p);
    }
}

void en_dev_free(struct en_dev *dev)
{
    if (!dev) {
        return;
    }
    if (dev->stream) {
        cudaStreamSynchronize(dev->stream);
    }
    en_dev_span_release(dev);
    if (dev->dsa) {
        for (en_dev_dsa_t *d = dev->dsa; d < dev->dsa + dev->n_dsa; d++) {
            en_dfree(d->rows);
            en_dfree(d->keys8);
            en_dfree(d->scale);
            en_dfree(d->summary);
            en_dfree(d->w_q);
            en_dfree(d->w_out);
        }
        free(dev->dsa);
    }
    void *dptr[] = {dev->kda, dev->ws,      dev->scores,      dev->ties, dev->up,    dev->qf,
                    dev->oa,  dev->ob,      dev->lsea,        dev->lseb, dev->part,  dev->res,
                    dev->kin, dev->ko,      dev->bulk,        dev->tau,  dev->qb,    dev->stage,
                    dev->sel, dev->sel_raw, (void *)dev->ptr, dev->cnt,  dev->stagef};
    for (size_t i = 0; i < sizeof(dptr) / sizeof(dptr[0]); i++) {
        en_dfree(dptr[i]);
    }
    void *hptr[] = {dev->h_up,  dev->h_res, dev->h_kin,         dev->h_ko,
                    dev->h_cnt, dev->h_sel, (void *)dev->h_ptr, dev->h_stage};
    for (size_t i = 0; i < sizeof(hptr) / sizeof(hptr[0]); i++) {
        if (hptr[i]) {
            cudaFreeHost(hptr[i]);
        }
    }
    if (dev->stream) {
        cudaStreamDestroy(dev->stream);
    }
    if (dev->h_pinned) {
        cudaHostUnregister(dev->h_pinned);
    }
    free(dev);
}

static const en_layer_t *en_dsa_layer_of(const st_model_t *m, int sub)
{
    for (int l = 0; l < m->n_layers; l++) {
        if (m->layer[l].kind == 'D' && m->layer[l].sub == sub) {
            return &m->layer[l];
        }
    }
    return NULL;
}

st_status_t en_dev_attach(st_seq_t *seq)
{
    const st_model_t *m = seq->m;
    const st_model_config_t *c = &m->cfg;
    size_t d = c->d_model, H = c->dsa_heads, row = (size_t)m->row, dv = c->dsa_latent;
    size_t k = (size_t)c->topk + 1, hk = (size_t)c->kda_heads * EN_KD;
    size_t part = en_cu_matvec_scratch((int)d, (int)(H * row));
    struct en_dev *dev;
    st_status_t r;

    r = en_dev_check_shape(m, 0);
    if (r != ST_OK) {
        return r;
    }
    if (st_cuda_available() != ST_OK) {
        lg_error("no usable CUDA device for the engine");
        return ST_ERR_UNAVAILABLE;
    }
    dev = calloc(1, sizeof(*dev));
    if (!dev) {
        return ST_ERR_NOMEM;
    }
    dev->dsa = calloc((size_t)m->n_dsa + 1, sizeof(*dev->dsa));
    if (!dev->dsa) {
        free(dev);
        return ST_ERR_NOMEM;
    }
    dev->n_dsa = m->n_dsa;
    r = en_cu_ok(cudaStreamCreateWithFlags(&dev->stream, cudaStreamNonBlocking), "stream");
    if (part < en_cu_matvec_scratch((int)(H * dv), (int)d)) {
        part = en_cu_matvec_scratch((int)(H * dv), (int)d);
    }
    for (int l = 0; r == ST_OK && l < m->n_dsa; l++) {
        const en_layer_t *L = en_dsa_layer_of(m, l);
        en_dev_dsa_t *e = &dev->dsa[l];
        size_t nq = d * H * row, no = H * dv * d;

        r = en_dmalloc(&e->w_q, nq * sizeof(float));
        r = r == ST_OK ? en_dmalloc(&e->w_out, no * sizeof(float)) : r;
        if (r == ST_OK) {
            r = en_cu_ok(cudaMemcpy(e->w_q, L->dq, nq * sizeof(float), cudaMemcpyHostToDevice),
                         "upload dq");
        }
        if (r == ST_OK) {
            r = en_cu_ok(cudaMemcpy(e->w_out, L->dout, no * sizeof(float), cudaMemcpyHostToDevice),
                         "upload dout");
        }
    }
    dev->o_row = en_pad(d);
    dev->o_key = dev->o_row + en_pad(row);
    dev->o_iq = dev->o_key + en_pad(EN_KD);
    dev->o_w = dev->o_iq + en_pad((size_t)c->idx_heads * EN_KD);
    dev->o_cs = dev->o_w + en_pad(c->idx_heads);
    dev->n_up = dev->o_cs + en_pad(c->dsa_rope);
    {
        struct {
            void *p;
            size_t bytes;
        } dv_bufs[] = {
            {&dev->kda, (size_t)m->n_kda * hk * EN_KD * sizeof(float)},
            {&dev->up, dev->n_up * sizeof(float)},
            {&dev->qf, H * row * sizeof(float)},
            {&dev->qb, H * row * sizeof(uint16_t)},
            {&dev->oa, H * dv * sizeof(float)},
            {&dev->ob, H * dv * sizeof(float)},
            {&dev->lsea, H * sizeof(float)},
            {&dev->lseb, H * sizeof(float)},
            {&dev->part, (part + 1) * sizeof(float)},
            {&dev->res, d * sizeof(float)},
            {&dev->cnt, sizeof(uint32_t)},
            {&dev->sel, k * sizeof(int32_t)},
            {&dev->sel_raw, k * sizeof(int32_t)},
            {&dev->tau, sizeof(float)},
            {&dev->ptr, 2 * k * sizeof(void *)},
            {&dev->stage, k * row * sizeof(uint16_t)},
            {&dev->stagef, k * row * sizeof(float)},
            {&dev->kin, (4 * en_pad(hk) + en_pad(c->kda_heads)) * sizeof(float)},
            {&dev->ko, hk * sizeof(float)},
            {&dev->bulk, (size_t)EN_CH * row * sizeof(float)},
        };
        struct {
            void *p;
            size_t bytes;
        } h_bufs[] = {
            {&dev->h_up, dev->n_up * sizeof(float)},
            {&dev->h_res, d * sizeof(float)},
            {&dev->h_cnt, sizeof(uint32_t)},
            {&dev->h_kin, (4 * en_pad(hk) + en_pad(c->kda_heads)) * sizeof(float)},
            {&dev->h_ko, hk * sizeof(float)},
            {&dev->h_sel, k * sizeof(int32_t)},
            {&dev->h_ptr, 2 * k * sizeof(void *)},
            {&dev->h_stage, k * row * sizeof(uint16_t)},
        };
        for (size_t i = 0; r == ST_OK && i < sizeof(dv_bufs) / sizeof(dv_bufs[0]); i++) {
            r = en_dmalloc(dv_bufs[i].p, dv_bufs[i].bytes);
        }
        for (size_t i = 0; r == ST_OK && i < sizeof(h_bufs) / sizeof(h_bufs[0]); i++) {
            r = en_hmalloc(h_bufs[i].p, h_bufs[i].bytes);
        }
    }
    if (r != ST_OK) {
        en_dev_free(dev);
        return r;
    }
    dev->ring = seq->ring;
    dev->cur = (size_t)-1;
    /* Remote rows land in the sequence's stage and go up from there as they are: pinned. */
    if (seq->ring && cudaHostRegister(seq->stage, k * row * sizeof(float),
                                      cudaHostRegisterDefault) == cudaSuccess) {
        dev->h_pinned = seq->stage;
    }
    (void)cudaGetLastError(); /* a refusal leaves the stage pageable: slower, not wrong */
    seq->dev = dev;
    {
        int empty = 1;

        for (int l = 0; l < m->n_dsa; l++) {
            empty = empty && !seq->dsa[l].kv && !seq->dsa[l].keys;
        }
        seq->pinned = empty; /* stores allocated from now on are pinned */
    }
    lg_info("sequence on the CUDA device dsa_layers=%d kda_layers=%d heads=%zu topk=%u", m->n_dsa,
            m->n_kda, H, c->topk);
    return ST_OK;
}

void en_dev_invalidate(st_seq_t *seq)
{
    struct en_dev *dev = seq->dev;

    if (dev) {
        dev->len = 0;
        dev->cur = (size_t)-1;
        dev->kda_valid = 0;
        dev->kda_newer = 0;
    }
}

void en_dev_kda_pull(const st_seq_t *seq)
{
    struct en_dev *dev = seq->dev;
    const st_model_config_t *c = &seq->m->cfg;

    if (dev && dev->kda_newer) {
        size_t n = (size_t)seq->m->n_kda * c->kda_heads * EN_KD * EN_KD;

        if (en_cu_ok(cudaMemcpyAsync(seq->kda, dev->kda, n * sizeof(float), cudaMemcpyDeviceToHost,
                                     dev->stream),
                     "download KDA states") == ST_OK &&
            en_cu_ok(cudaStreamSynchronize(dev->stream), "download KDA states") == ST_OK) {
            dev->kda_newer = 0;
        }
    }
}

/* Grows one device array of n_old elements to n_new (contents kept). */
static st_status_t en_dgrow(void *pp, size_t n_old, size_t n_new, size_t elem, cudaStream_t s)
{
    void *old = *(void **)pp, *p;
    st_status_t r = en_dmalloc(&p, n_new * elem);

    if (r != ST_OK) {
        return r;
    }
    if (old && n_old) {
        r = en_cu_ok(cudaMemcpyAsync(p, old, n_old * elem, cudaMemcpyDeviceToDevice, s), "grow");
        cudaStreamSynchronize(s);
    }
    en_dfree(old);
    *(void **)pp = p;
    return r;
}

/* Lays the device stores out for the sequence's capacity and pool. */
static st_status_t en_dev_grow(st_seq_t *seq)
{
    struct en_dev *dev = seq->dev;
    const st_model_t *m = seq->m;
    size_t B = m->cfg.block_tokens, cap = seq->cap, row = (size_t)m->row;
    size_t slots = seq->ring ? seq->ring * B : cap;
    st_status_t r;

    if (dev->ring != seq->ring) {
        for (int l = 0; l < m->n_dsa; l++) {
            en_dfree(dev->dsa[l].rows);
            dev->dsa[l].rows = NULL;
        }
        dev->slots = 0;
        dev->ring = seq->ring;
        dev->len = 0;
    }
    if (cap > dev->cap) {
        for (int l = 0; l < m->n_dsa; l++) {
            en_dev_dsa_t *e = &dev->dsa[l];

            r = en_dgrow(&e->keys8, dev->cap * EN_KD, cap * EN_KD, 1, dev->stream);
            r = r == ST_OK ? en_dgrow(&e->scale, dev->cap, cap, sizeof(float), dev->stream) : r;
            r = r == ST_OK ? en_dgrow(&e->summary, dev->cap / B * 2 * EN_KD, cap / B * 2 * EN_KD,
                                      sizeof(float), dev->stream)
                           : r;
            if (r != ST_OK) {
                return r;
            }
        }
        en_dfree(dev->ws);
        en_dfree(dev->scores);
        en_dfree(dev->ties);
        dev->ws = dev->scores = NULL;
        dev->ties = NULL;
        dev->ws_bytes = st_cuda_indexer_topk_workspace((int)cap, (int)B);
        r = en_dmalloc(&dev->ws, dev->ws_bytes);
        r = r == ST_OK ? en_dmalloc(&dev->scores, cap * sizeof(float)) : r;
        r = r == ST_OK ? en_dmalloc(&dev->ties, en_cu_ties_scratch(cap) * sizeof(int)) : r;
        if (r != ST_OK) {
            return r;
        }
        dev->cap = cap;
    }
    if (slots > dev->slots) {
        for (int l = 0; l < m->n_dsa; l++) {
            r = en_dgrow(&dev->dsa[l].rows, dev->slots * row, slots * row, sizeof(uint16_t),
                         dev->stream);
            if (r != ST_OK) {
                return r;
            }
        }
        dev->slots = slots;
    }
    return ST_OK;
}

/* Queues the upload of tokens [a, b) of DSA layer l from the host stores: keys to fp8, rows
 * (those the pool holds with the sequence at end tokens) to bf16, through dev->bulk in pieces
 * of EN_CH tokens. */
static st_status_t en_dev_upload_layer(st_seq_t *seq, int l, size_t a, size_t b, size_t end)
{
    struct en_dev *dev = seq->dev;
    const st_model_t *m = seq->m;
    size_t B = m->cfg.block_tokens, row = (size_t)m->row, open = end / B, first = 0;
    en_dev_dsa_t *e = &dev->dsa[l];

    if (seq->ring && open + 1 > seq->ring) {
        first = (open + 1 - seq->ring) * B; /* the oldest token of the pool */
    }
    for (size_t t = a; t < b;) {
        size_t n = b - t < EN_CH ? b - t : EN_CH;

        EN_CU(cudaMemcpyAsync(dev->bulk, seq->dsa[l].keys + t * EN_KD, n * EN_KD * sizeof(float),
                              cudaMemcpyHostToDevice, dev->stream));
        EN_ST(en_cu_keys_fp8(dev->bulk, n, t, e->keys8, e->scale, dev->stream));
        t += n;
    }
    for (size_t t = a > first ? a : first; t < b;) {
        size_t n = b - t < EN_CH ? b - t : EN_CH;

        if (seq->ring && n > B - t % B) {
            n = B - t % B; /* a ring slot's rows are contiguous within the block */
        }
        EN_CU(cudaMemcpyAsync(dev->bulk, en_kv_row(seq, l, t), n * row * sizeof(float),
                              cudaMemcpyHostToDevice, dev->stream));
        EN_ST(en_cu_rows_bf16(dev->bulk, n, t, (int)row, (int)B, seq->ring, e->rows, dev->stream));
        t += n;
    }
    return ST_OK;
}

/* Queues the block summaries of tokens [0, n) of every DSA layer, from the device keys. */
static st_status_t en_dev_summaries(st_seq_t *seq, size_t n)
{
    struct en_dev *dev = seq->dev;

    for (int l = 0; n > 0 && l < seq->m->n_dsa; l++) {
        en_dev_dsa_t *e = &dev->dsa[l];

        EN_ST(st_cuda_block_summary_fp8(e->keys8, e->scale, (int)n, EN_KD,
                                        (int)seq->m->cfg.block_tokens, e->summary, dev->stream));
    }
    return ST_OK;
}

/* Uploads tokens [a, b) of every DSA layer from the host stores (after a resume). */
static st_status_t en_dev_upload(st_seq_t *seq, size_t a, size_t b)
{
    for (int l = 0; l < seq->m->n_dsa; l++) {
        st_status_t r = en_dev_upload_layer(seq, l, a, b, b);

        if (r != ST_OK) {
            return r;
        }
    }
    return en_dev_summaries(seq, b);
}

st_status_t en_dev_load_start(st_seq_t *seq)
{
    seq->dev->len = 0;
    seq->dev->cur = (size_t)-1;
    return en_dev_grow(seq);
}

st_status_t en_dev_load_piece(st_seq_t *seq, int l, size_t a, size_t b, size_t n)
{
    return en_dev_upload_layer(seq, l, a, b, n);
}

st_status_t en_dev_load_end(st_seq_t *seq, size_t n)
{
    st_status_t r = en_dev_summaries(seq, n);
    cudaError_t ce = cudaStreamSynchronize(seq->dev->stream);

    return r != ST_OK ? r : en_cu_ok(ce, "resume upload");
}

void en_dev_loaded(st_seq_t *seq, size_t n)
{
    struct en_dev *dev = seq->dev;

    dev->len = n; /* en_dev_begin(n) uploads nothing more; the KDA states follow there */
    dev->cur = (size_t)-1;
    dev->kda_valid = 0;
    dev->kda_newer = 0;
}

/* Before the first layer of the token at pos: the device holds tokens [0, pos). */
st_status_t en_dev_begin(st_seq_t *seq, size_t pos)
{
    struct en_dev *dev = seq->dev;
    const st_model_config_t *c = &seq->m->cfg;
    st_status_t r;

    if (dev->cur == pos) {
        return ST_OK;
    }
    r = en_dev_grow(seq);
    if (r != ST_OK) {
        return r;
    }
    if (!dev->kda_valid && seq->m->n_kda > 0) {
        size_t n = (size_t)seq->m->n_kda * c->kda_heads * EN_KD * EN_KD;

        EN_CU(cudaMemcpyAsync(dev->kda, seq->kda, n * sizeof(float), cudaMemcpyHostToDevice,
                              dev->stream));
    }
    dev->kda_valid = 1;
    dev->kda_newer = 0;
    if (dev->len > pos) {
        dev->len = 0;
    }
    if (dev->len < pos) {
        r = en_dev_upload(seq, dev->len, pos);
        if (r != ST_OK) {
            return r;
        }
    }
    dev->len = pos + 1;
    dev->cur = pos;
    return ST_OK;
}

/* ------------------------------------------------------------ layers -- */

static st_status_t en_dev_kda(st_seq_t *s, const en_layer_t *L)
{
    struct en_dev *dev = s->dev;
    const st_model_config_t *c = &s->m->cfg;
    int d = (int)c->d_model, H = (int)c->kda_heads, hk = H * EN_KD;
    size_t ph = en_pad((size_t)hk);
    float *q = dev->h_kin, *k = q + ph, *v = k + ph, *g = v + ph, *beta = g + ph;
    float *state = dev->kda + (size_t)L->sub * (size_t)H * EN_KD * EN_KD;

    en_matvec(L->kq, s->xn, d, hk, q);
    en_matvec(L->kk, s->xn, d, hk, k);
    en_matvec(L->kv, s->xn, d, hk, v);
    en_matvec(L->kg, s->xn, d, hk, g);
    en_matvec(L->kb, s->xn, d, H, beta);
    for (int i = 0; i < hk; i++) {
        g[i] = -en_softplus(g[i] - 1.0f);
    }
    for (int h = 0; h < H; h++) {
        beta[h] = 1.0f / (1.0f + expf(-beta[h]));
    }
    EN_CU(cudaMemcpyAsync(dev->kin, dev->h_kin, (4 * ph + (size_t)H) * sizeof(float),
                          cudaMemcpyHostToDevice, dev->stream));
    EN_ST(st_cuda_kda_decode(state, dev->kin, dev->kin + ph, dev->kin + 2 * ph, dev->kin + 3 * ph,
                             dev->kin + 4 * ph, H, EN_KD, EN_KD, EN_G_LO, dev->ko, dev->stream));
    EN_CU(cudaMemcpyAsync(dev->h_ko, dev->ko, (size_t)hk * sizeof(float), cudaMemcpyDeviceToHost,
                          dev->stream));
    return ST_OK;
}

/* After en_dev_kda: waits for its output and projects it into s->att. */
static st_status_t en_dev_kda_finish(st_seq_t *s, const en_layer_t *L)
{
    struct en_dev *dev = s->dev;
    int d = (int)s->m->cfg.d_model, hk = (int)s->m->cfg.kda_heads * EN_KD;

    EN_CU(cudaStreamSynchronize(dev->stream));
    dev->kda_newer = 1;
    en_matvec(L->ko, dev->h_ko, hk, d, s->att);
    return ST_OK;
}

static int en_cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

    return (x > y) - (x < y);
}

/*
 * The selection of a bounded pool, on the host: local rows (the pool's and
 * the open block's) as device pointers, rows kept aside and remote rows
 * through the device staging buffer as a second partial, merged by LSE.
 */
static st_status_t en_dev_pool_attn(st_seq_t *s, const en_layer_t *L, size_t pos, int k,
                                    float scale)
{
    struct en_dev *dev = s->dev;
    const st_model_t *m = s->m;
    const st_model_config_t *c = &m->cfg;
    en_dev_dsa_t *e = &dev->dsa[L->sub];
    size_t B = c->block_tokens, blk = pos / B, row = (size_t)m->row, nr = 0, nk = 0;
    int H = (int)c->dsa_heads, dv = (int)c->dsa_latent, na = 0, closed = 0;
    const uint16_t **pa = dev->h_ptr, **pb = dev->h_ptr + c->topk + 1;
    st_status_t r = ST_OK, rf = ST_OK;

    EN_CU(cudaMemcpyAsync(dev->h_sel, dev->sel, (size_t)k * sizeof(int32_t), cudaMemcpyDeviceToHost,
                          dev->stream));
    EN_CU(cudaStreamSynchronize(dev->stream));
    qsort(dev->h_sel, (size_t)k, sizeof(int32_t), en_cmp_i32); /* rows of a block together */
    for (int i = 0; i < k; i++) {
        size_t t = (size_t)dev->h_sel[i], b = t / B;
        const float *p;

        if (b == blk || en_block_local(s, b, blk)) {
            size_t slot = s->ring ? b % s->ring * B + t % B : t;

            pa[na++] = e->rows + slot * row;
            closed += b != blk;
        } else if (s->rowsrc.local && (p = s->rowsrc.local(s->rowsrc.arg, L->sub, b)) != NULL) {
            p += (t % B) * row; /* a block kept aside: its rows go through the staging buffer */
            for (size_t j = 0; j < row; j++) {
                dev->h_stage[nk * row + j] = en_bf16(p[j]);
            }
            nk++;
            closed++;
        } else {
            s->remote[nr++] = (int32_t)t;
        }
    }
    s->rows_local += (uint64_t)closed;
    s->rows_remote += (uint64_t)nr;
    if (s->rowsrc.serial) {
        /* Measurement (serial_rows): the remote rows are waited for before the local partial. */
        r = en_rows_remote_start(s, L->sub, nr, &rf);
        if (r != ST_OK) {
            return r;
        }
    }
    /* The local partial is queued on the device first; it computes while this thread reads
     * the remote rows into the pinned stage. */
    EN_CU(cudaMemcpyAsync(dev->ptr, pa, (size_t)na * sizeof(void *), cudaMemcpyHostToDevice,
                          dev->stream));
    r = st_cuda_sparse_attn_bf16(dev->qb, 1, H, dev->ptr, na, scale, dev->oa, dev->lsea,
                                 dev->stream);
    if (!s->rowsrc.serial) {
        st_status_t rs = en_rows_remote_start(s, L->sub, nr, &rf);

        if (rs != ST_OK) {
            cudaStreamSynchronize(dev->stream);
            return rs;
        }
        if (nr > 0) {
            rf = s->rowsrc.finish(s->rowsrc.arg); /* always, so nothing stays in flight */
        }
    }
    r = r != ST_OK ? r : rf;
    if (r == ST_OK && nk + nr > 0) {
        const uint16_t **dptr = dev->ptr + c->topk + 1;

        for (size_t i = 0; i < nk + nr; i++) {
            pb[i] = dev->stage + i * row;
        }
        if (nk > 0) {
            EN_CU(cudaMemcpyAsync(dev->stage, dev->h_stage, nk * row * sizeof(uint16_t),
                                  cudaMemcpyHostToDevice, dev->stream));
        }
        if (nr > 0) {
            /* fp32 as read, to bf16 on the device. */
            EN_CU(cudaMemcpyAsync(dev->stagef, s->stage, nr * row * sizeof(float),
                                  cudaMemcpyHostToDevice, dev->stream));
            EN_ST(en_cu_rows_bf16(dev->stagef, nr, 0, (int)row, (int)B, 0, dev->stage + nk * row,
                                  dev->stream));
        }
        EN_CU(cudaMemcpyAsync(dptr, pb, (nk + nr) * sizeof(void *), cudaMemcpyHostToDevice,
                              dev->stream));
        r = st_cuda_sparse_attn_bf16(dev->qb, 1, H, dptr, (int)(nk + nr), scale, dev->ob, dev->lseb,
                                     dev->stream);
        if (r == ST_OK) {
            r = st_cuda_lse_merge(dev->oa, dev->lsea, dev->ob, dev->lseb, H, dv, dev->stream);
        }
    }
    if (r != ST_OK) {
        cudaStreamSynchronize(dev->stream); /* nothing in flight from the pinned buffers */
    }
    return r;
}

static st_status_t en_dev_dsa(st_seq_t *s, const en_layer_t *L, size_t pos)
{
    struct en_dev *dev = s->dev;
    const st_model_t *m = s->m;
    const st_model_config_t *c = &m->cfg;
    en_dsa_store_t *st = &s->dsa[L->sub];
    en_dev_dsa_t *e = &dev->dsa[L->sub];
    int d = (int)c->d_model, row = m->row, H = (int)c->dsa_heads, dv = (int)c->dsa_latent;
    int Hi = (int)c->idx_heads, di = EN_KD, B = (int)c->block_tokens, rope = (int)c->dsa_rope;
    size_t blk = pos / (size_t)B;
    float *up = dev->h_up, *kv_row = en_kv_row(s, L->sub, pos);
    float *key = st->keys + pos * (size_t)di;
    float *sum = st->summary + blk * 2u * (size_t)di;
    int k = (int)(c->topk < pos + 1 ? c->topk : pos + 1);
    float wscale = (float)(1.0 / sqrt((double)Hi)), scale = (float)(1.0 / sqrt((double)row));
    st_status_t r;

    /* The host stores, as the CPU path writes them (the objects' bytes). */
    memcpy(up, s->xn, sizeof(float) * (size_t)d);
    en_dv_rope_table(up + dev->o_cs, rope, pos);
    en_matvec(L->dkv, s->xn, d, row, kv_row);
    en_dv_rope(kv_row + dv, rope, up + dev->o_cs);
    en_matvec(L->dik, s->xn, d, di, key);
    en_summary_add(sum, key, di, pos % (size_t)B == 0);
    memcpy(up + dev->o_row, kv_row, sizeof(float) * (size_t)row);
    memcpy(up + dev->o_key, key, sizeof(float) * (size_t)di);
    en_matvec(L->diq, s->xn, d, Hi * di, up + dev->o_iq);
    en_matvec(L->diw, s->xn, d, Hi, up + dev->o_w);
    for (int j = 0; j < Hi; j++) {
        up[dev->o_w + (size_t)j] *= wscale;
    }
    /* The device: this token's row and key, the selection, the query. */
    EN_CU(cudaMemcpyAsync(dev->up, up, dev->n_up * sizeof(float), cudaMemcpyHostToDevice,
                          dev->stream));
    EN_ST(en_cu_rows_bf16(dev->up + dev->o_row, 1, pos, row, B, s->ring, e->rows, dev->stream));
    EN_ST(en_cu_keys_fp8(dev->up + dev->o_key, 1, pos, e->keys8, e->scale, dev->stream));
    EN_ST(st_cuda_block_summary_fp8(e->keys8 + blk * (size_t)B * di, e->scale + blk * (size_t)B,
                                    (int)(pos % (size_t)B) + 1, di, B,
                                    e->summary + blk * 2u * (size_t)di, dev->stream));
    EN_ST(st_cuda_indexer_topk_fp8(dev->up + dev->o_iq, dev->up + dev->o_w, Hi, e->keys8, e->scale,
                                   e->summary, (int)pos + 1, B, k, dev->ws, dev->ws_bytes,
                                   dev->sel_raw, NULL, dev->stream));
    /* The kernel breaks ties at the k-th score arbitrarily (many rows score exactly 0 under
     * the ReLU): rescored, they are resolved by row so that a run repeats itself. */
    EN_ST(st_cuda_indexer_scores_fp8(dev->up + dev->o_iq, dev->up + dev->o_w, 1, Hi, di, e->keys8,
                                     e->scale, (int)pos + 1, dev->scores, dev->stream));
    EN_ST(en_cu_select_ties(dev->scores, (int)pos + 1, dev->sel_raw, k, dev->ties, dev->tau,
                            dev->sel, dev->stream));
    EN_ST(en_cu_matvec(e->w_q, dev->up, d, H * row, dev->part, dev->qf, dev->stream));
    EN_ST(en_cu_q_bf16(dev->qf, dev->up + dev->o_cs, H, row, dv, dev->qb, dev->stream));
    if (s->ring == 0) {
        /* Every row is in the device store: pointers made on the device. */
        EN_ST(en_cu_row_ptrs(dev->sel, k, e->rows, row, B, blk, dev->ptr, dev->cnt, dev->stream));
        EN_ST(st_cuda_sparse_attn_bf16(dev->qb, 1, H, dev->ptr, k, scale, dev->oa, dev->lsea,
                                       dev->stream));
        EN_CU(cudaMemcpyAsync(dev->h_cnt, dev->cnt, sizeof(uint32_t), cudaMemcpyDeviceToHost,
                              dev->stream));
    } else {
        r = en_dev_pool_attn(s, L, pos, k, scale);
        if (r != ST_OK) {
            return r;
        }
    }
    EN_ST(en_cu_matvec(e->w_out, dev->oa, H * dv, d, dev->part, dev->res, dev->stream));
    EN_CU(cudaMemcpyAsync(dev->h_res, dev->res, (size_t)d * sizeof(float), cudaMemcpyDeviceToHost,
                          dev->stream));
    return ST_OK;
}

/* After en_dev_dsa: waits for its output into s->att. */
static st_status_t en_dev_dsa_finish(st_seq_t *s)
{
    struct en_dev *dev = s->dev;

    EN_CU(cudaStreamSynchronize(dev->stream));
    memcpy(s->att, dev->h_res, sizeof(float) * (size_t)s->m->cfg.d_model);
    if (s->ring == 0) {
        s->rows_local += *dev->h_cnt;
    }
    return ST_OK;
}

st_status_t en_dev_layer_issue(st_seq_t *seq, const en_layer_t *L, size_t pos)
{
    st_status_t r = en_dev_begin(seq, pos);

    if (r == ST_OK) {
        r = L->kind == 'K' ? en_dev_kda(seq, L) : en_dev_dsa(seq, L, pos);
    }
    if (r != ST_OK) {
        cudaStreamSynchronize(seq->dev->stream); /* nothing left in flight from its buffers */
    }
    return r;
}

st_status_t en_dev_layer_finish(st_seq_t *seq, const en_layer_t *L)
{
    return L->kind == 'K' ? en_dev_kda_finish(seq, L) : en_dev_dsa_finish(seq);
}

st_status_t en_dev_layer(st_seq_t *seq, const en_layer_t *L, size_t pos)
{
    st_status_t r = en_dev_layer_issue(seq, L, pos);

    return r != ST_OK ? r : en_dev_layer_finish(seq, L);
}
