/*
 * resume.c - the resumable prefix: look it up, fetch its KV, IDX and KDA
 * objects in one batch, and fall back to a shorter prefix when some fail to
 * load (docs/engine.md).
 */
#include <stdlib.h>
#include <string.h>

#include "en_engine.h"
#include "log.h"

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
    size_t kdb = en_kda_bytes(m), n = r * (size_t)m->n_dsa * 2 + 1, k = 0, ok = r, lo;
    st_get_op_t *ops = calloc(n, sizeof(*ops));
    uint8_t *stage;

    /* Near-data scoring: IDX objects only of the blocks of the keys window. */
    en_seq_window(s, r);
    lo = s->kwin ? s->kbase : 0;
    stage = malloc((r - lo) * (size_t)m->n_dsa * ixb + kdb);
    st_handle_t *h = NULL;
    st_status_t st;

    *kda_ok = 0;
    if (!ops || !stage || en_seq_reserve(s, r * B) != ST_OK) {
        lg_warn("no memory to resume blocks=%zu", r);
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
            if (b < lo) {
                continue;
            }
            ops[k++] = (st_get_op_t){.block = b,
                                     .kind = ST_KIND_IDX,
                                     .layer = (uint16_t)l,
                                     .dst = stage + ((b - lo) * (size_t)m->n_dsa + (size_t)l) * ixb,
                                     .dst_len = ixb};
        }
    }
    ops[k++] = (st_get_op_t){.block = r - 1,
                             .kind = ST_KIND_KDA,
                             .layer = 0,
                             .dst = stage + (r - lo) * (size_t)m->n_dsa * ixb,
                             .dst_len = kdb};
    uint64_t t0 = cm_mono_us();
    st = st_client_get(e->client, chain, n_chain, ops, k, &h);
    if (st == ST_OK) {
        st = st_handle_wait(h, EN_WAIT_MS);
        st_handle_release(h);
    }
    /* One batch up front: the computation waits for all of it. */
    t0 = cm_mono_us() - t0;
    stats->fetch_us += t0;
    stats->stall_us += t0;
    for (size_t i = 0; i < k; i++) {
        stats->bytes_fetched += ops[i].status == ST_OK ? ops[i].length : 0;
    }
    if (st != ST_OK) {
        lg_warn("cache fetch failed blocks=%zu status=%s error=\"%s\"", r, st_status_name(st),
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
    for (size_t b = lo; b < ok; b++) {
        for (int l = 0; l < m->n_dsa; l++) {
            en_import_idx(s, l, b, stage + ((b - lo) * (size_t)m->n_dsa + (size_t)l) * ixb, ixb);
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
size_t en_resume(st_engine_t *e, const uint32_t *tokens, const st_hash_t *chain, size_t n_chain,
                 size_t n_look, st_engine_stats_t *stats)
{
    size_t B = e->m->cfg.block_tokens;

    for (int attempt = 0; attempt < EN_ATTEMPTS && n_look > 0; attempt++) {
        st_lookup_result_t lr;
        size_t r, ok;
        int kda_ok;
        st_status_t st = st_client_lookup(e->client, chain, n_look, (uint32_t)e->m->n_dsa, &lr);

        if (st != ST_OK) {
            lg_warn("cache lookup failed status=%s error=\"%s\"", st_status_name(st),
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
        lg_info("resume fell short, looking up again resumable=%zu loaded=%zu kda=%d", r, ok,
                kda_ok);
        /* Without the checkpoint at r - 1 only a shorter prefix can resume. */
        n_look = kda_ok ? ok : (ok < r - 1 ? ok : r - 1);
    }
    st_seq_reset(e->seq);
    return 0;
}
