/*
 * etcd_members.c - the full read of a cluster's members (etcd_members.h).
 */
#include "etcd_members.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

int srpc_members_key_name(const char *prefix, const uint8_t *key, size_t len, char *name,
                          size_t cap)
{
    size_t plen = strlen(prefix), mlen = plen + 8; /* "members/" */

    if (len <= mlen || len - mlen >= cap || memcmp(key, prefix, plen) != 0 ||
        memcmp(key + plen, "members/", 8) != 0) {
        return 0;
    }
    memcpy(name, key + mlen, len - mlen);
    name[len - mlen] = '\0';
    return 1;
}

/*
 * The number recorded under <prefix>epoch or _base: 1 to 20 decimal digits
 * (daemons write 20, zero-padded) that fit 63 bits. Anything else is
 * ignored (0) and logged: such a value was not written by a daemon.
 */
static uint64_t srpc_members_epoch_value(const ProtobufCBinaryData *key,
                                         const ProtobufCBinaryData *v)
{
    uint64_t n = 0, max = (uint64_t)INT64_MAX;
    size_t i;

    for (i = 0; i < v->len && i < 20 && v->data[i] >= '0' && v->data[i] <= '9'; i++) {
        uint64_t d = (uint64_t)(v->data[i] - '0');

        if (n > (max - d) / 10) {
            break;
        }
        n = n * 10 + d;
    }
    if (v->len == 0 || i != v->len) {
        lg_warn_ratelimited("etcd: bad value ignored under key=%.*s (want up to 20 decimal "
                            "digits, at most %lld) len=%zu",
                            (int)key->len, (const char *)key->data, (long long)INT64_MAX, v->len);
        return 0;
    }
    return n;
}

/* Whether key[0..len) is prefix followed by exactly tail. */
static int srpc_members_key_is(const char *prefix, const char *tail, const uint8_t *key, size_t len)
{
    size_t plen = strlen(prefix), tlen = strlen(tail);

    return len == plen + tlen && memcmp(key, prefix, plen) == 0 &&
           memcmp(key + plen, tail, tlen) == 0;
}

srpc_members_key_t srpc_epoch_fold(srpc_epoch_t *ep, const char *prefix,
                                   const Etcdserverpb__EtcdKv *kv, int deleted, char *name,
                                   size_t cap)
{
    size_t plen = strlen(prefix);
    uint64_t v;

    if (kv->key.len > plen + 8 && memcmp(kv->key.data, prefix, plen) == 0 &&
        memcmp(kv->key.data + plen, "members/", 8) == 0) {
        if (!srpc_members_key_name(prefix, kv->key.data, kv->key.len, name, cap) && cap > 0) {
            name[0] = '\0';
        }
        v = kv->mod_revision > 0 ? (uint64_t)kv->mod_revision : 0;
        ep->rev = v > ep->rev ? v : ep->rev;
        return SRPC_KEY_MEMBER;
    }
    if (srpc_members_key_is(prefix, "epoch", kv->key.data, kv->key.len)) {
        v = deleted ? 0 : srpc_members_epoch_value(&kv->key, &kv->value);
        ep->rev = v > ep->rev ? v : ep->rev;
        return SRPC_KEY_EPOCH;
    }
    if (srpc_members_key_is(prefix, "epoch_base", kv->key.data, kv->key.len)) {
        if (!deleted) {
            ep->base = srpc_members_epoch_value(&kv->key, &kv->value);
        }
        return SRPC_KEY_BASE;
    }
    return SRPC_KEY_OTHER;
}

st_status_t srpc_etcd_members(srpc_etcd_t *e, const char *prefix, int timeout_ms,
                              srpc_members_t *out)
{
    Etcdserverpb__EtcdRangeResponse *r;
    st_status_t st;

    memset(out, 0, sizeof(*out));
    st = srpc_etcd_range_prefix(e, prefix, timeout_ms, &r);
    if (st != ST_OK) {
        return st;
    }
    out->m = calloc(r->n_kvs ? r->n_kvs : 1, sizeof(*out->m));
    if (out->m == NULL) {
        protobuf_c_message_free_unpacked(&r->base, NULL);
        lg_error("etcd: out of memory reading members n=%zu", r->n_kvs);
        return ST_ERR_NOMEM;
    }
    for (size_t i = 0; i < r->n_kvs; i++) {
        const Etcdserverpb__EtcdKv *kv = r->kvs[i];
        char name[MR_MAX_FIELD], why[160];

        if (srpc_epoch_fold(&out->ep, prefix, kv, 0, name, sizeof(name)) != SRPC_KEY_MEMBER) {
            continue;
        }
        if (name[0] != '\0' && mr_parse(name, kv->value.data, kv->value.len, &out->m[out->n], why,
                                        sizeof(why)) == ST_OK) {
            out->m[out->n++].mod_revision = kv->mod_revision;
            continue;
        }
        if (name[0] == '\0') {
            snprintf(why, sizeof(why), "the name is longer than %d bytes", MR_MAX_FIELD - 1);
        }
        out->malformed++;
        lg_warn_ratelimited("etcd: malformed member record ignored key=%.*s revision=%lld: %s",
                            (int)kv->key.len, (const char *)kv->key.data,
                            (long long)kv->mod_revision, why);
    }
    out->epoch = srpc_epoch_value(&out->ep);
    out->revision = r->header != NULL ? r->header->revision : 0;
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return ST_OK;
}

void srpc_members_free(srpc_members_t *mb)
{
    free(mb->m);
    memset(mb, 0, sizeof(*mb));
}
