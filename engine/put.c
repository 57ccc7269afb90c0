/*
 * put.c - the engine's background writes: each completed block's KV and IDX
 * objects (and KDA states at checkpoints; VIS objects, vis.c) on their way to the cluster, reaped
 * as they complete (docs/engine.md).
 */
#include <stdlib.h>
#include <string.h>

#include "en_engine.h"
#include "log.h"

void en_put_finish(st_engine_t *e, en_put_t *p, st_engine_stats_t *stats)
{
    int kv_ok = 1;

    st_handle_wait(p->h, -1); /* released below: the replica counts live in it */
    for (size_t i = 0; i < p->n; i++) {
        /* Near-data scoring scores a block's IDX object where it lies: it must be there too. */
        kv_ok &= (p->ops[i].kind != ST_KIND_KV && (!e->remote || p->ops[i].kind != ST_KIND_IDX)) ||
                 p->ops[i].status == ST_OK;
        if (p->ops[i].status == ST_OK || p->ops[i].status == ST_ERR_PARTIAL) {
            stats->objects_written++;
            stats->bytes_written += p->ops[i].len;
            stats->kda_written += p->ops[i].kind == ST_KIND_KDA;
            stats->vis_written += p->ops[i].kind == ST_KIND_VIS;
        }
        if (p->ops[i].status == ST_OK) {
            continue;
        } else if (p->ops[i].status == ST_ERR_PARTIAL) {
            /* Stored, and readable, but on disk on fewer replicas than write_quorum. */
            stats->partial_writes++;
            lg_warn_ratelimited("durable KDA checkpoint short of write_quorum block=%llu "
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
            lg_ratelimited(LG_INFO,
                           "cache holds other bytes for this object, kept as is block=%llu "
                           "kind=%u layer=%u",
                           (unsigned long long)p->ops[i].block, p->ops[i].kind, p->ops[i].layer);
        } else {
            stats->write_failures++;
            lg_warn_ratelimited("cache write failed block=%llu kind=%u layer=%u status=%s",
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
void en_put_reap(st_engine_t *e, int wait, st_engine_stats_t *stats)
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
void en_put_block(st_engine_t *e, const st_hash_t *chain, size_t n_chain, size_t b, int kda,
                  st_engine_stats_t *stats)
{
    const st_model_t *m = e->m;
    size_t kvb = en_kv_bytes(m), ixb = en_idx_bytes(m), kdb = en_kda_bytes(m);
    uint32_t rowb = (uint32_t)((size_t)m->row * sizeof(float));
    uint32_t idx_rowb = m->cfg.idx_dim * sizeof(float) >= 32 ? m->cfg.idx_dim * 4u : 0;
    size_t n = (size_t)m->n_dsa * 2 + (kda ? 1 : 0), off = 0, k = 0;
    en_put_t p = {.block = b};

    if (n == 0) {
        return;
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
        /* Row sums of one key row each: a Score call reads a block's two summary rows alone. */
        p.ops[k++] = (st_put_op_t){b, ST_KIND_IDX, (uint16_t)l, p.buf + off, ixb, 0, idx_rowb};
        off += ixb;
    }
    if (kda) {
        en_export_kda(e->seq, p.buf + off);
        p.ops[k++] = (st_put_op_t){b, ST_KIND_KDA, 0, p.buf + off, kdb, 0, 0};
    }
    p.n = k;
    en_put_start(e, &p, chain, n_chain, e->durable ? ST_PUT_DURABLE : 0, stats);
}

int en_put_start(st_engine_t *e, en_put_t *p, const st_hash_t *chain, size_t n_chain,
                 unsigned flags, st_engine_stats_t *stats)
{
    st_status_t r = ST_ERR_NOMEM;

    if (e->n_puts == e->cap_puts) {
        size_t cap = e->cap_puts ? e->cap_puts * 2 : 16;
        en_put_t *np = realloc(e->puts, cap * sizeof(*np));

        if (np) {
            e->puts = np;
            e->cap_puts = cap;
        }
    }
    if (e->n_puts < e->cap_puts) {
        r = st_client_put(e->client, chain, n_chain, p->ops, p->n, flags, &p->h);
    }
    if (r != ST_OK) {
        lg_warn_ratelimited("cache write not started block=%zu status=%s error=\"%s\"", p->block,
                            st_status_name(r), st_client_last_error());
        stats->write_failures += p->n;
        free(p->ops);
        free(p->buf);
        return -1;
    }
    e->puts[e->n_puts++] = *p;
    return 0;
}
