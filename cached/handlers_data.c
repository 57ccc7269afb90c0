/*
 * handlers_data.c - the object calls of strata.v1.Cache: Lookup, Locate,
 * Reserve, Commit, Abort, Release, Put, Get, Delete, Pin and Unpin.
 *
 * Every request is validated (sizes, hash lengths, kinds, limits) before it
 * reaches the store; per-key outcomes go into KeyStatus arrays and the call
 * itself succeeds when the batch was processed.
 */
#include "handlers.h"
#include "dataplane.h"
#include "tier.h"

#include <stdlib.h>
#include <string.h>

#include "rowsum.h"
#include "st_log.h"

#define CD_KIND_BIT(k) (1u << (k))

/* Checks a batch size against max_batch. */
static st_status_t cd_h_batch_limit(srpc_ctx_t *ctx, cd_daemon_t *d, size_t n, const char *what)
{
    if (n > (size_t)d->cfg.max_batch) {
        srpc_ctx_set_error(ctx, "%zu %s exceed max_batch=%lld", n, what,
                           (long long)d->cfg.max_batch);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

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

st_status_t cd_h_lookup(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                        void *arg)
{
    const Strata__V1__LookupRequest *req = (const void *)reqm;
    Strata__V1__LookupResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    cd_segment_t *segs;
    cd_probes_t *probes;
    cd_seg_answer_t *ans;
    cd_require_t rq = {0};
    uint64_t *kda, lease_id = 0, lease_exp = 0, gen;
    size_t total = 0, kda_n = 0;
    cd_err_t err = {""};
    int want_loc = req->want_locations || req->lease;
    size_t n_seg;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    n_seg = req->n_segments + req->n_compact_first;
    if (n_seg == 0) {
        srpc_ctx_set_error(ctx, "lookup without segments");
        return ST_ERR_INVALID;
    }
    if ((status = cd_h_batch_limit(ctx, d, n_seg, "segments")) != ST_OK) {
        return status;
    }
    if ((status = cd_h_lookup_check(ctx, d, req->layers, req->n_layers, req->kinds_mask, want_loc,
                                    req->lease_ms)) != ST_OK) {
        return status;
    }
    segs = srpc_ctx_alloc(ctx, sizeof(*segs) * n_seg);
    probes = srpc_ctx_alloc(ctx, sizeof(*probes) * n_seg);
    ans = srpc_ctx_alloc(ctx, sizeof(*ans) * n_seg);
    if (segs == NULL || probes == NULL || ans == NULL) {
        return ST_ERR_NOMEM;
    }
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
        total += n;
        if (total > (size_t)d->cfg.max_hashes) {
            break; /* refused below */
        }
        segs[i].first_block = req->segments[i]->first_block;
        segs[i].n = (uint32_t)n;
        segs[i].hashes = h;
        probes[i] = (cd_probes_t){NULL, 0};
    }
    if (total <= (size_t)d->cfg.max_hashes &&
        (status = cd_h_compact_read(ctx, req, want_loc, segs, probes, req->n_segments, &total)) !=
            ST_OK) {
        return status;
    }
    if (total > (size_t)d->cfg.max_hashes) {
        srpc_ctx_set_error(ctx, "lookup of more than max_hashes=%lld block hashes",
                           (long long)d->cfg.max_hashes);
        return ST_ERR_INVALID;
    }
    rq.kinds = cd_h_require_kinds(req->kinds_mask);
    for (size_t i = 0; i < req->n_layers; i++) {
        rq.layers[req->layers[i] / 64] |= 1ull << (req->layers[i] % 64);
    }
    kda = srpc_ctx_alloc(ctx, sizeof(*kda) * total);
    if (kda == NULL) {
        return ST_ERR_NOMEM;
    }
    gen = cd_tier_generation(d->tier);
    status = cd_store_lookup_probes(d->store, e->local_id, segs, probes, n_seg, &rq,
                                    cd_h_lease_ms(req->lease, req->lease_ms), ans, kda, total,
                                    &kda_n, &lease_id, &lease_exp, &err);
    if (status != ST_OK) {
        return cd_h_fail(ctx, status, &err);
    }
    /* Blocks on SSD past the DRAM match come back, then the store is asked again
     * (a few rounds: a chain may alternate between the tiers, and another call
     * may have promoted a block this one found gone from the index). */
    for (int round = 0; d->tier != NULL && round < 16; round++) {
        int promoted = 0;

        for (size_t i = 0; i < req->n_segments; i++) { /* compact ones: see below */
            for (uint32_t j = ans[i].matched; j < segs[i].n; j++) {
                int p = cd_tier_promote(d->tier, e, &segs[i].hashes[j]);

                if (p == 0) {
                    break;
                }
                promoted += p;
            }
        }
        if (promoted == 0 && cd_tier_generation(d->tier) == gen) {
            break;
        }
        if (lease_id != 0) {
            cd_store_release(d->store, e->local_id, lease_id);
            lease_id = 0;
        }
        gen = cd_tier_generation(d->tier);
        status = cd_store_lookup_probes(d->store, e->local_id, segs, probes, n_seg, &rq,
                                        cd_h_lease_ms(req->lease, req->lease_ms), ans, kda, total,
                                        &kda_n, &lease_id, &lease_exp, &err);
        if (status != ST_OK) {
            return cd_h_fail(ctx, status, &err);
        }
    }
    /* With an SSD tier, a compact segment's blocks past its match may be on
     * disk: what the index did not match stays undecided, and the client's
     * second lookup (full hashes) promotes them as above. */
    for (size_t i = req->n_segments; d->tier != NULL && i < n_seg; i++) {
        ans[i].unresolved = segs[i].n - ans[i].matched;
    }
    resp->segments = srpc_ctx_alloc(ctx, sizeof(*resp->segments) * (req->n_segments + 1));
    if (resp->segments == NULL) {
        return ST_ERR_NOMEM;
    }
    if (req->n_compact_first > 0 &&
        cd_h_compact_answer(ctx, resp, ans, req->n_segments, req->n_compact_first, kda) != ST_OK) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_segments; i++) {
        Strata__V1__SegmentMatch *m = srpc_ctx_alloc(ctx, sizeof(*m));

        if (m == NULL) {
            return ST_ERR_NOMEM;
        }
        strata__v1__segment_match__init(m);
        m->matched_blocks = ans[i].matched;
        m->kda_checkpoints = kda + ans[i].kda_first;
        m->n_kda_checkpoints = ans[i].kda_count;
        if (want_loc) {
            status = cd_h_segment_locations(
                ctx, d, e->local_id, segs[i].hashes, ans[i].matched, rq.kinds, req->layers,
                req->n_layers, m, kda + ans[i].kda_first, ans[i].kda_count, segs[i].first_block);
            if (status != ST_OK) {
                if (lease_id != 0) {
                    cd_store_release(d->store, e->local_id, lease_id);
                }
                return status;
            }
        }
        resp->segments[i] = m;
    }
    resp->n_segments = req->n_segments;
    resp->lease_id = lease_id != 0 ? lease_id ^ cd_au_client(ctx) : 0; /* owned: auth.h */
    {
        /* Hit rates, per segment this node owns (docs/observability.md §1). */
        uint64_t matched = 0, resumable = 0, bt = e->block_tokens;

        for (size_t i = 0; i < n_seg; i++) {
            total -= ans[i].unresolved; /* counted when asked again */
            matched += ans[i].matched;
            if (ans[i].kda_count > 0) {
                resumable += kda[ans[i].kda_first + ans[i].kda_count - 1] + 1 - segs[i].first_block;
            }
        }
        st_counter_inc(e->mx->lookups);
        st_counter_add(e->mx->lookup_tokens, total * bt);
        st_counter_add(e->mx->matched_tokens, matched * bt);
        st_counter_add(e->mx->resumable_tokens, resumable * bt);
        if (matched > 0) {
            st_counter_inc(e->mx->lookups_hit);
        }
    }
    if (lease_id != 0) {
        uint64_t now = cd_store_now(d->store);

        resp->lease_ms = lease_exp > now ? (uint32_t)(lease_exp - now) : 0;
    }
    resp->region_epoch = cd_daemon_ns_region_epoch(d, e);
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
    uint64_t lease_id = 0, lease_exp = 0, gen;
    cd_err_t err = {""};
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
    if (keys == NULL || out == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_keys; i++) {
        if (cd_h_key(req->keys[i], &keys[n]) != ST_OK) {
            srpc_ctx_set_error(ctx,
                               "keys[%zu]: block_hash must be 16 bytes, kind KV, IDX, KDA "
                               "or VIS, layer < %d",
                               i, CD_LAYERS_MAX);
            return ST_ERR_INVALID;
        }
        n++;
    }
    if ((status = cd_h_grid(ctx, req->grid, keys, &n, cap)) != ST_OK) {
        return status;
    }
    gen = cd_tier_generation(d->tier);
    status =
        cd_store_locate(d->store, e->local_id, keys, n, cd_h_lease_ms(req->lease, req->lease_ms),
                        out, &lease_id, &lease_exp, &err);
    if (status != ST_OK) {
        return cd_h_fail(ctx, status, &err);
    }
    if (d->tier != NULL) {
        /* Objects on SSD come back to DRAM, then the answer is asked again. */
        int promoted = 0;

        for (size_t i = 0; i < n; i++) {
            if (out[i].status == ST_ERR_NOT_FOUND &&
                (i == 0 || memcmp(keys[i].hash.b, keys[i - 1].hash.b, ST_HASH_BYTES) != 0)) {
                promoted += cd_tier_promote(d->tier, e, &keys[i].hash);
            }
        }
        if (promoted > 0 || cd_tier_generation(d->tier) != gen) {
            if (lease_id != 0) {
                cd_store_release(d->store, e->local_id, lease_id);
            }
            status = cd_store_locate(d->store, e->local_id, keys, n,
                                     cd_h_lease_ms(req->lease, req->lease_ms), out, &lease_id,
                                     &lease_exp, &err);
            if (status != ST_OK) {
                return cd_h_fail(ctx, status, &err);
            }
        }
    }
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

/* ------------------------------------------------ Reserve/Commit/Abort -- */

/* A request's block links, sorted by hash for binary search. */
typedef struct cd_h_links {
    Strata__V1__BlockLink **v;
    size_t n;
} cd_h_links_t;

static int cd_h_link_cmp(const void *a, const void *b)
{
    const Strata__V1__BlockLink *x = *(Strata__V1__BlockLink *const *)a;
    const Strata__V1__BlockLink *y = *(Strata__V1__BlockLink *const *)b;

    return memcmp(x->hash.data, y->hash.data, ST_HASH_BYTES);
}

/* Sorts a copy of the links (checked by cd_h_check_links). */
static st_status_t cd_h_links_index(srpc_ctx_t *ctx, Strata__V1__BlockLink *const *links, size_t n,
                                    cd_h_links_t *out)
{
    out->n = n;
    out->v = srpc_ctx_alloc(ctx, sizeof(*out->v) * (n + 1));
    if (out->v == NULL) {
        return ST_ERR_NOMEM;
    }
    if (n > 0) {
        memcpy(out->v, links, sizeof(*out->v) * n);
        qsort(out->v, n, sizeof(*out->v), cd_h_link_cmp);
    }
    return ST_OK;
}

/* Finds the parent hash of block h among the links; NULL if none. */
static const st_hash_t *cd_h_link_parent(const cd_h_links_t *l, const st_hash_t *h)
{
    size_t lo = 0, hi = l->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = memcmp(l->v[mid]->hash.data, h->b, ST_HASH_BYTES);

        if (c == 0) {
            return (const st_hash_t *)(const void *)l->v[mid]->parent_hash.data;
        }
        if (c < 0) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return NULL;
}

static st_status_t cd_h_check_links(srpc_ctx_t *ctx, Strata__V1__BlockLink *const *links, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (links[i]->hash.len != ST_HASH_BYTES || links[i]->parent_hash.len != ST_HASH_BYTES) {
            srpc_ctx_set_error(ctx, "links[%zu]: hash and parent_hash must be 16 bytes", i);
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

/* srpc_ctx_alloc for the data plane's copies. */
static void *cd_h_wk_alloc(void *ctx, size_t len)
{
    return srpc_ctx_alloc(ctx, len);
}

/*
 * Gives each reserved extent its own write key where the transport enforces
 * keys (cd_dp_write_key(); the store's resv_end revokes it). Returns ST_OK
 * (also when the transport has no write keys), or the first failure, logged
 * and set on ctx.
 */
static st_status_t cd_h_write_keys(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_ns_entry_t *e,
                                   const cd_resv_t *out, size_t n,
                                   Strata__V1__ReserveResponse *resp)
{
    if (!cd_dp_committed_read_only(d->dp)) {
        return ST_OK;
    }
    resp->write_rkeys = srpc_ctx_alloc(ctx, sizeof(*resp->write_rkeys) * n);
    if (resp->write_rkeys == NULL) {
        return ST_ERR_NOMEM;
    }
    memset(resp->write_rkeys, 0, sizeof(*resp->write_rkeys) * n);
    resp->n_write_rkeys = n;
    for (size_t i = 0; i < n; i++) {
        st_status_t st;

        if (out[i].status != ST_OK) {
            continue;
        }
        st = cd_dp_write_key(d->dp, e->local_id, out[i].id, out[i].where.region,
                             out[i].where.offset, out[i].where.length, cd_h_wk_alloc, ctx,
                             &resp->write_rkeys[i].data, &resp->write_rkeys[i].len);
        if (st != ST_OK) {
            srpc_ctx_set_error(ctx, "keys[%zu]: cannot register its extent for write: %s", i,
                               st_strerror(st));
            return st;
        }
    }
    return ST_OK;
}

st_status_t cd_h_reserve(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                         void *arg)
{
    const Strata__V1__ReserveRequest *req = (const void *)reqm;
    Strata__V1__ReserveResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    cd_resv_req_t *rq;
    cd_resv_t *out;
    uint64_t *ids, expires = 0;
    cd_h_links_t links;
    cd_err_t err = {""};
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    if (req->n_keys == 0 || req->n_lengths != req->n_keys ||
        (req->n_row_bytes != 0 && req->n_row_bytes != req->n_keys)) {
        srpc_ctx_set_error(ctx,
                           "reserve needs one length (and row_bytes, if any) per key: "
                           "%zu keys, %zu lengths, %zu row_bytes",
                           req->n_keys, req->n_lengths, req->n_row_bytes);
        return ST_ERR_INVALID;
    }
    if ((status = cd_h_batch_limit(ctx, d, req->n_keys, "keys")) != ST_OK ||
        (status = cd_h_check_links(ctx, req->links, req->n_links)) != ST_OK ||
        (status = cd_h_links_index(ctx, req->links, req->n_links, &links)) != ST_OK) {
        return status;
    }
    if (req->ttl_ms > d->cfg.reservation_ms) {
        srpc_ctx_set_error(ctx, "ttl_ms=%u exceeds reservation_ttl=%llu", req->ttl_ms,
                           (unsigned long long)d->cfg.reservation_ms);
        return ST_ERR_INVALID;
    }
    rq = srpc_ctx_alloc(ctx, sizeof(*rq) * req->n_keys);
    out = srpc_ctx_alloc(ctx, sizeof(*out) * req->n_keys);
    ids = calloc(req->n_keys, sizeof(*ids));
    if (rq == NULL || out == NULL || ids == NULL) {
        free(ids);
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_keys; i++) {
        if (cd_h_key(req->keys[i], &rq[i].key) != ST_OK || req->lengths[i] == 0 ||
            req->lengths[i] > d->cfg.max_object_bytes) {
            free(ids);
            srpc_ctx_set_error(ctx, "keys[%zu]: bad key or length %llu (1..max_object=%llu)", i,
                               (unsigned long long)req->lengths[i],
                               (unsigned long long)d->cfg.max_object_bytes);
            return ST_ERR_INVALID;
        }
        rq[i].parent = cd_h_link_parent(&links, &rq[i].key.hash);
        rq[i].length = req->lengths[i];
        if (req->n_row_bytes && req->row_bytes[i] != 0 && req->row_bytes[i] < PR_ROW_BYTES_MIN) {
            free(ids);
            srpc_ctx_set_error(ctx, "row_bytes[%zu]=%u: rows have at least %u bytes (or 0: none)",
                               i, req->row_bytes[i], PR_ROW_BYTES_MIN);
            return ST_ERR_INVALID;
        }
        rq[i].row_bytes = req->n_row_bytes ? req->row_bytes[i] : 0;
    }
    status = cd_store_reserve(d->store, e->local_id, rq, req->n_keys, out, &err);
    if (status != ST_OK) {
        free(ids);
        return cd_h_fail(ctx, status, &err);
    }
    resp->extents = cd_h_locations(ctx, req->n_keys);
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * req->n_keys);
    if (resp->extents == NULL || resp->status == NULL) {
        for (size_t i = 0; i < req->n_keys; i++) {
            if (out[i].status == ST_OK) {
                cd_store_abort(d->store, e->local_id, out[i].id);
            }
        }
        free(ids);
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_keys; i++) {
        resp->status[i] = cd_h_key_status(out[i].status);
        if (out[i].status == ST_OK) {
            ids[i] = out[i].id;
            cd_h_location_set(resp->extents, i, STRATA__V1__OBJECT_STATE__OBJECT_PRESENT,
                              &out[i].where);
            resp->extents->row_bytes[i] = req->n_row_bytes ? req->row_bytes[i] : 0;
            if (out[i].expires_ms > expires) {
                expires = out[i].expires_ms;
            }
        }
    }
    resp->n_status = req->n_keys;
    status = cd_h_write_keys(ctx, d, e, out, req->n_keys, resp);
    if (status != ST_OK) {
        for (size_t i = 0; i < req->n_keys; i++) {
            if (ids[i] != 0) {
                cd_store_abort(d->store, e->local_id, ids[i]);
            }
        }
        free(ids);
        return status;
    }
    status = cd_batch_add(d, e->local_id, cd_au_client(ctx), ids, req->n_keys,
                          expires ? expires : cd_store_now(d->store) + d->cfg.reservation_ms,
                          &resp->reservation_id);
    if (status != ST_OK) {
        for (size_t i = 0; i < req->n_keys; i++) {
            if (ids[i] != 0) {
                cd_store_abort(d->store, e->local_id, ids[i]);
            }
        }
        free(ids);
        return status;
    }
    resp->ttl_ms = (uint32_t)d->cfg.reservation_ms;
    resp->region_epoch = cd_daemon_ns_region_epoch(d, e);
    return ST_OK;
}

/* Copies a committed KDA object out of DRAM and writes it to the SSD tier. */
static st_status_t cd_h_commit_through(cd_daemon_t *d, const cd_ns_entry_t *e, const cd_key_t *key,
                                       const st_hash_t *parent, int durable, cd_err_t *err)
{
    uint64_t len = 0;
    void *buf;
    st_status_t status;

    status = cd_store_get(d->store, e->local_id, key, NULL, 0, &len, NULL, err);
    if (status != ST_OK && status != ST_ERR_INVALID) {
        return status; /* evicted already: its KDA copy cannot be written now */
    }
    buf = malloc(len ? len : 1);
    if (buf == NULL) {
        snprintf(err->msg, sizeof(err->msg), "no memory to copy a %llu-byte KDA object",
                 (unsigned long long)len);
        return ST_ERR_NOMEM;
    }
    status = cd_store_get(d->store, e->local_id, key, buf, len, &len, NULL, err);
    if (status == ST_OK) {
        status = cd_tier_put_object(d->tier, e->wire_id, key, parent, buf, len, durable, err);
    }
    free(buf);
    if (status != ST_OK && !durable) {
        st_warn_ratelimited("KDA write-through of a commit not queued ns=%u: %s", e->local_id,
                            err->msg);
    }
    return status;
}

st_status_t cd_h_commit(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                        void *arg)
{
    const Strata__V1__CommitRequest *req = (const void *)reqm;
    Strata__V1__CommitResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    cd_batch_t *b;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    b = cd_batch_take(d, e->local_id, cd_au_client(ctx), req->reservation_id);
    if (b == NULL) {
        srpc_ctx_set_error(ctx,
                           "no reservation_id=%llu (unknown, committed, aborted or "
                           "expired)",
                           (unsigned long long)req->reservation_id);
        return ST_ERR_NOT_FOUND;
    }
    if (req->n_checksums != b->n) {
        srpc_ctx_set_error(ctx, "commit needs %zu checksums, one per reserved key, got %zu", b->n,
                           req->n_checksums);
        /* Put it back: the writer may retry with the right count. */
        pthread_mutex_lock(&d->batch_lock);
        b->next = d->batches;
        d->batches = b;
        pthread_mutex_unlock(&d->batch_lock);
        return ST_ERR_INVALID;
    }
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * b->n);
    if (resp->status == NULL) {
        cd_batch_free(b);
        return ST_ERR_NOMEM;
    }
    if (req->durable && d->tier == NULL) {
        cd_batch_free(b);
        srpc_ctx_set_error(ctx, "durable commit on node %s, which has no SSD tier (data_dir)",
                           d->cfg.node_id);
        return ST_ERR_UNSUPPORTED;
    }
    for (size_t i = 0; i < b->n; i++) {
        cd_err_t err = {""};
        cd_key_t key;
        st_hash_t parent;
        int has_parent = 0;

        if (b->resv[i] == 0) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_EXISTS;
            continue;
        }
        status = cd_store_commit_key(d->store, e->local_id, b->resv[i], req->checksums[i], &key,
                                     &parent, &has_parent, &err);
        if (status == ST_OK && d->tier != NULL && key.kind == CD_KIND_KDA) {
            /* Written through like a Put's KDA object; with durable, before the reply. */
            status =
                cd_h_commit_through(d, e, &key, has_parent ? &parent : NULL, req->durable, &err);
            if (status != ST_OK && req->durable) {
                st_warn_ratelimited("durable commit refused ns=%u: %s", e->local_id, err.msg);
                srpc_ctx_set_error(ctx, "key %zu: %s", i, err.msg);
                for (size_t j = i + 1; j < b->n; j++) {
                    if (b->resv[j] != 0) {
                        cd_store_abort(d->store, e->local_id, b->resv[j]);
                    }
                }
                cd_batch_free(b);
                return status;
            }
            status = ST_OK;
        }
        resp->status[i] = status == ST_ERR_NOT_FOUND ? STRATA__V1__KEY_STATUS__KEY_EXPIRED
                                                     : cd_h_key_status(status);
        if (status == ST_ERR_CORRUPT) {
            /* Nothing became visible; free the extent now rather than at expiry. */
            cd_store_abort(d->store, e->local_id, b->resv[i]);
            st_debug("commit refused: checksum mismatch ns=%u key=%zu", e->local_id, i);
        }
    }
    resp->n_status = b->n;
    cd_batch_free(b);
    return ST_OK;
}

st_status_t cd_h_abort(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__AbortRequest *req = (const void *)reqm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    cd_batch_t *b;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    b = cd_batch_take(d, e->local_id, cd_au_client(ctx), req->reservation_id);
    if (b == NULL) {
        /* Expired, committed or aborted before: nothing is left to free. */
        if (cd_batch_issued(d, e->local_id, cd_au_client(ctx), req->reservation_id)) {
            return ST_OK;
        }
        srpc_ctx_set_error(ctx,
                           "no reservation_id=%llu (unknown, committed, aborted or "
                           "expired)",
                           (unsigned long long)req->reservation_id);
        return ST_ERR_NOT_FOUND;
    }
    for (size_t i = 0; i < b->n; i++) {
        if (b->resv[i] != 0) {
            cd_store_abort(d->store, e->local_id, b->resv[i]);
        }
    }
    cd_batch_free(b);
    return ST_OK;
}

st_status_t cd_h_release(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                         void *arg)
{
    const Strata__V1__ReleaseRequest *req = (const void *)reqm;
    Strata__V1__ReleaseResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK || (status = cd_h_batch_limit(ctx, d, req->n_lease_ids, "leases"))) {
        return status;
    }
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * (req->n_lease_ids + 1));
    if (resp->status == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_lease_ids; i++) {
        uint64_t client = cd_au_client(ctx);
        st_status_t st = cd_store_release(d->store, e->local_id, req->lease_ids[i] ^ client);

        if (st == ST_ERR_NOT_FOUND && client != 0) {
            /* A lease granted without a client id (a peer's fan-out): bound to the tenant. */
            st = cd_store_release(d->store, e->local_id, req->lease_ids[i]);
        }
        resp->status[i] = cd_h_key_status(st);
    }
    resp->n_status = req->n_lease_ids;
    return ST_OK;
}

/* ------------------------------------------------------------ Put/Get -- */

st_status_t cd_h_put(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                     void *arg)
{
    const Strata__V1__PutRequest *req = (const void *)reqm;
    Strata__V1__PutResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_h_links_t links;
    cd_ns_entry_t *e;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    if ((status = cd_h_batch_limit(ctx, d, req->n_objects, "objects")) != ST_OK ||
        (status = cd_h_check_links(ctx, req->links, req->n_links)) != ST_OK ||
        (status = cd_h_links_index(ctx, req->links, req->n_links, &links)) != ST_OK) {
        return status;
    }
    if (req->durable && d->tier == NULL) {
        srpc_ctx_set_error(ctx, "durable put on node %s, which has no SSD tier (data_dir)",
                           d->cfg.node_id);
        return ST_ERR_UNSUPPORTED;
    }
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * (req->n_objects + 1));
    if (resp->status == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_objects; i++) {
        const Strata__V1__InlineObject *o = req->objects[i];
        cd_key_t key;
        cd_err_t err = {""};

        if (cd_h_key(o->key, &key) != ST_OK || o->data.len == 0 ||
            o->data.len > d->cfg.max_object_bytes) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_INVALID;
            continue;
        }
        if (cd_checksum(o->data.data, o->data.len) != o->checksum) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_CORRUPT;
            continue;
        }
        if (o->row_bytes != 0 && o->row_bytes < PR_ROW_BYTES_MIN) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_INVALID; /* rows too small */
            continue;
        }
        status = cd_store_put_rows(d->store, e->local_id, &key, cd_h_link_parent(&links, &key.hash),
                                   o->data.data, o->data.len, o->row_bytes, &err);
        if (status == ST_OK && d->tier != NULL && key.kind == CD_KIND_KDA) {
            /* Written through; with durable, the reply waits for the commit. */
            status =
                cd_tier_put_object(d->tier, e->wire_id, &key, cd_h_link_parent(&links, &key.hash),
                                   o->data.data, o->data.len, req->durable, &err);
            if (status != ST_OK && req->durable) {
                st_warn_ratelimited("durable put refused ns=%u: %s", e->local_id, err.msg);
                srpc_ctx_set_error(ctx, "objects[%zu]: %s", i, err.msg);
                return status;
            }
            if (status != ST_OK) {
                st_warn_ratelimited("KDA write-through not queued ns=%u: %s", e->local_id, err.msg);
                status = ST_OK; /* not asked to be durable: in DRAM, as asked */
            }
        }
        resp->status[i] = cd_h_key_status(status);
        if (status == ST_OK) {
            st_counter_inc(e->mx->stored_objects[key.kind]);
            st_counter_add(e->mx->stored_bytes[key.kind], o->data.len);
        } else if (status == ST_ERR_EXHAUSTED) {
            st_warn_ratelimited("put refused ns=%u: %s", e->local_id, err.msg);
        }
    }
    resp->n_status = req->n_objects;
    return ST_OK;
}

/*
 * One key of a Get with a row selection: the rows, each checked against the
 * object's row sums, into o (data, the XXH3-64 of those bytes, row_bytes,
 * generation); ON_DISK objects are promoted first. Returns the key's status
 * (ST_ERR_UNSUPPORTED: the object has no row sums, KEY_INVALID), or
 * ST_ERR_NOMEM for the call.
 */
static st_status_t cd_h_get_rows(cd_daemon_t *d, cd_ns_entry_t *e, const cd_key_t *key,
                                 const Strata__V1__RowSelection *sel, Strata__V1__InlineObject *o,
                                 srpc_ctx_t *ctx, uint64_t *budget)
{
    cd_location_t where;
    cd_err_t err = {""};
    uint64_t len = 0, gen = cd_tier_generation(d->tier);
    st_status_t status;
    void *buf;

    status = cd_store_get_rows(d->store, e->local_id, key, sel->rows, sel->n_rows, NULL, 0, &len,
                               NULL, &err);
    if (status == ST_ERR_NOT_FOUND &&
        (cd_tier_promote(d->tier, e, &key->hash) > 0 || cd_tier_generation(d->tier) != gen)) {
        status = cd_store_get_rows(d->store, e->local_id, key, sel->rows, sel->n_rows, NULL, 0,
                                   &len, NULL, &err);
    }
    if (status != ST_ERR_INVALID || len == 0) {
        return status == ST_OK ? ST_ERR_INVALID : status; /* (no rows selected) */
    }
    if (len > *budget) {
        return ST_ERR_EXHAUSTED;
    }
    buf = srpc_ctx_alloc(ctx, len);
    if (buf == NULL) {
        return ST_ERR_NOMEM;
    }
    status = cd_store_get_rows(d->store, e->local_id, key, sel->rows, sel->n_rows, buf, len, &len,
                               &where, &err);
    if (status != ST_OK) {
        return status;
    }
    *budget -= len;
    st_counter_inc(e->mx->served_objects[key->kind]);
    st_counter_add(e->mx->served_bytes[key->kind], len);
    o->data.data = buf;
    o->data.len = len;
    o->checksum = cd_checksum(buf, len);
    o->row_bytes = where.row_bytes;
    o->generation = where.generation;
    return ST_OK;
}

st_status_t cd_h_get(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                     void *arg)
{
    const Strata__V1__GetRequest *req = (const void *)reqm;
    Strata__V1__GetResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    uint64_t budget = d->cfg.max_message_bytes;
    const Strata__V1__RowSelection **sel;
    cd_ns_entry_t *e;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    if ((status = cd_h_batch_limit(ctx, d, req->n_keys, "keys")) != ST_OK) {
        return status;
    }
    sel = req->n_rows > 0 ? srpc_ctx_alloc(ctx, sizeof(*sel) * (req->n_keys + 1)) : NULL;
    if (req->n_rows > 0 && sel == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t r = 0; r < req->n_rows; r++) {
        if (req->rows[r]->key_index >= req->n_keys) {
            srpc_ctx_set_error(ctx, "rows[%zu].key_index=%u is not a key index", r,
                               req->rows[r]->key_index);
            return ST_ERR_INVALID;
        }
        if (sel[req->rows[r]->key_index] != NULL) {
            srpc_ctx_set_error(ctx, "rows[%zu]: a second selection for key %u (at most one a key)",
                               r, req->rows[r]->key_index);
            return ST_ERR_INVALID;
        }
        sel[req->rows[r]->key_index] = req->rows[r];
    }
    resp->objects = srpc_ctx_alloc(ctx, sizeof(*resp->objects) * (req->n_keys + 1));
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * (req->n_keys + 1));
    if (resp->objects == NULL || resp->status == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_keys; i++) {
        Strata__V1__InlineObject *o = srpc_ctx_alloc(ctx, sizeof(*o));
        cd_key_t key;
        cd_err_t err = {""};
        cd_location_t where;
        uint64_t len = 0, gen;
        void *buf;

        if (o == NULL) {
            return ST_ERR_NOMEM;
        }
        strata__v1__inline_object__init(o);
        o->key = req->keys[i];
        resp->objects[i] = o;
        if (cd_h_key(req->keys[i], &key) != ST_OK) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_INVALID;
            continue;
        }
        if (sel != NULL && sel[i] != NULL) {
            status = cd_h_get_rows(d, e, &key, sel[i], o, ctx, &budget);
            if (status == ST_ERR_NOMEM) {
                return status;
            }
            resp->status[i] = cd_h_key_status(status);
            continue;
        }
        /* First the length, then the bytes (objects are immutable). */
        gen = cd_tier_generation(d->tier);
        status = cd_store_get(d->store, e->local_id, &key, NULL, 0, &len, NULL, &err);
        if (status == ST_ERR_NOT_FOUND &&
            (cd_tier_promote(d->tier, e, &key.hash) > 0 || cd_tier_generation(d->tier) != gen)) {
            status = cd_store_get(d->store, e->local_id, &key, NULL, 0, &len, NULL, &err);
        }
        if (status != ST_OK && status != ST_ERR_INVALID) {
            resp->status[i] = cd_h_key_status(status);
            continue;
        }
        if (len > budget) {
            resp->status[i] = STRATA__V1__KEY_STATUS__KEY_EXHAUSTED;
            continue;
        }
        buf = srpc_ctx_alloc(ctx, len ? len : 1);
        if (buf == NULL) {
            return ST_ERR_NOMEM;
        }
        status = cd_store_get(d->store, e->local_id, &key, buf, len, &len, &where, &err);
        resp->status[i] = cd_h_key_status(status);
        if (status != ST_OK) {
            continue;
        }
        budget -= len;
        st_counter_inc(e->mx->served_objects[key.kind]);
        st_counter_add(e->mx->served_bytes[key.kind], len);
        o->data.data = buf;
        o->data.len = len;
        o->checksum = where.checksum;
        o->generation = where.generation;
    }
    resp->n_objects = req->n_keys;
    resp->n_status = req->n_keys;
    return ST_OK;
}

/* ------------------------------------------------ Delete/Pin/Unpin -- */

st_status_t cd_h_delete(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                        void *arg)
{
    const Strata__V1__DeleteRequest *req = (const void *)reqm;
    Strata__V1__DeleteResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    size_t n = 0, cap = req->n_keys + cd_h_grid_cells(req->grid);
    cd_ns_entry_t *e;
    cd_key_t *keys;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    if ((status = cd_h_batch_limit(ctx, d, cap, "keys")) != ST_OK) {
        return status;
    }
    keys = srpc_ctx_alloc(ctx, sizeof(*keys) * (cap + 1));
    resp->status = srpc_ctx_alloc(ctx, sizeof(*resp->status) * (cap + 1));
    if (keys == NULL || resp->status == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < req->n_keys; i++) {
        if (cd_h_key(req->keys[i], &keys[n]) != ST_OK) {
            srpc_ctx_set_error(ctx, "keys[%zu] is malformed", i);
            return ST_ERR_INVALID;
        }
        n++;
    }
    if ((status = cd_h_grid(ctx, req->grid, keys, &n, cap)) != ST_OK) {
        return status;
    }
    for (size_t i = 0; i < n; i++) {
        cd_err_t err = {""};

        resp->status[i] = cd_h_key_status(cd_store_delete(d->store, e->local_id, &keys[i], &err));
        if (d->tier != NULL && resp->status[i] != STRATA__V1__KEY_STATUS__KEY_BUSY) {
            cd_tier_forget(d->tier, e->wire_id, &keys[i]);
        }
    }
    resp->n_status = n;
    return ST_OK;
}

static st_status_t cd_h_pin_common(srpc_ctx_t *ctx, uint64_t ns_wire,
                                   const ProtobufCBinaryData *hashes, int pin, uint64_t ttl_ms,
                                   Strata__V1__KeyStatus **status_p, size_t *n_p)
{
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_ns_entry_t *e;
    const st_hash_t *h;
    size_t n;
    st_status_t status;

    status = cd_h_ns(ctx, d, ns_wire, &e);
    if (status != ST_OK) {
        return status;
    }
    h = cd_h_hashes(ctx, hashes, &n, "block_hashes");
    if (h == NULL) {
        return ST_ERR_INVALID;
    }
    if ((status = cd_h_batch_limit(ctx, d, n, "block hashes")) != ST_OK) {
        return status;
    }
    *status_p = srpc_ctx_alloc(ctx, sizeof(**status_p) * (n + 1));
    if (*status_p == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        st_hash_t one;
        cd_err_t err = {{0}};

        memcpy(&one, &h[i], sizeof(one));
        status = pin ? cd_store_pin_ttl(d->store, e->local_id, &one, ttl_ms, &err)
                     : cd_store_unpin(d->store, e->local_id, &one);
        if (pin && status == ST_ERR_EXHAUSTED) {
            /* The tenant's pins quota (or memory): the call is refused with
             * the numbers, and the pins it made are undone. */
            for (size_t j = 0; j < i; j++) {
                if ((*status_p)[j] == STRATA__V1__KEY_STATUS__KEY_OK) {
                    memcpy(&one, &h[j], sizeof(one));
                    (void)cd_store_unpin(d->store, e->local_id, &one);
                }
            }
            srpc_ctx_set_error(ctx, "block_hashes[%zu]: %s", i, err.msg);
            return status;
        }
        (*status_p)[i] = cd_h_key_status(status);
    }
    *n_p = n;
    return ST_OK;
}

st_status_t cd_h_pin(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                     void *arg)
{
    const Strata__V1__PinRequest *req = (const void *)reqm;
    Strata__V1__PinResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);

    if (req->ttl_ms > d->cfg.max_pin_ms) {
        srpc_ctx_set_error(ctx, "pin ttl_ms=%u is above the limit max_pin=%llu ms", req->ttl_ms,
                           (unsigned long long)d->cfg.max_pin_ms);
        return ST_ERR_INVALID;
    }
    return cd_h_pin_common(ctx, req->namespace_id, &req->block_hashes, 1, req->ttl_ms,
                           &resp->status, &resp->n_status);
}

st_status_t cd_h_unpin(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__UnpinRequest *req = (const void *)reqm;
    Strata__V1__UnpinResponse *resp = (void *)respm;

    return cd_h_pin_common(ctx, req->namespace_id, &req->block_hashes, 0, 0, &resp->status,
                           &resp->n_status);
}
