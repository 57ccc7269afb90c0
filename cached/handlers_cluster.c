/*
 * handlers_cluster.c - ClusterLookup: the fan-out lookup for thin clients.
 *
 * The daemon that takes the call cuts the chain into segments (aligned to
 * segment_blocks chain positions), places each on the ring exactly as a
 * client would (proto/ring.h), sends one Lookup per owner in parallel (its
 * own segments it answers itself), and composes the answers into the
 * longest prefix and the resumable prefix (proto/compose.h). An owner that
 * does not answer counts as a miss for its segments, so lost data is never
 * claimed.
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
    if (!c->state || !c->region_id || !c->offset || !c->length || !c->checksum || !c->generation ||
        !c->row_bytes) {
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
    size_t *item_owner, n_items = 0;
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

            if (sa == NULL) {
                srpc_fanout_free(items, n_items);
                return ST_ERR_NOMEM;
            }
            strata__v1__segment_answer__init(sa);
            sa->first_block = ans[k].first_block;
            sa->n_blocks = ans[k].n_blocks;
            sa->node_id = d->n_peers ? d->peer_list[o] : d->cfg.node_id;
            sa->address = sa->node_id;
            if (lr != NULL && j < lr->n_segments) {
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
    st_compose_prefix(ans, n_segs, &prefix);
    resp->matched_blocks = prefix.matched_blocks;
    resp->resumable_blocks = prefix.resumable_blocks;
    srpc_fanout_free(items, n_items);
    return ST_OK;
}
