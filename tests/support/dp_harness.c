/* dp_harness.c - see dp_harness.h. */
#include "dp_harness.h"

#include "client_fixture.h"
#include "grpc_conn.h"

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
    size_t nt = st_client_block_tokens(c) * n;
    uint32_t *tok = cf_token_buf(c, n);

    for (size_t i = 0; i < nt; i++) {
        tok[i] = (uint32_t)(i * 2654435761u) ^ stream;
    }
    return cf_hash(c, tok, n);
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

void dh_put_one(st_client_t *c, const st_hash_t *chain, st_put_op_t *op)
{
    st_handle_t *h;

    assert_int_equal(st_client_put(c, chain, 1, op, 1, 0, &h), ST_OK);
    dh_run(h);
    assert_int_equal(op->status, ST_OK);
}

st_status_t dh_get_block0(st_client_t *c, const st_hash_t *chain, uint8_t *dst, size_t len,
                          size_t *length)
{
    st_get_op_t g = {.block = 0, .kind = ST_KIND_KV, .dst = dst, .dst_len = len};
    st_handle_t *hd;

    memset(dst, 0, len);
    assert_int_equal(st_client_get(c, chain, 1, &g, 1, &hd), ST_OK);
    dh_run(hd);
    if (length != NULL) {
        *length = g.length;
    }
    return g.status;
}

void dh_raw_hello(dh_raw_t *r)
{
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    srpc_error_t err;

    req.protocol_version = 1;
    assert_int_equal(srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base, 10000,
                               (ProtobufCMessage **)&resp, &err),
                     ST_OK);
    r->ns = resp->namespace_id;
    r->committed_ro = resp->committed_read_only;
    memcpy(r->seed.b, resp->namespace_seed.data, 16);
    if (r->ep == NULL) {
        assert_int_equal(
            tp_connect(r->tp, resp->transport_address.data, resp->transport_address.len, &r->ep),
            ST_OK);
    }
    for (size_t i = 0; i < resp->n_regions; i++) {
        const Strata__V1__Region *g = resp->regions[i];

        assert_true(g->id < 64);
        assert_true(g->rkey.len > 0);
        if (r->rkey[g->id] == NULL) {
            assert_int_equal(tp_rkey_unpack(r->ep, g->rkey.data, g->rkey.len, &r->rkey[g->id]),
                             ST_OK);
            r->base[g->id] = g->remote_addr;
        }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

void dh_raw_open_with(dh_raw_t *r, const char *addr, const tp_config_t *tc)
{
    srpc_channel_config_t cc = {.token = NULL};

    memset(r, 0, sizeof(*r));
    assert_int_equal(srpc_channel_open(addr, &cc, &r->ch), ST_OK);
    assert_int_equal(tp_create(tc, &r->tp), ST_OK);
    assert_int_equal(tp_mem_register(r->tp, r->buf, sizeof(r->buf), &r->mem), ST_OK);
    dh_raw_hello(r);
}

void dh_raw_open(dh_raw_t *r, const char *addr)
{
    tp_config_t tc = {0};

    tc.backend = TP_UCX;
    dh_raw_open_with(r, addr, &tc);
}

void dh_raw_close(dh_raw_t *r)
{
    tp_destroy(r->tp);
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
    Strata__V1__ObjectKey k = gc_key(&chain[0], STRATA__V1__OBJECT_KIND__KV), *kp = &k;
    Strata__V1__LocateResponse *resp = NULL;
    srpc_error_t err;

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
    assert_int_equal(tp_put(r->ep, r->buf, len, r->mem, r->base[region] + off, r->rkey[region],
                            dh_cb_done, &done),
                     ST_OK);
    while (done == ST_ERR_BUSY) {
        tp_progress(r->tp);
    }
    assert_int_equal(done, ST_OK);
    assert_int_equal(tp_ep_flush(r->ep, 10000), ST_OK);
}
