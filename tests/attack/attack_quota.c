/*
 * attack_quota.c - the attack suite's quota cases (see attack.c): acme held at
 * its quotas of memory, pins, leases and namespaces; beta is not starved.
 */
#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cluster.h"
#include "srpc.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "tcall_raw.h"
#include "tenants.h"
#include "mkhash.h"
#include "grpc_conn.h"

#include "attack.h"

/* ------------------------------------------------------------ quotas -- */

/* Puts one AT_BIG object under h in t's namespace over gRPC; returns the
 * gRPC code, or 8 (RESOURCE_EXHAUSTED) for a key refused in the answer. */
static int at_put_big(at_tenant_t *t, const st_hash_t *h, const uint8_t *data, srpc_error_t *err)
{
    Strata__V1__PutRequest q = STRATA__V1__PUT_REQUEST__INIT;
    Strata__V1__ObjectKey k = gc_key(h, STRATA__V1__OBJECT_KIND__KV);
    Strata__V1__InlineObject o, *op = &o;
    Strata__V1__PutResponse *r;
    int code;

    gc_inline(&o, &k, data, AT_BIG);
    q.namespace_id = t->tr.ns;
    q.objects = &op;
    q.n_objects = 1;
    code = at_call(t, SRPC_CACHE_PUT, &q, (ProtobufCMessage **)&r, err);
    if (code == 0 && (r->n_status != 1 || r->status[0] != STRATA__V1__KEY_STATUS__KEY_OK)) {
        snprintf(err->message, sizeof(err->message), "key status %d",
                 r->n_status == 1 ? (int)r->status[0] : -1);
        code = 8;
    }
    at_free(r ? &r->base : NULL);
    return code;
}

/* Pins (ttl 0: until Unpin or max_pin) or unpins block h of t's namespace. */
static int at_pin_big(at_tenant_t *t, const st_hash_t *h, int pin, srpc_error_t *err)
{
    ProtobufCMessage *r;
    int code;

    if (pin) {
        Strata__V1__PinRequest q = STRATA__V1__PIN_REQUEST__INIT;

        q.namespace_id = t->tr.ns;
        q.block_hashes.data = (uint8_t *)h->b;
        q.block_hashes.len = ST_HASH_BYTES;
        code = at_call(t, SRPC_CACHE_PIN, &q, &r, err);
    } else {
        Strata__V1__UnpinRequest q = STRATA__V1__UNPIN_REQUEST__INIT;

        q.namespace_id = t->tr.ns;
        q.block_hashes.data = (uint8_t *)h->b;
        q.block_hashes.len = ST_HASH_BYTES;
        code = at_call(t, SRPC_CACHE_UNPIN, &q, &r, err);
    }
    if (code == 0 && pin && ((Strata__V1__PinResponse *)r)->n_status == 1 &&
        ((Strata__V1__PinResponse *)r)->status[0] != STRATA__V1__KEY_STATUS__KEY_OK) {
        code = 8;
    }
    at_free(r);
    return code;
}

/* A lease (the longest) on block h of t's namespace, from a Locate; 0: refused. */
static uint64_t at_lease_big(at_tenant_t *t, const st_hash_t *h, srpc_error_t *err)
{
    Strata__V1__LocateRequest q = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__ObjectKey k = STRATA__V1__OBJECT_KEY__INIT, *kp = &k;
    Strata__V1__LocateResponse *r;
    uint64_t id = 0;

    k.block_hash.data = (uint8_t *)h->b;
    k.block_hash.len = ST_HASH_BYTES;
    k.kind = STRATA__V1__OBJECT_KIND__KV;
    q.namespace_id = t->tr.ns;
    q.keys = &kp;
    q.n_keys = 1;
    q.lease = 1;
    q.lease_ms = 10000;
    if (at_call(t, SRPC_CACHE_LOCATE, &q, (ProtobufCMessage **)&r, err) == 0) {
        id = r->lease_id;
        at_free(&r->base);
    }
    return id;
}

/*
 * acme puts more than the whole daemon holds, pinning every block it can and
 * leasing every one it cannot pin: its pins, leases and memory stop at its
 * quotas (refused with RESOURCE_EXHAUSTED naming the quota), and beta's Puts
 * still succeed.
 */
int at_quota_holds(void)
{
    static uint8_t data[AT_BIG];
    static st_hash_t pinned[AT_BIG_N];
    size_t n_pinned = 0, n_leased = 0, n_put = 0;
    int pin_refused = 0, lease_refused = 0, res = AT_PASS;
    srpc_error_t err;
    char pin_why[AT_MSG] = "";

    memset(data, 0xa5, sizeof(data));
    for (uint64_t i = 0; i < AT_BIG_N; i++) {
        st_hash_t h = mh_hash(101, i);

        data[0] = (uint8_t)i;
        if (at_put_big(&A.a, &h, data, &err) != 0) {
            continue; /* acme's own put may fail: acme is at its quota */
        }
        n_put++;
        if (at_pin_big(&A.a, &h, 1, &err) == 0) {
            pinned[n_pinned++] = h;
            continue;
        }
        if (!pin_refused) {
            snprintf(pin_why, sizeof(pin_why), "%s", err.message);
        }
        pin_refused = 1;
        if (at_lease_big(&A.a, &h, &err) != 0) {
            n_leased++;
        } else {
            lease_refused = 1;
        }
    }
    if (n_put == 0) {
        return at_broken("acme stored nothing: %s", err.message);
    }
    for (uint64_t i = 0; i < 8 && res == AT_PASS; i++) {
        st_hash_t h = mh_hash(202, i);
        int code = at_put_big(&A.b, &h, data, &err);

        if (code != 0) {
            res = at_fail("beta's Put %llu failed (code %d: %s) while acme holds %zu pins and %zu "
                          "leases of %zu blocks put",
                          (unsigned long long)i, code, err.message, n_pinned, n_leased, n_put);
        }
    }
    if (res == AT_PASS &&
        (!pin_refused || !lease_refused || strstr(pin_why, "pins quota") == NULL)) {
        res = at_fail("acme's holds did not stop at its quotas: %zu pins, %zu leases (%s)",
                      n_pinned, n_leased, pin_why);
    }
    for (size_t i = 0; i < n_pinned; i++) {
        (void)at_pin_big(&A.a, &pinned[i], 0, &err);
    }
    return res;
}

/* Opens a namespace of t for model; returns the gRPC code (err: why). */
static int at_hello_model(at_tenant_t *t, const char *model, srpc_error_t *err)
{
    Strata__V1__HelloRequest q = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *r;
    int code;

    q.protocol_version = 1;
    q.tenant = (char *)t->name;
    q.model = (char *)model;
    code = at_call(t, SRPC_CACHE_HELLO, &q, &r, err);
    at_free(r);
    return code;
}

/*
 * acme (namespaces=2, one of them "at") opens a second namespace, then a
 * third: the third is RESOURCE_EXHAUSTED, and the store, which counts them,
 * shows the quota and the use on /metrics.
 */
int at_namespaces_quota(void)
{
    char series[160];
    srpc_error_t err;
    double quota, used;
    int code;

    if (at_hello_model(&A.a, "n1", &err) != 0) {
        return at_broken("acme's second namespace refused: %s", err.message);
    }
    code = at_hello_model(&A.a, "n2", &err);
    if (code == 0) {
        return at_fail("acme opened a third namespace (quota namespaces=2)");
    }
    if (code != 8 || strstr(err.message, "namespaces quota") == NULL) {
        return at_fail("the third namespace: code %d, %s (want RESOURCE_EXHAUSTED naming the "
                       "namespaces quota)",
                       code, err.message);
    }
    if (at_hello_model(&A.b, "n2", &err) != 0) {
        return at_fail("beta's namespace refused after acme's: %s", err.message);
    }
    snprintf(series, sizeof(series),
             "strata_tenant_quota{tenant=\"acme\",resource=\"namespaces\"}");
    quota = tc_metric(A.metrics_port, series);
    snprintf(series, sizeof(series), "strata_tenant_used{tenant=\"acme\",resource=\"namespaces\"}");
    used = tc_metric(A.metrics_port, series);
    if (quota != 2 || used != 2) {
        return at_fail("the store shows acme's namespaces quota %.0f, used %.0f (want 2 and 2)",
                       quota, used);
    }
    return AT_PASS;
}
