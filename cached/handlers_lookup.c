/*
 * handlers_lookup.c - the calls of strata.v1.Cache that find objects:
 * Lookup (prefix matching over the radix index, full and compact segments,
 * with locations and a lease) and Locate (where given objects lie).
 *
 * Both ask the store through cd_h_ask_promoting (handlers_promote.c): what
 * the SSD tier holds of what missed comes back to DRAM and the store is
 * asked again. Requests are validated before they reach the store.
 */
#include "handlers.h"

#include <string.h>

#include "log.h"
#include "tier.h"

#define CD_KIND_BIT(k) (1u << (k))

/* The store's lease argument for a request's lease flag and duration. */
static uint64_t cd_h_lease_ms(int lease, uint32_t lease_ms)
{
    if (!lease) {
        return CD_LEASE_NONE;
    }
    return lease_ms != 0 ? lease_ms : CD_LEASE_DEFAULT;
}

/* Maps a protocol kinds_mask (bit 1 << ObjectKind) to the store's kinds of
 * the blocks' KV and IDX requirements (KDA checkpoints are reported apart). */
static uint32_t cd_h_require_kinds(uint32_t mask)
{
    uint32_t kinds = 0;

    if (mask & (1u << STRATA__V1__OBJECT_KIND__KV)) {
        kinds |= CD_KIND_BIT(CD_KIND_KV);
    }
    if (mask & (1u << STRATA__V1__OBJECT_KIND__IDX)) {
        kinds |= CD_KIND_BIT(CD_KIND_IDX);
    }
    return kinds;
}

/* ------------------------------------------------------------- Lookup -- */

st_status_t cd_h_lookup_check(srpc_ctx_t *ctx, cd_daemon_t *d, const uint32_t *layers,
                              size_t n_layers, uint32_t kinds_mask, int want_loc, uint32_t lease_ms)
{
    uint64_t seen[(CD_LAYERS_MAX + 63) / 64] = {0};

    for (size_t i = 0; i < n_layers; i++) {
        if (layers[i] >= CD_LAYERS_MAX) {
            srpc_ctx_set_error(ctx, "layers[%zu]=%u: layers are < %d", i, layers[i], CD_LAYERS_MAX);
            return ST_ERR_INVALID;
        }
        if (seen[layers[i] / 64] & (1ull << (layers[i] % 64))) {
            srpc_ctx_set_error(ctx, "layers[%zu]=%u is given twice", i, layers[i]);
            return ST_ERR_INVALID;
        }
        seen[layers[i] / 64] |= 1ull << (layers[i] % 64);
    }
    if (want_loc && n_layers == 0 && cd_h_require_kinds(kinds_mask) != 0) {
        srpc_ctx_set_error(ctx, "want_locations needs the layers to locate");
        return ST_ERR_INVALID;
    }
    if (lease_ms > d->cfg.max_lease_ms) {
        srpc_ctx_set_error(ctx, "lease_ms=%u exceeds max_lease=%llu", lease_ms,
                           (unsigned long long)d->cfg.max_lease_ms);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

/* Locations of the matched blocks x required kinds x layers of one segment. */
static st_status_t cd_h_segment_locations(srpc_ctx_t *ctx, cd_daemon_t *d, uint32_t ns,
                                          const st_hash_t *hashes, uint32_t matched, uint32_t kinds,
                                          const uint32_t *layers, size_t n_layers,
                                          Strata__V1__SegmentMatch *m, const uint64_t *kda,
                                          uint32_t n_kda, uint64_t first_block)
{
    size_t nk = (size_t)__builtin_popcount(kinds), n = (size_t)matched * nk * n_layers;
    cd_key_t *keys = srpc_ctx_alloc(ctx, sizeof(*keys) * (n + n_kda + 1));
    cd_located_t *out = srpc_ctx_alloc(ctx, sizeof(*out) * (n + n_kda + 1));
    cd_err_t err = {""};
    size_t k = 0;
    st_status_t status;

    if (keys == NULL || out == NULL) {
        return ST_ERR_NOMEM;
    }
    for (uint32_t b = 0; b < matched; b++) {
        for (uint32_t kind = 0; kind < CD_KIND_COUNT; kind++) {
            if (!(kinds & CD_KIND_BIT(kind))) {
                continue;
            }
            for (size_t l = 0; l < n_layers; l++) {
                keys[k].hash = hashes[b];
                keys[k].kind = kind;
                keys[k].layer = layers[l];
                k++;
            }
        }
    }
    for (uint32_t i = 0; i < n_kda; i++) {
        keys[k].hash = hashes[kda[i] - first_block];
        keys[k].kind = CD_KIND_KDA;
        keys[k].layer = 0;
        k++;
    }
    m->locations = cd_h_locations(ctx, n);
    m->kda_locations = cd_h_locations(ctx, n_kda);
    if (m->locations == NULL || m->kda_locations == NULL) {
        return ST_ERR_NOMEM;
    }
    if (k == 0) {
        return ST_OK;
    }
    /* In chunks of max_batch; the lookup's lease already holds these blocks. */
    for (size_t off = 0; off < k; off += (size_t)d->cfg.max_batch) {
        size_t cnt = k - off < (size_t)d->cfg.max_batch ? k - off : (size_t)d->cfg.max_batch;

        status = cd_store_locate(d->store, ns, keys + off, cnt, CD_LEASE_NONE, out + off, NULL,
                                 NULL, &err);
        if (status != ST_OK) {
            return cd_h_fail(ctx, status, &err);
        }
    }
    for (size_t i = 0; i < k; i++) {
        Strata__V1__Locations *l = i < n ? m->locations : m->kda_locations;
        size_t j = i < n ? i : i - n;

        cd_h_location_set(l, j,
                          out[i].status == ST_OK ? STRATA__V1__OBJECT_STATE__OBJECT_PRESENT
                                                 : STRATA__V1__OBJECT_STATE__OBJECT_MISSING,
                          &out[i].where);
    }
    return ST_OK;
}

/*
 * Reads the compact segments of a Lookup (docs/protocol.md "Compact
 * segments") into segs[base..] and probes[base..], adding their blocks to
 * *total. Everything is checked before the index is touched: parallel arrays
 * of one length, a hash per offset, offsets rising from 0 to the last block,
 * no locations or lease. Returns ST_OK or ST_ERR_INVALID (the message set).
 */
static st_status_t cd_h_compact_read(srpc_ctx_t *ctx, const Strata__V1__LookupRequest *req,
                                     int want_loc, cd_segment_t *segs, cd_probes_t *probes,
                                     size_t base, size_t *total)
{
    size_t n = req->n_compact_first, n_hashes, at = 0;
    const st_hash_t *h;

    if (req->n_compact_blocks != n || req->n_compact_probes != n) {
        srpc_ctx_set_error(ctx,
                           "compact_first, compact_blocks and compact_probes differ in length");
        return ST_ERR_INVALID;
    }
    if (n > 0 && want_loc) {
        srpc_ctx_set_error(ctx, "compact segments take no locations or lease (send their hashes)");
        return ST_ERR_INVALID;
    }
    h = cd_h_hashes(ctx, &req->compact_hashes, &n_hashes, "compact_hashes");
    if (h == NULL) {
        return ST_ERR_INVALID;
    }
    if (n_hashes != req->n_compact_offsets) {
        srpc_ctx_set_error(ctx, "%zu compact_hashes for %zu compact_offsets", n_hashes,
                           req->n_compact_offsets);
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < n; i++) {
        uint32_t blocks = req->compact_blocks[i], np = req->compact_probes[i];
        const uint32_t *off = req->compact_offsets + at;

        if (blocks == 0 || np == 0 || np > req->n_compact_offsets - at) {
            srpc_ctx_set_error(ctx, "compact segment %zu: %u blocks, %u probes (%zu offsets left)",
                               i, blocks, np, req->n_compact_offsets - at);
            return ST_ERR_INVALID;
        }
        if (off[0] != 0 || off[np - 1] != blocks - 1) {
            srpc_ctx_set_error(ctx, "compact segment %zu: offsets must run from 0 to %u", i,
                               blocks - 1);
            return ST_ERR_INVALID;
        }
        for (uint32_t j = 1; j < np; j++) {
            if (off[j] <= off[j - 1]) {
                srpc_ctx_set_error(ctx, "compact segment %zu: offset %u does not rise", i, off[j]);
                return ST_ERR_INVALID;
            }
        }
        if (req->compact_first[i] > UINT64_MAX - (blocks - 1)) {
            srpc_ctx_set_error(ctx,
                               "compact segment %zu: first=%llu plus %u blocks passes the largest "
                               "chain index",
                               i, (unsigned long long)req->compact_first[i], blocks);
            return ST_ERR_INVALID;
        }
        segs[base + i] = (cd_segment_t){req->compact_first[i], blocks, h + at};
        probes[base + i] = (cd_probes_t){off, np};
        *total += blocks;
        at += np;
    }
    if (at != req->n_compact_offsets) {
        srpc_ctx_set_error(ctx, "compact_probes name %zu of %zu compact_offsets", at,
                           req->n_compact_offsets);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

/* Fills the compact_* answer fields for the compact segments, which follow
 * the n_full segments in ans[]. */
static st_status_t cd_h_compact_answer(srpc_ctx_t *ctx, Strata__V1__LookupResponse *resp,
                                       const cd_seg_answer_t *ans, size_t n_full, size_t n,
                                       const uint64_t *kda)
{
    size_t n_kda = 0;

    resp->compact = 1;
    resp->compact_matched = srpc_ctx_alloc(ctx, sizeof(uint32_t) * n);
    resp->compact_unresolved = srpc_ctx_alloc(ctx, sizeof(uint32_t) * n);
    resp->compact_kda_counts = srpc_ctx_alloc(ctx, sizeof(uint32_t) * n);
    if (!resp->compact_matched || !resp->compact_unresolved || !resp->compact_kda_counts) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        n_kda += ans[n_full + i].kda_count;
    }
    resp->compact_kda = srpc_ctx_alloc(ctx, sizeof(uint64_t) * (n_kda + 1));
    if (resp->compact_kda == NULL) {
        return ST_ERR_NOMEM;
    }
    n_kda = 0;
    for (size_t i = 0; i < n; i++) {
        const cd_seg_answer_t *a = &ans[n_full + i];

        resp->compact_matched[i] = a->matched;
        resp->compact_unresolved[i] = a->unresolved;
        resp->compact_kda_counts[i] = a->kda_count;
        if (a->kda_count > 0) {
            memcpy(resp->compact_kda + n_kda, kda + a->kda_first, sizeof(uint64_t) * a->kda_count);
        }
        n_kda += a->kda_count;
    }
    resp->n_compact_matched = resp->n_compact_unresolved = resp->n_compact_kda_counts = n;
    resp->n_compact_kda = n_kda;
    return ST_OK;
}

/* One Lookup: its segments as the store takes them, and the answer. */
typedef struct cd_h_lk {
    cd_daemon_t *d;
    cd_ns_entry_t *e;
    const Strata__V1__LookupRequest *req;
    size_t n_seg; /* the full segments, then the compact ones */
    cd_segment_t *segs;
    cd_probes_t *probes;
    cd_seg_answer_t *ans;
    cd_require_t rq;
    uint64_t *kda;
    size_t total, kda_n; /* blocks asked for; KDA checkpoints answered */
    uint64_t lease_id, lease_exp;
    cd_err_t err;
} cd_h_lk_t;

/* Reads the full segments of a Lookup into lk (adding to lk->total, and
 * stopping past max_hashes: the caller refuses that). */
static st_status_t cd_h_lookup_full(srpc_ctx_t *ctx, cd_h_lk_t *lk)
{
    const Strata__V1__LookupRequest *req = lk->req;

    for (size_t i = 0; i < req->n_segments; i++) {
        size_t n;
        const st_hash_t *h =
            cd_h_hashes(ctx, &req->segments[i]->block_hashes, &n, "segments.block_hashes");

        if (h == NULL) {
            return ST_ERR_INVALID;
        }
        if (n == 0) {
            srpc_ctx_set_error(ctx, "segment %zu has no block hashes", i);
            return ST_ERR_INVALID;
        }
        if (req->segments[i]->first_block > UINT64_MAX - (n - 1)) {
            srpc_ctx_set_error(ctx,
                               "segment %zu: first_block=%llu plus %zu blocks passes the largest "
                               "chain index",
                               i, (unsigned long long)req->segments[i]->first_block, n);
            return ST_ERR_INVALID;
        }
        lk->total += n;
        if (lk->total > (size_t)lk->d->cfg.max_hashes) {
            break; /* refused by the caller */
        }
        lk->segs[i].first_block = req->segments[i]->first_block;
        lk->segs[i].n = (uint32_t)n;
        lk->segs[i].hashes = h;
        lk->probes[i] = (cd_probes_t){NULL, 0};
    }
    return ST_OK;
}

/* Checks a Lookup and reads its segments and requirements into lk.
 * Returns ST_OK, ST_ERR_INVALID (message set) or ST_ERR_NOMEM. */
static st_status_t cd_h_lookup_read(srpc_ctx_t *ctx, cd_h_lk_t *lk, int want_loc)
{
    const Strata__V1__LookupRequest *req = lk->req;
    cd_daemon_t *d = lk->d;
    st_status_t status;

    lk->n_seg = req->n_segments + req->n_compact_first;
    if (lk->n_seg == 0) {
        srpc_ctx_set_error(ctx, "lookup without segments");
        return ST_ERR_INVALID;
    }
    if ((status = cd_h_batch_limit(ctx, d, lk->n_seg, "segments")) != ST_OK) {
        return status;
    }
    if ((status = cd_h_lookup_check(ctx, d, req->layers, req->n_layers, req->kinds_mask, want_loc,
                                    req->lease_ms)) != ST_OK) {
        return status;
    }
    lk->segs = srpc_ctx_alloc(ctx, sizeof(*lk->segs) * lk->n_seg);
    lk->probes = srpc_ctx_alloc(ctx, sizeof(*lk->probes) * lk->n_seg);
    lk->ans = srpc_ctx_alloc(ctx, sizeof(*lk->ans) * lk->n_seg);
    if (lk->segs == NULL || lk->probes == NULL || lk->ans == NULL) {
        return ST_ERR_NOMEM;
    }
    if ((status = cd_h_lookup_full(ctx, lk)) != ST_OK) {
        return status;
    }
    if (lk->total <= (size_t)d->cfg.max_hashes &&
        (status = cd_h_compact_read(ctx, req, want_loc, lk->segs, lk->probes, req->n_segments,
                                    &lk->total)) != ST_OK) {
        return status;
    }
    if (lk->total > (size_t)d->cfg.max_hashes) {
        srpc_ctx_set_error(ctx, "lookup of more than max_hashes=%lld block hashes",
                           (long long)d->cfg.max_hashes);
        return ST_ERR_INVALID;
    }
    lk->rq.kinds = cd_h_require_kinds(req->kinds_mask);
    for (size_t i = 0; i < req->n_layers; i++) {
        lk->rq.layers[req->layers[i] / 64] |= 1ull << (req->layers[i] % 64);
    }
    lk->kda = srpc_ctx_alloc(ctx, sizeof(*lk->kda) * lk->total);
    return lk->kda != NULL ? ST_OK : ST_ERR_NOMEM;
}

/* cd_h_ask_t.ask of a Lookup: the lease of an earlier ask is released. */
static st_status_t cd_h_lookup_ask(void *arg)
{
    cd_h_lk_t *lk = arg;

    if (lk->lease_id != 0) {
        cd_store_release(lk->d->store, lk->e->local_id, lk->lease_id);
        lk->lease_id = 0;
    }
    return cd_store_lookup_probes(lk->d->store, lk->e->local_id, lk->segs, lk->probes, lk->n_seg,
                                  &lk->rq, cd_h_lease_ms(lk->req->lease, lk->req->lease_ms),
                                  lk->ans, lk->kda, lk->total, &lk->kda_n, &lk->lease_id,
                                  &lk->lease_exp, &lk->err);
}

/* cd_h_ask_t.promote of a Lookup: the blocks on SSD right after each full
 * segment's DRAM match (compact ones: see cd_h_lookup). */
static int cd_h_lookup_promote(void *arg, st_status_t asked)
{
    cd_h_lk_t *lk = arg;
    int promoted = 0;

    if (asked != ST_OK) {
        return 0;
    }
    for (size_t i = 0; i < lk->req->n_segments; i++) {
        for (uint32_t j = lk->ans[i].matched; j < lk->segs[i].n; j++) {
            int p = cd_tier_promote(lk->d->tier, lk->e->local_id, &lk->segs[i].hashes[j]);

            if (p == 0) {
                break;
            }
            promoted += p;
        }
    }
    return promoted;
}

/* The full segments' answers, with their locations when asked for. */
static st_status_t cd_h_lookup_answer(srpc_ctx_t *ctx, cd_h_lk_t *lk, int want_loc,
                                      Strata__V1__LookupResponse *resp)
{
    const Strata__V1__LookupRequest *req = lk->req;

    for (size_t i = 0; i < req->n_segments; i++) {
        Strata__V1__SegmentMatch *m = srpc_ctx_alloc(ctx, sizeof(*m));
        const cd_seg_answer_t *a = &lk->ans[i];
        st_status_t status;

        if (m == NULL) {
            return ST_ERR_NOMEM;
        }
        strata__v1__segment_match__init(m);
        m->matched_blocks = a->matched;
        m->kda_checkpoints = lk->kda + a->kda_first;
        m->n_kda_checkpoints = a->kda_count;
        if (want_loc) {
            status = cd_h_segment_locations(ctx, lk->d, lk->e->local_id, lk->segs[i].hashes,
                                            a->matched, lk->rq.kinds, req->layers, req->n_layers, m,
                                            lk->kda + a->kda_first, a->kda_count,
                                            lk->segs[i].first_block);
            if (status != ST_OK) {
                return status;
            }
        }
        resp->segments[i] = m;
    }
    resp->n_segments = req->n_segments;
    return ST_OK;
}

/* Hit rates, per segment this node owns (docs/observability.md §1). */
static void cd_h_lookup_count(const cd_h_lk_t *lk)
{
    uint64_t matched = 0, resumable = 0, bt = lk->e->block_tokens, total = lk->total;
    cd_ns_metrics_t *mx = lk->e->mx;
    int lkind;

    for (size_t i = 0; i < lk->n_seg; i++) {
        const cd_seg_answer_t *a = &lk->ans[i];

        total -= a->unresolved; /* counted when asked again */
        matched += a->matched;
        if (a->kda_count > 0) {
            resumable += lk->kda[a->kda_first + a->kda_count - 1] + 1 - lk->segs[i].first_block;
        }
    }
    /* Per kind: "vis" when the Lookup asks for VIS objects only. */
    lkind = lk->req->kinds_mask == (1u << STRATA__V1__OBJECT_KIND__VIS) ? CD_OBS_LOOKUP_VIS
                                                                        : CD_OBS_LOOKUP_KV;
    mx_counter_add(mx->lookup_blocks[lkind][0], matched);
    mx_counter_add(mx->lookup_blocks[lkind][1], total > matched ? total - matched : 0);
    mx_counter_inc(mx->lookups);
    mx_counter_add(mx->lookup_tokens, total * bt);
    mx_counter_add(mx->matched_tokens, matched * bt);
    mx_counter_add(mx->resumable_tokens, resumable * bt);
    if (matched > 0) {
        mx_counter_inc(mx->lookups_hit);
    }
}

st_status_t cd_h_lookup(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                        void *arg)
{
    const Strata__V1__LookupRequest *req = (const void *)reqm;
    Strata__V1__LookupResponse *resp = (void *)respm;
    cd_h_lk_t lk = {.d = cd_h_daemon(ctx), .req = req, .err = {""}};
    cd_h_ask_t ask = {cd_h_lookup_ask, cd_h_lookup_promote, &lk};
    int want_loc = req->want_locations || req->lease;
    st_status_t status;

    (void)arg;
    status = cd_h_ns(ctx, lk.d, req->namespace_id, &lk.e);
    if (status != ST_OK) {
        return status;
    }
    if ((status = cd_h_lookup_read(ctx, &lk, want_loc)) != ST_OK) {
        return status;
    }
    /* Blocks on SSD past the DRAM match come back, then the store is asked again. */
    status = cd_h_ask_promoting(lk.d, &ask);
    if (status != ST_OK) {
        return cd_h_fail(ctx, status, &lk.err);
    }
    /* With an SSD tier, a compact segment's blocks past its match may be on
     * disk: what the index did not match stays undecided, and the client's
     * second lookup (full hashes) promotes them as above. */
    for (size_t i = req->n_segments; lk.d->tier != NULL && i < lk.n_seg; i++) {
        lk.ans[i].unresolved = lk.segs[i].n - lk.ans[i].matched;
    }
    resp->segments = srpc_ctx_alloc(ctx, sizeof(*resp->segments) * (req->n_segments + 1));
    if (resp->segments == NULL) {
        return ST_ERR_NOMEM;
    }
    if (req->n_compact_first > 0 && cd_h_compact_answer(ctx, resp, lk.ans, req->n_segments,
                                                        req->n_compact_first, lk.kda) != ST_OK) {
        return ST_ERR_NOMEM;
    }
    if ((status = cd_h_lookup_answer(ctx, &lk, want_loc, resp)) != ST_OK) {
        if (lk.lease_id != 0) {
            cd_store_release(lk.d->store, lk.e->local_id, lk.lease_id);
        }
        return status;
    }
    resp->lease_id = lk.lease_id != 0 ? lk.lease_id ^ cd_au_client(ctx) : 0; /* owned: auth.h */
    cd_h_lookup_count(&lk);
    if (lk.lease_id != 0) {
        uint64_t now = cd_store_now(lk.d->store);

        resp->lease_ms = lk.lease_exp > now ? (uint32_t)(lk.lease_exp - now) : 0;
    }
    resp->region_epoch = cd_daemon_ns_region_epoch(lk.d, lk.e);
    return ST_OK;
}

/* ------------------------------------------------------------- Locate -- */

/*
 * Row sums for a Locate that asked for them (want_row_sums): copied from the
 * store into the answer's arena, at most a quarter of max_message_bytes in
 * all (objects past that go without, and their rows are read inline), and
 * the answer's row_sums column made.
 */
static st_status_t cd_h_row_sums(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_ns_entry_t *e,
                                 const cd_key_t *keys, cd_located_t *out, size_t n,
                                 Strata__V1__Locations *l)
{
    uint64_t want = 0, cap;
    uint8_t *buf;

    for (size_t i = 0; i < n; i++) {
        want += out[i].status == ST_OK ? out[i].where.n_rowsum * 8 : 0;
    }
    cap = want < d->cfg.max_message_bytes / 4 ? want : d->cfg.max_message_bytes / 4;
    buf = srpc_ctx_alloc(ctx, cap + 1);
    if (buf == NULL) {
        return ST_ERR_NOMEM;
    }
    l->row_sums = srpc_ctx_alloc(ctx, sizeof(*l->row_sums) * (n + 1));
    if (l->row_sums == NULL) {
        return ST_ERR_NOMEM;
    }
    memset(l->row_sums, 0, sizeof(*l->row_sums) * (n + 1));
    l->n_row_sums = n;
    (void)cd_store_row_sums(d->store, e->local_id, keys, out, n, buf, cap);
    return ST_OK;
}

/* One Locate's keys and answer, for cd_h_ask_promoting. */
typedef struct cd_h_lc {
    cd_daemon_t *d;
    cd_ns_entry_t *e;
    const cd_key_t *keys;
    size_t n;
    cd_located_t *out;
    uint64_t lease_arg; /* the store's lease argument */
    uint64_t lease_id, lease_exp;
    uint8_t *in_dram; /* per key: found by the first ask (before any promotion) */
    unsigned asks;
    cd_err_t err;
} cd_h_lc_t;

/* cd_h_ask_t.ask of a Locate: the lease of an earlier ask is released. */
static st_status_t cd_h_locate_ask(void *arg)
{
    cd_h_lc_t *lc = arg;
    st_status_t status;

    if (lc->lease_id != 0) {
        cd_store_release(lc->d->store, lc->e->local_id, lc->lease_id);
        lc->lease_id = 0;
    }
    status = cd_store_locate(lc->d->store, lc->e->local_id, lc->keys, lc->n, lc->lease_arg, lc->out,
                             &lc->lease_id, &lc->lease_exp, &lc->err);
    if (lc->asks++ == 0 && status == ST_OK) {
        for (size_t i = 0; i < lc->n; i++) {
            lc->in_dram[i] = lc->out[i].status == ST_OK;
        }
    }
    return status;
}

/* Each key of an answered Locate, by kind and outcome (strata_object_gets_total). */
static void cd_h_locate_count(const cd_h_lc_t *lc)
{
    for (size_t i = 0; i < lc->n; i++) {
        cd_obs_get_outcome_t o = lc->out[i].status != ST_OK ? CD_OBS_GET_MISS
                                 : lc->in_dram[i]           ? CD_OBS_GET_DRAM
                                                            : CD_OBS_GET_SSD;

        cd_obs_get(lc->e->mx, lc->keys[i].kind, o);
    }
}

/* cd_h_ask_t.promote of a Locate: the blocks of the keys that missed (each
 * block once when its keys are adjacent). */
static int cd_h_locate_promote(void *arg, st_status_t asked)
{
    cd_h_lc_t *lc = arg;
    int promoted = 0;

    if (asked != ST_OK) {
        return 0;
    }
    for (size_t i = 0; i < lc->n; i++) {
        if (lc->out[i].status == ST_ERR_NOT_FOUND &&
            (i == 0 || memcmp(lc->keys[i].hash.b, lc->keys[i - 1].hash.b, ST_HASH_BYTES) != 0)) {
            promoted += cd_tier_promote(lc->d->tier, lc->e->local_id, &lc->keys[i].hash);
        }
    }
    return promoted;
}

st_status_t cd_h_locate(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                        void *arg)
{
    const Strata__V1__LocateRequest *req = (const void *)reqm;
    Strata__V1__LocateResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    size_t n = 0, cap = req->n_keys + cd_h_grid_cells(req->grid);
    cd_ns_entry_t *e;
    cd_key_t *keys;
    cd_located_t *out;
    uint8_t *in_dram;
    uint64_t lease_id, lease_exp;
    cd_h_lc_t lc;
    cd_h_ask_t ask = {cd_h_locate_ask, cd_h_locate_promote, &lc};
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    if (cap == 0) {
        srpc_ctx_set_error(ctx, "locate without keys");
        return ST_ERR_INVALID;
    }
    if ((status = cd_h_batch_limit(ctx, d, cap, "keys")) != ST_OK) {
        return status;
    }
    if (req->lease_ms > d->cfg.max_lease_ms) { /* as in Lookup, with or without lease */
        srpc_ctx_set_error(ctx, "lease_ms=%u exceeds max_lease=%llu", req->lease_ms,
                           (unsigned long long)d->cfg.max_lease_ms);
        return ST_ERR_INVALID;
    }
    keys = srpc_ctx_alloc(ctx, sizeof(*keys) * cap);
    out = srpc_ctx_alloc(ctx, sizeof(*out) * cap);
    in_dram = srpc_ctx_alloc(ctx, cap);
    if (keys == NULL || out == NULL || in_dram == NULL) {
        return ST_ERR_NOMEM;
    }
    memset(in_dram, 0, cap);
    if ((status = cd_h_read_keys(ctx, req->keys, req->n_keys, req->grid, 1, keys, cap, &n)) !=
        ST_OK) {
        return status;
    }
    lc = (cd_h_lc_t){d, e, keys,    n, out, cd_h_lease_ms(req->lease, req->lease_ms),
                     0, 0, in_dram, 0, {""}};
    /* Objects on SSD come back to DRAM, then the answer is asked again. */
    status = cd_h_ask_promoting(d, &ask);
    if (status != ST_OK) {
        return cd_h_fail(ctx, status, &lc.err);
    }
    cd_h_locate_count(&lc);
    lease_id = lc.lease_id;
    lease_exp = lc.lease_exp;
    resp->locations = cd_h_locations(ctx, n);
    if (resp->locations == NULL) {
        return ST_ERR_NOMEM;
    }
    if (req->want_row_sums &&
        (status = cd_h_row_sums(ctx, d, e, keys, out, n, resp->locations)) != ST_OK) {
        return status;
    }
    for (size_t i = 0; i < n; i++) {
        cd_h_location_set(resp->locations, i,
                          out[i].status == ST_OK ? STRATA__V1__OBJECT_STATE__OBJECT_PRESENT
                                                 : STRATA__V1__OBJECT_STATE__OBJECT_MISSING,
                          &out[i].where);
    }
    resp->lease_id = lease_id != 0 ? lease_id ^ cd_au_client(ctx) : 0; /* owned: auth.h */
    if (lease_id != 0) {
        uint64_t now = cd_store_now(d->store);

        resp->lease_ms = lease_exp > now ? (uint32_t)(lease_exp - now) : 0;
    }
    resp->region_epoch = cd_daemon_ns_region_epoch(d, e);
    return ST_OK;
}
