/*
 * pool.c - the local pool of a bounded run: blocks kept aside when the cluster
 * does not hold them, the DSA row reads of blocks outside the pool, and the
 * lease-cache warm-up that keeps those reads on this thread (docs/engine.md).
 */
#include <stdlib.h>
#include <string.h>

#include "en_engine.h"
#include "log.h"

const float *en_orphan(void *arg, int l, size_t b)
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
st_status_t en_rows_start(void *arg, int l, const int32_t *tok, size_t n, float *dst)
{
    st_engine_t *e = arg;
    size_t B = e->m->cfg.block_tokens, k = 0, row_bytes = (size_t)e->m->row * sizeof(float);
    st_status_t r;

    for (size_t i = 0; i < n;) {
        size_t b = (size_t)tok[i] / B, j = i;

        if (b >= e->n_chain) {
            lg_error("row outside the named chain block=%zu chain=%zu", b, e->n_chain);
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
    e->rt0 = cm_mono_us();
    r = st_client_get(e->client, e->chain, e->n_chain, e->rops, k, &e->rh);
    if (r != ST_OK) {
        lg_warn("row read not started layer=%d rows=%zu status=%s error=\"%s\"", l, n,
                st_status_name(r), st_client_last_error());
        e->rh = NULL;
        return ST_ERR_UNAVAILABLE;
    }
    if (st_handle_test(e->rh)) {
        /* Read inside the call (every location was in the lease cache): this
         * thread spent that time reading, not computing. */
        e->stats->stall_us += cm_mono_us() - e->rt0;
    }
    e->n_rops = k;
    return ST_OK;
}

st_status_t en_rows_finish(void *arg)
{
    st_engine_t *e = arg;
    uint64_t t0 = cm_mono_us(), t1;
    st_status_t r;

    if (!e->rh) {
        return ST_ERR_UNAVAILABLE;
    }
    r = st_handle_wait(e->rh, EN_WAIT_MS);
    st_handle_release(e->rh);
    e->rh = NULL;
    t1 = cm_mono_us();
    e->stats->stall_us += t1 - t0;
    e->stats->fetch_us += t1 - e->rt0;
    e->stats->rows_us += t1 - e->rt0;
    for (size_t i = 0; i < e->n_rops; i++) {
        st_get_op_t *op = &e->rops[i];

        if (r == ST_OK && (op->status != ST_OK || op->length != op->dst_len)) {
            lg_warn("remote rows lost block=%llu layer=%u rows=%u status=%s",
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
void en_warm_reap(st_engine_t *e, int wait, st_engine_stats_t *stats)
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
void en_warm(st_engine_t *e, size_t open, st_engine_stats_t *stats)
{
    const st_model_t *m = e->m;
    size_t row_bytes = (size_t)m->row * sizeof(float), k = 0;
    size_t need = e->n_chain * (size_t)m->n_dsa;
    uint64_t now = cm_mono_us();
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
        lg_warn_ratelimited("lease-cache warm-up not started objects=%zu status=%s", k,
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
void en_pool_release(st_engine_t *e, size_t b)
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
    if (e->seq->kwin) {
        /* Its keys cannot be scored where they are not: every key comes here
         * (a failure marks the keys lost: en_step recomputes). */
        en_score_localize(e, "a block the cluster does not hold leaves the pool");
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
            lg_error("no memory to keep a block that the cluster does not hold block=%zu", b);
            return; /* its rows are lost: a read of them fails and the run recomputes */
        }
        e->orphan = no;
        e->cap_orphans = cap;
    }
    e->orphan[e->n_orphans] = malloc(kvb * (size_t)m->n_dsa + 1);
    if (!e->orphan[e->n_orphans]) {
        lg_error("no memory to keep a block that the cluster does not hold block=%zu", b);
        return;
    }
    for (int l = 0; l < m->n_dsa; l++) {
        en_export_kv(e->seq, l, b, (char *)e->orphan[e->n_orphans] + (size_t)l * kvb);
    }
    e->orphan_b[e->n_orphans++] = b;
    lg_info("block kept outside the local pool (not in the cluster) block=%zu kept=%zu", b,
            e->n_orphans);
}

void en_pool_clear(st_engine_t *e)
{
    for (size_t i = 0; i < e->n_orphans; i++) {
        free(e->orphan[i]);
    }
    e->n_orphans = 0;
}
