/*
 * engine.c - one request through the model beside a strata cluster: look up
 * the resumable prefix, fetch its objects in one batch, fall back to
 * recomputing what did not load, compute the rest while the completed blocks
 * are written in the background, decode greedily (docs/engine.md).
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "en_internal.h"
#include "st_log.h"

#define EN_WAIT_MS  120000
#define EN_ATTEMPTS 4
#define EN_WARM_US  1000000 /* lease-cache warm-up period (en_warm) */

/* One block's objects on their way to the cluster. */
typedef struct en_put {
    size_t block;
    st_handle_t *h;
    st_put_op_t *ops;
    size_t n;
    uint8_t *buf;
} en_put_t;

struct st_engine {
    const st_model_t *m;
    st_client_t *client;
    uint32_t interval;
    void (*on_lookup)(void *arg, const st_lookup_result_t *result);
    void *on_lookup_arg;
    void (*on_progress)(void *arg, size_t done, size_t total);
    void *on_progress_arg;
    st_seq_t *seq;
    en_put_t *puts;
    size_t n_puts, cap_puts;
    size_t ring;     /* local pool in blocks, the open one included (0: unbounded) */
    int serial;      /* serial_rows */
    uint32_t device; /* st_engine_device_t asked for */
    int durable;     /* KDA checkpoints and the session record are durable writes */
    /* The run in progress: its chain, which blocks the cluster holds, the
     * blocks kept aside because it does not, and the row reads in flight. */
    st_engine_stats_t *stats;
    st_hash_t *chain;
    size_t n_chain;   /* valid entries */
    uint8_t *stored;  /* per block: 1 when every KV object is in the cluster */
    size_t n_stored;  /* blocks that stored covers */
    size_t *orphan_b; /* blocks outside the pool kept locally, and their rows */
    float **orphan;
    size_t n_orphans, cap_orphans;
    st_handle_t *rh;
    st_get_op_t *rops;
    uint32_t *ridx;
    size_t n_rops;
    uint64_t rt0;
    /* The lease-cache warm-up in flight (en_warm). */
    st_handle_t *wh;
    st_get_op_t *wops;
    float *wbuf;
    size_t n_wops, cap_wops;
    uint64_t wt0;   /* when the last one was issued (0: this run has none yet) */
    uint32_t wzero; /* the row it reads of each object */
};

static const float *en_orphan(void *arg, int l, size_t b);
static st_status_t en_rows_start(void *arg, int l, const int32_t *tok, size_t n, float *dst);
static st_status_t en_rows_finish(void *arg);

st_status_t st_engine_create(const st_model_t *model, const st_engine_params_t *params,
                             st_engine_t **engine_p)
{
    st_engine_t *e;
    st_status_t r;

    if (!model || !engine_p) {
        st_error("st_engine_create: NULL argument");
        return ST_ERR_INVALID;
    }
    e = calloc(1, sizeof(*e));
    if (!e) {
        return ST_ERR_NOMEM;
    }
    e->m = model;
    e->interval = 16;
    if (params) {
        if (params->field_mask & ST_ENGINE_FIELD_CLIENT) {
            e->client = params->client;
        }
        if (params->field_mask & ST_ENGINE_FIELD_KDA_INTERVAL) {
            e->interval = params->kda_interval;
        }
        if (params->field_mask & ST_ENGINE_FIELD_ON_LOOKUP) {
            e->on_lookup = params->on_lookup;
            e->on_lookup_arg = params->on_lookup_arg;
        }
        if (params->field_mask & ST_ENGINE_FIELD_ON_PROGRESS) {
            e->on_progress = params->on_progress;
            e->on_progress_arg = params->on_progress_arg;
        }
        if (params->field_mask & ST_ENGINE_FIELD_DEVICE) {
            e->device = params->device;
        }
        if (params->field_mask & ST_ENGINE_FIELD_DURABLE) {
            e->durable = params->durable != 0;
        }
        if (params->field_mask & ST_ENGINE_FIELD_SERIAL_ROWS) {
            e->serial = params->serial_rows != 0;
        }
        if (params->field_mask & ST_ENGINE_FIELD_LOCAL_BLOCKS && params->local_blocks > 0) {
            e->ring = (size_t)params->local_blocks + 1;
        }
    }
    if (e->interval == 0) {
        st_error("engine refused field=kda_interval value=0 min=1");
        free(e);
        return ST_ERR_INVALID;
    }
    if (e->client && st_client_block_tokens(e->client) != model->cfg.block_tokens) {
        st_error("engine refused: block sizes differ model_block_tokens=%u cluster_block_tokens=%u",
                 model->cfg.block_tokens, st_client_block_tokens(e->client));
        free(e);
        return ST_ERR_INVALID;
    }
    if (e->ring && !e->client) {
        st_error("engine refused field=local_blocks value=%zu reason=\"needs a client\"",
                 e->ring - 1);
        free(e);
        return ST_ERR_INVALID;
    }
    {
        int cuda = 0;

        r = en_dev_resolve(model, e->device, &cuda); /* engine/device.c */
        if (r != ST_OK) {
            free(e);
            return r;
        }
        r = st_seq_create(model, &e->seq);
        if (r == ST_OK && cuda) {
            r = en_dev_attach(e->seq); /* the CUDA path (docs/engine.md) */
        }
    }
    if (r == ST_OK && e->ring) {
        size_t k = model->cfg.topk + 1;

        e->rops = calloc(k, sizeof(*e->rops));
        e->ridx = calloc(k, sizeof(*e->ridx));
        r = e->rops && e->ridx ? en_seq_set_ring(e->seq, e->ring) : ST_ERR_NOMEM;
        if (r == ST_OK) {
            e->seq->rowsrc = (en_rowsrc_t){e, en_rows_start, en_rows_finish, en_orphan, e->serial};
            /* Remote rows land in the sequence's stage: registered once. */
            st_client_register(e->client, e->seq->stage,
                               sizeof(float) * (size_t)model->cfg.topk * (size_t)model->row);
        }
    }
    if (r != ST_OK) {
        st_seq_free(e->seq);
        free(e->rops);
        free(e->ridx);
        free(e);
        return r;
    }
    *engine_p = e;
    return ST_OK;
}

static uint64_t en_now_us(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

double st_engine_overlap(const st_engine_stats_t *s)
{
    uint64_t lo;

    if (!s || s->fetch_us == 0) {
        return 0.0;
    }
    lo = s->fetch_us > s->compute_us ? s->fetch_us : s->compute_us;
    return (double)(s->compute_us + s->stall_us) / (double)lo;
}

const st_model_t *en_engine_model(const st_engine_t *e)
{
    return e->m;
}

int en_engine_durable(const st_engine_t *e)
{
    return e->durable;
}

st_client_t *en_engine_client(const st_engine_t *e)
{
    return e->client;
}

/* ----------------------------------------------------------- writes -- */

static void en_put_finish(st_engine_t *e, en_put_t *p, st_engine_stats_t *stats)
{
    int kv_ok = 1;

    st_handle_wait(p->h, -1); /* released below: the replica counts live in it */
    for (size_t i = 0; i < p->n; i++) {
        kv_ok &= p->ops[i].kind != ST_KIND_KV || p->ops[i].status == ST_OK;
        if (p->ops[i].status == ST_OK || p->ops[i].status == ST_ERR_PARTIAL) {
            stats->objects_written++;
            stats->bytes_written += p->ops[i].len;
            stats->kda_written += p->ops[i].kind == ST_KIND_KDA;
        }
        if (p->ops[i].status == ST_OK) {
            continue;
        } else if (p->ops[i].status == ST_ERR_PARTIAL) {
            /* Stored, and readable, but on disk on fewer replicas than write_quorum. */
            stats->partial_writes++;
            st_warn_ratelimited("durable KDA checkpoint short of write_quorum block=%llu "
                                "replicas_written=%u write_quorum=%u",
                                (unsigned long long)p->ops[i].block,
                                st_handle_replicas_written(p->h, i),
                                st_client_write_quorum(e->client));
        } else if (p->ops[i].status == ST_ERR_EXISTS) {
            /* Objects are immutable: another run stored other bytes under this
             * name. Within one model that is rounding (a bounded pool merges
             * its partials in another order); across models sharing a
             * namespace it is a misconfiguration (docs/engine.md). */
            stats->write_failures++;
            st_log_ratelimited(ST_LOG_INFO,
                               "cache holds other bytes for this object, kept as is block=%llu "
                               "kind=%u layer=%u",
                               (unsigned long long)p->ops[i].block, p->ops[i].kind,
                               p->ops[i].layer);
        } else {
            stats->write_failures++;
            st_warn_ratelimited("cache write failed block=%llu kind=%u layer=%u status=%s",
                                (unsigned long long)p->ops[i].block, p->ops[i].kind,
                                p->ops[i].layer, st_status_name(p->ops[i].status));
        }
    }
    if (kv_ok && p->block < e->n_stored) {
        e->stored[p->block] = 1;
    }
    st_handle_release(p->h);
    free(p->ops);
    free(p->buf);
}

/* Releases the writes that completed (all of them when wait is set). */
static void en_put_reap(st_engine_t *e, int wait, st_engine_stats_t *stats)
{
    size_t k = 0;

    for (size_t i = 0; i < e->n_puts; i++) {
        if (wait || st_handle_test(e->puts[i].h)) {
            en_put_finish(e, &e->puts[i], stats);
        } else {
            e->puts[k++] = e->puts[i];
        }
    }
    e->n_puts = k;
}

/*
 * Starts writing block b: KV and IDX of every DSA layer, and the KDA states
 * when kda is set. Failures are counted, never fatal: the cache is an
 * optimisation.
 */
static void en_put_block(st_engine_t *e, const st_hash_t *chain, size_t n_chain, size_t b, int kda,
                         st_engine_stats_t *stats)
{
    const st_model_t *m = e->m;
    size_t kvb = en_kv_bytes(m), ixb = en_idx_bytes(m), kdb = en_kda_bytes(m);
    uint32_t rowb = (uint32_t)((size_t)m->row * sizeof(float));
    size_t n = (size_t)m->n_dsa * 2 + (kda ? 1 : 0), off = 0, k = 0;
    en_put_t p = {.block = b};
    st_status_t r;

    if (n == 0) {
        return;
    }
    if (e->n_puts == e->cap_puts) {
        size_t cap = e->cap_puts ? e->cap_puts * 2 : 16;
        en_put_t *np = realloc(e->puts, cap * sizeof(*np));

        if (!np) {
            stats->write_failures += n;
            return;
        }
        e->puts = np;
        e->cap_puts = cap;
    }
    p.ops = calloc(n, sizeof(*p.ops));
    p.buf = malloc((size_t)m->n_dsa * (kvb + ixb) + (kda ? kdb : 0) + 1);
    if (!p.ops || !p.buf) {
        free(p.ops);
        free(p.buf);
        stats->write_failures += n;
        return;
    }
    for (int l = 0; l < m->n_dsa; l++) {
        en_export_kv(e->seq, l, b, p.buf + off);
        /* Row reads (en_rows_start) verify each row by the daemon's row sums. */
        p.ops[k++] = (st_put_op_t){b, ST_KIND_KV, (uint16_t)l, p.buf + off, kvb, 0, rowb};
        off += kvb;
        en_export_idx(e->seq, l, b, p.buf + off);
        p.ops[k++] = (st_put_op_t){b, ST_KIND_IDX, (uint16_t)l, p.buf + off, ixb, 0, 0};
        off += ixb;
    }
    if (kda) {
        en_export_kda(e->seq, p.buf + off);
        p.ops[k++] = (st_put_op_t){b, ST_KIND_KDA, 0, p.buf + off, kdb, 0, 0};
    }
    p.n = k;
    r = st_client_put(e->client, chain, n_chain, p.ops, p.n, e->durable ? ST_PUT_DURABLE : 0, &p.h);
    if (r != ST_OK) {
        st_warn_ratelimited("cache write not started block=%zu status=%s error=\"%s\"", b,
                            st_status_name(r), st_client_last_error());
        stats->write_failures += n;
        free(p.ops);
        free(p.buf);
        return;
    }
    e->puts[e->n_puts++] = p;
}

/* ------------------------------------------------------- local pool -- */

static const float *en_orphan(void *arg, int l, size_t b)
{
    st_engine_t *e = arg;

    for (size_t i = 0; i < e->n_orphans; i++) {
        if (e->orphan_b[i] == b) {
            return e->orphan[i] + (size_t)l * en_kv_bytes(e->m) / sizeof(float);
        }
    }
    return NULL;
}

/* Issues the reads of n rows (ascending positions) of DSA layer l: one row
 * read per block, straight into dst. */
static st_status_t en_rows_start(void *arg, int l, const int32_t *tok, size_t n, float *dst)
{
    st_engine_t *e = arg;
    size_t B = e->m->cfg.block_tokens, k = 0, row_bytes = (size_t)e->m->row * sizeof(float);
    st_status_t r;

    for (size_t i = 0; i < n;) {
        size_t b = (size_t)tok[i] / B, j = i;

        if (b >= e->n_chain) {
            st_error("row outside the named chain block=%zu chain=%zu", b, e->n_chain);
            return ST_ERR_INTERNAL;
        }
        for (; j < n && (size_t)tok[j] / B == b; j++) {
            e->ridx[j] = (uint32_t)((size_t)tok[j] % B);
        }
        e->rops[k++] = (st_get_op_t){.block = b,
                                     .kind = ST_KIND_KV,
                                     .layer = (uint16_t)l,
                                     .dst = dst + i * (size_t)e->m->row,
                                     .dst_len = (j - i) * row_bytes,
                                     .row_bytes = (uint32_t)row_bytes,
                                     .rows = e->ridx + i,
                                     .n_rows = (uint32_t)(j - i)};
        i = j;
    }
    e->rt0 = en_now_us();
    r = st_client_get(e->client, e->chain, e->n_chain, e->rops, k, &e->rh);
    if (r != ST_OK) {
        st_warn("row read not started layer=%d rows=%zu status=%s error=\"%s\"", l, n,
                st_status_name(r), st_client_last_error());
        e->rh = NULL;
        return ST_ERR_UNAVAILABLE;
    }
    if (st_handle_test(e->rh)) {
        /* Read inside the call (every location was in the lease cache): this
         * thread spent that time reading, not computing. */
        e->stats->stall_us += en_now_us() - e->rt0;
    }
    e->n_rops = k;
    return ST_OK;
}

static st_status_t en_rows_finish(void *arg)
{
    st_engine_t *e = arg;
    uint64_t t0 = en_now_us(), t1;
    st_status_t r;

    if (!e->rh) {
        return ST_ERR_UNAVAILABLE;
    }
    r = st_handle_wait(e->rh, EN_WAIT_MS);
    st_handle_release(e->rh);
    e->rh = NULL;
    t1 = en_now_us();
    e->stats->stall_us += t1 - t0;
    e->stats->fetch_us += t1 - e->rt0;
    e->stats->rows_us += t1 - e->rt0;
    for (size_t i = 0; i < e->n_rops; i++) {
        st_get_op_t *op = &e->rops[i];

        if (r == ST_OK && (op->status != ST_OK || op->length != op->dst_len)) {
            st_warn("remote rows lost block=%llu layer=%u rows=%u status=%s",
                    (unsigned long long)op->block, op->layer, op->n_rows,
                    st_status_name(op->status));
            r = ST_ERR_UNAVAILABLE;
        }
        e->stats->bytes_fetched += op->status == ST_OK ? op->length : 0;
    }
    return r;
}

/* ------------------------------------------------ lease-cache warm-up -- */

/* Releases a completed (or, with wait, any) warm-up and counts its bytes. */
static void en_warm_reap(st_engine_t *e, int wait, st_engine_stats_t *stats)
{
    if (!e->wh || (!wait && !st_handle_test(e->wh))) {
        return;
    }
    st_handle_release(e->wh);
    e->wh = NULL;
    for (size_t i = 0; i < e->n_wops; i++) {
        stats->bytes_fetched += e->wops[i].status == ST_OK ? e->wops[i].length : 0;
    }
}

/*
 * Keeps the locations of the blocks outside the local pool in the client's
 * lease cache, so that a DSA layer's row reads find every location there and
 * are read on this thread, without a Locate or a client worker (libstrata's
 * cached row path): every EN_WARM_US (and at the first step of a run), one
 * background read of row 0 of each such block's KV objects, which takes a
 * lease on them that the cache keeps. Not waited for; its bytes count as
 * fetched.
 */
static void en_warm(st_engine_t *e, size_t open, st_engine_stats_t *stats)
{
    const st_model_t *m = e->m;
    size_t row_bytes = (size_t)m->row * sizeof(float), k = 0;
    size_t need = e->n_chain * (size_t)m->n_dsa;
    uint64_t now = en_now_us();
    st_status_t r;

    en_warm_reap(e, 0, stats);
    if (e->wh || need == 0 || (e->wt0 != 0 && now - e->wt0 < EN_WARM_US)) {
        return;
    }
    if (need > e->cap_wops) {
        st_get_op_t *ops = realloc(e->wops, need * sizeof(*ops));
        float *buf = ops ? realloc(e->wbuf, need * row_bytes) : NULL;

        if (ops) {
            e->wops = ops;
        }
        if (!buf) {
            return; /* no warm-up: the row reads take the Locate path */
        }
        e->wbuf = buf;
        e->cap_wops = need;
    }
    for (size_t b = 0; b < e->n_chain; b++) {
        if (b >= e->n_stored || !e->stored[b] || en_block_local(e->seq, b, open)) {
            continue;
        }
        for (int l = 0; l < m->n_dsa; l++, k++) {
            e->wops[k] = (st_get_op_t){.block = b,
                                       .kind = ST_KIND_KV,
                                       .layer = (uint16_t)l,
                                       .dst = e->wbuf + k * (size_t)m->row,
                                       .dst_len = row_bytes,
                                       .row_bytes = (uint32_t)row_bytes,
                                       .rows = &e->wzero,
                                       .n_rows = 1};
        }
    }
    if (k == 0) {
        return;
    }
    e->wt0 = now;
    r = st_client_get(e->client, e->chain, e->n_chain, e->wops, k, &e->wh);
    if (r != ST_OK) {
        st_warn_ratelimited("lease-cache warm-up not started objects=%zu status=%s", k,
                            st_status_name(r));
        e->wh = NULL;
        return;
    }
    e->n_wops = k;
}

/*
 * Block b is about to leave the local pool (its slot is reused). It must be
 * in the cluster first: wait for its write; if the write failed, or it was
 * never written, keep a copy of its rows aside (outside the pool's bound,
 * counted) so nothing is lost.
 */
static void en_pool_release(st_engine_t *e, size_t b)
{
    const st_model_t *m = e->m;
    size_t kvb = en_kv_bytes(m);

    for (size_t i = 0; i < e->n_puts; i++) {
        if (e->puts[i].block == b) {
            en_put_finish(e, &e->puts[i], e->stats);
            e->puts[i] = e->puts[--e->n_puts];
            break;
        }
    }
    if (b < e->n_stored && e->stored[b]) {
        return;
    }
    if (e->n_orphans == e->cap_orphans) {
        size_t cap = e->cap_orphans ? e->cap_orphans * 2 : 8;
        size_t *nb = realloc(e->orphan_b, cap * sizeof(*nb));
        float **no;

        if (nb) {
            e->orphan_b = nb;
        }
        no = nb ? realloc(e->orphan, cap * sizeof(*no)) : NULL;
        if (!no) {
            st_error("no memory to keep a block that the cluster does not hold block=%zu", b);
            return; /* its rows are lost: a read of them fails and the run recomputes */
        }
        e->orphan = no;
        e->cap_orphans = cap;
    }
    e->orphan[e->n_orphans] = malloc(kvb * (size_t)m->n_dsa + 1);
    if (!e->orphan[e->n_orphans]) {
        st_error("no memory to keep a block that the cluster does not hold block=%zu", b);
        return;
    }
    for (int l = 0; l < m->n_dsa; l++) {
        en_export_kv(e->seq, l, b, (char *)e->orphan[e->n_orphans] + (size_t)l * kvb);
    }
    e->orphan_b[e->n_orphans++] = b;
    st_info("block kept outside the local pool (not in the cluster) block=%zu kept=%zu", b,
            e->n_orphans);
}

static void en_pool_clear(st_engine_t *e)
{
    for (size_t i = 0; i < e->n_orphans; i++) {
        free(e->orphan[i]);
    }
    e->n_orphans = 0;
}

/* ----------------------------------------------------------- resume -- */

/*
 * Fetches KV and IDX of blocks [0, r) of every DSA layer and the KDA
 * checkpoint after block r-1, in one batch, into the sequence. Returns the
 * blocks whose KV and IDX all loaded (a prefix) and sets *kda_ok.
 */
static size_t en_fetch(st_engine_t *e, const st_hash_t *chain, size_t n_chain, size_t r,
                       int *kda_ok, st_engine_stats_t *stats)
{
    const st_model_t *m = e->m;
    st_seq_t *s = e->seq;
    size_t B = m->cfg.block_tokens, kvb = en_kv_bytes(m), ixb = en_idx_bytes(m);
    size_t kdb = en_kda_bytes(m), n = r * (size_t)m->n_dsa * 2 + 1, k = 0, ok = r;
    st_get_op_t *ops = calloc(n, sizeof(*ops));
    uint8_t *stage = malloc(r * (size_t)m->n_dsa * ixb + kdb);
    st_handle_t *h = NULL;
    st_status_t st;

    *kda_ok = 0;
    if (!ops || !stage || en_seq_reserve(s, r * B) != ST_OK) {
        st_warn("no memory to resume blocks=%zu", r);
        free(ops);
        free(stage);
        return 0;
    }
    for (size_t b = 0; b < r; b++) {
        for (int l = 0; l < m->n_dsa; l++) {
            /* KV rows only of the blocks that the local pool holds after the
             * resume; the rest are read row by row when selected. */
            if (en_block_local(s, b, r)) {
                ops[k++] = (st_get_op_t){.block = b,
                                         .kind = ST_KIND_KV,
                                         .layer = (uint16_t)l,
                                         .dst = en_kv_row(s, l, b * B),
                                         .dst_len = kvb};
            }
            ops[k++] = (st_get_op_t){.block = b,
                                     .kind = ST_KIND_IDX,
                                     .layer = (uint16_t)l,
                                     .dst = stage + (b * (size_t)m->n_dsa + (size_t)l) * ixb,
                                     .dst_len = ixb};
        }
    }
    ops[k++] = (st_get_op_t){.block = r - 1,
                             .kind = ST_KIND_KDA,
                             .layer = 0,
                             .dst = stage + r * (size_t)m->n_dsa * ixb,
                             .dst_len = kdb};
    uint64_t t0 = en_now_us();
    st = st_client_get(e->client, chain, n_chain, ops, k, &h);
    if (st == ST_OK) {
        st = st_handle_wait(h, EN_WAIT_MS);
        st_handle_release(h);
    }
    /* One batch up front: the computation waits for all of it. */
    t0 = en_now_us() - t0;
    stats->fetch_us += t0;
    stats->stall_us += t0;
    for (size_t i = 0; i < k; i++) {
        stats->bytes_fetched += ops[i].status == ST_OK ? ops[i].length : 0;
    }
    if (st != ST_OK) {
        st_warn("cache fetch failed blocks=%zu status=%s error=\"%s\"", r, st_status_name(st),
                st_client_last_error());
        stats->fetch_misses += k;
        free(ops);
        free(stage);
        return 0;
    }
    for (size_t i = 0; i + 1 < k; i++) {
        size_t want = ops[i].kind == ST_KIND_KV ? kvb : ixb;

        if (ops[i].status != ST_OK || ops[i].length != want) {
            stats->fetch_misses++;
            if (ops[i].block < ok) {
                ok = ops[i].block;
            }
        }
    }
    for (size_t b = 0; b < ok; b++) {
        for (int l = 0; l < m->n_dsa; l++) {
            en_import_idx(s, l, b, stage + (b * (size_t)m->n_dsa + (size_t)l) * ixb, ixb);
        }
    }
    if (ops[k - 1].status == ST_OK &&
        en_import_kda(s, r * B, ops[k - 1].dst, ops[k - 1].length) == ST_OK) {
        *kda_ok = 1;
    } else {
        stats->fetch_misses++;
    }
    free(ops);
    free(stage);
    return ok;
}

/*
 * Restores the longest resumable prefix of chain[0..n_look) that loads.
 * Returns the blocks restored (0: compute from the start).
 */
static size_t en_resume(st_engine_t *e, const uint32_t *tokens, const st_hash_t *chain,
                        size_t n_chain, size_t n_look, st_engine_stats_t *stats)
{
    size_t B = e->m->cfg.block_tokens;

    for (int attempt = 0; attempt < EN_ATTEMPTS && n_look > 0; attempt++) {
        st_lookup_result_t lr;
        size_t r, ok;
        int kda_ok;
        st_status_t st = st_client_lookup(e->client, chain, n_look, (uint32_t)e->m->n_dsa, &lr);

        if (st != ST_OK) {
            st_warn("cache lookup failed status=%s error=\"%s\"", st_status_name(st),
                    st_client_last_error());
            break;
        }
        if (stats->lookups++ == 0) {
            stats->lookup_resumable = lr.resumable_blocks;
        }
        if (e->on_lookup) {
            e->on_lookup(e->on_lookup_arg, &lr);
        }
        r = lr.resumable_blocks < n_look ? (size_t)lr.resumable_blocks : n_look;
        if (r == 0) {
            break;
        }
        ok = en_fetch(e, chain, n_chain, r, &kda_ok, stats);
        if (ok == r && kda_ok) {
            en_seq_set_prefix(e->seq, tokens, r * B);
            return r;
        }
        st_info("resume fell short, looking up again resumable=%zu loaded=%zu kda=%d", r, ok,
                kda_ok);
        /* Without the checkpoint at r - 1 only a shorter prefix can resume. */
        n_look = kda_ok ? ok : (ok < r - 1 ? ok : r - 1);
    }
    st_seq_reset(e->seq);
    return 0;
}

/* ------------------------------------------------------------- run -- */

static uint32_t en_argmax(const float *v, uint32_t n)
{
    uint32_t best = 0;

    for (uint32_t i = 1; i < n; i++) {
        if (v[i] > v[best]) {
            best = i;
        }
    }
    return best;
}

/* chain[b] from chain[b - 1] and the sequence's tokens of block b. */
static st_status_t en_hash_block(st_engine_t *e, st_hash_t *chain, size_t b)
{
    size_t B = e->m->cfg.block_tokens, nb = 0;
    st_hash_t first;
    st_status_t r;

    if (b > 0) {
        r = st_hash_block(&chain[b - 1], e->seq->tokens + b * B, (uint32_t)B, NULL, NULL, 0,
                          &chain[b]);
    } else {
        /* Block 0 hangs off the namespace seed, which only the client knows. */
        r = st_client_hash(e->client, e->seq->tokens, B, NULL, 0, &first, 1, &nb);
        if (r == ST_OK) {
            chain[0] = first;
        }
    }
    if (r != ST_OK) {
        st_warn("hashing a decoded block failed block=%zu status=%s", b, st_status_name(r));
    }
    return r;
}

/*
 * Recomputes the sequence from its first token with every block local,
 * after rows outside the pool were lost. The tokens are the sequence's own.
 */
static st_status_t en_pool_fallback(st_engine_t *e, st_engine_stats_t *stats)
{
    size_t n = e->seq->len;
    uint32_t *toks = malloc(sizeof(uint32_t) * (n + 1));
    st_status_t r;

    if (!toks) {
        return ST_ERR_NOMEM;
    }
    memcpy(toks, e->seq->tokens, sizeof(uint32_t) * n);
    stats->rows_local += e->seq->rows_local;
    stats->rows_remote += e->seq->rows_remote;
    stats->pool_fallbacks++;
    st_warn("rows outside the local pool were lost: recomputing the sequence with every block "
            "local tokens=%zu",
            n);
    en_pool_clear(e);
    r = en_seq_set_ring(e->seq, 0);
    for (size_t t = 0; r == ST_OK && t < n; t++) {
        r = st_seq_forward(e->seq, toks[t], NULL);
        stats->computed_tokens++;
    }
    free(toks);
    return r;
}

/*
 * One token through the model: frees the pool slot it needs, times it, and
 * falls back to a full local recompute when remote rows are lost.
 */
static st_status_t en_step(st_engine_t *e, uint32_t token, float *logits, st_engine_stats_t *stats)
{
    size_t pos = e->seq->len, B = e->m->cfg.block_tokens;
    uint64_t t0 = en_now_us(), stall0 = stats->stall_us;
    st_status_t r;

    if (e->seq->ring && pos % B == 0 && pos / B >= e->seq->ring) {
        en_pool_release(e, pos / B - e->seq->ring);
    }
    if (e->seq->ring && e->chain) {
        en_warm(e, pos / B, stats);
    }
    r = st_seq_forward(e->seq, token, logits);
    if (r == ST_ERR_UNAVAILABLE && e->seq->ring) {
        r = en_pool_fallback(e, stats);
        if (r == ST_OK) {
            r = st_seq_forward(e->seq, token, logits);
        }
    }
    stats->compute_us += en_now_us() - t0 - (stats->stall_us - stall0);
    return r;
}

/* Grows the run's chain bookkeeping to n blocks (stored flags). */
static st_status_t en_run_blocks(st_engine_t *e, size_t n)
{
    if (n > e->n_stored) {
        uint8_t *p = realloc(e->stored, n);

        if (!p) {
            return ST_ERR_NOMEM;
        }
        memset(p + e->n_stored, 0, n - e->n_stored);
        e->stored = p;
        e->n_stored = n;
    }
    return ST_OK;
}

st_status_t st_engine_run(st_engine_t *e, const uint32_t *tokens, size_t n_tokens,
                          uint32_t n_decode, float *logits, uint32_t *out_ids,
                          st_engine_stats_t *stats_p)
{
    const st_model_t *m;
    st_engine_stats_t stats = {0};
    size_t B, n_full = 0, n_turn = 0, start = 0, n_look;
    st_hash_t *chain = NULL;
    float *lg = NULL;
    st_status_t r = ST_OK;
    uint64_t t_start = en_now_us(), t0;

    if (!e || !tokens || n_tokens == 0 || (n_decode > 0 && !out_ids)) {
        st_error("st_engine_run refused: %s", !e              ? "NULL engine"
                                              : !tokens       ? "NULL tokens"
                                              : n_tokens == 0 ? "no tokens"
                                                              : "out_ids NULL with n_decode > 0");
        return ST_ERR_INVALID;
    }
    m = e->m;
    B = m->cfg.block_tokens;
    for (size_t i = 0; i < n_tokens; i++) {
        if (tokens[i] >= m->cfg.vocab) {
            st_error("st_engine_run refused: token out of range index=%zu token=%u vocab=%u", i,
                     tokens[i], m->cfg.vocab);
            return ST_ERR_INVALID;
        }
    }
    lg = malloc(sizeof(float) * m->cfg.vocab);
    if (!lg) {
        return ST_ERR_NOMEM;
    }
    /* A pool that fell back to unbounded in the last run is bounded again. */
    r = e->seq->ring != e->ring ? en_seq_set_ring(e->seq, e->ring) : ST_OK;
    if (r != ST_OK) {
        free(lg);
        return r;
    }
    st_seq_reset(e->seq);
    en_pool_clear(e);
    e->stats = &stats;
    e->n_chain = 0;
    e->wt0 = 0;
    if (e->n_stored) {
        memset(e->stored, 0, e->n_stored);
    }
    if (e->client && (n_tokens + n_decode) / B > 0) {
        size_t nb = 0;

        n_full = n_tokens / B;
        n_turn = (n_tokens + n_decode) / B;
        chain = malloc(sizeof(*chain) * n_turn);
        if (!chain || en_run_blocks(e, n_turn) != ST_OK) {
            free(chain);
            free(lg);
            return ST_ERR_NOMEM;
        }
        r = n_full ? st_client_hash(e->client, tokens, n_full * B, NULL, 0, chain, n_full, &nb)
                   : ST_OK;
        if (r != ST_OK || nb != n_full) {
            st_error("hashing the prompt failed status=%s", st_status_name(r));
            free(chain);
            free(lg);
            return r != ST_OK ? r : ST_ERR_INTERNAL;
        }
        e->chain = chain;
        e->n_chain = n_full;
        /* At least the last prompt token is computed: its logits are the answer. */
        n_look = n_full * B == n_tokens ? n_full - 1 : n_full;
        start = en_resume(e, tokens, chain, n_full, n_look, &stats) * B;
        stats.resumed_blocks = start / B;
        memset(e->stored, 1, stats.resumed_blocks); /* found in the cluster */
    }
    if (e->on_progress && start > 0) {
        e->on_progress(e->on_progress_arg, start, n_tokens);
    }
    for (size_t t = start; t < n_tokens; t++) {
        r = en_step(e, tokens[t], t + 1 == n_tokens ? lg : NULL, &stats);
        if (r != ST_OK) {
            goto out;
        }
        stats.computed_tokens++;
        if (e->on_progress && ((t + 1) % B == 0 || t + 1 == n_tokens)) {
            e->on_progress(e->on_progress_arg, t + 1, n_tokens);
        }
        if (chain && (t + 1) % B == 0) {
            size_t b = (t + 1) / B - 1;

            en_put_block(e, chain, n_full, b,
                         (b + 1) % e->interval == 0 || b + 1 == n_full || b + 1 == n_turn, &stats);
            en_put_reap(e, 0, &stats);
        }
    }
    stats.ttft_us = en_now_us() - t_start;
    if (logits) {
        memcpy(logits, lg, sizeof(float) * m->cfg.vocab);
    }
    t0 = en_now_us();
    for (uint32_t i = 0; i < n_decode; i++) {
        size_t len;

        out_ids[i] = en_argmax(lg, m->cfg.vocab);
        r = en_step(e, out_ids[i], lg, &stats);
        if (r != ST_OK) {
            goto out;
        }
        len = st_seq_length(e->seq);
        if (chain && len % B == 0) {
            /* A block of the reply completed: name it and write it, with the
             * end-of-turn checkpoint when it is the turn's last full block. */
            size_t b = len / B - 1;

            if (en_hash_block(e, chain, b) == ST_OK) {
                e->n_chain = b + 1;
                en_put_block(e, chain, b + 1, b, (b + 1) % e->interval == 0 || b + 1 == n_turn,
                             &stats);
                en_put_reap(e, 0, &stats);
            }
        }
    }
    stats.decode_us = en_now_us() - t0;
out:
    en_put_reap(e, 1, &stats);
    en_warm_reap(e, 1, &stats);
    stats.rows_local += e->seq->rows_local;
    stats.rows_remote += e->seq->rows_remote;
    e->seq->rows_local = e->seq->rows_remote = 0;
    en_pool_clear(e);
    e->stats = NULL;
    e->chain = NULL;
    e->n_chain = 0;
    free(chain);
    free(lg);
    if (stats_p) {
        *stats_p = stats;
    }
    return r;
}

st_engine_device_t st_engine_device_used(const st_engine_t *engine)
{
    return engine && engine->seq->dev ? ST_ENGINE_DEVICE_CUDA : ST_ENGINE_DEVICE_CPU;
}

void st_engine_free(st_engine_t *engine)
{
    if (engine) {
        st_engine_stats_t stats = {0};

        en_put_reap(engine, 1, &stats);
        en_pool_clear(engine);
        free(engine->orphan);
        free(engine->orphan_b);
        free(engine->stored);
        free(engine->rops);
        free(engine->ridx);
        free(engine->wops);
        free(engine->wbuf);
        if (engine->ring && engine->client) {
            st_client_deregister(engine->client, engine->seq->stage);
        }
        free(engine->puts);
        st_seq_free(engine->seq);
        free(engine);
    }
}
