/*
 * handlers_session.c - the session calls of strata.v1.Cache: OpenSession,
 * AppendSession, GetSession and CloseSession.
 *
 * A session id is 16 bytes, chosen by the client (so that every replica of a
 * session holds it under the same id) or, when the client sends none, by
 * the daemon. Records live in the store's session table of the namespace.
 */
#include "handlers.h"
#include "rebalance.h"
#include "tier.h"

#include <string.h>
#include <time.h>

#include "clock.h"
#include "fault.h"
#include "log.h"

/* Converts a store (monotonic) time to wall-clock ms since the epoch. */
static uint64_t cd_h_unix_ms(cd_daemon_t *d, uint64_t store_ms)
{
    uint64_t now_unix = cm_real_ms(), now_store = cd_store_now(d->store);

    return now_unix - (now_store > store_ms ? now_store - store_ms : 0);
}

/* Fills resp with rec; durable: this call committed rec to the SSD tier. */
static st_status_t cd_h_session_fill(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_ns_info_t *info,
                                     const cd_session_t *rec, int durable,
                                     Strata__V1__SessionResponse *resp)
{
    Strata__V1__SessionInfo *si = srpc_ctx_alloc(ctx, sizeof(*si));
    uint8_t *id = srpc_ctx_alloc(ctx, ST_HASH_BYTES);
    uint8_t *head = srpc_ctx_alloc(ctx, ST_HASH_BYTES);
    char *tenant = srpc_ctx_alloc(ctx, sizeof(info->tenant));
    char *model = srpc_ctx_alloc(ctx, sizeof(info->model));

    if (!si || !id || !head || !tenant || !model) {
        return ST_ERR_NOMEM;
    }
    strata__v1__session_info__init(si);
    memcpy(id, rec->id.b, ST_HASH_BYTES);
    memcpy(head, rec->head.b, ST_HASH_BYTES);
    memcpy(tenant, info->tenant, sizeof(info->tenant));
    memcpy(model, info->model, sizeof(info->model));
    si->session_id.data = id;
    si->session_id.len = ST_HASH_BYTES;
    si->head_hash.data = head;
    si->head_hash.len = ST_HASH_BYTES;
    si->tenant = tenant;
    si->model = model;
    si->length = rec->length;
    si->version = rec->version;
    si->created_unix_ms = cd_h_unix_ms(d, rec->created_ms);
    si->updated_unix_ms = cd_h_unix_ms(d, rec->updated_ms);
    si->ttl_ms = (uint32_t)(rec->ttl_ms > UINT32_MAX ? UINT32_MAX : rec->ttl_ms);
    si->durable = durable != 0;
    resp->session = si;
    return ST_OK;
}

/* Writes the record through to the SSD tier, if there is one: with durable,
 * after the commit; a durable write that fails fails the call. */
static st_status_t cd_h_session_store(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_ns_entry_t *e,
                                      const cd_session_t *rec, int durable)
{
    cd_err_t err = {""};
    st_status_t status;

    if (d->tier == NULL) {
        return ST_OK;
    }
    status = cd_tier_session_put(d->tier, e->wire_id, rec, durable, &err);
    if (status != ST_OK && durable) {
        lg_warn_ratelimited("durable session write refused: %s", err.msg);
        srpc_ctx_set_error(ctx, "%s", err.msg);
        return status;
    }
    if (status != ST_OK) {
        lg_warn_ratelimited("session write-through not queued: %s", err.msg);
    }
    return ST_OK;
}

/* What a session request names: its namespace and the session id, where it has one. */
typedef struct cd_h_sreq {
    cd_ns_entry_t *e;
    cd_ns_info_t info;
    st_hash_t id;
    int has_id;
} cd_h_sreq_t;

/* Resolves the namespace and the session id of a request. */
static st_status_t cd_h_session_begin(srpc_ctx_t *ctx, cd_daemon_t *d, uint64_t ns_wire,
                                      const ProtobufCBinaryData *sid, int may_be_empty,
                                      cd_h_sreq_t *s)
{
    st_status_t status = cd_h_ns(ctx, d, ns_wire, &s->e);
    char epoch[24];

    /* Every answer, a miss too, says which ring this node places by: a client
     * behind it reads the members again (client/session.c). */
    snprintf(epoch, sizeof(epoch), "%llu", (unsigned long long)cd_ring_epoch(d));
    srpc_ctx_set_trailer(ctx, SRPC_RING_EPOCH_KEY, epoch);
    if (status != ST_OK) {
        return status;
    }
    s->has_id = sid->len == ST_HASH_BYTES;
    if (!s->has_id && !(may_be_empty && sid->len == 0)) {
        srpc_ctx_set_error(ctx, "session_id must be 16 bytes, got %zu", sid->len);
        return ST_ERR_INVALID;
    }
    if (s->has_id) {
        memcpy(s->id.b, sid->data, ST_HASH_BYTES);
    }
    return cd_store_ns_info(d->store, s->e->local_id, &s->info);
}

/* The reply of an open or an append that the store answered with status: the record
 * stored (durable: on the tier before the reply) and filled into resp. */
static st_status_t cd_h_session_reply(srpc_ctx_t *ctx, cd_daemon_t *d, const cd_h_sreq_t *s,
                                      st_status_t status, const cd_err_t *err,
                                      const cd_session_t *rec, int durable, void *resp)
{
    if (status != ST_OK) {
        return cd_h_fail(ctx, status, err);
    }
    if ((status = cd_h_session_store(ctx, d, s->e, rec, durable)) != ST_OK) {
        return status;
    }
    cd_h_note_session(d, s->e, &rec->id); /* moved when members change */
    return cd_h_session_fill(ctx, d, &s->info, rec, durable, resp);
}

static st_status_t cd_h_check_ttl(srpc_ctx_t *ctx, cd_daemon_t *d, uint32_t ttl_ms)
{
    if (ttl_ms != 0 && ttl_ms < 1000) {
        srpc_ctx_set_error(ctx, "ttl_ms=%u is below the minimum of 1000", ttl_ms);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

static st_status_t cd_h_session_durable(srpc_ctx_t *ctx, cd_daemon_t *d, int durable)
{
    if (durable && d->tier == NULL) {
        srpc_ctx_set_error(ctx, "durable session on node %s, which has no SSD tier (data_dir)",
                           d->cfg.node_id);
        return ST_ERR_UNSUPPORTED;
    }
    return ST_OK;
}

st_status_t cd_h_session_open(srpc_ctx_t *ctx, const ProtobufCMessage *reqm,
                              ProtobufCMessage *respm, void *arg)
{
    const Strata__V1__OpenSessionRequest *req = (const void *)reqm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_h_sreq_t s;
    cd_session_t rec;
    cd_err_t err = {""};
    st_status_t status;

    status = cd_h_session_begin(ctx, d, req->namespace_id, &req->session_id, 1, &s);
    if (status != ST_OK || (status = cd_h_check_ttl(ctx, d, req->ttl_ms)) != ST_OK ||
        (status = cd_h_session_durable(ctx, d, req->durable)) != ST_OK) {
        return status;
    }
    status = cd_store_session_open(d->store, s.e->local_id, s.has_id ? &s.id : NULL, req->ttl_ms,
                                   &rec, &err);
    return cd_h_session_reply(ctx, d, &s, status, &err, &rec, req->durable, respm);
}

st_status_t cd_h_session_append(srpc_ctx_t *ctx, const ProtobufCMessage *reqm,
                                ProtobufCMessage *respm, void *arg)
{
    const Strata__V1__AppendSessionRequest *req = (const void *)reqm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_h_sreq_t s;
    cd_session_t rec;
    cd_err_t err = {""};
    st_hash_t head;
    uint64_t length;
    st_status_t status;

    status = cd_h_session_begin(ctx, d, req->namespace_id, &req->session_id, 0, &s);
    if (status != ST_OK || (status = cd_h_session_durable(ctx, d, req->durable)) != ST_OK) {
        return status;
    }
    if (req->head_hash.len != ST_HASH_BYTES) {
        srpc_ctx_set_error(ctx, "head_hash must be 16 bytes, got %zu", req->head_hash.len);
        return ST_ERR_INVALID;
    }
    memcpy(head.b, req->head_hash.data, ST_HASH_BYTES);
    length = req->length;
    if (cd_fault_armed("stale-session") &&
        cd_store_session_get(d->store, s.e->local_id, &s.id, &rec) == ST_OK) {
        head = rec.head; /* the planted fault (fault.h): acknowledge, keep the old record */
        length = rec.length;
    }
    status = cd_store_session_append(d->store, s.e->local_id, &s.id, &head, length,
                                     req->expected_version, &rec, &err);
    return cd_h_session_reply(ctx, d, &s, status, &err, &rec, req->durable, respm);
}

st_status_t cd_h_session_get(srpc_ctx_t *ctx, const ProtobufCMessage *reqm, ProtobufCMessage *respm,
                             void *arg)
{
    const Strata__V1__GetSessionRequest *req = (const void *)reqm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_h_sreq_t s;
    cd_session_t rec;
    st_status_t status;

    status = cd_h_session_begin(ctx, d, req->namespace_id, &req->session_id, 0, &s);
    if (status != ST_OK) {
        return status;
    }
    status = cd_store_session_get(d->store, s.e->local_id, &s.id, &rec);
    if (status == ST_OK || status == ST_ERR_NOT_FOUND) {
        cd_obs_get(s.e->mx, CD_KIND_SESSION, status == ST_OK ? CD_OBS_GET_DRAM : CD_OBS_GET_MISS);
    }
    if (status != ST_OK) {
        srpc_ctx_set_error(ctx, "no such session on node %s", d->cfg.node_id);
        return status;
    }
    return cd_h_session_fill(ctx, d, &s.info, &rec, 0, (void *)respm);
}

st_status_t cd_h_session_close(srpc_ctx_t *ctx, const ProtobufCMessage *reqm,
                               ProtobufCMessage *respm, void *arg)
{
    const Strata__V1__CloseSessionRequest *req = (const void *)reqm;
    cd_daemon_t *d = cd_h_daemon(ctx);
    cd_h_sreq_t s;
    st_status_t status;

    status = cd_h_session_begin(ctx, d, req->namespace_id, &req->session_id, 0, &s);
    if (status != ST_OK) {
        return status;
    }
    status = cd_store_session_close(d->store, s.e->local_id, &s.id);
    cd_rb_forget(d->rb, s.e->wire_id, CD_KIND_SESSION, &s.id, 0);
    if (d->tier != NULL) {
        cd_tier_session_delete(d->tier, s.e->wire_id, &s.id);
    }
    if (status != ST_OK) {
        srpc_ctx_set_error(ctx, "no such session on node %s", d->cfg.node_id);
    }
    return status;
}
