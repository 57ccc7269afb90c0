/*
 * handlers_node.c - the calls about the node rather than its objects: Hello
 * (the principal, the namespace it opens, the transport, regions, limits and
 * peers) and Stats (the store's and the tier's counters, the calls' numbers).
 */
#include "handlers.h"
#include "rebalance.h"
#include "tier.h"

#include "dataplane.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "log.h"
#include "procstat.h"
#include "utf8.h"

static char *cd_h_strdup(srpc_ctx_t *ctx, const char *s)
{
    size_t len = strlen(s);
    char *p = srpc_ctx_alloc(ctx, len + 1);

    if (p != NULL) {
        memcpy(p, s, len + 1);
    }
    return p;
}

/* srpc_ctx_alloc for the data plane's copies. */
static void *cd_h_alloc(void *ctx, size_t len)
{
    return srpc_ctx_alloc(ctx, len);
}

/* -------------------------------------------------------------- Hello -- */

/*
 * The principal of a Hello into *pr (the call's): Hello may carry the token
 * in auth_token instead of the metadata; when both are present they must
 * match. Refuses no principal, and the cluster credential (it opens no
 * namespace).
 */
static st_status_t cd_h_hello_principal(srpc_ctx_t *ctx, cd_daemon_t *d,
                                        const Strata__V1__HelloRequest *req, cd_principal_t *pr)
{
    st_status_t status;

    *pr = *cd_au_principal(ctx);
    if (req->auth_token != NULL && req->auth_token[0] != '\0') {
        const char *token = srpc_ctx_token(ctx);
        char why[256] = "";

        if (token != NULL && strcmp(token, req->auth_token) != 0) {
            srpc_ctx_set_error(ctx, "auth_token differs from the token of the authorization "
                                    "metadata");
            return ST_ERR_PERMISSION;
        }
        if (token == NULL) {
            /* The body's token authenticates the Hello (checked against a
             * certificate that names a tenant, if the call has one). */
            memset(pr, 0, sizeof(*pr));
            status = cd_au_authenticate(&d->auth, srpc_ctx_method(ctx), req->auth_token,
                                        srpc_ctx_peer(ctx), srpc_ctx_peer_identity(ctx), pr, why,
                                        sizeof(why));
            if (status != ST_OK) {
                srpc_ctx_set_error(ctx, "%s", why);
                return status;
            }
        }
    }
    if (pr->pr_kind == CD_PR_NONE) {
        srpc_ctx_set_error(ctx, "this node requires a token (authorization: Bearer <token>)");
        return ST_ERR_UNAUTHENTICATED;
    }
    if (pr->pr_kind == CD_PR_PEER) {
        srpc_ctx_set_error(ctx, "the cluster credential opens no namespace");
        return ST_ERR_PERMISSION;
    }
    return ST_OK;
}

/*
 * Checks what a Hello asks for (protocol version, names, block size) and
 * whether principal pr may open it; *tenant_p becomes the tenant of pr's
 * token when the request names none.
 */
static st_status_t cd_h_hello_check(srpc_ctx_t *ctx, const Strata__V1__HelloRequest *req,
                                    const cd_principal_t *pr, const char **tenant_p,
                                    const char *model)
{
    const char *tenant = *tenant_p;
    long bad_tenant, bad_model;

    if (req->protocol_version > 1) {
        srpc_ctx_set_error(ctx, "protocol_version %u is newer than this node's (1)",
                           req->protocol_version);
        return ST_ERR_UNSUPPORTED;
    }
    if (strlen(tenant) > CD_NAME_MAX || strlen(model) > CD_NAME_MAX) {
        srpc_ctx_set_error(ctx, "tenant and model names are limited to %d bytes", CD_NAME_MAX);
        return ST_ERR_INVALID;
    }
    /* Checked before the namespace is created: a name its metrics refuse
     * would leave it half made. */
    bad_tenant = utf8_bad_byte(tenant, 1);
    bad_model = utf8_bad_byte(model, 1);
    if (bad_tenant >= 0 || bad_model >= 0) {
        srpc_ctx_set_error(ctx,
                           "%s: byte %ld is not UTF-8 or is a control character (names are "
                           "UTF-8 text)",
                           bad_tenant >= 0 ? "tenant" : "model",
                           bad_tenant >= 0 ? bad_tenant : bad_model);
        return ST_ERR_INVALID;
    }
    if (req->block_tokens != 0 && (req->block_tokens % 16 != 0 || req->block_tokens > 4096)) {
        srpc_ctx_set_error(ctx, "block_tokens=%u must be a multiple of 16 in 16..4096",
                           req->block_tokens);
        return ST_ERR_INVALID;
    }
    if (pr->pr_kind == CD_PR_TENANT) {
        const cd_tn_tenant_t *t = pr->pr_tenant;

        if (req->tenant == NULL || req->tenant[0] == '\0') {
            tenant = *tenant_p = t->tn_name; /* a tenant's token names its tenant */
        }
        if (!cd_au_may_tenant(pr, tenant)) {
            srpc_ctx_set_error(ctx, "this token is tenant %s's: it may not open tenant %.128s",
                               t->tn_name, tenant);
            return ST_ERR_PERMISSION;
        }
        if (!cd_tn_model_allowed(t, model)) {
            srpc_ctx_set_error(ctx,
                               "tenant %s may not use model %.128s (models= of the "
                               "tenants file)",
                               t->tn_name, model);
            return ST_ERR_PERMISSION;
        }
    }
    return ST_OK;
}

/* The node and its data plane in a Hello's answer: a client id and a
 * transport key per Hello, bound to its principal (auth.h). */
static st_status_t cd_h_hello_transport(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_principal_t *pr,
                                        Strata__V1__HelloResponse *resp)
{
    resp->protocol_version = 1;
    resp->node_id = cd_h_strdup(ctx, d->cfg.node_id);
    resp->version = cd_h_strdup(ctx, CD_VERSION);
    resp->transport = (Strata__V1__TransportKind)cd_dp_kind(d->dp);
    resp->committed_read_only = cd_dp_committed_read_only(d->dp);
    resp->transport_call_key.data = srpc_ctx_alloc(ctx, CD_DP_CALL_KEY);
    if (resp->transport_call_key.data == NULL) {
        return ST_ERR_NOMEM;
    }
    resp->client_id = cd_au_random64();
    resp->transport_calls = cd_dp_serves_calls(d->dp, NULL);
    if (resp->client_id == 0 ||
        (resp->transport_calls &&
         cd_au_key_issue(&d->auth, pr, resp->client_id, resp->transport_call_key.data) != ST_OK)) {
        srpc_ctx_set_error(ctx, "no randomness for the client id or transport key");
        return ST_ERR_INTERNAL;
    }
    resp->transport_call_key.len = resp->transport_calls ? CD_DP_CALL_KEY : 0;
    if (d->dp != NULL && cd_dp_address(d->dp, cd_h_alloc, ctx, &resp->transport_address.data,
                                       &resp->transport_address.len) != ST_OK) {
        return ST_ERR_NOMEM;
    }
    return ST_OK;
}

/* The namespace's regions with their keys, as the table holds them now. */
static st_status_t cd_h_hello_regions(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_ns_entry_t *e,
                                      cd_region_t *regions, Strata__V1__HelloResponse *resp)
{
    uint32_t nr;

    nr = cd_daemon_ns_regions(d, e, regions, CD_MAX_REGIONS, &resp->region_epoch);
    resp->regions = srpc_ctx_alloc(ctx, sizeof(*resp->regions) * (nr ? nr : 1));
    if (resp->regions == NULL) {
        return ST_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < nr; i++) {
        Strata__V1__Region *r = srpc_ctx_alloc(ctx, sizeof(*r));

        if (r == NULL) {
            return ST_ERR_NOMEM;
        }
        strata__v1__region__init(r);
        r->id = regions[i].id;
        r->remote_addr = (uint64_t)(uintptr_t)regions[i].base;
        r->length = regions[i].len;
        /* A region freed since the table was copied has no key: the client
         * sees the epoch move and asks again. */
        (void)cd_dp_rkey(d->dp, e->local_id, regions[i].id, cd_h_alloc, ctx, &r->rkey.data,
                         &r->rkey.len);
        resp->regions[i] = r;
    }
    resp->n_regions = nr;
    return ST_OK;
}

/* The cluster's members and the ring epoch in a Hello's answer, copied from
 * the current view (which may be swapped before the answer is sent). */
static st_status_t cd_h_hello_peers(srpc_ctx_t *ctx, cd_daemon_t *d,
                                    Strata__V1__HelloResponse *resp)
{
    cd_view_t *v = cd_view_get(d);
    st_status_t status = ST_OK;

    resp->ring_epoch = v->epoch;
    resp->peers = srpc_ctx_alloc(ctx, sizeof(*resp->peers) * (v->n ? v->n : 1));
    for (uint32_t i = 0; resp->peers != NULL && i < v->n; i++) {
        Strata__V1__Peer *p = srpc_ctx_alloc(ctx, sizeof(*p));

        if (p == NULL) {
            status = ST_ERR_NOMEM;
            break;
        }
        strata__v1__peer__init(p);
        if ((p->node_id = p->address = cd_h_strdup(ctx, v->members[i].grpc)) == NULL) {
            status = ST_ERR_NOMEM;
            break;
        }
        p->vnodes = (uint32_t)d->cfg.vnodes;
        resp->peers[i] = p;
        resp->n_peers = i + 1;
    }
    if (resp->peers == NULL) {
        status = ST_ERR_NOMEM;
    }
    cd_view_put(d, v);
    return status;
}

/* The node's limits and the cluster's peers in a Hello's answer. */
static st_status_t cd_h_hello_cluster(srpc_ctx_t *ctx, cd_daemon_t *d, Strata__V1__Limits *lim,
                                      Strata__V1__HelloResponse *resp)
{
    strata__v1__limits__init(lim);
    lim->max_message_bytes = (uint32_t)d->cfg.max_message_bytes;
    lim->max_keys_per_call = (uint32_t)d->cfg.max_batch;
    lim->max_blocks_per_lookup = (uint32_t)d->cfg.max_hashes;
    lim->max_inline_bytes = (uint32_t)d->cfg.max_object_bytes;
    lim->lease_ms = (uint32_t)d->cfg.lease_ms;
    lim->max_lease_ms = (uint32_t)d->cfg.max_lease_ms;
    lim->reservation_ms = (uint32_t)d->cfg.reservation_ms;
    lim->max_sessions =
        (uint32_t)(d->cfg.max_sessions > UINT32_MAX ? UINT32_MAX : d->cfg.max_sessions);
    resp->limits = lim;

    return cd_h_hello_peers(ctx, d, resp);
}

st_status_t cd_h_hello(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__HelloRequest *req = (const void *)reqm;
    Strata__V1__HelloResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    const char *tenant = req->tenant && req->tenant[0] ? req->tenant : "default";
    const char *model = req->model && req->model[0] ? req->model : "default";
    cd_principal_t pr;
    cd_region_t *regions;
    cd_ns_entry_t *e;
    cd_err_t err = {""};
    Strata__V1__Limits *lim;
    st_status_t status;

    status = cd_h_hello_principal(ctx, d, req, &pr);
    if (status == ST_OK) {
        status = cd_h_hello_check(ctx, req, &pr, &tenant, model);
    }
    if (status != ST_OK) {
        return status;
    }
    status = cd_daemon_ns_open(d, tenant, model, req->block_tokens, &e, &err);
    if (status != ST_OK) {
        return cd_h_fail(ctx, status, &err);
    }
    status = cd_h_hello_transport(ctx, d, &pr, resp);
    if (status != ST_OK) {
        return status;
    }
    resp->namespace_id = e->wire_id;
    resp->namespace_seed.data = srpc_ctx_alloc(ctx, ST_HASH_BYTES);
    regions = srpc_ctx_alloc(ctx, sizeof(*regions) * CD_MAX_REGIONS);
    lim = srpc_ctx_alloc(ctx, sizeof(*lim));
    if (!resp->node_id || !resp->version || !resp->namespace_seed.data || !regions || !lim) {
        return ST_ERR_NOMEM;
    }
    memcpy(resp->namespace_seed.data, e->seed.b, ST_HASH_BYTES);
    resp->namespace_seed.len = ST_HASH_BYTES;
    resp->block_tokens = e->block_tokens;
    resp->segment_blocks = (uint32_t)d->cfg.segment_blocks;
    resp->kda_interval = (uint32_t)d->cfg.kda_interval;
    resp->replicas = (uint32_t)d->cfg.replicas;
    status = cd_h_hello_regions(ctx, d, e, regions, resp);
    if (status == ST_OK) {
        status = cd_h_hello_cluster(ctx, d, lim, resp);
    }
    if (status != ST_OK) {
        return status;
    }
    lg_debug("hello tenant=%s model=%s ns=%llu peer=%s", tenant, model,
             (unsigned long long)e->wire_id, srpc_ctx_peer(ctx));
    return ST_OK;
}

/* -------------------------------------------------------------- Stats -- */

typedef struct cd_h_kv {
    const char *name;
    uint64_t value;
} cd_h_kv_t;

/*
 * The store's namespace of a Stats call into *local_p (0: node-wide, for
 * the principal that may see every tenant only: node-wide numbers sum every
 * tenant's, a tenant asks per namespace).
 */
static st_status_t cd_h_stats_scope(srpc_ctx_t *ctx, cd_daemon_t *d,
                                    const Strata__V1__StatsRequest *req, uint32_t *local_p)
{
    st_status_t status;

    *local_p = 0;
    if (req->namespace_id != 0) {
        cd_ns_entry_t *e;

        status = cd_h_ns(ctx, d, req->namespace_id, &e);
        if (status == ST_OK) {
            *local_p = e->local_id;
        }
        return status;
    }
    status = cd_h_auth(ctx, d);
    if (status != ST_OK) {
        return status;
    }
    if (cd_au_principal(ctx)->pr_kind != CD_PR_ANY) {
        srpc_ctx_set_error(ctx, "Stats without a namespace_id is node-wide: a tenant's token "
                                "asks for its own namespace_id");
        return ST_ERR_PERMISSION;
    }
    return ST_OK;
}

/* Appends the n counters of c to resp's, from index at on (room for them). */
static st_status_t cd_h_stats_put(srpc_ctx_t *ctx, Strata__V1__StatsResponse *resp, size_t at,
                                  const cd_h_kv_t *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        Strata__V1__StatsResponse__CountersEntry *ce = srpc_ctx_alloc(ctx, sizeof(*ce));

        if (ce == NULL) {
            return ST_ERR_NOMEM;
        }
        strata__v1__stats_response__counters_entry__init(ce);
        ce->key = (char *)c[i].name;
        ce->value = c[i].value;
        resp->counters[at + i] = ce;
    }
    return ST_OK;
}

/* Appends the n counters of c to resp's, growing its array. */
static st_status_t cd_h_stats_append(srpc_ctx_t *ctx, Strata__V1__StatsResponse *resp,
                                     const cd_h_kv_t *c, size_t n)
{
    Strata__V1__StatsResponse__CountersEntry **grown;

    grown = srpc_ctx_alloc(ctx, sizeof(*grown) * (resp->n_counters + n));
    if (grown == NULL) {
        return ST_ERR_NOMEM;
    }
    memcpy(grown, resp->counters, sizeof(*grown) * resp->n_counters);
    resp->counters = grown;
    if (cd_h_stats_put(ctx, resp, resp->n_counters, c, n) != ST_OK) {
        return ST_ERR_NOMEM;
    }
    resp->n_counters += n;
    return ST_OK;
}

/* The store's counters s, then (node-wide only) the SSD tier's, when
 * there is a tier. */
static st_status_t cd_h_stats_counters(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_stats_t *s,
                                       int node_wide, Strata__V1__StatsResponse *resp)
{
    const cd_h_kv_t c[] = {
        {"objects_kv", s->objects[CD_KIND_KV]},
        {"objects_idx", s->objects[CD_KIND_IDX]},
        {"objects_kda", s->objects[CD_KIND_KDA]},
        {"objects_vis", s->objects[CD_KIND_VIS]},
        {"bytes_kv", s->bytes[CD_KIND_KV]},
        {"bytes_idx", s->bytes[CD_KIND_IDX]},
        {"bytes_kda", s->bytes[CD_KIND_KDA]},
        {"bytes_vis", s->bytes[CD_KIND_VIS]},
        {"blocks", s->blocks},
        {"tree_nodes", s->nodes},
        {"puts", s->puts},
        {"gets", s->gets},
        {"get_misses", s->get_misses},
        {"corrupt", s->corrupt},
        {"lookups", s->lookups},
        {"lookups_with_hit", s->lookup_hits},
        {"lookup_tokens", s->lookup_tokens},
        {"matched_tokens", s->hit_tokens},
        {"locates", s->locates},
        {"locate_keys", s->locate_keys},
        {"locate_hits", s->locate_hits},
        {"evicted_blocks", s->evicted_blocks},
        {"evicted_objects", s->evicted_objects},
        {"evicted_bytes", s->evicted_bytes},
        {"leases_active", s->leases_active},
        {"leases_granted", s->leases_granted},
        {"leases_released", s->leases_released},
        {"leases_expired", s->leases_expired},
        {"pins_active", s->pins_active},
        {"reservations_active", s->reservations_active},
        {"reservations_committed", s->reservations_committed},
        {"reservations_aborted", s->reservations_aborted},
        {"reservations_expired", s->reservations_expired},
        {"sessions_active", s->sessions_active},
        {"sessions_expired", s->sessions_expired},
        {"exhausted", s->exhausted},
        {"arena_committed_bytes", s->arena_committed},
        {"arena_used_bytes", s->arena_used},
        {"memory_used_bytes", s->memory_used},
        {"memory_limit_bytes", s->memory_limit},
        {"ring_epoch", cd_ring_epoch(d)}, /* members.h: the ring this node places by */
    };
    size_t n = sizeof(c) / sizeof(c[0]), m = 0;
    ssd_stats_t ss;
    cd_tier_counters_t tc;

    memset(&ss, 0, sizeof(ss));
    memset(&tc, 0, sizeof(tc));
    if (d->tier != NULL) {
        cd_tier_stats(d->tier, &ss, &tc);
    }
    /* The SSD tier's counters (daemon-wide), when there is a tier. */
    const cd_h_kv_t t[] = {
        {"ssd_objects_kv", ss.objects[SSD_KV]},
        {"ssd_objects_idx", ss.objects[SSD_IDX]},
        {"ssd_objects_kda", ss.objects[SSD_KDA]},
        {"ssd_objects_session", ss.objects[SSD_SESSION]},
        {"ssd_spill_bytes", ss.spill_bytes},
        {"ssd_spill_budget_bytes", ss.spill_budget},
        {"ssd_map_size_bytes", ss.map_size},
        {"ssd_map_used_bytes", ss.map_used},
        {"ssd_puts", ss.puts},
        {"ssd_durable_puts", ss.durable_puts},
        {"ssd_spills", ss.spills},
        {"ssd_spill_failed", ss.spill_failed + tc.spill_dropped},
        {"ssd_spill_clean", tc.spill_clean},
        {"ssd_writeback_objects", tc.writeback_objects},
        {"ssd_writeback_bytes", tc.writeback_bytes},
        {"ssd_writeback_failed", tc.writeback_failed},
        {"ssd_promotions", tc.promoted},
        {"ssd_promote_misses", tc.promote_misses},
        {"ssd_evictions", ss.evictions},
        {"ssd_corrupt", ss.corrupt},
        {"ssd_write_errors", ss.write_errors},
        {"ssd_map_full", ss.map_full},
        {"ssd_index_blocks", tc.t2_blocks},
        {"ssd_index_objects", tc.t2_objects},
        {"ssd_recovery_ms", tc.recovered_ms},
        {"ssd_recovered_objects", tc.recovered_objects},
        {"ssd_recovered_sessions", tc.recovered_sessions},
    };
    cd_rb_stats_t rs;
    size_t r = 0;
    st_status_t status;

    cd_rb_stats(d->rb, &rs);
    /* The rebalancer's (node-wide: membership changes move every tenant's objects). */
    const cd_h_kv_t rb[] = {
        {"rebalance_pending", rs.pending},
        {"rebalance_catalog", rs.catalog},
        {"rebalance_objects", rs.objects},
        {"rebalance_bytes", rs.bytes},
        {"rebalance_failed", rs.failed},
        {"rebalance_dropped", rs.dropped},
        {"rebalance_passes", rs.passes},
        {"rebalance_epoch", rs.epoch},
        {"rebalance_ring_epoch", cd_ring_epoch(d)},
        {"rebalance_last_pass_ms", rs.last_pass_ms},
        {"draining", (uint64_t)atomic_load(&d->draining)},
    };

    if (d->tier != NULL && node_wide) {
        m = sizeof(t) / sizeof(t[0]);
    }
    if (node_wide) {
        r = sizeof(rb) / sizeof(rb[0]);
    }
    resp->counters = srpc_ctx_alloc(ctx, sizeof(*resp->counters) * (n + m + r));
    if (resp->counters == NULL) {
        return ST_ERR_NOMEM;
    }
    status = cd_h_stats_put(ctx, resp, 0, c, n);
    if (status == ST_OK) {
        status = cd_h_stats_put(ctx, resp, n, t, m);
    }
    if (status == ST_OK) {
        status = cd_h_stats_put(ctx, resp, n + m, rb, r);
    }
    if (status != ST_OK) {
        return status;
    }
    resp->n_counters = n + m + r;
    return ST_OK;
}

/* Stats' names of the per-kind counters (docs/daemon.md, "Stats"): gets that
 * hit (DRAM or SSD), of those from the SSD tier, misses, by cd_kind_t. */
static const char *const cd_h_kind_get_names[5][3] = {
    {"get_hits_kv", "get_hits_ssd_kv", "get_misses_kv"},
    {"get_hits_idx", "get_hits_ssd_idx", "get_misses_idx"},
    {"get_hits_kda", "get_hits_ssd_kda", "get_misses_kda"},
    {"get_hits_session", "get_hits_ssd_session", "get_misses_session"},
    {"get_hits_vis", "get_hits_ssd_vis", "get_misses_vis"},
};
static const char *const cd_h_kind_lookup_names[CD_OBS_LOOKUP_KINDS][2] = {
    {"lookup_block_hits_kv", "lookup_block_misses_kv"},
    {"lookup_block_hits_vis", "lookup_block_misses_vis"},
};

/* Appends the per-kind hits and misses (cd_obs_kind_totals: the namespace's,
 * or every namespace's when all is set) to resp's counters. */
static st_status_t cd_h_stats_kinds(srpc_ctx_t *ctx, cd_daemon_t *d, uint32_t local, int all,
                                    Strata__V1__StatsResponse *resp)
{
    cd_h_kv_t c[5 * 3 + CD_OBS_LOOKUP_KINDS * 2];
    cd_obs_kinds_t t;
    size_t n = 0;

    cd_obs_kind_totals(d, all, local, &t);
    for (int k = 0; k < 5; k++) {
        c[n++] = (cd_h_kv_t){cd_h_kind_get_names[k][0],
                             t.gets[k][CD_OBS_GET_DRAM] + t.gets[k][CD_OBS_GET_SSD]};
        c[n++] = (cd_h_kv_t){cd_h_kind_get_names[k][1], t.gets[k][CD_OBS_GET_SSD]};
        c[n++] = (cd_h_kv_t){cd_h_kind_get_names[k][2], t.gets[k][CD_OBS_GET_MISS]};
    }
    for (int k = 0; k < CD_OBS_LOOKUP_KINDS; k++) {
        c[n++] = (cd_h_kv_t){cd_h_kind_lookup_names[k][0], t.lookup_blocks[k][0]};
        c[n++] = (cd_h_kv_t){cd_h_kind_lookup_names[k][1], t.lookup_blocks[k][1]};
    }
    return cd_h_stats_append(ctx, resp, c, n);
}

/* The process as the kernel sees it: resident bytes, open descriptors and
 * threads (node-wide only; a soak samples them, docs/testing.md "Soak"). */
static st_status_t cd_h_stats_process(srpc_ctx_t *ctx, int node_wide,
                                      Strata__V1__StatsResponse *resp)
{
    cm_proc_t ps;

    if (!node_wide) {
        return ST_OK;
    }
    (void)cm_proc_sample(&ps); /* a field it could not read is 0 */
    const cd_h_kv_t c[] = {
        {"process_rss_bytes", ps.ps_rss_bytes},
        {"process_open_fds", ps.ps_open_fds},
        {"process_threads", ps.ps_threads},
    };
    return cd_h_stats_append(ctx, resp, c, sizeof(c) / sizeof(c[0]));
}

/* The calls' numbers, per method (node-wide only: the calls are the node's,
 * every tenant's, not a tenant's to see). */
static st_status_t cd_h_stats_methods(srpc_ctx_t *ctx, cd_daemon_t *d, int node_wide,
                                      Strata__V1__StatsResponse *resp)
{
    srpc_method_stats_t ms[SRPC_CACHE_N_METHODS + 1];
    size_t nm = node_wide ? srpc_server_stats(d->server, ms, SRPC_CACHE_N_METHODS + 1) : 0;

    if (nm > SRPC_CACHE_N_METHODS + 1) {
        nm = SRPC_CACHE_N_METHODS + 1;
    }
    resp->methods = srpc_ctx_alloc(ctx, sizeof(*resp->methods) * (nm ? nm : 1));
    if (resp->methods == NULL) {
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < nm; i++) {
        Strata__V1__MethodStats *m = srpc_ctx_alloc(ctx, sizeof(*m));
        uint64_t *bounds = srpc_ctx_alloc(ctx, sizeof(uint64_t) * SRPC_LATENCY_BUCKETS);
        uint64_t *lat = srpc_ctx_alloc(ctx, sizeof(uint64_t) * SRPC_LATENCY_BUCKETS);
        uint64_t *codes = srpc_ctx_alloc(ctx, sizeof(uint64_t) * SRPC_GRPC_CODES);

        if (!m || !bounds || !lat || !codes) {
            return ST_ERR_NOMEM;
        }
        strata__v1__method_stats__init(m);
        m->method = (char *)ms[i].path;
        m->calls = ms[i].calls;
        memcpy(codes, ms[i].by_code, sizeof(uint64_t) * SRPC_GRPC_CODES);
        m->errors_by_code = codes;
        m->n_errors_by_code = SRPC_GRPC_CODES;
        memcpy(lat, ms[i].latency, sizeof(uint64_t) * SRPC_LATENCY_BUCKETS);
        m->latency_buckets = lat;
        m->n_latency_buckets = SRPC_LATENCY_BUCKETS;
        memcpy(bounds, srpc_latency_bounds_us, sizeof(uint64_t) * (SRPC_LATENCY_BUCKETS - 1));
        bounds[SRPC_LATENCY_BUCKETS - 1] = 0;
        m->bucket_upper_us = bounds;
        m->n_bucket_upper_us = SRPC_LATENCY_BUCKETS;
        m->latency_sum_us = ms[i].latency_sum_us;
        resp->methods[i] = m;
    }
    resp->n_methods = nm;
    return ST_OK;
}

st_status_t cd_h_stats(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__StatsRequest *req = (const void *)reqm;
    Strata__V1__StatsResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    int node_wide = cd_au_principal(ctx)->pr_kind == CD_PR_ANY;
    uint32_t local;
    cd_stats_t s;
    st_status_t status;

    status = cd_h_stats_scope(ctx, d, req, &local);
    if (status != ST_OK) {
        return status;
    }
    status = cd_store_stats(d->store, local, &s);
    if (status != ST_OK) {
        srpc_ctx_set_error(ctx, "no stats for namespace");
        return status;
    }
    status = cd_h_stats_counters(ctx, d, &s, node_wide, resp);
    if (status == ST_OK) {
        status = cd_h_stats_kinds(ctx, d, local, local == 0, resp);
    }
    if (status == ST_OK) {
        status = cd_h_stats_process(ctx, node_wide, resp);
    }
    if (status == ST_OK) {
        status = cd_h_stats_methods(ctx, d, node_wide, resp);
    }
    if (status != ST_OK) {
        return status;
    }
    resp->node_id = cd_h_strdup(ctx, d->cfg.node_id);
    resp->version = cd_h_strdup(ctx, CD_VERSION);
    if (resp->node_id == NULL || resp->version == NULL) {
        return ST_ERR_NOMEM;
    }
    resp->uptime_ms = cm_mono_ms() - d->started_ms;
    return ST_OK;
}
