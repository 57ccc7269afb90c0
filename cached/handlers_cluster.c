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
 * segment's answer is the full form's. Placing, grouping, the compact form
 * and the merging of answers are the lookup planner's (proto/plan.h), the
 * client's too; what is the daemon's own is how a group is sent (a peer over
 * gRPC, this node's own segments through its Lookup handler) and the answer
 * per segment that it writes.
 */
#include "handlers.h"

#include <stdlib.h>
#include <string.h>

#include "plan.h"
#include "log.h"

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

/* The planner's placer: a segment's owner on the whole ring (every peer, up
 * or not: one that does not answer counts as a miss). */
static int cd_h_cl_place(void *arg, const st_hash_t *first)
{
    const cd_view_t *v = arg;

    return v->n ? (int)ring_home(&v->ring, first) : 0;
}

/* The peer calls of one round; their answers and messages live until freed. */
typedef struct cd_h_cl_calls {
    srpc_fanout_item_t *items;
    size_t n_items;
} cd_h_cl_calls_t;

/* This node's own group, answered by its Lookup handler. */
static st_status_t cd_h_cl_local(srpc_ctx_t *ctx, lp_group_t *g)
{
    Strata__V1__LookupResponse *local = srpc_ctx_alloc(ctx, sizeof(*local));

    if (local == NULL) {
        return ST_ERR_NOMEM;
    }
    strata__v1__lookup_response__init(local);
    g->status = cd_h_lookup(ctx, &g->req.base, &local->base, NULL);
    g->resp = g->status == ST_OK ? local : NULL;
    g->msg = st_strerror(g->status);
    return ST_OK;
}

/*
 * Sends a round's groups: one Lookup per peer, in parallel, then this
 * node's own group through its handler; a peer without a channel is
 * unreachable. Sets each group's answer, status and message. Returns ST_OK,
 * or ST_ERR_NOMEM or srpc_fanout()'s status (the call fails then).
 */
static st_status_t cd_h_cl_send(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_view_t *v,
                                lp_group_t *groups, size_t n, cd_h_cl_calls_t *calls)
{
    int64_t left = srpc_ctx_remaining_ms(ctx);
    size_t *item_group = srpc_ctx_alloc(ctx, sizeof(*item_group) * (n + 1));
    st_status_t status;

    calls->n_items = 0;
    calls->items = srpc_ctx_alloc(ctx, sizeof(*calls->items) * (n + 1));
    if (calls->items == NULL || item_group == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t g = 0; g < n; g++) {
        srpc_fanout_item_t *it = &calls->items[calls->n_items];

        groups[g].resp = NULL;
        groups[g].status = ST_ERR_UNAVAILABLE;
        groups[g].msg = "peer unreachable";
        if (v->n == 0 || (int)groups[g].node == v->self) {
            continue;
        }
        memset(it, 0, sizeof(*it));
        it->ch = cd_daemon_peer_ch(d, v->members[groups[g].node].grpc);
        it->req = &groups[g].req.base;
        if (it->ch != NULL) {
            item_group[calls->n_items++] = g;
        }
    }
    if (calls->n_items > 0) {
        status = srpc_fanout(&srpc_cache_methods[SRPC_CACHE_LOOKUP], calls->items, calls->n_items,
                             left == INT64_MAX ? 5000 : (int)(left > 60000 ? 60000 : left));
        if (status != ST_OK) {
            calls->n_items = 0; /* nothing was issued */
            return status;
        }
    }
    for (size_t i = 0; i < calls->n_items; i++) {
        lp_group_t *g = &groups[item_group[i]];

        g->status = calls->items[i].status;
        g->msg = calls->items[i].err.message;
        g->resp = g->status == ST_OK ? (const void *)calls->items[i].resp : NULL;
    }
    for (size_t g = 0; g < n; g++) {
        if ((v->n == 0 || (int)groups[g].node == v->self) &&
            cd_h_cl_local(ctx, &groups[g]) != ST_OK) {
            return ST_ERR_NOMEM;
        }
    }
    return ST_OK;
}

/*
 * The second round of a compact ClusterLookup: the segments whose owner left
 * blocks undecided are asked again, those blocks with their hashes, one
 * full-form Lookup per owner in parallel; each answer is added to the
 * segment's match. A segment whose owner fails now is answered as a failed
 * owner. Returns ST_OK, ST_ERR_NOMEM or srpc_fanout()'s status.
 */
static st_status_t cd_h_cl_resolve(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_view_t *v,
                                   lp_plan_t *p, cd_h_cl_calls_t *calls)
{
    size_t *runs = srpc_ctx_alloc(ctx, sizeof(*runs) * (p->n_runs + 1)), n;
    lp_round_t r;
    st_status_t status;

    if (runs == NULL) {
        return ST_ERR_NOMEM;
    }
    n = lp_plan_undecided(p, runs);
    if (n == 0) {
        return ST_OK;
    }
    status = lp_round_init(p, &r, runs, n);
    if (status != ST_OK) {
        return status;
    }
    status = cd_h_cl_send(ctx, d, v, r.groups, r.n_groups, calls);
    for (size_t g = 0; status == ST_OK && g < r.n_groups; g++) {
        if (lp_round_take(p, &r, g) == ST_ERR_NOMEM) {
            status = ST_ERR_NOMEM;
        }
    }
    lp_round_free(&r);
    return status;
}

/* A segment answered: its match as the owner gave it (compact: the merged
 * counts and checkpoints; full form: a copy, with locations and lease). */
static st_status_t cd_h_cl_match(srpc_ctx_t *ctx, const lp_plan_t *p, size_t k,
                                 Strata__V1__SegmentAnswer *sa)
{
    const lp_run_t *run = &p->runs[p->seg_run[k]];
    const Strata__V1__LookupResponse *lr = p->groups[run->group].resp;
    Strata__V1__SegmentMatch *m;

    if (!p->compact) {
        m = cd_h_match_copy(ctx, lr->segments[run->index]);
        sa->lease_id = lr->lease_id;
        sa->lease_ms = lr->lease_ms;
    } else if ((m = srpc_ctx_alloc(ctx, sizeof(*m))) != NULL) {
        strata__v1__segment_match__init(m);
        m->matched_blocks = p->ans[k].matched;
        m->kda_checkpoints = cd_h_dup(ctx, p->ans[k].kda, p->ans[k].n_kda, sizeof(uint64_t));
        m->n_kda_checkpoints = p->ans[k].n_kda;
        if (m->kda_checkpoints == NULL) {
            return ST_ERR_NOMEM;
        }
    }
    if (m == NULL) {
        return ST_ERR_NOMEM;
    }
    sa->match = m;
    sa->region_epoch = lr->region_epoch;
    return ST_OK;
}

/* Segment k's answer in the response: its match, or why its owner failed. */
static st_status_t cd_h_cl_segment(srpc_ctx_t *ctx, const cd_daemon_t *d, const cd_view_t *v,
                                   const lp_plan_t *p, size_t k, Strata__V1__SegmentAnswer **sa_p)
{
    const lp_run_t *run = &p->runs[p->seg_run[k]];
    const lp_fail_t *f = &p->fail[k];
    Strata__V1__SegmentAnswer *sa = srpc_ctx_alloc(ctx, sizeof(*sa));
    const char *msg = f->msg;

    if (sa == NULL) {
        return ST_ERR_NOMEM;
    }
    strata__v1__segment_answer__init(sa);
    sa->first_block = p->ans[k].first_block;
    sa->n_blocks = p->ans[k].n_blocks;
    msg = v->n ? v->members[p->groups[run->group].node].grpc : d->cfg.node_id;
    /* A copy: the view may go before the answer is sent. */
    sa->node_id = cd_h_dup(ctx, msg, strlen(msg) + 1, 1);
    sa->address = sa->node_id;
    *sa_p = sa;
    msg = f->msg;
    if (sa->node_id == NULL) {
        return ST_ERR_NOMEM;
    }
    if (p->ans[k].answered) {
        return cd_h_cl_match(ctx, p, k, sa);
    }
    /* The owner failed: a peer's error, this node's own, no peer, or an
     * answer that does not fit the request. */
    if (msg == NULL) {
        msg = f->round == 2 ? "the owner's second answer does not fit"
                            : "the owner's answer does not fit the request";
    }
    if (f->round == 2) {
        sa->region_epoch = p->groups[run->group].resp->region_epoch; /* its first answer's */
    }
    sa->grpc_status = (uint32_t)st_status_to_grpc(f->why);
    sa->error = cd_h_dup(ctx, msg, strlen(msg) + 1, 1);
    return sa->error != NULL ? ST_OK : ST_ERR_NOMEM;
}

/* The checks of a ClusterLookup before it is planned; sets its hashes. */
static st_status_t cd_h_cl_check(srpc_ctx_t *ctx, cd_daemon_t *d,
                                 const Strata__V1__ClusterLookupRequest *req,
                                 const st_hash_t **hashes_p, size_t *n_hashes_p)
{
    uint32_t S = (uint32_t)d->cfg.segment_blocks;
    size_t n_hashes;
    cd_ns_entry_t *e;
    st_status_t status = cd_h_ns(ctx, d, req->namespace_id, &e);

    if (status != ST_OK) {
        return status;
    }
    *hashes_p = cd_h_hashes(ctx, &req->block_hashes, &n_hashes, "block_hashes");
    if (*hashes_p == NULL) {
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
    *n_hashes_p = n_hashes;
    /* What every owner's Lookup checks, checked here: a request no owner
     * accepts fails as a whole instead of segment by segment. */
    return cd_h_lookup_check(ctx, d, req->layers, req->n_layers, req->kinds_mask,
                             req->want_locations || req->lease, req->lease_ms);
}

/* The planner's parameters of a ClusterLookup (tmpl: its requests' template). */
static void cd_h_cl_params(cd_daemon_t *d, cd_view_t *v,
                           const Strata__V1__ClusterLookupRequest *req, const st_hash_t *hashes,
                           size_t n_hashes, Strata__V1__LookupRequest *tmpl, lp_params_t *prm)
{
    strata__v1__lookup_request__init(tmpl);
    tmpl->namespace_id = req->namespace_id;
    tmpl->kinds_mask = req->kinds_mask;
    tmpl->layers = req->layers;
    tmpl->n_layers = req->n_layers;
    tmpl->want_locations = req->want_locations;
    tmpl->lease = req->lease;
    tmpl->lease_ms = req->lease_ms;
    /* One request per owner, one request segment per segment (the answer
     * says, per segment, its owner and its match). */
    *prm = (lp_params_t){.hashes = hashes,
                         .n_blocks = n_hashes,
                         .first_block = req->first_block,
                         .segment_blocks = (uint32_t)d->cfg.segment_blocks,
                         .n_nodes = v->n ? v->n : 1,
                         .place = cd_h_cl_place,
                         .place_arg = v,
                         .max_segments = LP_UNLIMITED,
                         .max_hashes = LP_UNLIMITED,
                         .merge_runs = 0,
                         .tmpl = tmpl};
}

st_status_t cd_h_cluster_lookup(srpc_ctx_t *ctx, const ProtobufCMessage *reqm,
                                ProtobufCMessage *respm, void *arg)
{
    const Strata__V1__ClusterLookupRequest *req = (const void *)reqm;
    Strata__V1__ClusterLookupResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_h_cl_calls_t first = {0}, second = {0};
    cd_view_t *v;
    Strata__V1__LookupRequest tmpl;
    const st_hash_t *hashes;
    size_t n_hashes;
    lp_params_t prm;
    lp_plan_t p;
    compose_prefix_t prefix;
    st_status_t status;

    (void)arg;
    status = cd_h_cl_check(ctx, d, req, &hashes, &n_hashes);
    if (status != ST_OK) {
        return status;
    }
    v = cd_view_get(d);
    cd_h_cl_params(d, v, req, hashes, n_hashes, &tmpl, &prm);
    if ((status = lp_plan_init(&p, &prm)) != ST_OK) {
        cd_view_put(d, v);
        return status;
    }
    resp->segments = srpc_ctx_alloc(ctx, sizeof(*resp->segments) * p.n_segs);
    status = resp->segments != NULL ? ST_OK : ST_ERR_NOMEM;
    /* Without locations or a lease, owners get compact segments (docs/protocol.md
     * "Compact segments"); what they leave undecided is asked again. */
    if (status == ST_OK && !req->want_locations && !req->lease) {
        status = lp_plan_compact(&p);
    }
    if (status == ST_OK) {
        status = cd_h_cl_send(ctx, d, v, p.groups, p.n_groups, &first);
    }
    for (size_t g = 0; status == ST_OK && g < p.n_groups; g++) {
        lp_plan_take(&p, g);
    }
    if (status == ST_OK && p.compact) {
        status = cd_h_cl_resolve(ctx, d, v, &p, &second);
    }
    for (size_t k = 0; status == ST_OK && k < p.n_segs; k++) {
        status = cd_h_cl_segment(ctx, d, v, &p, k, &resp->segments[k]);
    }
    if (status == ST_OK) {
        resp->n_segments = p.n_segs;
        lp_plan_compose(&p, &prefix);
        resp->matched_blocks = prefix.matched_blocks;
        resp->resumable_blocks = prefix.resumable_blocks;
    }
    srpc_fanout_free(first.items, first.n_items);
    srpc_fanout_free(second.items, second.n_items);
    lp_plan_free(&p);
    cd_view_put(d, v);
    return status;
}
