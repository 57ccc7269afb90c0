/*
 * etcd.c - the etcd v3 client of etcd.h: unary KV and Lease calls with
 * srpc_call() and the watch as an srpc_stream_t, each over the first
 * endpoint that answers.
 */
#include "etcd.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

#define SRPC_ETCD_M(name, svc, req, resp)                                       \
    static const srpc_method_t name = {"/etcdserverpb." svc,                    \
                                       &etcdserverpb__etcd_##req##__descriptor, \
                                       &etcdserverpb__etcd_##resp##__descriptor}

SRPC_ETCD_M(srpc_etcd_range_m, "KV/Range", range_request, range_response);
SRPC_ETCD_M(srpc_etcd_put_m, "KV/Put", put_request, put_response);
SRPC_ETCD_M(srpc_etcd_delete_m, "KV/DeleteRange", delete_range_request, delete_range_response);
SRPC_ETCD_M(srpc_etcd_txn_m, "KV/Txn", txn_request, txn_response);
SRPC_ETCD_M(srpc_etcd_grant_m, "Lease/LeaseGrant", lease_grant_request, lease_grant_response);
SRPC_ETCD_M(srpc_etcd_revoke_m, "Lease/LeaseRevoke", lease_revoke_request, lease_revoke_response);
SRPC_ETCD_M(srpc_etcd_keepalive_m, "Lease/LeaseKeepAlive", lease_keep_alive_request,
            lease_keep_alive_response);
SRPC_ETCD_M(srpc_etcd_watch_m, "Watch/Watch", watch_request, watch_response);

struct srpc_etcd {
    char *endpoints;
    srpc_channel_t *ch[SRPC_ETCD_MAX_ENDPOINTS];
    unsigned n;
    unsigned current; /* the endpoint that answered last (atomic access) */
};

struct srpc_etcd_watch {
    srpc_stream_t *stream;
    char endpoint[128];
};

/* One endpoint into target[0..cap) as "host:port"; ST_ERR_INVALID when it is not one. */
static st_status_t srpc_etcd_target(const char *tok, char *target, size_t cap)
{
    const char *hp = tok;
    size_t len;

    if (strncmp(tok, "http://", 7) == 0) {
        hp = tok + 7;
    } else if (strstr(tok, "://") != NULL) {
        lg_error("etcd: endpoint scheme not supported endpoint=%s (want http://host:port; "
                 "TLS to etcd is not supported yet)",
                 tok);
        return ST_ERR_INVALID;
    }
    len = strlen(hp);
    while (len > 0 && hp[len - 1] == '/') {
        len--;
    }
    if (len == 0 || len >= cap || memchr(hp, ':', len) == NULL || memchr(hp, '/', len) != NULL) {
        lg_error("etcd: bad endpoint endpoint=%s (want http://host:port)", tok);
        return ST_ERR_INVALID;
    }
    memcpy(target, hp, len);
    target[len] = '\0';
    return ST_OK;
}

st_status_t srpc_etcd_open(const char *endpoints, srpc_etcd_t **e_p)
{
    char *list, *save = NULL, *tok;
    srpc_etcd_t *e;
    st_status_t st = ST_OK;

    if (endpoints == NULL || endpoints[0] == '\0') {
        lg_error("etcd: no endpoints");
        return ST_ERR_INVALID;
    }
    e = calloc(1, sizeof(*e));
    list = strdup(endpoints);
    if (e == NULL || list == NULL || (e->endpoints = strdup(endpoints)) == NULL) {
        free(list);
        free(e);
        lg_error("etcd: out of memory");
        return ST_ERR_NOMEM;
    }
    for (tok = strtok_r(list, ", ", &save); tok != NULL && st == ST_OK;
         tok = strtok_r(NULL, ", ", &save)) {
        char target[128];

        if (e->n == SRPC_ETCD_MAX_ENDPOINTS) {
            lg_error("etcd: too many endpoints endpoints=%s max=%d", endpoints,
                     SRPC_ETCD_MAX_ENDPOINTS);
            st = ST_ERR_INVALID;
            break;
        }
        st = srpc_etcd_target(tok, target, sizeof(target));
        if (st == ST_OK) {
            st = srpc_channel_open(target, NULL, &e->ch[e->n]);
        }
        if (st == ST_OK) {
            e->n++;
        }
    }
    free(list);
    if (st == ST_OK && e->n == 0) {
        lg_error("etcd: no endpoints in endpoints=\"%s\"", endpoints);
        st = ST_ERR_INVALID;
    }
    if (st != ST_OK) {
        srpc_etcd_close(e);
        return st;
    }
    *e_p = e;
    return ST_OK;
}

void srpc_etcd_close(srpc_etcd_t *e)
{
    if (e == NULL) {
        return;
    }
    for (unsigned i = 0; i < e->n; i++) {
        srpc_channel_close(e->ch[i]);
    }
    free(e->endpoints);
    free(e);
}

const char *srpc_etcd_endpoints(const srpc_etcd_t *e)
{
    return e->endpoints;
}

/* One unary call, on the endpoint that answered last, then on the others. */
static st_status_t srpc_etcd_call(srpc_etcd_t *e, const srpc_method_t *m,
                                  const ProtobufCMessage *req, int timeout_ms,
                                  ProtobufCMessage **resp_p)
{
    unsigned first = __atomic_load_n(&e->current, __ATOMIC_RELAXED) % e->n;
    st_status_t st = ST_ERR_UNAVAILABLE;

    for (unsigned k = 0; k < e->n; k++) {
        unsigned i = (first + k) % e->n;
        srpc_error_t err;

        st = srpc_call(e->ch[i], m, req, timeout_ms, resp_p, &err);
        if (st == ST_OK) {
            __atomic_store_n(&e->current, i, __ATOMIC_RELAXED);
            return ST_OK;
        }
        if (st != ST_ERR_UNAVAILABLE && st != ST_ERR_TIMEOUT) {
            lg_warn("etcd: call failed endpoint=%s method=%s error=\"%s\"",
                    srpc_channel_target(e->ch[i]), m->path, err.message);
            return st;
        }
    }
    return st;
}

/* [key, range_end) of a prefix: the prefix with its last byte plus one. */
static void srpc_etcd_prefix_end(const char *prefix, uint8_t *end, size_t *len_p)
{
    size_t len = strlen(prefix);

    memcpy(end, prefix, len);
    while (len > 0 && end[len - 1] == 0xff) {
        len--;
    }
    if (len == 0) {
        end[0] = 0; /* every key */
        *len_p = 1;
        return;
    }
    end[len - 1]++;
    *len_p = len;
}

st_status_t srpc_etcd_range_prefix(srpc_etcd_t *e, const char *prefix, int timeout_ms,
                                   Etcdserverpb__EtcdRangeResponse **resp_p)
{
    Etcdserverpb__EtcdRangeRequest req = ETCDSERVERPB__ETCD_RANGE_REQUEST__INIT;
    uint8_t end[256];
    size_t end_len;

    if (strlen(prefix) >= sizeof(end)) {
        lg_error("etcd: prefix too long prefix=%s max=%zu", prefix, sizeof(end) - 1);
        return ST_ERR_INVALID;
    }
    srpc_etcd_prefix_end(prefix, end, &end_len);
    req.key.data = (uint8_t *)prefix;
    req.key.len = strlen(prefix);
    req.range_end.data = end;
    req.range_end.len = end_len;
    return srpc_etcd_call(e, &srpc_etcd_range_m, &req.base, timeout_ms,
                          (ProtobufCMessage **)resp_p);
}

static int64_t srpc_etcd_revision(const Etcdserverpb__EtcdHeader *h)
{
    return h != NULL ? h->revision : 0;
}

st_status_t srpc_etcd_put(srpc_etcd_t *e, const char *key, const void *value, size_t len,
                          int64_t lease, int timeout_ms, int64_t *revision_p)
{
    Etcdserverpb__EtcdPutRequest req = ETCDSERVERPB__ETCD_PUT_REQUEST__INIT;
    Etcdserverpb__EtcdPutResponse *resp;
    st_status_t st;

    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    req.value.data = (uint8_t *)value;
    req.value.len = len;
    req.lease = lease;
    st = srpc_etcd_call(e, &srpc_etcd_put_m, &req.base, timeout_ms, (ProtobufCMessage **)&resp);
    if (st != ST_OK) {
        return st;
    }
    if (revision_p != NULL) {
        *revision_p = srpc_etcd_revision(resp->header);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return ST_OK;
}

st_status_t srpc_etcd_delete(srpc_etcd_t *e, const char *key, int timeout_ms, int64_t *revision_p)
{
    Etcdserverpb__EtcdDeleteRangeRequest req = ETCDSERVERPB__ETCD_DELETE_RANGE_REQUEST__INIT;
    Etcdserverpb__EtcdDeleteRangeResponse *resp;
    st_status_t st;

    req.key.data = (uint8_t *)key;
    req.key.len = strlen(key);
    st = srpc_etcd_call(e, &srpc_etcd_delete_m, &req.base, timeout_ms, (ProtobufCMessage **)&resp);
    if (st != ST_OK) {
        return st;
    }
    if (revision_p != NULL) {
        *revision_p = srpc_etcd_revision(resp->header);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return ST_OK;
}

st_status_t srpc_etcd_put_if_less(srpc_etcd_t *e, const char *key, const char *value,
                                  int timeout_ms, int *put_p)
{
    Etcdserverpb__EtcdTxnRequest req = ETCDSERVERPB__ETCD_TXN_REQUEST__INIT;
    Etcdserverpb__EtcdCompare missing = ETCDSERVERPB__ETCD_COMPARE__INIT;
    Etcdserverpb__EtcdCompare less = ETCDSERVERPB__ETCD_COMPARE__INIT;
    Etcdserverpb__EtcdPutRequest put = ETCDSERVERPB__ETCD_PUT_REQUEST__INIT;
    Etcdserverpb__EtcdRequestOp op = ETCDSERVERPB__ETCD_REQUEST_OP__INIT;
    Etcdserverpb__EtcdCompare *cmp[1];
    Etcdserverpb__EtcdRequestOp *ops[1] = {&op};
    Etcdserverpb__EtcdTxnResponse *resp;
    int written = 0;
    st_status_t st;

    put.key.data = (uint8_t *)key;
    put.key.len = strlen(key);
    put.value.data = (uint8_t *)value;
    put.value.len = strlen(value);
    op.request_case = ETCDSERVERPB__ETCD_REQUEST_OP__REQUEST_REQUEST_PUT;
    op.request_put = &put;
    /* Two rounds: "version = 0" (missing) puts it; else "value < new" does. */
    missing.result = ETCDSERVERPB__ETCD_COMPARE__RESULT__EQUAL;
    missing.target = ETCDSERVERPB__ETCD_COMPARE__TARGET__VERSION;
    missing.key = put.key;
    missing.target_union_case = ETCDSERVERPB__ETCD_COMPARE__TARGET_UNION_VERSION;
    missing.version = 0;
    less.result = ETCDSERVERPB__ETCD_COMPARE__RESULT__LESS;
    less.target = ETCDSERVERPB__ETCD_COMPARE__TARGET__VALUE;
    less.key = put.key;
    less.target_union_case = ETCDSERVERPB__ETCD_COMPARE__TARGET_UNION_VALUE;
    less.value = put.value;
    for (int round = 0; round < 2 && !written; round++) {
        cmp[0] = round == 0 ? &missing : &less;
        req.n_compare = 1;
        req.compare = cmp;
        req.n_success = 1;
        req.success = ops;
        st = srpc_etcd_call(e, &srpc_etcd_txn_m, &req.base, timeout_ms, (ProtobufCMessage **)&resp);
        if (st != ST_OK) {
            return st;
        }
        written = resp->succeeded;
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    if (put_p != NULL) {
        *put_p = written;
    }
    return ST_OK;
}

st_status_t srpc_etcd_lease_grant(srpc_etcd_t *e, int64_t ttl_s, int timeout_ms, int64_t *lease_p)
{
    Etcdserverpb__EtcdLeaseGrantRequest req = ETCDSERVERPB__ETCD_LEASE_GRANT_REQUEST__INIT;
    Etcdserverpb__EtcdLeaseGrantResponse *resp;
    st_status_t st;

    req.ttl = ttl_s;
    st = srpc_etcd_call(e, &srpc_etcd_grant_m, &req.base, timeout_ms, (ProtobufCMessage **)&resp);
    if (st != ST_OK) {
        return st;
    }
    if (resp->error != NULL && resp->error[0] != '\0') {
        lg_error("etcd: lease grant refused ttl=%lld error=\"%s\"", (long long)ttl_s, resp->error);
        st = ST_ERR_UNAVAILABLE;
    } else {
        *lease_p = resp->id;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return st;
}

st_status_t srpc_etcd_lease_keepalive(srpc_etcd_t *e, int64_t lease, int timeout_ms, int64_t *ttl_p)
{
    Etcdserverpb__EtcdLeaseKeepAliveRequest req = ETCDSERVERPB__ETCD_LEASE_KEEP_ALIVE_REQUEST__INIT;
    Etcdserverpb__EtcdLeaseKeepAliveResponse *resp;
    st_status_t st;
    int64_t ttl;

    req.id = lease;
    /* One request and one answer: etcd ends the stream when we half-close. */
    st = srpc_etcd_call(e, &srpc_etcd_keepalive_m, &req.base, timeout_ms,
                        (ProtobufCMessage **)&resp);
    if (st != ST_OK) {
        return st;
    }
    ttl = resp->ttl;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    if (ttl <= 0) {
        return ST_ERR_NOT_FOUND;
    }
    if (ttl_p != NULL) {
        *ttl_p = ttl;
    }
    return ST_OK;
}

st_status_t srpc_etcd_lease_revoke(srpc_etcd_t *e, int64_t lease, int timeout_ms)
{
    Etcdserverpb__EtcdLeaseRevokeRequest req = ETCDSERVERPB__ETCD_LEASE_REVOKE_REQUEST__INIT;
    Etcdserverpb__EtcdLeaseRevokeResponse *resp;
    st_status_t st;

    req.id = lease;
    st = srpc_etcd_call(e, &srpc_etcd_revoke_m, &req.base, timeout_ms, (ProtobufCMessage **)&resp);
    if (st == ST_OK) {
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    return st;
}

/* Opens the watch stream on endpoint i and waits for etcd's "created". */
static st_status_t srpc_etcd_watch_on(srpc_etcd_t *e, unsigned i,
                                      const Etcdserverpb__EtcdWatchRequest *req, int timeout_ms,
                                      srpc_etcd_watch_t *w)
{
    Etcdserverpb__EtcdWatchResponse *resp;
    srpc_error_t err;
    st_status_t st;

    st = srpc_stream_open(e->ch[i], &srpc_etcd_watch_m, &req->base, &w->stream);
    if (st != ST_OK) {
        return st;
    }
    st = srpc_stream_recv(w->stream, timeout_ms, (ProtobufCMessage **)&resp, &err);
    if (st == ST_OK) {
        if (!resp->created || resp->canceled) {
            lg_warn("etcd: watch not created endpoint=%s reason=\"%s\"",
                    srpc_channel_target(e->ch[i]),
                    resp->cancel_reason != NULL ? resp->cancel_reason : "");
            st = resp->compact_revision != 0 ? ST_ERR_EXHAUSTED : ST_ERR_UNAVAILABLE;
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    if (st != ST_OK) {
        srpc_stream_close(w->stream);
        w->stream = NULL;
        return st == ST_ERR_TIMEOUT ? ST_ERR_UNAVAILABLE : st;
    }
    snprintf(w->endpoint, sizeof(w->endpoint), "%s", srpc_channel_target(e->ch[i]));
    return ST_OK;
}

st_status_t srpc_etcd_watch_open(srpc_etcd_t *e, const char *prefix, int64_t start_revision,
                                 int timeout_ms, srpc_etcd_watch_t **w_p)
{
    Etcdserverpb__EtcdWatchRequest req = ETCDSERVERPB__ETCD_WATCH_REQUEST__INIT;
    Etcdserverpb__EtcdWatchCreateRequest create = ETCDSERVERPB__ETCD_WATCH_CREATE_REQUEST__INIT;
    unsigned first = __atomic_load_n(&e->current, __ATOMIC_RELAXED) % e->n;
    srpc_etcd_watch_t *w;
    uint8_t end[256];
    size_t end_len;
    st_status_t st = ST_ERR_UNAVAILABLE;

    if (strlen(prefix) >= sizeof(end)) {
        lg_error("etcd: prefix too long prefix=%s max=%zu", prefix, sizeof(end) - 1);
        return ST_ERR_INVALID;
    }
    w = calloc(1, sizeof(*w));
    if (w == NULL) {
        lg_error("etcd: out of memory");
        return ST_ERR_NOMEM;
    }
    srpc_etcd_prefix_end(prefix, end, &end_len);
    create.key.data = (uint8_t *)prefix;
    create.key.len = strlen(prefix);
    create.range_end.data = end;
    create.range_end.len = end_len;
    create.start_revision = start_revision;
    req.request_union_case = ETCDSERVERPB__ETCD_WATCH_REQUEST__REQUEST_UNION_CREATE_REQUEST;
    req.create_request = &create;
    for (unsigned k = 0; k < e->n; k++) {
        st = srpc_etcd_watch_on(e, (first + k) % e->n, &req, timeout_ms, w);
        if (st != ST_ERR_UNAVAILABLE) {
            break;
        }
    }
    if (st != ST_OK) {
        free(w);
        return st;
    }
    *w_p = w;
    return ST_OK;
}

st_status_t srpc_etcd_watch_next(srpc_etcd_watch_t *w, int timeout_ms,
                                 Etcdserverpb__EtcdWatchResponse **resp_p)
{
    Etcdserverpb__EtcdWatchResponse *resp;
    srpc_error_t err;
    st_status_t st;

    st = srpc_stream_recv(w->stream, timeout_ms, (ProtobufCMessage **)&resp, &err);
    if (st != ST_OK) {
        return st;
    }
    if (resp->canceled) {
        lg_warn("etcd: watch cancelled endpoint=%s reason=\"%s\" compact_revision=%lld",
                w->endpoint, resp->cancel_reason != NULL ? resp->cancel_reason : "",
                (long long)resp->compact_revision);
        st = resp->compact_revision != 0 ? ST_ERR_EXHAUSTED : ST_ERR_UNAVAILABLE;
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return st;
    }
    *resp_p = resp;
    return ST_OK;
}

void srpc_etcd_watch_close(srpc_etcd_watch_t *w)
{
    if (w == NULL) {
        return;
    }
    srpc_stream_close(w->stream);
    free(w);
}
