/* dp_harness.c - see dp_harness.h. */
#include "dp_harness.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

void dh_start(tc_cluster_t *cl, const char *stratad, int n, const char *args, const char *more)
{
    char line[512];
    srpc_channel_t *ch;
    srpc_channel_config_t cc = {.token = NULL};
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    srpc_error_t err;
    int kind;

    snprintf(line, sizeof(line), "%s %s", args, more);
    assert_int_equal(tc_start(cl, stratad, n, line), 0);
    assert_int_equal(srpc_channel_open(cl->node[0].addr, &cc, &ch), ST_OK);
    req.protocol_version = 1;
    assert_int_equal(srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base, 10000,
                               (ProtobufCMessage **)&resp, &err),
                     ST_OK);
    kind = resp->transport;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    srpc_channel_close(ch);
    if (kind == STRATA__V1__TRANSPORT_KIND__TRANSPORT_NONE) {
        tc_stop_all(cl);
        skip();
    }
}

st_hash_t *dh_make_chain(st_client_t *c, uint32_t stream, size_t n)
{
    size_t bt = st_client_block_tokens(c), nb = 0;
    uint32_t *tok = malloc(sizeof(*tok) * bt * n);
    st_hash_t *chain = malloc(sizeof(*chain) * n);

    assert_non_null(tok);
    assert_non_null(chain);
    for (size_t i = 0; i < bt * n; i++) {
        tok[i] = (uint32_t)(i * 2654435761u) ^ stream;
    }
    assert_int_equal(st_client_hash(c, tok, bt * n, NULL, 0, chain, n, &nb), ST_OK);
    assert_int_equal(nb, n);
    free(tok);
    return chain;
}

void dh_fill(uint8_t *p, size_t len, uint64_t block, uint64_t salt)
{
    uint64_t x = XXH3_64bits_withSeed(&block, sizeof(block), salt) | 1;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

void dh_run(st_handle_t *h)
{
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    st_handle_release(h);
}

void dh_raw_open(dh_raw_t *r, const char *addr)
{
    srpc_channel_config_t cc = {.token = NULL};
    st_transport_config_t tc = {0};
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    srpc_error_t err;

    memset(r, 0, sizeof(*r));
    assert_int_equal(srpc_channel_open(addr, &cc, &r->ch), ST_OK);
    tc.backend = ST_TRANSPORT_UCX;
    assert_int_equal(st_transport_create(&tc, &r->tp), ST_OK);
    assert_int_equal(st_transport_mem_register(r->tp, r->buf, sizeof(r->buf), &r->mem), ST_OK);
    req.protocol_version = 1;
    assert_int_equal(srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base, 10000,
                               (ProtobufCMessage **)&resp, &err),
                     ST_OK);
    r->ns = resp->namespace_id;
    assert_int_equal(st_transport_connect(r->tp, resp->transport_address.data,
                                          resp->transport_address.len, &r->ep),
                     ST_OK);
    for (size_t i = 0; i < resp->n_regions; i++) {
        const Strata__V1__Region *g = resp->regions[i];

        assert_true(g->id < 64);
        assert_int_equal(
            st_transport_rkey_unpack(r->ep, g->rkey.data, g->rkey.len, &r->rkey[g->id]), ST_OK);
        r->base[g->id] = g->remote_addr;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

void dh_raw_close(dh_raw_t *r)
{
    st_transport_destroy(r->tp);
    srpc_channel_close(r->ch);
}

void dh_cb_done(void *user, st_status_t st)
{
    *(st_status_t *)user = st;
}

Strata__V1__LocateResponse *dh_raw_locate_resp(dh_raw_t *r, const st_hash_t *chain,
                                               int want_row_sums)
{
    Strata__V1__LocateRequest req = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__ObjectKey k = STRATA__V1__OBJECT_KEY__INIT, *kp = &k;
    Strata__V1__LocateResponse *resp = NULL;
    srpc_error_t err;

    k.block_hash.data = (uint8_t *)chain[0].b;
    k.block_hash.len = ST_HASH_BYTES;
    k.kind = STRATA__V1__OBJECT_KIND__KV;
    req.namespace_id = r->ns;
    req.keys = &kp;
    req.n_keys = 1;
    req.want_row_sums = want_row_sums;
    assert_int_equal(srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_LOCATE], &req.base, 10000,
                               (ProtobufCMessage **)&resp, &err),
                     ST_OK);
    return resp;
}

int dh_raw_locate(dh_raw_t *r, const st_hash_t *chain, uint32_t *region, uint64_t *off)
{
    Strata__V1__LocateResponse *resp = dh_raw_locate_resp(r, chain, 0);
    int present = resp->locations->state[0] == STRATA__V1__OBJECT_STATE__OBJECT_PRESENT;

    *region = resp->locations->region_id[0];
    *off = resp->locations->offset[0];
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return present;
}

void dh_raw_scribble(dh_raw_t *r, uint32_t region, uint64_t off, const uint8_t *bytes, size_t len)
{
    st_status_t done = ST_ERR_BUSY;

    assert_non_null(r->rkey[region]);
    assert_true(len <= sizeof(r->buf));
    memcpy(r->buf, bytes, len);
    assert_int_equal(st_transport_put(r->ep, r->buf, len, r->mem, r->base[region] + off,
                                      r->rkey[region], dh_cb_done, &done),
                     ST_OK);
    while (done == ST_ERR_BUSY) {
        st_transport_progress(r->tp);
    }
    assert_int_equal(done, ST_OK);
    assert_int_equal(st_transport_ep_flush(r->ep, 10000), ST_OK);
}
