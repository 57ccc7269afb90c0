/*
 * session.c - sessions: records of multi-turn conversations, kept on
 * `replicas` nodes of the ring. A session's string id is hashed to the
 * 16-byte protocol id (XXH3-128 of "strata-session-v1" || id), which also
 * places it. Writes go to every live replica; a read asks them all and keeps
 * the record with the highest version, so a replica that missed an append
 * while it was down cannot serve an older head.
 *
 * A durable write (ST_SESSION_DURABLE) asks each replica to commit the record
 * to its SSD tier before answering, and succeeds only when write_quorum of
 * the R replicas did: a replica that is down, or has no SSD tier (it answers
 * UNSUPPORTED), does not count, and fewer than W is ST_ERR_PARTIAL.
 */
#include "client_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "clock.h"

#define SC_SESSION_REPLICAS_MAX 16

static st_status_t sc_session_id(const char *id, st_hash_t *out)
{
    XXH3_state_t st;
    XXH128_hash_t h;
    size_t len;

    if (id == NULL || (len = strlen(id)) == 0 || len > 63) {
        return sc_error(ST_ERR_INVALID, "session id must be 1..63 bytes");
    }
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, "strata-session-v1", 17);
    XXH3_128bits_update(&st, id, len);
    h = XXH3_128bits_digest(&st);
    for (int i = 0; i < 8; i++) {
        out->b[i] = (uint8_t)(h.low64 >> (8 * i));
        out->b[8 + i] = (uint8_t)(h.high64 >> (8 * i));
    }
    return ST_OK;
}

/* Hashes the session id into *sid and names it, in the client's namespace, in the
 * request's fields ns and sid_field (which point into *sid). */
static st_status_t sc_session_req(const st_client_t *c, const char *id, st_hash_t *sid,
                                  uint64_t *ns, ProtobufCBinaryData *sid_field)
{
    st_status_t status = sc_session_id(id, sid);

    if (status == ST_OK) {
        *ns = c->ns;
        sid_field->data = sid->b;
        sid_field->len = ST_HASH_BYTES;
    }
    return status;
}

static size_t sc_session_nodes(st_client_t *c, const st_hash_t *sid, uint32_t *nodes)
{
    size_t r = c->replicas < SC_SESSION_REPLICAS_MAX ? c->replicas : SC_SESSION_REPLICAS_MAX;

    return ring_place(&c->ring, sid, nodes, r);
}

static void sc_session_info(const char *id, const Strata__V1__SessionInfo *si,
                            st_session_info_t *info)
{
    memset(info, 0, sizeof(*info));
    snprintf(info->id, sizeof(info->id), "%s", id);
    if (si->head_hash.len == ST_HASH_BYTES) {
        memcpy(info->head.b, si->head_hash.data, ST_HASH_BYTES);
    }
    info->length = si->length;
    info->created_ms = si->created_unix_ms;
    info->updated_ms = si->updated_unix_ms;
    info->ttl_ms = si->ttl_ms;
}

/* Sends req (of method m) to every replica, one request for them all; keeps the answer with the
 * highest version. quorum: the replicas that must answer OK (1 for a write
 * that is not durable, and for reads); with durable, an OK counts only when
 * its SessionInfo says the record is on the node's disk. Returns ST_OK if at least quorum
 * replicas answered OK; ST_ERR_PARTIAL if some did, but fewer; else the first
 * replica's error. *result (may be NULL) gets the counts. */
static st_status_t sc_session_once(st_client_t *c, const char *id, const st_hash_t *sid, int m,
                                   const ProtobufCMessage *req, st_session_info_t *info,
                                   int durable, uint32_t quorum, st_write_result_t *result,
                                   int timeout_ms, int *behind)
{
    uint32_t nodes[SC_SESSION_REPLICAS_MAX];
    srpc_fanout_item_t items[SC_SESSION_REPLICAS_MAX];
    size_t n = sc_session_nodes(c, sid, nodes);
    uint32_t want = c->replicas < c->n_nodes ? c->replicas : c->n_nodes; /* R as placed */
    const Strata__V1__SessionInfo *best = NULL;
    st_status_t first = ST_ERR_UNAVAILABLE;
    uint32_t ok = 0, nondurable = 0;
    char failed[256] = "";
    size_t fl = 0;
    st_status_t status;

    want = want < SC_SESSION_REPLICAS_MAX ? want : SC_SESSION_REPLICAS_MAX;
    if (result != NULL) {
        result->replicas = want;
        result->quorum = quorum;
        result->written = 0;
    }
    if (n == 0) {
        return sc_error(ST_ERR_UNAVAILABLE, "session %s: every replica is down", id);
    }
    memset(items, 0, sizeof(items));
    for (size_t i = 0; i < n; i++) {
        items[i].ch = c->nodes[nodes[i]].ch;
        items[i].req = req;
    }
    status = srpc_fanout(&srpc_cache_methods[m], items, n, timeout_ms);
    if (status != ST_OK) {
        return sc_error(status, "session %s: out of memory", id);
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].err.ring_epoch > __atomic_load_n(&c->ring_epoch, __ATOMIC_ACQUIRE)) {
            *behind = 1; /* this node places by a newer ring than ours */
        }
        if (items[i].status != ST_OK) {
            sc_node_failed(c, nodes[i], items[i].status, &items[i].err);
            if (ok == 0 && first == ST_ERR_UNAVAILABLE) {
                first = sc_error(items[i].status, "session %s on %s: %s", id,
                                 c->nodes[nodes[i]].addr, items[i].err.message);
            }
            if (fl < sizeof(failed)) {
                int w = snprintf(failed + fl, sizeof(failed) - fl, " %s (%s: %s)",
                                 c->nodes[nodes[i]].addr, st_status_name(items[i].status),
                                 items[i].err.message);

                fl += w > 0 ? (size_t)w : 0;
            }
            continue;
        }
        if (m != SRPC_CACHE_CLOSE_SESSION) {
            const Strata__V1__SessionResponse *r = (const void *)items[i].resp;

            if (r->session != NULL && (best == NULL || r->session->version > best->version)) {
                best = r->session;
            }
            if (durable && (r->session == NULL || !r->session->durable)) {
                /* Answered OK without saying the record is on its disk (a daemon
                 * that ignored durable): not a durable replica. */
                if (fl < sizeof(failed)) {
                    int w = snprintf(failed + fl, sizeof(failed) - fl,
                                     " %s (answered, but not durably)", c->nodes[nodes[i]].addr);

                    fl += w > 0 ? (size_t)w : 0;
                }
                nondurable++;
                continue;
            }
        }
        ok++;
        first = ST_OK;
    }
    if (best != NULL && info != NULL) {
        sc_session_info(id, best, info);
    }
    srpc_fanout_free(items, n);
    if (result != NULL) {
        result->written = ok;
    }
    if (ok == 0 && nondurable > 0) {
        return sc_error(ST_ERR_UNSUPPORTED, "session %s: no replica committed it to disk:%s", id,
                        failed);
    }
    if (ok > 0 && ok < quorum) {
        return sc_error(ST_ERR_PARTIAL,
                        "session %s: durable on %u of %u replicas, write_quorum is %u; not "
                        "written:%s%s",
                        id, ok, want, quorum, failed,
                        n < want ? " (and replicas beyond the live nodes of the ring)" : "");
    }
    return first;
}

/*
 * sc_session_once on the replicas of sid. With membership on etcd, a call
 * that no replica took (NOT_FOUND or UNAVAILABLE from every one; a get: any
 * failure) while a node answered with a newer ring epoch than this client's
 * may have asked none of the record's holders: two ring changes it has not
 * read yet can move them all. Then the client's view is brought up to date
 * (sc_health_refresh) and, if it moved, the call made again on the new
 * replicas, all within timeout_ms.
 */
static st_status_t sc_session_call(st_client_t *c, const char *id, const st_hash_t *sid, int m,
                                   const ProtobufCMessage *req, st_session_info_t *info,
                                   int durable, uint32_t quorum, st_write_result_t *result)
{
    uint64_t gen0 = __atomic_load_n(&c->view_gen, __ATOMIC_ACQUIRE);
    uint64_t deadline_ns = cm_mono_ns() + (uint64_t)c->timeout_ms * 1000000ull;
    int behind = 0;
    st_status_t st = sc_session_once(c, id, sid, m, req, info, durable, quorum, result,
                                     (int)c->timeout_ms, &behind);
    uint64_t now;

    if (!behind || c->etcd == NULL || st == ST_OK ||
        (m != SRPC_CACHE_GET_SESSION && st != ST_ERR_NOT_FOUND && st != ST_ERR_UNAVAILABLE) ||
        !sc_health_refresh(c, gen0, deadline_ns) ||
        (now = cm_mono_ns()) + 1000000ull >= deadline_ns) {
        return st;
    }
    return sc_session_once(c, id, sid, m, req, info, durable, quorum, result,
                           (int)((deadline_ns - now) / 1000000ull), &behind);
}

/* The quorum of a session write with flags. */
static uint32_t sc_session_quorum(const st_client_t *c, unsigned flags)
{
    return (flags & ST_SESSION_DURABLE) ? c->write_quorum : 1;
}

st_status_t st_session_open(st_client_t *c, const char *id, uint64_t ttl_ms,
                            st_session_info_t *info)
{
    return st_session_open_ex(c, id, ttl_ms, 0, info, NULL);
}

st_status_t st_session_open_ex(st_client_t *c, const char *id, uint64_t ttl_ms, unsigned flags,
                               st_session_info_t *info, st_write_result_t *result)
{
    Strata__V1__OpenSessionRequest req = STRATA__V1__OPEN_SESSION_REQUEST__INIT;
    st_hash_t sid;
    st_status_t status = sc_session_req(c, id, &sid, &req.namespace_id, &req.session_id);

    if (status != ST_OK) {
        return status;
    }
    if (ttl_ms > UINT32_MAX) {
        return sc_error(ST_ERR_INVALID, "session ttl_ms %llu is too long",
                        (unsigned long long)ttl_ms);
    }
    req.tenant = c->tenant;
    req.model = c->model;
    req.ttl_ms = (uint32_t)ttl_ms;
    req.durable = (flags & ST_SESSION_DURABLE) != 0;
    return sc_session_call(c, id, &sid, SRPC_CACHE_OPEN_SESSION, &req.base, info, req.durable,
                           sc_session_quorum(c, flags), result);
}

st_status_t st_session_append(st_client_t *c, const char *id, const st_hash_t *head,
                              uint64_t length)
{
    return st_session_append_ex(c, id, head, length, 0, NULL);
}

st_status_t st_session_append_ex(st_client_t *c, const char *id, const st_hash_t *head,
                                 uint64_t length, unsigned flags, st_write_result_t *result)
{
    Strata__V1__AppendSessionRequest req = STRATA__V1__APPEND_SESSION_REQUEST__INIT;
    st_hash_t sid;
    st_status_t status = sc_session_req(c, id, &sid, &req.namespace_id, &req.session_id);

    if (status != ST_OK) {
        return status;
    }
    if (head == NULL) {
        return sc_error(ST_ERR_INVALID, "session append: NULL head");
    }
    req.head_hash.data = (uint8_t *)head->b;
    req.head_hash.len = ST_HASH_BYTES;
    req.length = length;
    req.durable = (flags & ST_SESSION_DURABLE) != 0;
    return sc_session_call(c, id, &sid, SRPC_CACHE_APPEND_SESSION, &req.base, NULL, req.durable,
                           sc_session_quorum(c, flags), result);
}

st_status_t st_session_get(st_client_t *c, const char *id, st_session_info_t *info)
{
    Strata__V1__GetSessionRequest req = STRATA__V1__GET_SESSION_REQUEST__INIT;
    st_hash_t sid;
    st_status_t status = sc_session_req(c, id, &sid, &req.namespace_id, &req.session_id);

    if (status != ST_OK) {
        return status;
    }
    return sc_session_call(c, id, &sid, SRPC_CACHE_GET_SESSION, &req.base, info, 0, 1, NULL);
}

st_status_t st_session_close(st_client_t *c, const char *id)
{
    Strata__V1__CloseSessionRequest req = STRATA__V1__CLOSE_SESSION_REQUEST__INIT;
    st_hash_t sid;
    st_status_t status = sc_session_req(c, id, &sid, &req.namespace_id, &req.session_id);

    if (status != ST_OK) {
        return status;
    }
    req.forget = 1;
    return sc_session_call(c, id, &sid, SRPC_CACHE_CLOSE_SESSION, &req.base, NULL, 0, 1, NULL);
}
