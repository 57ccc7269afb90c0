/*
 * resume.c - the resumable prefix: look it up, fetch its KV, IDX and KDA
 * objects in one batch, and fall back to a shorter prefix when some fail to
 * load (docs/engine.md).
 */
#include <stdlib.h>
#include <string.h>

#include "en_engine.h"
#include "log.h"

/* Blocks of one DSA layer per get of a resume, at most (a quarter of the resume, when less):
 * each piece is taken in (imported, uploaded to the device) as soon as it lands, while the
 * later pieces are still being read. */
#define EN_PIECE_BLOCKS 128

/* ------------------------------------------------------ registrations -- */

static void en_reg_drop(st_engine_t *e, en_reg_t *g)
{
    if (g->p) {
        (void)st_client_deregister(e->client, g->p);
        g->p = NULL;
        g->len = 0;
    }
}

/* seq->on_store_free: store p is about to be freed or moved. */
static void en_reg_forget(void *arg, void *p)
{
    st_engine_t *e = arg;

    for (int i = 0; i < 2 * e->m->n_dsa; i++) {
        if (e->reg[i].p == p) {
            en_reg_drop(e, &e->reg[i]);
        }
    }
}

/* Registers [p, p + len) in g unless it already is (a refusal is logged once: the reads then
 * register their destinations one by one, slower but correct). */
static void en_reg_ensure(st_engine_t *e, en_reg_t *g, void *p, size_t len)
{
    static int told;

    if (!p || (g->p == p && g->len >= len)) {
        return;
    }
    en_reg_drop(e, g);
    if (st_client_register(e->client, p, len) == ST_OK) {
        *g = (en_reg_t){p, len};
    } else if (!told) {
        told = 1;
        lg_info("resume buffers not registered, reads register each destination bytes=%zu "
                "error=\"%s\"",
                len, st_client_last_error());
    }
}

st_status_t en_reg_init(st_engine_t *e)
{
    e->reg = calloc(2 * (size_t)e->m->n_dsa + 1, sizeof(*e->reg));
    if (!e->reg) {
        return ST_ERR_NOMEM;
    }
    e->seq->on_store_free = en_reg_forget;
    e->seq->on_store_arg = e;
    return ST_OK;
}

void en_reg_fini(st_engine_t *e)
{
    if (e->reg) {
        for (int i = 0; i < 2 * e->m->n_dsa; i++) {
            en_reg_drop(e, &e->reg[i]);
        }
    }
    if (e->fstage) {
        (void)st_client_deregister(e->client, e->fstage);
    }
    free(e->fstage);
    free(e->reg);
    e->fstage = NULL;
    e->reg = NULL;
    if (e->seq) {
        e->seq->on_store_free = NULL;
    }
}

/* The stage, at least len bytes, registered; NULL when out of memory. */
static uint8_t *en_fetch_stage(st_engine_t *e, size_t len)
{
    if (len > e->fstage_len) {
        if (e->fstage) {
            (void)st_client_deregister(e->client, e->fstage);
        }
        free(e->fstage);
        e->fstage = malloc(len);
        e->fstage_len = e->fstage ? len : 0;
        if (e->fstage && st_client_register(e->client, e->fstage, len) != ST_OK) {
            lg_info("resume stage not registered bytes=%zu error=\"%s\"", len,
                    st_client_last_error());
        }
    }
    return e->fstage;
}

/* Registers what the resume of r blocks reads into: the stores as reserved, the stage. */
static void en_reg_stores(st_engine_t *e)
{
    const st_model_t *m = e->m;
    st_seq_t *s = e->seq;
    size_t B = m->cfg.block_tokens, rows = s->ring ? s->ring * B + 1 : s->cap;
    size_t keys = s->kwin ? s->ring * B + 1 : s->cap;

    for (int l = 0; e->reg && l < m->n_dsa; l++) {
        en_reg_ensure(e, &e->reg[2 * l], s->dsa[l].kv, sizeof(float) * rows * (size_t)m->row);
        en_reg_ensure(e, &e->reg[2 * l + 1], s->dsa[l].keys, sizeof(float) * keys * m->cfg.idx_dim);
    }
}

/* ------------------------------------------------------------- fetch -- */

/* One get of a fetch: ops [op0, op0 + n) (layer's blocks [b0, b1) on the device path). */
typedef struct en_piece {
    size_t op0, n;
    int layer; /* -1: the whole fetch, or the KDA checkpoint alone */
    size_t b0, b1;
    st_handle_t *h;
    st_status_t st;
} en_piece_t;

/* Whether op landed whole. */
static int en_op_ok(const st_model_t *m, const st_get_op_t *op)
{
    size_t want = op->kind == ST_KIND_KV ? en_kv_bytes(m) : en_idx_bytes(m);

    return op->status == ST_OK && op->length == want;
}

/*
 * Fetches KV and IDX of blocks [0, r) of every DSA layer and the KDA
 * checkpoint after block r-1 into the sequence, in pieces (the checkpoint,
 * then up to EN_PIECE_BLOCKS blocks of one layer each), all posted at once and
 * taken in order as they land: each piece's IDX imported, and on the
 * device path its rows and keys uploaded (asynchronous copies from the
 * pinned stores), while the later pieces are still being read; *loaded = 1
 * when the device then holds the blocks that loaded. Returns the blocks
 * whose KV and IDX all loaded (a prefix) and sets *kda_ok.
 */
static size_t en_fetch(st_engine_t *e, const st_hash_t *chain, size_t n_chain, size_t r,
                       int *kda_ok, int *loaded, st_engine_stats_t *stats)
{
    const st_model_t *m = e->m;
    st_seq_t *s = e->seq;
    size_t B = m->cfg.block_tokens, kvb = en_kv_bytes(m), ixb = en_idx_bytes(m);
    size_t kdb = en_kda_bytes(m), n = r * (size_t)m->n_dsa * 2 + 1, k = 0, ok = r, lo;
    int dev = s->dev != NULL && !s->kwin;
    size_t per = (r + 3) / 4 < EN_PIECE_BLOCKS ? (r + 3) / 4 : EN_PIECE_BLOCKS;
    size_t n_pieces = 1 + m->n_dsa * ((r + per - 1) / per);
    st_get_op_t *ops = calloc(n, sizeof(*ops));
    en_piece_t *pc = calloc(n_pieces, sizeof(*pc));
    size_t np = 0;
    uint8_t *stage, *kda_dst;
    st_status_t st = ST_OK;

    *kda_ok = 0;
    *loaded = 0;
    /* Near-data scoring: IDX objects only of the blocks of the keys window. */
    en_seq_window(s, r);
    lo = s->kwin ? s->kbase : 0;
    stage = ops && pc && en_seq_reserve(s, r * B) == ST_OK
                ? en_fetch_stage(e, (r - lo) * (size_t)m->n_dsa * ixb + kdb)
                : NULL;
    if (!stage) {
        lg_warn("no memory to resume blocks=%zu", r);
        free(ops);
        free(pc);
        return 0;
    }
    en_reg_stores(e);
    kda_dst = stage + (r - lo) * (size_t)m->n_dsa * ixb;
    /* The KDA checkpoint first, a piece of its own. */
    ops[k++] = (st_get_op_t){
        .block = r - 1, .kind = ST_KIND_KDA, .layer = 0, .dst = kda_dst, .dst_len = kdb};
    pc[np++] = (en_piece_t){0, 1, -1, 0, r, NULL, ST_OK};
    for (int l = 0; l < m->n_dsa; l++) {
        for (size_t b0 = 0; b0 < r; b0 += per) {
            size_t b1 = b0 + per < r ? b0 + per : r, op0 = k;

            for (size_t b = b0; b < b1; b++) {
                /* KV rows only of the blocks that the local pool holds after the
                 * resume; the rest are read row by row when selected. */
                if (en_block_local(s, b, r)) {
                    ops[k++] = (st_get_op_t){.block = b,
                                             .kind = ST_KIND_KV,
                                             .layer = (uint16_t)l,
                                             .dst = en_kv_row(s, l, b * B),
                                             .dst_len = kvb};
                }
                if (b >= lo) {
                    ops[k++] = (st_get_op_t){.block = b,
                                             .kind = ST_KIND_IDX,
                                             .layer = (uint16_t)l,
                                             .dst = stage +
                                                    ((b - lo) * (size_t)m->n_dsa + (size_t)l) * ixb,
                                             .dst_len = ixb};
                }
            }
            if (k > op0) {
                pc[np++] = (en_piece_t){op0, k - op0, l, b0, b1, NULL, ST_OK};
            }
        }
    }
    uint64_t t0 = cm_mono_us();

    if (dev) {
        st = en_dev_load_start(s);
    }
    for (size_t i = 0; i < np; i++) {
        pc[i].st = st == ST_OK ? st_client_get(e->client, chain, n_chain, ops + pc[i].op0, pc[i].n,
                                               &pc[i].h)
                               : st;
    }
    /* In order: each piece waited for, its IDX taken in, its rows and keys uploaded. */
    for (size_t i = 0; i < np; i++) {
        en_piece_t *p = &pc[i];
        size_t good = p->b1;

        if (p->st == ST_OK) {
            p->st = st_handle_wait(p->h, EN_WAIT_MS);
            st_handle_release(p->h);
        }
        if (p->st != ST_OK) {
            if (st == ST_OK) {
                lg_warn("cache fetch failed blocks=%zu status=%s error=\"%s\"", r,
                        st_status_name(p->st), st_client_last_error());
            }
            st = p->st;
        }
        if (p->st != ST_OK) {
            stats->fetch_misses += p->n;
            continue; /* the fetch has failed: the rest is only waited for */
        }
        for (size_t j = p->op0; j < p->op0 + p->n; j++) {
            stats->bytes_fetched += ops[j].status == ST_OK ? ops[j].length : 0;
            if (ops[j].kind != ST_KIND_KDA && !en_op_ok(m, &ops[j])) {
                stats->fetch_misses++;
                good = ops[j].block < good ? ops[j].block : good;
            }
        }
        if (good < p->b1 && good < ok) {
            ok = good; /* a miss in this piece: the prefix ends before it */
        }
        if (p->layer < 0) {
            continue;
        }
        for (size_t b = p->b0 > lo ? p->b0 : lo; b < good; b++) {
            en_import_idx(s, p->layer, b,
                          stage + ((b - lo) * (size_t)m->n_dsa + (size_t)p->layer) * ixb, ixb);
        }
        if (dev && good > p->b0 &&
            en_dev_load_piece(s, p->layer, p->b0 * B, good * B, r * B) != ST_OK) {
            st = ST_ERR_INTERNAL; /* logged */
        }
    }
    if (dev) {
        /* Always: nothing may still be copying from the stores when this returns. */
        st_status_t le = en_dev_load_end(s, ok * B);

        *loaded = st == ST_OK && le == ST_OK;
        st = st == ST_OK ? le : st;
    }
    /* The computation waits for all of it (on the device path for the uploads too). */
    t0 = cm_mono_us() - t0;
    stats->fetch_us += t0;
    stats->stall_us += t0;
    if (st != ST_OK) {
        free(ops);
        free(pc);
        return 0;
    }
    if (ops[0].status == ST_OK && en_import_kda(s, r * B, ops[0].dst, ops[0].length) == ST_OK) {
        *kda_ok = 1;
    } else {
        stats->fetch_misses++;
    }
    free(ops);
    free(pc);
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
        int kda_ok, loaded;
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
        ok = en_fetch(e, chain, n_chain, r, &kda_ok, &loaded, stats);
        if (ok == r && kda_ok) {
            en_seq_set_prefix(e->seq, tokens, r * B);
            if (loaded) {
                en_dev_loaded(e->seq, r * B); /* the device holds it already */
            }
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
