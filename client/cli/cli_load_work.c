/*
 * cli_load_work.c - the workload of `strata load`: sessions that grow turn
 * by turn, and the calls an engine makes on them (docs/cli.md, "strata
 * load", states the distributions).
 *
 * A session's tokens are a function of its serial number and position, so
 * its chain is hashed once, block by block, as it grows, and every object's
 * bytes are a function of its key (cli_fill): each get checks what came back
 * byte by byte. Any call on a session with nothing written yet is that
 * session's first turn, a put.
 */
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cli.h"
#include "cli_load.h"

#define LOAD_KDA_EVERY 16 /* a KDA checkpoint every 16 blocks and at the end of a turn */
#define LOAD_AGENT_CAP (1u << 20)

/* A session kind's growth: [lo, hi] tokens of the length it ends at, of the
 * first turn, and of each later turn. */
typedef struct load_growth {
    uint64_t cap_lo, cap_hi, first_lo, first_hi, turn_lo, turn_hi;
} load_growth_t;

static const load_growth_t load_growths[LS_N] = {
    [LS_CHAT] = {2048, 8192, 1024, 2048, 256, 1024},
    [LS_DOC] = {32768, 131072, 32768, 131072, 512, 2048},
    [LS_AGENT] = {LOAD_AGENT_CAP, LOAD_AGENT_CAP, 8192, 32768, 4096, 16384},
};

static uint32_t load_token(const load_engine_t *e, uint64_t serial, uint64_t pos)
{
    uint64_t key[2] = {serial, pos}; /* both whole: every session's tokens are its own */

    return (uint32_t)(XXH3_64bits_withSeed(key, sizeof(key), e->lc->seed) % 150000);
}

/* Starts a new conversation in slot s, of kind and length cap (the caller holds the write lock). */
static st_status_t load_session_new(load_engine_t *e, load_session_t *s, int kind, uint64_t cap)
{
    st_hash_t *chain = malloc(sizeof(*chain) * (cap / e->be->block_tokens + 1));

    if (chain == NULL) {
        return ST_ERR_NOMEM;
    }
    free(s->chain);
    s->chain = chain;
    s->serial = ((uint64_t)e->id << 24) | ++e->serials;
    s->kind = kind;
    s->cap_tokens = cap;
    s->n_tokens = 0;
    s->nb = 0;
    snprintf(s->sid, sizeof(s->sid), "load-%llu-%d-%llu", (unsigned long long)e->lc->run_id, e->id,
             (unsigned long long)e->serials);
    return ST_OK;
}

static st_status_t load_session_draw(load_engine_t *e, load_session_t *s, uint64_t *rng)
{
    int kind = load_rng_pick(rng, e->lc->smix, LS_N);
    const load_growth_t *g = &load_growths[kind];

    return load_session_new(e, s, kind, load_rng_range(rng, g->cap_lo, g->cap_hi));
}

/* Grows s to n tokens (at most its cap): hashes the new full blocks. Write lock held. */
static st_status_t load_session_grow(load_lane_t *l, load_session_t *s, uint64_t n)
{
    const load_engine_t *e = l->e;
    uint32_t bt = e->be->block_tokens, tok[ST_BLOCK_TOKENS_MAX];
    size_t nb = (size_t)(n / bt);

    for (size_t b = s->nb; b < nb; b++) {
        st_status_t st;

        for (uint32_t i = 0; i < bt; i++) {
            tok[i] = load_token(e, s->serial, (uint64_t)b * bt + i);
        }
        st = b == 0 ? l->be->ops->first_hash(l->be, tok, bt, &s->chain[0])
                    : st_hash_block(&s->chain[b - 1], tok, bt, NULL, NULL, 0, &s->chain[b]);
        if (st != ST_OK) {
            s->nb = b;
            return st;
        }
    }
    s->nb = nb;
    s->n_tokens = n;
    return ST_OK;
}

st_status_t load_engine_init(load_engine_t *e, const load_conf_t *lc, load_backend_t *be, int id,
                             int n_sess)
{
    uint64_t rng = load_rng_seed(lc->seed, (uint64_t)id + (1ull << 32));

    memset(e, 0, sizeof(*e));
    e->lc = lc;
    e->be = be;
    e->id = id;
    e->sess = calloc((size_t)n_sess, sizeof(*e->sess));
    if (e->sess == NULL) {
        return ST_ERR_NOMEM;
    }
    e->n_sess = n_sess;
    pthread_mutex_init(&e->mu, NULL);
    for (int i = 0; i < n_sess; i++) {
        pthread_rwlock_init(&e->sess[i].lock, NULL);
        if (load_session_draw(e, &e->sess[i], &rng) != ST_OK) {
            load_engine_free(e);
            return ST_ERR_NOMEM;
        }
    }
    return ST_OK;
}

void load_engine_free(load_engine_t *e)
{
    for (int i = 0; i < e->n_sess; i++) {
        free(e->sess[i].chain);
        pthread_rwlock_destroy(&e->sess[i].lock);
    }
    free(e->sess);
    e->sess = NULL;
    pthread_mutex_destroy(&e->mu);
}

st_status_t load_lane_init(load_lane_t *l, load_engine_t *e, load_backend_t *be, int kind)
{
    const load_conf_t *lc = e->lc;

    l->e = e;
    l->be = be;
    l->kind = kind;
    l->rng = load_rng_seed(lc->seed, ((uint64_t)e->id << 8) | (uint64_t)kind);
    l->want = malloc(lc->kv_bytes > lc->kda_bytes ? lc->kv_bytes : lc->kda_bytes);
    return l->want != NULL ? ST_OK : ST_ERR_NOMEM;
}

void load_lane_free(load_lane_t *l)
{
    free(l->want);
    l->want = NULL;
}

/* Keeps the call's first error. */
static void load_fail(load_result_t *r, st_status_t st)
{
    if (r->status == ST_OK && st != ST_OK) {
        r->status = st;
    }
}

/* The puts of blocks [from, to) of s: KV of every layer, KDA checkpoints; their bytes
 * one after another in data. */
static size_t load_put_ops(const load_engine_t *e, const load_session_t *s, size_t from, size_t to,
                           st_put_op_t *ops, uint8_t *data)
{
    const load_conf_t *lc = e->lc;
    size_t n = 0, off = 0;

    for (size_t b = from; b < to; b++) {
        for (uint32_t l = 0; l < lc->layers; l++, n++, off += lc->kv_bytes) {
            cli_fill(data + off, lc->kv_bytes, &s->chain[b], ST_KIND_KV, (int)l);
            ops[n] = (st_put_op_t){.block = b,
                                   .kind = ST_KIND_KV,
                                   .layer = (uint16_t)l,
                                   .src = data + off,
                                   .len = lc->kv_bytes,
                                   .row_bytes = lc->row_bytes};
        }
        if ((b + 1) % LOAD_KDA_EVERY == 0 || b + 1 == to) {
            cli_fill(data + off, lc->kda_bytes, &s->chain[b], ST_KIND_KDA, 0);
            ops[n++] = (st_put_op_t){
                .block = b, .kind = ST_KIND_KDA, .src = data + off, .len = lc->kda_bytes};
            off += lc->kda_bytes;
        }
    }
    return n;
}

/* Writes blocks [from, to) of s in one batch; counts into r. */
static void load_put_blocks(load_lane_t *l, const load_session_t *s, size_t from, size_t to,
                            load_result_t *r)
{
    const load_conf_t *lc = l->e->lc;
    size_t nb = to - from, n_kda = nb / LOAD_KDA_EVERY + 2, n; /* every 16th, the last */
    st_put_op_t *ops = calloc(nb * lc->layers + n_kda, sizeof(*ops));
    uint8_t *data = malloc(nb * lc->layers * lc->kv_bytes + n_kda * lc->kda_bytes);

    if (ops == NULL || data == NULL) {
        free(ops), free(data);
        load_fail(r, ST_ERR_NOMEM);
        return;
    }
    n = load_put_ops(l->e, s, from, to, ops, data);
    load_fail(r, l->be->ops->put(l->be, s->chain, s->nb, ops, n));
    for (size_t i = 0; i < n; i++) {
        if (ops[i].status == ST_OK) {
            r->bytes += ops[i].len;
        }
        load_fail(r, ops[i].status);
    }
    free(ops), free(data);
}

/*
 * A turn of s: the put lane grows it (a new conversation in the slot once
 * it reached its length) under the write lock, then writes the new blocks
 * and moves the session's head under the read lock.
 */
static void load_turn(load_lane_t *l, load_session_t *s, load_result_t *r)
{
    load_engine_t *e = l->e;
    const load_growth_t *g;
    size_t old_nb;
    uint64_t add, n;
    int first;

    pthread_rwlock_wrlock(&s->lock);
    if (s->n_tokens >= s->cap_tokens && load_session_draw(e, s, &l->rng) != ST_OK) {
        pthread_rwlock_unlock(&s->lock);
        load_fail(r, ST_ERR_NOMEM);
        return;
    }
    g = &load_growths[s->kind];
    first = s->n_tokens == 0;
    add = first ? load_rng_range(&l->rng, g->first_lo, g->first_hi)
                : load_rng_range(&l->rng, g->turn_lo, g->turn_hi);
    n = s->n_tokens + add < s->cap_tokens ? s->n_tokens + add : s->cap_tokens;
    old_nb = s->nb;
    load_fail(r, load_session_grow(l, s, n));
    pthread_rwlock_unlock(&s->lock);
    /* Only this lane writes s: between the two locks it stays as it is. */
    pthread_rwlock_rdlock(&s->lock);
    if (first) {
        load_fail(r, l->be->ops->session_open(l->be, s->sid));
    }
    if (s->nb > old_nb) {
        load_put_blocks(l, s, old_nb, s->nb, r);
    }
    if (s->nb > 0) {
        load_fail(r, l->be->ops->session_append(l->be, s->sid, &s->chain[s->nb - 1], s->n_tokens));
    }
    pthread_rwlock_unlock(&s->lock);
}

st_status_t load_engine_prefill(load_lane_t *l, int *failed_p)
{
    *failed_p = 0;
    for (int i = 0; i < l->e->n_sess; i++) {
        load_result_t r = {0};

        load_turn(l, &l->e->sess[i], &r);
        if (r.status == ST_ERR_NOMEM) {
            return r.status;
        }
        *failed_p += r.status != ST_OK; /* a busy or full cluster: measured, not fatal */
    }
    return ST_OK;
}

/* Counts the bytes of ops that came back, and those that differ from what was written. */
static void load_verify(load_lane_t *l, const load_session_t *s, const st_get_op_t *ops, size_t n,
                        load_result_t *r)
{
    const load_conf_t *lc = l->e->lc;

    for (size_t i = 0; i < n; i++) {
        const uint8_t *got = ops[i].dst;
        size_t want_len = ops[i].n_rows ? (size_t)ops[i].n_rows * lc->row_bytes : lc->kv_bytes;

        r->asked++;
        if (ops[i].status == ST_ERR_NOT_FOUND) {
            continue; /* a miss (evicted, or refused when it was written) */
        }
        load_fail(r, ops[i].status);
        if (ops[i].status != ST_OK) {
            continue;
        }
        r->hit++;
        r->bytes += ops[i].length;
        cli_fill(l->want, lc->kv_bytes, &s->chain[ops[i].block], ops[i].kind, ops[i].layer);
        if (ops[i].length != want_len) {
            r->wrong += want_len > ops[i].length ? want_len : ops[i].length;
            continue;
        }
        for (size_t j = 0; j < want_len; j++) {
            size_t at = ops[i].n_rows ? (size_t)ops[i].rows[j / lc->row_bytes] * lc->row_bytes +
                                            j % lc->row_bytes
                                      : j;

            r->wrong += got[j] != l->want[at];
        }
    }
}

/* A segment's worth of consecutive KV objects of s, whole. */
static void load_get(load_lane_t *l, const load_session_t *s, load_result_t *r)
{
    load_engine_t *e = l->e;
    const load_conf_t *lc = e->lc;
    size_t n = s->nb < lc->get_blocks ? s->nb : lc->get_blocks;
    size_t first = (size_t)load_rng_range(&l->rng, 0, s->nb - n);
    st_get_op_t *ops = calloc(n, sizeof(*ops));
    uint8_t *buf = malloc(n * lc->kv_bytes);

    if (ops == NULL || buf == NULL) {
        load_fail(r, ST_ERR_NOMEM);
    } else {
        for (size_t i = 0; i < n; i++) {
            ops[i] = (st_get_op_t){.block = first + i,
                                   .kind = ST_KIND_KV,
                                   .layer = (uint16_t)(load_rng_next(&l->rng) % lc->layers),
                                   .dst = buf + i * lc->kv_bytes,
                                   .dst_len = lc->kv_bytes};
        }
        load_fail(r, l->be->ops->get(l->be, s->chain, s->nb, ops, n));
        load_verify(l, s, ops, n, r);
    }
    free(ops), free(buf);
}

/* Decode-time row reads: rows_per_block rows of each of rows_blocks random blocks. */
static void load_rows(load_lane_t *l, const load_session_t *s, load_result_t *r)
{
    load_engine_t *e = l->e;
    const load_conf_t *lc = e->lc;
    size_t n = lc->rows_blocks, per = lc->rows_per_block, per_obj = lc->kv_bytes / lc->row_bytes;
    st_get_op_t *ops = calloc(n, sizeof(*ops));
    uint32_t *rows = malloc(sizeof(*rows) * n * per);
    uint8_t *buf = malloc(n * per * lc->row_bytes);

    if (ops == NULL || rows == NULL || buf == NULL) {
        load_fail(r, ST_ERR_NOMEM);
    } else {
        for (size_t i = 0; i < n; i++) {
            for (size_t j = 0; j < per; j++) {
                rows[i * per + j] = (uint32_t)(load_rng_next(&l->rng) % per_obj);
            }
            ops[i] = (st_get_op_t){.block = load_rng_next(&l->rng) % s->nb,
                                   .kind = ST_KIND_KV,
                                   .layer = (uint16_t)(load_rng_next(&l->rng) % lc->layers),
                                   .dst = buf + i * per * lc->row_bytes,
                                   .dst_len = per * lc->row_bytes,
                                   .row_bytes = lc->row_bytes,
                                   .rows = rows + i * per,
                                   .n_rows = (uint32_t)per};
        }
        load_fail(r, l->be->ops->get(l->be, s->chain, s->nb, ops, n));
        load_verify(l, s, ops, n, r);
    }
    free(ops), free(rows), free(buf);
}

static void load_lookup(load_lane_t *l, const load_session_t *s, load_result_t *r)
{
    uint64_t matched = 0;

    load_fail(r, l->be->ops->lookup(l->be, s->chain, s->nb, &matched));
    r->asked = s->nb;
    r->hit = matched;
}

void load_call(load_lane_t *l, load_result_t *r)
{
    load_session_t *s = &l->e->sess[load_rng_next(&l->rng) % (uint64_t)l->e->n_sess];

    memset(r, 0, sizeof(*r));
    if (l->kind == LK_PUT) {
        load_turn(l, s, r);
        return;
    }
    pthread_rwlock_rdlock(&s->lock);
    if (s->nb == 0) {
        /* nothing written yet (its first turn was refused): nothing to ask about */
    } else if (l->kind == LK_LOOKUP) {
        load_lookup(l, s, r);
    } else if (l->kind == LK_GET) {
        load_get(l, s, r);
    } else {
        load_rows(l, s, r);
    }
    pthread_rwlock_unlock(&s->lock);
}

st_status_t load_big_setup(load_lane_t *l)
{
    load_engine_t *e = l->e;
    load_session_t *s = &e->sess[0];
    load_result_t r = {0};

    if (load_session_new(e, s, LS_AGENT, e->lc->big_tokens) != ST_OK ||
        load_session_grow(l, s, e->lc->big_tokens) != ST_OK) {
        return ST_ERR_NOMEM;
    }
    snprintf(s->sid, sizeof(s->sid), "big-%llu-%d", (unsigned long long)e->lc->run_id, e->id);
    for (size_t b = 0; b < s->nb && r.status == ST_OK; b += 1024) {
        load_put_blocks(l, s, b, b + 1024 < s->nb ? b + 1024 : s->nb, &r);
    }
    return r.status;
}

void load_big_get(load_lane_t *l, load_result_t *r)
{
    const load_conf_t *lc = l->e->lc;
    const load_session_t *s = &l->e->sess[0];
    st_get_op_t *ops = calloc(s->nb, sizeof(*ops));
    uint8_t *buf = malloc(s->nb * lc->kv_bytes);

    memset(r, 0, sizeof(*r));
    if (ops == NULL || buf == NULL) {
        load_fail(r, ST_ERR_NOMEM);
    } else {
        for (size_t i = 0; i < s->nb; i++) {
            ops[i] = (st_get_op_t){.block = i,
                                   .kind = ST_KIND_KV,
                                   .dst = buf + i * lc->kv_bytes,
                                   .dst_len = lc->kv_bytes};
        }
        load_fail(r, l->be->ops->get(l->be, s->chain, s->nb, ops, s->nb));
        load_verify(l, s, ops, s->nb, r);
    }
    free(ops), free(buf);
}

void load_record(load_engine_t *e, int kind, const load_result_t *r, uint64_t lat_ns)
{
    load_stats_t *st = &e->st;
    int slot = r->status == ST_OK ? 0 : -(int)r->status;

    st->k[kind].count++;
    st->k[kind].ok += r->status == ST_OK;
    st->k[kind].bytes += r->bytes;
    load_hist_add(&st->k[kind].lat, lat_ns);
    if (r->status != ST_OK) {
        st->errors[kind][slot < LOAD_N_STATUS ? slot : LOAD_N_STATUS - 1]++;
    }
    if (kind == LK_LOOKUP) {
        st->lookup_asked += r->asked;
        st->lookup_hit += r->hit;
    } else if (kind == LK_GET || kind == LK_ROWS) {
        st->get_asked += r->asked;
        st->get_hit += r->hit;
    }
    st->wrong_bytes += r->wrong;
}
