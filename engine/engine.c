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

/* One block's objects on their way to the cluster. */
typedef struct en_put {
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
};

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
    r = st_seq_create(model, &e->seq);
    if (r != ST_OK) {
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

/* ----------------------------------------------------------- writes -- */

static void en_put_finish(st_engine_t *e, en_put_t *p, st_engine_stats_t *stats)
{
    st_handle_release(p->h); /* waits if needed */
    for (size_t i = 0; i < p->n; i++) {
        if (p->ops[i].status == ST_OK) {
            stats->objects_written++;
            stats->bytes_written += p->ops[i].len;
            stats->kda_written += p->ops[i].kind == ST_KIND_KDA;
        } else {
            stats->write_failures++;
            st_warn_ratelimited("cache write failed block=%llu kind=%u layer=%u status=%s",
                                (unsigned long long)p->ops[i].block, p->ops[i].kind,
                                p->ops[i].layer, st_status_name(p->ops[i].status));
        }
    }
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
    size_t n = (size_t)m->n_dsa * 2 + (kda ? 1 : 0), off = 0, k = 0;
    en_put_t p = {0};
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
        p.ops[k++] = (st_put_op_t){b, ST_KIND_KV, (uint16_t)l, p.buf + off, kvb, 0};
        off += kvb;
        en_export_idx(e->seq, l, b, p.buf + off);
        p.ops[k++] = (st_put_op_t){b, ST_KIND_IDX, (uint16_t)l, p.buf + off, ixb, 0};
        off += ixb;
    }
    if (kda) {
        en_export_kda(e->seq, p.buf + off);
        p.ops[k++] = (st_put_op_t){b, ST_KIND_KDA, 0, p.buf + off, kdb, 0};
    }
    p.n = k;
    r = st_client_put(e->client, chain, n_chain, p.ops, p.n, 0, &p.h);
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
            ops[k++] = (st_get_op_t){.block = b,
                                     .kind = ST_KIND_KV,
                                     .layer = (uint16_t)l,
                                     .dst = s->dsa[l].kv + b * B * (size_t)m->row,
                                     .dst_len = kvb};
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
    stats->fetch_us += en_now_us() - t0;
    stats->stall_us += en_now_us() - t0;
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
    st_seq_reset(e->seq);
    if (e->client && (n_tokens + n_decode) / B > 0) {
        size_t nb = 0;

        n_full = n_tokens / B;
        n_turn = (n_tokens + n_decode) / B;
        chain = malloc(sizeof(*chain) * n_turn);
        if (!chain) {
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
        /* At least the last prompt token is computed: its logits are the answer. */
        n_look = n_full * B == n_tokens ? n_full - 1 : n_full;
        start = en_resume(e, tokens, chain, n_full, n_look, &stats) * B;
        stats.resumed_blocks = start / B;
    }
    for (size_t t = start; t < n_tokens; t++) {
        t0 = en_now_us();
        r = st_seq_forward(e->seq, tokens[t], t + 1 == n_tokens ? lg : NULL);
        stats.compute_us += en_now_us() - t0;
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
        r = st_seq_forward(e->seq, out_ids[i], lg);
        if (r != ST_OK) {
            goto out;
        }
        len = st_seq_length(e->seq);
        if (chain && len % B == 0) {
            /* A block of the reply completed: name it and write it, with the
             * end-of-turn checkpoint when it is the turn's last full block. */
            size_t b = len / B - 1;

            if (en_hash_block(e, chain, b) == ST_OK) {
                en_put_block(e, chain, b + 1, b, (b + 1) % e->interval == 0 || b + 1 == n_turn,
                             &stats);
                en_put_reap(e, 0, &stats);
            }
        }
    }
    stats.decode_us = en_now_us() - t0;
out:
    en_put_reap(e, 1, &stats);
    free(chain);
    free(lg);
    if (stats_p) {
        *stats_p = stats;
    }
    return r;
}

void st_engine_free(st_engine_t *engine)
{
    if (engine) {
        st_engine_stats_t stats = {0};

        en_put_reap(engine, 1, &stats);
        free(engine->puts);
        st_seq_free(engine->seq);
        free(engine);
    }
}
