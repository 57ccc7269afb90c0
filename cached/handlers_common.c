/*
 * handlers_common.c - the method table of stratad, the helpers of
 * handlers.h, and the Hello and Stats calls.
 */
#include "handlers.h"
#include "tier.h"

#include "dataplane.h"

#include <stdlib.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#include "st_log.h"
#include "st_utf8.h"

/* The handlers, in srpc_cache_method_id_t order. */
static const srpc_handler_fn cd_h_impl[SRPC_CACHE_N_METHODS] = {
    cd_h_hello,        cd_h_lookup,         cd_h_locate,      cd_h_reserve,
    cd_h_commit,       cd_h_abort,          cd_h_release,     cd_h_put,
    cd_h_get,          cd_h_delete,         cd_h_pin,         cd_h_unpin,
    cd_h_session_open, cd_h_session_append, cd_h_session_get, cd_h_session_close,
    cd_h_stats,        cd_h_cluster_lookup,
};

/* Every call goes through here: the handler, timed and counted. */
static st_status_t cd_h_dispatch(srpc_ctx_t *ctx, const ProtobufCMessage *req,
                                 ProtobufCMessage *resp, void *arg)
{
    int m = (int)(intptr_t)arg;
    struct timespec t0, t1;
    st_status_t status;

    clock_gettime(CLOCK_MONOTONIC, &t0);
    status = cd_h_impl[m](ctx, req, resp, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cd_obs_call(cd_h_daemon(ctx)->obs, m,
                (uint64_t)(t1.tv_sec - t0.tv_sec) * 1000000000ull + (uint64_t)t1.tv_nsec -
                    (uint64_t)t0.tv_nsec,
                status);
    return status;
}

#define CD_M(id)                                                          \
    {                                                                     \
        &srpc_cache_methods[id], cd_h_dispatch, (void *)(intptr_t)(id), 0 \
    }
/* Hello may come without metadata token (its body's auth_token), so it is
 * parsed before it is authenticated: its size is bounded tightly. */
#define CD_HELLO_MAX_BYTES (64u << 10)
const srpc_method_def_t cd_method_table[SRPC_CACHE_N_METHODS] = {
    {&srpc_cache_methods[SRPC_CACHE_HELLO], cd_h_dispatch, (void *)(intptr_t)SRPC_CACHE_HELLO,
     CD_HELLO_MAX_BYTES},
    CD_M(SRPC_CACHE_LOOKUP),
    CD_M(SRPC_CACHE_LOCATE),
    CD_M(SRPC_CACHE_RESERVE),
    CD_M(SRPC_CACHE_COMMIT),
    CD_M(SRPC_CACHE_ABORT),
    CD_M(SRPC_CACHE_RELEASE),
    CD_M(SRPC_CACHE_PUT),
    CD_M(SRPC_CACHE_GET),
    CD_M(SRPC_CACHE_DELETE),
    CD_M(SRPC_CACHE_PIN),
    CD_M(SRPC_CACHE_UNPIN),
    CD_M(SRPC_CACHE_OPEN_SESSION),
    CD_M(SRPC_CACHE_APPEND_SESSION),
    CD_M(SRPC_CACHE_GET_SESSION),
    CD_M(SRPC_CACHE_CLOSE_SESSION),
    CD_M(SRPC_CACHE_STATS),
    CD_M(SRPC_CACHE_CLUSTER_LOOKUP),
};
#undef CD_M
const size_t cd_method_table_len = SRPC_CACHE_N_METHODS;

/* ------------------------------------------------------------ helpers -- */

st_status_t cd_h_auth(srpc_ctx_t *ctx, cd_daemon_t *d)
{
    const cd_principal_t *pr = cd_au_principal(ctx);

    (void)d;
    if (pr->pr_kind == CD_PR_NONE) {
        srpc_ctx_set_error(ctx, "this node requires a token (authorization: Bearer <token>)");
        return ST_ERR_UNAUTHENTICATED;
    }
    if (pr->pr_kind == CD_PR_TENANT && atomic_load(&pr->pr_tenant->tn_removed)) {
        srpc_ctx_set_error(ctx, "token refused: it belongs to no tenant of this node");
        return ST_ERR_UNAUTHENTICATED;
    }
    return ST_OK;
}

st_status_t cd_h_ns(srpc_ctx_t *ctx, cd_daemon_t *d, uint64_t wire_id, cd_ns_entry_t **e_p)
{
    st_status_t status = cd_h_auth(ctx, d);
    cd_ns_entry_t *e;

    if (status != ST_OK) {
        return status;
    }
    e = cd_daemon_ns_find(d, wire_id);
    /* Another tenant's namespace answers as an unknown one: its existence is not told. */
    if (e == NULL || !cd_au_may_tenant(cd_au_principal(ctx), e->tenant)) {
        srpc_ctx_set_error(ctx, "unknown namespace_id=%llu on node %s: call Hello first",
                           (unsigned long long)wire_id, d->cfg.node_id);
        return ST_ERR_NOT_FOUND;
    }
    *e_p = e;
    return ST_OK;
}

int cd_h_kind(Strata__V1__ObjectKind kind)
{
    switch (kind) {
    case STRATA__V1__OBJECT_KIND__KV: return CD_KIND_KV;
    case STRATA__V1__OBJECT_KIND__IDX: return CD_KIND_IDX;
    case STRATA__V1__OBJECT_KIND__KDA: return CD_KIND_KDA;
    case STRATA__V1__OBJECT_KIND__SESSION: return CD_KIND_SESSION;
    case STRATA__V1__OBJECT_KIND__VIS: return CD_KIND_VIS;
    default: return -1;
    }
}

st_status_t cd_h_key(const Strata__V1__ObjectKey *k, cd_key_t *out)
{
    int kind;

    if (k == NULL || k->block_hash.len != ST_HASH_BYTES) {
        return ST_ERR_INVALID;
    }
    kind = cd_h_kind(k->kind);
    if (kind < 0 || kind == CD_KIND_SESSION || k->layer >= CD_LAYERS_MAX) {
        return ST_ERR_INVALID;
    }
    memcpy(out->hash.b, k->block_hash.data, ST_HASH_BYTES);
    out->kind = (uint32_t)kind;
    out->layer = k->layer;
    return ST_OK;
}

size_t cd_h_grid_cells(const Strata__V1__KeyGrid *g)
{
    if (g == NULL) {
        return 0;
    }
    return g->block_hashes.len / ST_HASH_BYTES * g->n_kinds * g->n_layers;
}

st_status_t cd_h_grid(srpc_ctx_t *ctx, const Strata__V1__KeyGrid *g, cd_key_t *keys, size_t *n,
                      size_t cap)
{
    size_t nb;

    if (g == NULL || g->block_hashes.len == 0) {
        return ST_OK;
    }
    if (g->block_hashes.len % ST_HASH_BYTES != 0 || g->n_kinds == 0 || g->n_layers == 0) {
        srpc_ctx_set_error(ctx,
                           "grid: block_hashes must be n x 16 bytes (got %zu) and kinds "
                           "and layers non-empty",
                           g->block_hashes.len);
        return ST_ERR_INVALID;
    }
    nb = g->block_hashes.len / ST_HASH_BYTES;
    for (size_t b = 0; b < nb; b++) {
        for (size_t k = 0; k < g->n_kinds; k++) {
            int kind = cd_h_kind(g->kinds[k]);

            if (kind < 0 || kind == CD_KIND_SESSION ||
                (kind != CD_KIND_KV && kind != CD_KIND_IDX &&
                 (g->n_layers != 1 || g->layers[0] != 0))) {
                srpc_ctx_set_error(ctx, "grid: kind %d is invalid or has layers other than [0]",
                                   (int)g->kinds[k]);
                return ST_ERR_INVALID;
            }
            for (size_t l = 0; l < g->n_layers; l++) {
                if (*n >= cap || g->layers[l] >= CD_LAYERS_MAX) {
                    srpc_ctx_set_error(ctx, "grid: too many cells or layer %u >= %d", g->layers[l],
                                       CD_LAYERS_MAX);
                    return ST_ERR_INVALID;
                }
                memcpy(keys[*n].hash.b, g->block_hashes.data + b * ST_HASH_BYTES, ST_HASH_BYTES);
                keys[*n].kind = (uint32_t)kind;
                keys[*n].layer = g->layers[l];
                (*n)++;
            }
        }
    }
    return ST_OK;
}

Strata__V1__KeyStatus cd_h_key_status(st_status_t status)
{
    switch (status) {
    case ST_OK: return STRATA__V1__KEY_STATUS__KEY_OK;
    case ST_ERR_NOT_FOUND: return STRATA__V1__KEY_STATUS__KEY_NOT_FOUND;
    case ST_ERR_EXISTS: return STRATA__V1__KEY_STATUS__KEY_EXISTS;
    case ST_ERR_EXHAUSTED:
    case ST_ERR_NOMEM: return STRATA__V1__KEY_STATUS__KEY_EXHAUSTED;
    case ST_ERR_CORRUPT: return STRATA__V1__KEY_STATUS__KEY_CORRUPT;
    case ST_ERR_BUSY: return STRATA__V1__KEY_STATUS__KEY_BUSY;
    case ST_ERR_TIMEOUT: return STRATA__V1__KEY_STATUS__KEY_EXPIRED;
    default: return STRATA__V1__KEY_STATUS__KEY_INVALID;
    }
}

Strata__V1__Locations *cd_h_locations(srpc_ctx_t *ctx, size_t n)
{
    Strata__V1__Locations *l = srpc_ctx_alloc(ctx, sizeof(*l));

    if (l == NULL) {
        return NULL;
    }
    strata__v1__locations__init(l);
    if (n == 0) {
        return l;
    }
    l->state = srpc_ctx_alloc(ctx, sizeof(*l->state) * n);
    l->region_id = srpc_ctx_alloc(ctx, sizeof(*l->region_id) * n);
    l->offset = srpc_ctx_alloc(ctx, sizeof(*l->offset) * n);
    l->length = srpc_ctx_alloc(ctx, sizeof(*l->length) * n);
    l->checksum = srpc_ctx_alloc(ctx, sizeof(*l->checksum) * n);
    l->generation = srpc_ctx_alloc(ctx, sizeof(*l->generation) * n);
    l->row_bytes = srpc_ctx_alloc(ctx, sizeof(*l->row_bytes) * n);
    l->row_group = srpc_ctx_alloc(ctx, sizeof(*l->row_group) * n);
    if (!l->state || !l->region_id || !l->offset || !l->length || !l->checksum || !l->generation ||
        !l->row_bytes || !l->row_group) {
        return NULL;
    }
    l->n_state = l->n_region_id = l->n_offset = l->n_length = l->n_checksum = l->n_generation =
        l->n_row_bytes = l->n_row_group = n;
    return l;
}

void cd_h_location_set(Strata__V1__Locations *l, size_t i, Strata__V1__ObjectState state,
                       const cd_location_t *where)
{
    l->state[i] = state;
    if (where != NULL && state != STRATA__V1__OBJECT_STATE__OBJECT_MISSING) {
        l->region_id[i] = where->region;
        l->offset[i] = where->offset;
        l->length[i] = where->length;
        l->checksum[i] = where->checksum;
        l->generation[i] = where->generation;
        l->row_bytes[i] = where->row_bytes;
        l->row_group[i] = where->row_group;
        if (l->row_sums != NULL && i < l->n_row_sums && where->rowsum != NULL) {
            l->row_sums[i].data = (uint8_t *)where->rowsum;
            l->row_sums[i].len = where->n_rowsum * 8;
        }
    }
}

const st_hash_t *cd_h_hashes(srpc_ctx_t *ctx, const ProtobufCBinaryData *b, size_t *n_p,
                             const char *field)
{
    static const st_hash_t none;

    if (b->len % ST_HASH_BYTES != 0) {
        srpc_ctx_set_error(ctx, "%s: %zu bytes is not a multiple of 16 (packed block hashes)",
                           field, b->len);
        return NULL;
    }
    *n_p = b->len / ST_HASH_BYTES;
    /* protobuf-c gives bytes fields no particular alignment; st_hash_t needs none. */
    return b->len ? (const st_hash_t *)(const void *)b->data : &none;
}

st_status_t cd_h_fail(srpc_ctx_t *ctx, st_status_t status, const cd_err_t *err)
{
    srpc_ctx_set_error(ctx, "%s", err->msg[0] ? err->msg : st_strerror(status));
    return status;
}

/* -------------------------------------------------------------- Hello -- */

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

st_status_t cd_h_hello(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__HelloRequest *req = (const void *)reqm;
    Strata__V1__HelloResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    const char *tenant = req->tenant && req->tenant[0] ? req->tenant : "default";
    const char *model = req->model && req->model[0] ? req->model : "default";
    cd_principal_t pr = *cd_au_principal(ctx);
    cd_region_t *regions;
    cd_ns_entry_t *e;
    cd_err_t err = {""};
    Strata__V1__Limits *lim;
    uint32_t nr;
    long bad_tenant, bad_model;
    st_status_t status;

    /* Hello may carry the token in auth_token instead of the metadata; when
     * both are present they must match. */
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
            memset(&pr, 0, sizeof(pr));
            status =
                cd_au_authenticate(d, srpc_ctx_method(ctx), req->auth_token, srpc_ctx_peer(ctx),
                                   srpc_ctx_peer_identity(ctx), &pr, why, sizeof(why));
            if (status != ST_OK) {
                srpc_ctx_set_error(ctx, "%s", why);
                return status;
            }
        }
    }
    if (pr.pr_kind == CD_PR_NONE) {
        srpc_ctx_set_error(ctx, "this node requires a token (authorization: Bearer <token>)");
        return ST_ERR_UNAUTHENTICATED;
    }
    if (pr.pr_kind == CD_PR_PEER) {
        srpc_ctx_set_error(ctx, "the cluster credential opens no namespace");
        return ST_ERR_PERMISSION;
    }
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
    bad_tenant = st_utf8_bad_byte(tenant, 1);
    bad_model = st_utf8_bad_byte(model, 1);
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
    if (pr.pr_kind == CD_PR_TENANT) {
        const cd_tn_tenant_t *t = pr.pr_tenant;

        if (req->tenant == NULL || req->tenant[0] == '\0') {
            tenant = t->tn_name; /* a tenant's token names its tenant */
        }
        if (!cd_au_may_tenant(&pr, tenant)) {
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
    status = cd_daemon_ns_open(d, tenant, model, req->block_tokens, &e, &err);
    if (status != ST_OK) {
        return cd_h_fail(ctx, status, &err);
    }

    resp->protocol_version = 1;
    resp->node_id = cd_h_strdup(ctx, d->cfg.node_id);
    resp->version = cd_h_strdup(ctx, CD_VERSION);
    resp->transport = (Strata__V1__TransportKind)cd_dp_kind(d->dp);
    resp->committed_read_only = cd_dp_committed_read_only(d->dp);
    resp->transport_call_key.data = srpc_ctx_alloc(ctx, CD_DP_CALL_KEY);
    if (resp->transport_call_key.data == NULL) {
        return ST_ERR_NOMEM;
    }
    /* A client id and a transport key per Hello, bound to its principal (auth.h). */
    resp->client_id = cd_au_random64();
    resp->transport_calls = cd_dp_serves_calls(d->dp, NULL);
    if (resp->client_id == 0 ||
        (resp->transport_calls &&
         cd_au_key_issue(&d->auth, &pr, resp->client_id, resp->transport_call_key.data) != ST_OK)) {
        srpc_ctx_set_error(ctx, "no randomness for the client id or transport key");
        return ST_ERR_INTERNAL;
    }
    resp->transport_call_key.len = resp->transport_calls ? CD_DP_CALL_KEY : 0;
    if (d->dp != NULL && cd_dp_address(d->dp, cd_h_alloc, ctx, &resp->transport_address.data,
                                       &resp->transport_address.len) != ST_OK) {
        return ST_ERR_NOMEM;
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

    resp->peers = srpc_ctx_alloc(ctx, sizeof(*resp->peers) * (d->n_peers ? d->n_peers : 1));
    if (resp->peers == NULL) {
        return ST_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < d->n_peers; i++) {
        Strata__V1__Peer *p = srpc_ctx_alloc(ctx, sizeof(*p));

        if (p == NULL) {
            return ST_ERR_NOMEM;
        }
        strata__v1__peer__init(p);
        p->node_id = d->peer_list[i];
        p->address = d->peer_list[i];
        p->vnodes = (uint32_t)d->cfg.vnodes;
        resp->peers[i] = p;
    }
    resp->n_peers = d->n_peers;
    st_debug("hello tenant=%s model=%s ns=%llu peer=%s", tenant, model,
             (unsigned long long)e->wire_id, srpc_ctx_peer(ctx));
    return ST_OK;
}

/* -------------------------------------------------------------- Stats -- */

typedef struct cd_h_kv {
    const char *name;
    uint64_t value;
} cd_h_kv_t;

st_status_t cd_h_stats(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                       void *arg)
{
    const Strata__V1__StatsRequest *req = (const void *)reqm;
    Strata__V1__StatsResponse *resp = (void *)respm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    srpc_method_stats_t ms[SRPC_CACHE_N_METHODS + 1];
    int node_wide = cd_au_principal(ctx)->pr_kind == CD_PR_ANY;
    uint32_t local = 0;
    cd_stats_t s;
    size_t nm;
    st_status_t status;

    if (req->namespace_id != 0) {
        cd_ns_entry_t *e;

        status = cd_h_ns(ctx, d, req->namespace_id, &e);
        if (status != ST_OK) {
            return status;
        }
        local = e->local_id;
    } else if ((status = cd_h_auth(ctx, d)) != ST_OK) {
        return status;
    } else if (cd_au_principal(ctx)->pr_kind != CD_PR_ANY) {
        /* Node-wide numbers sum every tenant's: a tenant asks per namespace. */
        srpc_ctx_set_error(ctx, "Stats without a namespace_id is node-wide: a tenant's token "
                                "asks for its own namespace_id");
        return ST_ERR_PERMISSION;
    }
    status = cd_store_stats(d->store, local, &s);
    if (status != ST_OK) {
        srpc_ctx_set_error(ctx, "no stats for namespace");
        return status;
    }
    {
        const cd_h_kv_t c[] = {
            {"objects_kv", s.objects[CD_KIND_KV]},
            {"objects_idx", s.objects[CD_KIND_IDX]},
            {"objects_kda", s.objects[CD_KIND_KDA]},
            {"objects_vis", s.objects[CD_KIND_VIS]},
            {"bytes_kv", s.bytes[CD_KIND_KV]},
            {"bytes_idx", s.bytes[CD_KIND_IDX]},
            {"bytes_kda", s.bytes[CD_KIND_KDA]},
            {"bytes_vis", s.bytes[CD_KIND_VIS]},
            {"blocks", s.blocks},
            {"tree_nodes", s.nodes},
            {"puts", s.puts},
            {"gets", s.gets},
            {"get_misses", s.get_misses},
            {"corrupt", s.corrupt},
            {"lookups", s.lookups},
            {"lookups_with_hit", s.lookup_hits},
            {"lookup_tokens", s.lookup_tokens},
            {"matched_tokens", s.hit_tokens},
            {"locates", s.locates},
            {"locate_keys", s.locate_keys},
            {"locate_hits", s.locate_hits},
            {"evicted_blocks", s.evicted_blocks},
            {"evicted_objects", s.evicted_objects},
            {"evicted_bytes", s.evicted_bytes},
            {"leases_active", s.leases_active},
            {"leases_granted", s.leases_granted},
            {"leases_released", s.leases_released},
            {"leases_expired", s.leases_expired},
            {"pins_active", s.pins_active},
            {"reservations_active", s.reservations_active},
            {"reservations_committed", s.reservations_committed},
            {"reservations_aborted", s.reservations_aborted},
            {"reservations_expired", s.reservations_expired},
            {"sessions_active", s.sessions_active},
            {"sessions_expired", s.sessions_expired},
            {"exhausted", s.exhausted},
            {"arena_committed_bytes", s.arena_committed},
            {"arena_used_bytes", s.arena_used},
            {"memory_used_bytes", s.memory_used},
            {"memory_limit_bytes", s.memory_limit},
        };
        size_t n = sizeof(c) / sizeof(c[0]), m = 0;
        st_ssd_stats_t ss;
        cd_tier_counters_t tc;

        memset(&ss, 0, sizeof(ss));
        memset(&tc, 0, sizeof(tc));
        if (d->tier != NULL) {
            cd_tier_stats(d->tier, &ss, &tc);
        }
        /* The SSD tier's counters (daemon-wide), when there is a tier. */
        const cd_h_kv_t t[] = {
            {"ssd_objects_kv", ss.objects[ST_SSD_KV]},
            {"ssd_objects_idx", ss.objects[ST_SSD_IDX]},
            {"ssd_objects_kda", ss.objects[ST_SSD_KDA]},
            {"ssd_objects_session", ss.objects[ST_SSD_SESSION]},
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

        if (d->tier != NULL && node_wide) {
            m = sizeof(t) / sizeof(t[0]);
        }
        resp->counters = srpc_ctx_alloc(ctx, sizeof(*resp->counters) * (n + m));
        if (resp->counters == NULL) {
            return ST_ERR_NOMEM;
        }
        for (size_t i = 0; i < n + m; i++) {
            Strata__V1__StatsResponse__CountersEntry *ce = srpc_ctx_alloc(ctx, sizeof(*ce));
            const cd_h_kv_t *kv = i < n ? &c[i] : &t[i - n];

            if (ce == NULL) {
                return ST_ERR_NOMEM;
            }
            strata__v1__stats_response__counters_entry__init(ce);
            ce->key = (char *)kv->name;
            ce->value = kv->value;
            resp->counters[i] = ce;
        }
        resp->n_counters = n + m;
    }

    /* The calls and the SSD tier are the node's, every tenant's: not a tenant's to see. */
    nm = node_wide ? srpc_server_stats(d->server, ms, SRPC_CACHE_N_METHODS + 1) : 0;
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
    resp->node_id = cd_h_strdup(ctx, d->cfg.node_id);
    resp->version = cd_h_strdup(ctx, CD_VERSION);
    if (resp->node_id == NULL || resp->version == NULL) {
        return ST_ERR_NOMEM;
    }
    {
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        resp->uptime_ms =
            (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000 - d->started_ms;
    }
    return ST_OK;
}
