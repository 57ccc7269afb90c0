/*
 * handlers_cluster.c - ClusterLookup: the fan-out lookup for thin clients.
 *
 * The daemon that takes the call cuts the chain into segments (aligned to
 * segment_blocks chain positions), places each on the ring exactly as a
 * client would (proto/ring.h), sends one Lookup per owner in parallel (its
 * own segments it answers itself), and composes the answers into the
 * longest prefix and the resumable prefix (proto/compose.h). An owner that
 * does not answer counts as a miss for its segments, so lost data is never
 * claimed. Without locations or a lease the owners get compact segments, and
 * the blocks they leave undecided are asked again with their hashes, so each
 * segment's answer is the full form's.
 */
#include "handlers.h"

#include <stdlib.h>
#include <string.h>

#include "compose.h"
#include "st_log.h"

typedef struct cd_h_owner {
    Strata__V1__LookupRequest req;
    Strata__V1__Segment **segs;
    size_t *seg_index; /* request segment i -> chain segment */
    size_t n;
} cd_h_owner_t;

/* Copies n elements of size sz into the call's memory (peer answers are
 * freed before the response is packed). */
static void *cd_h_dup(srpc_ctx_t *ctx, const void *src, size_t n, size_t sz)
{
    void *p = srpc_ctx_alloc(ctx, n * sz + 1);

    if (p != NULL && n != 0) {
        memcpy(p, src, n * sz);
    }
    return p;
}

static Strata__V1__Locations *cd_h_loc_copy(srpc_ctx_t *ctx, const Strata__V1__Locations *l)
{
    Strata__V1__Locations *c;

    if (l == NULL) {
        return NULL;
    }
    c = cd_h_dup(ctx, l, 1, sizeof(*l));
    if (c == NULL) {
        return NULL;
    }
    c->state = cd_h_dup(ctx, l->state, l->n_state, sizeof(*l->state));
    c->region_id = cd_h_dup(ctx, l->region_id, l->n_region_id, sizeof(*l->region_id));
    c->offset = cd_h_dup(ctx, l->offset, l->n_offset, sizeof(*l->offset));
    c->length = cd_h_dup(ctx, l->length, l->n_length, sizeof(*l->length));
    c->checksum = cd_h_dup(ctx, l->checksum, l->n_checksum, sizeof(*l->checksum));
    c->generation = cd_h_dup(ctx, l->generation, l->n_generation, sizeof(*l->generation));
    c->row_bytes = cd_h_dup(ctx, l->row_bytes, l->n_row_bytes, sizeof(*l->row_bytes));
    c->row_group = cd_h_dup(ctx, l->row_group, l->n_row_group, sizeof(*l->row_group));
    c->row_sums = NULL; /* Lookup answers carry no row sums (Locate's do) */
    c->n_row_sums = 0;
    if (!c->state || !c->region_id || !c->offset || !c->length || !c->checksum || !c->generation ||
        !c->row_bytes || !c->row_group) {
        return NULL;
    }
    return c;
}

static Strata__V1__SegmentMatch *cd_h_match_copy(srpc_ctx_t *ctx, const Strata__V1__SegmentMatch *m)
{
    Strata__V1__SegmentMatch *c = cd_h_dup(ctx, m, 1, sizeof(*m));

    if (c == NULL) {
        return NULL;
    }
    c->kda_checkpoints =
        cd_h_dup(ctx, m->kda_checkpoints, m->n_kda_checkpoints, sizeof(*m->kda_checkpoints));
    c->locations = cd_h_loc_copy(ctx, m->locations);
    c->kda_locations = cd_h_loc_copy(ctx, m->kda_locations);
    if (c->kda_checkpoints == NULL || (m->locations && !c->locations) ||
        (m->kda_locations && !c->kda_locations)) {
        return NULL;
    }
    return c;
}

#define CD_H_PROBE_EVERY 64

/* Moves an owner's request segments to the compact fields of its request
 * (docs/protocol.md "Compact segments"): the hashes of every 64th block and
 * of the last. */
static st_status_t cd_h_cl_compact(srpc_ctx_t *ctx, cd_h_owner_t *ow)
{
    Strata__V1__LookupRequest *q = &ow->req;
    size_t n = q->n_segments, room = 0, at = 0;
    st_hash_t *h;

    for (size_t j = 0; j < n; j++) {
        room += q->segments[j]->block_hashes.len / ST_HASH_BYTES / CD_H_PROBE_EVERY + 2;
    }
    q->compact_first = srpc_ctx_alloc(ctx, sizeof(uint64_t) * n);
    q->compact_blocks = srpc_ctx_alloc(ctx, sizeof(uint32_t) * n);
    q->compact_probes = srpc_ctx_alloc(ctx, sizeof(uint32_t) * n);
    q->compact_offsets = srpc_ctx_alloc(ctx, sizeof(uint32_t) * room);
    h = srpc_ctx_alloc(ctx, sizeof(*h) * room);
    if (!q->compact_first || !q->compact_blocks || !q->compact_probes || !q->compact_offsets ||
        h == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t j = 0; j < n; j++) {
        const Strata__V1__Segment *sg = q->segments[j];
        const st_hash_t *src = (const st_hash_t *)sg->block_hashes.data;
        uint32_t len = (uint32_t)(sg->block_hashes.len / ST_HASH_BYTES), np = 0;

        for (uint32_t o = 0; o < len; o += CD_H_PROBE_EVERY) {
            q->compact_offsets[at + np] = o;
            h[at + np++] = src[o];
        }
        if (q->compact_offsets[at + np - 1] != len - 1) {
            q->compact_offsets[at + np] = len - 1;
            h[at + np++] = src[len - 1];
        }
        q->compact_first[j] = sg->first_block;
        q->compact_blocks[j] = len;
        q->compact_probes[j] = np;
        at += np;
    }
    q->n_compact_first = q->n_compact_blocks = q->n_compact_probes = n;
    q->n_compact_offsets = at;
    q->compact_hashes.data = (uint8_t *)h->b;
    q->compact_hashes.len = at * ST_HASH_BYTES;
    q->n_segments = 0;
    return ST_OK;
}

/* Request segment j's answer in lr: matched blocks, undecided ones, and its
 * checkpoints (from the compact fields when compact; *kda_at runs over
 * compact_kda). Returns 0 when lr has no answer for it. */
static int cd_h_cl_answer(const Strata__V1__LookupResponse *lr, int compact, size_t n, size_t j,
                          size_t *kda_at, uint32_t *m, uint32_t *u, const uint64_t **kda,
                          size_t *n_kda)
{
    if (!compact) {
        if (j >= lr->n_segments) {
            return 0;
        }
        *m = lr->segments[j]->matched_blocks;
        *u = 0;
        *kda = lr->segments[j]->kda_checkpoints;
        *n_kda = lr->segments[j]->n_kda_checkpoints;
        return 1;
    }
    if (!lr->compact || lr->n_compact_matched != n || lr->n_compact_unresolved != n ||
        lr->n_compact_kda_counts != n || *kda_at + lr->compact_kda_counts[j] > lr->n_compact_kda) {
        return 0;
    }
    *m = lr->compact_matched[j];
    *u = lr->compact_unresolved[j];
    *kda = lr->compact_kda != NULL ? lr->compact_kda + *kda_at : NULL;
    *n_kda = lr->compact_kda_counts[j];
    *kda_at += *n_kda;
    return 1;
}

/*
 * The second round of a compact ClusterLookup: the segments whose owner left
 * blocks undecided (undecided[k] > 0) are asked again, those blocks with
 * their hashes, one full-form Lookup per owner in parallel; each answer is
 * added to the segment's match. A segment whose owner fails now is answered
 * as a failed owner. Returns ST_OK or ST_ERR_NOMEM.
 */
static st_status_t cd_h_cl_resolve(srpc_ctx_t *ctx, cd_daemon_t *d,
                                   const Strata__V1__ClusterLookupRequest *req,
                                   const st_hash_t *hashes, const uint32_t *seg_owner,
                                   const uint32_t *undecided, size_t n_segs, uint32_t S,
                                   Strata__V1__ClusterLookupResponse *resp, st_seg_answer_t *ans)
{
    uint32_t n_nodes = d->n_peers ? d->n_peers : 1;
    cd_h_owner_t *own = srpc_ctx_alloc(ctx, sizeof(*own) * n_nodes);
    srpc_fanout_item_t *items = srpc_ctx_alloc(ctx, sizeof(*items) * n_nodes);
    size_t *item_owner = srpc_ctx_alloc(ctx, sizeof(*item_owner) * n_nodes), n_items = 0;
    int64_t left = srpc_ctx_remaining_ms(ctx);
    st_status_t status;

    if (own == NULL || items == NULL || item_owner == NULL) {
        return ST_ERR_NOMEM;
    }
    memset(own, 0, sizeof(*own) * n_nodes);
    for (size_t k = 0; k < n_segs; k++) {
        own[seg_owner[k]].n += undecided[k] > 0;
    }
    for (uint32_t o = 0; o < n_nodes; o++) {
        cd_h_owner_t *ow = &own[o];
        size_t cnt = ow->n;

        strata__v1__lookup_request__init(&ow->req);
        if (cnt == 0) {
            continue;
        }
        ow->segs = srpc_ctx_alloc(ctx, sizeof(*ow->segs) * cnt);
        ow->seg_index = srpc_ctx_alloc(ctx, sizeof(*ow->seg_index) * cnt);
        if (ow->segs == NULL || ow->seg_index == NULL) {
            return ST_ERR_NOMEM;
        }
        ow->n = 0;
        ow->req.namespace_id = req->namespace_id;
        ow->req.kinds_mask = req->kinds_mask;
        ow->req.layers = req->layers;
        ow->req.n_layers = req->n_layers;
        ow->req.segments = ow->segs;
    }
    for (size_t k = 0; k < n_segs; k++) {
        cd_h_owner_t *ow = &own[seg_owner[k]];
        Strata__V1__Segment *sg;
        uint32_t m;

        if (undecided[k] == 0) {
            continue; /* decided, or its owner failed (no match) */
        }
        m = resp->segments[k]->match->matched_blocks;
        sg = srpc_ctx_alloc(ctx, sizeof(*sg));
        if (sg == NULL) {
            return ST_ERR_NOMEM;
        }
        strata__v1__segment__init(sg);
        sg->first_block = req->first_block + k * S + m;
        sg->block_hashes.data = (uint8_t *)&hashes[k * S + m];
        sg->block_hashes.len = (size_t)undecided[k] * ST_HASH_BYTES;
        ow->seg_index[ow->n] = k;
        ow->segs[ow->n++] = sg;
        ow->req.n_segments = ow->n;
    }
    for (uint32_t o = 0; o < n_nodes; o++) {
        if (own[o].n == 0 || d->n_peers == 0 || (int)o == d->self_peer) {
            continue;
        }
        items[n_items].ch = cd_daemon_peer(d, o);
        items[n_items].req = &own[o].req.base;
        items[n_items].resp = NULL;
        if (items[n_items].ch == NULL) {
            continue;
        }
        item_owner[n_items++] = o;
    }
    if (n_items > 0) {
        status = srpc_fanout(&srpc_cache_methods[SRPC_CACHE_LOOKUP], items, n_items,
                             left == INT64_MAX ? 5000 : (int)(left > 60000 ? 60000 : left));
        if (status != ST_OK) {
            return status;
        }
    }
    for (uint32_t o = 0; o < n_nodes; o++) {
        const Strata__V1__LookupResponse *lr = NULL;
        srpc_fanout_item_t *it = NULL;
        st_status_t why = ST_ERR_UNAVAILABLE;
        const char *msg = "peer unreachable";

        if (own[o].n == 0) {
            continue;
        }
        if (d->n_peers == 0 || (int)o == d->self_peer) {
            Strata__V1__LookupResponse *local = srpc_ctx_alloc(ctx, sizeof(*local));

            if (local == NULL) {
                srpc_fanout_free(items, n_items);
                return ST_ERR_NOMEM;
            }
            strata__v1__lookup_response__init(local);
            why = cd_h_lookup(ctx, &own[o].req.base, &local->base, NULL);
            lr = why == ST_OK ? local : NULL;
            msg = st_strerror(why);
        } else {
            for (size_t i = 0; i < n_items; i++) {
                if (item_owner[i] == o) {
                    it = &items[i];
                    why = it->status;
                    msg = it->err.message;
                    lr = it->status == ST_OK ? (const void *)it->resp : NULL;
                }
            }
        }
        for (size_t j = 0; j < own[o].n; j++) {
            size_t k = own[o].seg_index[j];
            Strata__V1__SegmentAnswer *sa = resp->segments[k];
            Strata__V1__SegmentMatch *m = sa->match;

            if (lr != NULL && j < lr->n_segments &&
                lr->segments[j]->matched_blocks <= undecided[k]) {
                const Strata__V1__SegmentMatch *m2 = lr->segments[j];
                uint64_t *kda = srpc_ctx_alloc(
                    ctx, sizeof(*kda) * (m->n_kda_checkpoints + m2->n_kda_checkpoints + 1));

                if (kda == NULL) {
                    srpc_fanout_free(items, n_items);
                    return ST_ERR_NOMEM;
                }
                if (m->n_kda_checkpoints > 0) {
                    memcpy(kda, m->kda_checkpoints, sizeof(*kda) * m->n_kda_checkpoints);
                }
                if (m2->n_kda_checkpoints > 0) {
                    memcpy(kda + m->n_kda_checkpoints, m2->kda_checkpoints,
                           sizeof(*kda) * m2->n_kda_checkpoints);
                }
                m->kda_checkpoints = kda;
                m->n_kda_checkpoints += m2->n_kda_checkpoints;
                m->matched_blocks += m2->matched_blocks;
                ans[k].matched = m->matched_blocks;
                ans[k].kda = m->kda_checkpoints;
                ans[k].n_kda = m->n_kda_checkpoints;
                continue;
            }
            /* The owner failed now: as a failed owner. */
            if (why == ST_OK) {
                why = ST_ERR_PROTOCOL;
                msg = "the owner's second answer does not fit";
            }
            sa->match = NULL;
            sa->grpc_status = (uint32_t)st_status_to_grpc(why);
            sa->error = cd_h_dup(ctx, msg, strlen(msg) + 1, 1);
            if (sa->error == NULL) {
                srpc_fanout_free(items, n_items);
                return ST_ERR_NOMEM;
            }
            ans[k].answered = 0;
        }
    }
    srpc_fanout_free(items, n_items);
    return ST_OK;
}

st_status_t cd_h_cluster_lookup(srpc_ctx_t *ctx, const ProtobufCMessage *reqm,
                                ProtobufCMessage *respm, void *arg)
{
    const Strata__V1__ClusterLookupRequest *req = (const void *)reqm;
    Strata__V1__ClusterLookupResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    uint32_t S = (uint32_t)d->cfg.segment_blocks;
    uint32_t n_nodes = d->n_peers ? d->n_peers : 1;
    size_t n_hashes, n_segs;
    const st_hash_t *hashes;
    cd_h_owner_t *own;
    uint32_t *seg_owner;
    st_seg_answer_t *ans;
    srpc_fanout_item_t *items;
    size_t *item_owner, n_items = 0, n_undecided = 0;
    uint32_t *undecided;
    int compact;
    cd_ns_entry_t *e;
    st_prefix_t prefix;
    int64_t left;
    st_status_t status;

    status = cd_h_ns(ctx, d, req->namespace_id, &e);
    if (status != ST_OK) {
        return status;
    }
    hashes = cd_h_hashes(ctx, &req->block_hashes, &n_hashes, "block_hashes");
    if (hashes == NULL) {
        return ST_ERR_INVALID;
    }
    if (n_hashes == 0 || n_hashes > (size_t)d->cfg.max_hashes) {
        srpc_ctx_set_error(ctx, "cluster lookup of %zu block hashes (1..max_hashes=%lld)", n_hashes,
                           (long long)d->cfg.max_hashes);
        return ST_ERR_INVALID;
    }
    if (req->first_block > UINT64_MAX - (n_hashes - 1)) {
        srpc_ctx_set_error(ctx, "first_block=%llu plus %zu blocks passes the largest chain index",
                           (unsigned long long)req->first_block, n_hashes);
        return ST_ERR_INVALID;
    }
    if (req->first_block % S != 0) {
        srpc_ctx_set_error(ctx, "first_block=%llu is not at a segment start (segment_blocks=%u)",
                           (unsigned long long)req->first_block, S);
        return ST_ERR_INVALID;
    }
    /* What every owner's Lookup checks, checked here: a request no owner
     * accepts fails as a whole instead of segment by segment. */
    status = cd_h_lookup_check(ctx, d, req->layers, req->n_layers, req->kinds_mask,
                               req->want_locations || req->lease, req->lease_ms);
    if (status != ST_OK) {
        return status;
    }
    n_segs = (n_hashes + S - 1) / S;
    own = srpc_ctx_alloc(ctx, sizeof(*own) * n_nodes);
    seg_owner = srpc_ctx_alloc(ctx, sizeof(*seg_owner) * n_segs);
    ans = srpc_ctx_alloc(ctx, sizeof(*ans) * n_segs);
    items = srpc_ctx_alloc(ctx, sizeof(*items) * n_nodes);
    item_owner = srpc_ctx_alloc(ctx, sizeof(*item_owner) * n_nodes);
    resp->segments = srpc_ctx_alloc(ctx, sizeof(*resp->segments) * n_segs);
    if (!own || !seg_owner || !ans || !items || !item_owner || !resp->segments) {
        return ST_ERR_NOMEM;
    }

    /* Place every segment. */
    for (size_t k = 0; k < n_segs; k++) {
        seg_owner[k] = d->n_peers ? st_ring_home(&d->ring, &hashes[k * S]) : 0;
        own[seg_owner[k]].n++;
    }
    for (uint32_t o = 0; o < n_nodes; o++) {
        cd_h_owner_t *ow = &own[o];
        size_t cnt = ow->n;

        strata__v1__lookup_request__init(&ow->req);
        if (cnt == 0) {
            continue;
        }
        ow->segs = srpc_ctx_alloc(ctx, sizeof(*ow->segs) * cnt);
        ow->seg_index = srpc_ctx_alloc(ctx, sizeof(*ow->seg_index) * cnt);
        if (ow->segs == NULL || ow->seg_index == NULL) {
            return ST_ERR_NOMEM;
        }
        ow->n = 0;
        ow->req.namespace_id = req->namespace_id;
        ow->req.kinds_mask = req->kinds_mask;
        ow->req.layers = req->layers;
        ow->req.n_layers = req->n_layers;
        ow->req.want_locations = req->want_locations;
        ow->req.lease = req->lease;
        ow->req.lease_ms = req->lease_ms;
        ow->req.segments = ow->segs;
    }
    for (size_t k = 0; k < n_segs; k++) {
        cd_h_owner_t *ow = &own[seg_owner[k]];
        Strata__V1__Segment *sg = srpc_ctx_alloc(ctx, sizeof(*sg));
        size_t nb = n_hashes - k * S < S ? n_hashes - k * S : S;

        if (sg == NULL) {
            return ST_ERR_NOMEM;
        }
        strata__v1__segment__init(sg);
        sg->first_block = req->first_block + k * S;
        sg->block_hashes.data = (uint8_t *)&hashes[k * S];
        sg->block_hashes.len = nb * ST_HASH_BYTES;
        ow->seg_index[ow->n] = k;
        ow->segs[ow->n++] = sg;
        ow->req.n_segments = ow->n;
        ans[k].first_block = sg->first_block;
        ans[k].n_blocks = (uint32_t)nb;
        ans[k].answered = 0;
    }

    /* Without locations or a lease, owners get compact segments (docs/protocol.md
     * "Compact segments"); what they leave undecided is asked again below. */
    compact = !req->want_locations && !req->lease;
    for (uint32_t o = 0; compact && o < n_nodes; o++) {
        if (own[o].n > 0 && (status = cd_h_cl_compact(ctx, &own[o])) != ST_OK) {
            return status;
        }
    }
    undecided = srpc_ctx_alloc(ctx, sizeof(*undecided) * n_segs);
    if (undecided == NULL) {
        return ST_ERR_NOMEM;
    }
    memset(undecided, 0, sizeof(*undecided) * n_segs);

    /* Ask the peers in parallel; answer our own segments meanwhile. */
    left = srpc_ctx_remaining_ms(ctx);
    for (uint32_t o = 0; o < n_nodes; o++) {
        if (own[o].n == 0 || d->n_peers == 0 || (int)o == d->self_peer) {
            continue;
        }
        items[n_items].ch = cd_daemon_peer(d, o);
        items[n_items].req = &own[o].req.base;
        items[n_items].resp = NULL;
        if (items[n_items].ch == NULL) {
            continue;
        }
        item_owner[n_items++] = o;
    }
    if (n_items > 0) {
        status = srpc_fanout(&srpc_cache_methods[SRPC_CACHE_LOOKUP], items, n_items,
                             left == INT64_MAX ? 5000 : (int)(left > 60000 ? 60000 : left));
        if (status != ST_OK) {
            return status;
        }
    }

    for (uint32_t o = 0; o < n_nodes; o++) {
        const Strata__V1__LookupResponse *lr = NULL;
        Strata__V1__LookupResponse *local = NULL;
        srpc_fanout_item_t *it = NULL;
        st_status_t local_status = ST_OK;
        size_t kda_at = 0;

        if (own[o].n == 0) {
            continue;
        }
        if (d->n_peers == 0 || (int)o == d->self_peer) {
            local = srpc_ctx_alloc(ctx, sizeof(*local));
            if (local == NULL) {
                return ST_ERR_NOMEM;
            }
            strata__v1__lookup_response__init(local);
            local_status = cd_h_lookup(ctx, &own[o].req.base, &local->base, NULL);
            if (local_status == ST_OK) {
                lr = local;
            }
        } else {
            for (size_t i = 0; i < n_items; i++) {
                if (item_owner[i] == o) {
                    it = &items[i];
                    if (it->status == ST_OK) {
                        lr = (const void *)it->resp;
                    }
                }
            }
        }
        for (size_t j = 0; j < own[o].n; j++) {
            size_t k = own[o].seg_index[j];
            Strata__V1__SegmentAnswer *sa = srpc_ctx_alloc(ctx, sizeof(*sa));
            uint32_t cm, cu;
            const uint64_t *ckda;
            size_t cn_kda;

            if (sa == NULL) {
                srpc_fanout_free(items, n_items);
                return ST_ERR_NOMEM;
            }
            strata__v1__segment_answer__init(sa);
            sa->first_block = ans[k].first_block;
            sa->n_blocks = ans[k].n_blocks;
            sa->node_id = d->n_peers ? d->peer_list[o] : d->cfg.node_id;
            sa->address = sa->node_id;
            if (lr != NULL && compact &&
                cd_h_cl_answer(lr, compact, own[o].n, j, &kda_at, &cm, &cu, &ckda, &cn_kda) &&
                (uint64_t)cm + cu <= ans[k].n_blocks) {
                Strata__V1__SegmentMatch *m = srpc_ctx_alloc(ctx, sizeof(*m));

                if (m == NULL) {
                    srpc_fanout_free(items, n_items);
                    return ST_ERR_NOMEM;
                }
                strata__v1__segment_match__init(m);
                m->matched_blocks = cm;
                m->kda_checkpoints = cd_h_dup(ctx, ckda, cn_kda, sizeof(*ckda));
                m->n_kda_checkpoints = cn_kda;
                if (m->kda_checkpoints == NULL) {
                    srpc_fanout_free(items, n_items);
                    return ST_ERR_NOMEM;
                }
                undecided[k] = cu;
                n_undecided += cu > 0;
                ans[k].answered = 1;
                ans[k].matched = m->matched_blocks;
                ans[k].kda = m->kda_checkpoints;
                ans[k].n_kda = m->n_kda_checkpoints;
                sa->match = m;
                sa->region_epoch = lr->region_epoch;
            } else if (lr != NULL && !compact && j < lr->n_segments) {
                Strata__V1__SegmentMatch *m = cd_h_match_copy(ctx, lr->segments[j]);

                if (m == NULL) {
                    srpc_fanout_free(items, n_items);
                    return ST_ERR_NOMEM;
                }
                ans[k].answered = 1;
                ans[k].matched = m->matched_blocks;
                ans[k].kda = m->kda_checkpoints;
                ans[k].n_kda = m->n_kda_checkpoints;
                sa->match = m;
                sa->lease_id = lr->lease_id;
                sa->lease_ms = lr->lease_ms;
                sa->region_epoch = lr->region_epoch;
            } else {
                /* The owner failed: a peer's error, this node's own, or no peer. */
                st_status_t why = it != NULL ? it->status : local_status;
                const char *msg = it != NULL ? it->err.message : st_strerror(why);

                if (it == NULL && why == ST_OK) {
                    why = ST_ERR_UNAVAILABLE;
                    msg = "peer unreachable";
                } else if (why == ST_OK) {
                    why = ST_ERR_PROTOCOL; /* an answer that does not fit the request */
                    msg = "the owner's answer does not fit the request";
                }
                sa->grpc_status = (uint32_t)st_status_to_grpc(why);
                sa->error = cd_h_dup(ctx, msg, strlen(msg) + 1, 1);
                if (sa->error == NULL) {
                    srpc_fanout_free(items, n_items);
                    return ST_ERR_NOMEM;
                }
            }
            resp->segments[k] = sa;
        }
    }
    resp->n_segments = n_segs;
    srpc_fanout_free(items, n_items);
    if (n_undecided > 0) {
        status = cd_h_cl_resolve(ctx, d, req, hashes, seg_owner, undecided, n_segs, S, resp, ans);
        if (status != ST_OK) {
            return status;
        }
    }
    st_compose_prefix(ans, n_segs, &prefix);
    resp->matched_blocks = prefix.matched_blocks;
    resp->resumable_blocks = prefix.resumable_blocks;
    return ST_OK;
}
