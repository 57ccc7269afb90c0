/*
 * test_transport_calls.c - Locate, Release and Lookup over the data plane's
 * transport (docs/protocol.md, "Calls over the transport"), against real
 * daemons on loopback over UCX:
 *
 *   - raw frames from this process's own UCX transport to one stratad: a
 *     Locate and a Lookup answered over the transport equal the same calls
 *     over gRPC; a Release over the transport ends the lease; a call without
 *     Hello's key, or with another key, is UNAUTHENTICATED; frames that do
 *     not parse (random bytes, bad magic, unknown method, a token longer than
 *     the frame, non-zero reserved bytes, a body that is not the request) are
 *     answered INVALID_ARGUMENT when they carry a call id and dropped when
 *     they are too short to, and the daemon keeps serving; a daemon started
 *     with transport_calls = false says so in Hello and answers nothing
 *     over the transport;
 *   - three daemons through libstrata with transport_calls on and off: the
 *     same lookups and the same bytes, also after a node is killed with
 *     SIGKILL (the calls to it fall back to gRPC, which finds it down).
 *
 * STRATA_TEST_SEED fixes the random sequence (the seed is printed).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/evp.h>
#include <signal.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "client_fixture.h"
#include "cluster.h"
#include "grpc_conn.h"
#include "srpc.h"
#include "log.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "tcall.h"
#include "stratad_arg.h"

#define OBJ      4096
#define N_BLOCKS 96
#define WAIT_MS  20000 /* not a speed check: a lost answer fails instead of hanging */

static const char *stratad_path;
static uint64_t rng_state;

static uint64_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state >> 17;
}

static st_client_t *connect_nodes(const char *nodes, int tcalls)
{
    st_client_params_t p;

    cf_params_session(&p, nodes, "tc", 10000);
    p.field_mask |= ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_TRANSPORT_CALLS;
    p.transport = "ucx";
    p.transport_calls = tcalls;
    return cf_connect(&p);
}

static void fill_obj(uint8_t *buf, size_t b, uint16_t layer)
{
    for (size_t i = 0; i < OBJ; i += 8) {
        uint64_t v = XXH3_64bits_withSeed(&i, sizeof(i), b * 7 + layer);
        memcpy(buf + i, &v, 8);
    }
}

/* KV of layers 0 and 1 for blocks [0, n). */
static void put_chain(st_client_t *c, const st_hash_t *chain, size_t n)
{
    st_put_op_t *ops = calloc(2 * n, sizeof(*ops));
    uint8_t *data = malloc(2 * n * OBJ);
    st_handle_t *h;

    assert_true(ops && data);
    for (size_t b = 0; b < n; b++) {
        for (uint16_t l = 0; l < 2; l++) {
            uint8_t *p = data + (2 * b + l) * OBJ;

            fill_obj(p, b, l);
            ops[2 * b + l] = (st_put_op_t){b, ST_KIND_KV, l, p, OBJ, 0, 0};
        }
    }
    assert_int_equal(st_client_put(c, chain, n, ops, 2 * n, 0, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, 60000), ST_OK);
    st_handle_release(h);
    for (size_t i = 0; i < 2 * n; i++) {
        assert_int_equal(ops[i].status, ST_OK);
    }
    free(ops);
    free(data);
}

/* ------------------------------------------------------------ raw frames -- */

typedef struct answer {
    int got;
    uint64_t id;
    uint32_t code;
    uint8_t *body;
    size_t body_len;
} answer_t;

typedef struct raw {
    srpc_channel_t *ch;
    uint64_t ns;
    int serves;
    uint8_t key[16];
    tp_transport_t *tp;
    tp_ep_t *ep;
    answer_t ans[1024];
    int n_ans;
    int bad; /* answers that did not parse */
} raw_t;

static void raw_on_msg(void *arg, tp_msg_t *msg, const void *data, size_t len)
{
    raw_t *r = arg;
    tcall_frame_t f;
    char why[128];

    (void)msg;
    if (tcall_parse(data, len, 1, &f, why, sizeof(why)) != ST_OK || r->n_ans >= 1024) {
        r->bad++;
        return;
    }
    answer_t *a = &r->ans[r->n_ans++];
    a->got = 1;
    a->id = f.id;
    a->code = f.code;
    a->body_len = f.body_len;
    a->body = malloc(f.body_len + 1);
    assert_non_null(a->body);
    memcpy(a->body, f.body, f.body_len);
}

/* Hello as tenant with token (NULL: none), then connects the transport. */
static void raw_open_as(raw_t *r, const char *addr, const char *token, const char *tenant)
{
    Strata__V1__HelloRequest hello = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *hr = NULL;
    tp_config_t cfg = {.backend = TP_UCX};
    srpc_channel_config_t cc = {.token = token, .client_id = NULL};
    srpc_error_t err;

    memset(r, 0, sizeof(*r));
    assert_int_equal(srpc_channel_open(addr, &cc, &r->ch), ST_OK);
    hello.tenant = (char *)tenant;
    hello.model = "tc";
    assert_int_equal(srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &hello.base, 30000,
                               (ProtobufCMessage **)&hr, &err),
                     ST_OK);
    r->ns = hr->namespace_id;
    r->serves = hr->transport_calls;
    assert_int_equal(hr->transport, STRATA__V1__TRANSPORT_KIND__TRANSPORT_UCX);
    if (r->serves) {
        assert_int_equal(hr->transport_call_key.len, 16);
        memcpy(r->key, hr->transport_call_key.data, 16);
    } else {
        assert_int_equal(hr->transport_call_key.len, 0);
    }
    assert_int_equal(tp_create(&cfg, &r->tp), ST_OK);
    assert_int_equal(tp_msg_listen(r->tp, raw_on_msg, r), ST_OK);
    assert_int_equal(
        tp_connect(r->tp, hr->transport_address.data, hr->transport_address.len, &r->ep), ST_OK);
    protobuf_c_message_free_unpacked(&hr->base, NULL);
}

static void raw_open(raw_t *r, const char *addr)
{
    raw_open_as(r, addr, NULL, "acme");
}

static void raw_close(raw_t *r)
{
    for (int i = 0; i < r->n_ans; i++) {
        free(r->ans[i].body);
    }
    tp_destroy(r->tp);
    srpc_channel_close(r->ch);
}

/* Sends frame bytes as they are. */
static void raw_send(raw_t *r, const void *frame, size_t len)
{
    assert_int_equal(tp_msg_send(r->ep, frame, len), ST_OK);
}

/* Sends a well-formed call of method with msg (key: 16 bytes or NULL). */
static void raw_call(raw_t *r, uint32_t method, uint64_t id, const uint8_t *key, size_t key_len,
                     const ProtobufCMessage *msg)
{
    size_t body = protobuf_c_message_get_packed_size(msg), n;
    uint8_t *frame = malloc(TCALL_HDR + key_len + body);

    assert_non_null(frame);
    n = tcall_head(frame, 0, method, id, (const char *)key, key_len);
    n += protobuf_c_message_pack(msg, frame + n);
    raw_send(r, frame, n);
    free(frame);
}

/* Progresses until want answers in all have come (or WAIT_MS passed). */
static void raw_wait(raw_t *r, int want)
{
    uint64_t start = lg_now_ms();

    while (r->n_ans + r->bad < want && lg_now_ms() - start < WAIT_MS) {
        if (tp_progress(r->tp) <= 0) {
            usleep(100);
        }
    }
}

static answer_t *raw_answer(raw_t *r, uint64_t id)
{
    for (int i = 0; i < r->n_ans; i++) {
        if (r->ans[i].id == id) {
            return &r->ans[i];
        }
    }
    return NULL;
}

/* Release rel over the transport as call id; its one lease must answer want. */
static void raw_release(raw_t *r, uint64_t id, const Strata__V1__ReleaseRequest *rel, int n_ans,
                        Strata__V1__KeyStatus want)
{
    Strata__V1__ReleaseResponse *rr;
    answer_t *a;

    raw_call(r, TCALL_RELEASE, id, r->key, 16, &rel->base);
    raw_wait(r, n_ans);
    assert_non_null(a = raw_answer(r, id));
    assert_int_equal(a->code, 0);
    rr = strata__v1__release_response__unpack(NULL, a->body_len, a->body);
    assert_non_null(rr);
    assert_int_equal(rr->n_status, 1);
    assert_int_equal(rr->status[0], want);
    strata__v1__release_response__free_unpacked(rr, NULL);
}

static void locate_request(Strata__V1__LocateRequest *req, Strata__V1__ObjectKey *keys,
                           Strata__V1__ObjectKey **kp, const raw_t *r, const st_hash_t *chain,
                           size_t n, int lease)
{
    strata__v1__locate_request__init(req);
    req->namespace_id = r->ns;
    req->lease = lease;
    for (size_t i = 0; i < n; i++) {
        strata__v1__object_key__init(&keys[i]);
        keys[i].block_hash.data = (uint8_t *)chain[i / 2].b;
        keys[i].block_hash.len = ST_HASH_BYTES;
        keys[i].kind = STRATA__V1__OBJECT_KIND__KV;
        keys[i].layer = (uint32_t)(i % 2);
        kp[i] = &keys[i];
    }
    req->keys = kp;
    req->n_keys = n;
}

/* Locate of 2 * N_BLOCKS keys over the transport answers what gRPC answers. */
static void raw_locate_as_grpc(raw_t *r, const st_hash_t *chain)
{
    Strata__V1__LocateRequest lreq;
    Strata__V1__ObjectKey keys[2 * N_BLOCKS], *kp[2 * N_BLOCKS];
    Strata__V1__LocateResponse *viagrpc = NULL, *viatp;
    srpc_error_t err;
    answer_t *a;

    locate_request(&lreq, keys, kp, r, chain, 2 * N_BLOCKS, 0);
    assert_int_equal(srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_LOCATE], &lreq.base, 30000,
                               (ProtobufCMessage **)&viagrpc, &err),
                     ST_OK);
    raw_call(r, TCALL_LOCATE, 101, r->key, 16, &lreq.base);
    raw_wait(r, 1);
    assert_int_equal(r->bad, 0);
    assert_non_null(a = raw_answer(r, 101));
    assert_int_equal(a->code, 0);
    viatp = strata__v1__locate_response__unpack(NULL, a->body_len, a->body);
    assert_non_null(viatp);
    assert_int_equal(viatp->locations->n_state, 2 * N_BLOCKS);
    for (size_t i = 0; i < 2 * N_BLOCKS; i++) {
        assert_int_equal(viatp->locations->state[i], STRATA__V1__OBJECT_STATE__OBJECT_PRESENT);
        assert_int_equal(viatp->locations->state[i], viagrpc->locations->state[i]);
        assert_int_equal(viatp->locations->region_id[i], viagrpc->locations->region_id[i]);
        assert_int_equal(viatp->locations->offset[i], viagrpc->locations->offset[i]);
        assert_int_equal(viatp->locations->length[i], OBJ);
        assert_int_equal(viatp->locations->checksum[i], viagrpc->locations->checksum[i]);
    }
    assert_int_equal(viatp->lease_id, 0);
    strata__v1__locate_response__free_unpacked(viatp, NULL);
    protobuf_c_message_free_unpacked(&viagrpc->base, NULL);
}

/* Locate with a lease over the transport, then its Release over it too:
 * a second Release of the same lease finds nothing to release. */
static void raw_lease_release(raw_t *r, const st_hash_t *chain)
{
    Strata__V1__LocateRequest lreq;
    Strata__V1__ObjectKey keys[2 * N_BLOCKS], *kp[2 * N_BLOCKS];
    Strata__V1__LocateResponse *viatp;
    Strata__V1__ReleaseRequest rel = STRATA__V1__RELEASE_REQUEST__INIT;
    uint64_t id;
    answer_t *a;

    locate_request(&lreq, keys, kp, r, chain, 8, 1);
    raw_call(r, TCALL_LOCATE, 102, r->key, 16, &lreq.base);
    raw_wait(r, 2);
    assert_non_null(a = raw_answer(r, 102));
    assert_int_equal(a->code, 0);
    viatp = strata__v1__locate_response__unpack(NULL, a->body_len, a->body);
    assert_non_null(viatp);
    assert_true(viatp->lease_id != 0);
    id = viatp->lease_id;
    rel.namespace_id = r->ns;
    rel.lease_ids = &id;
    rel.n_lease_ids = 1;
    raw_release(r, 103, &rel, 3, STRATA__V1__KEY_STATUS__KEY_OK);
    raw_release(r, 104, &rel, 4, STRATA__V1__KEY_STATUS__KEY_NOT_FOUND);
    strata__v1__locate_response__free_unpacked(viatp, NULL);
}

/* Lookup of the whole chain over the transport answers what gRPC answers. */
static void raw_lookup_as_grpc(raw_t *r, Strata__V1__LookupRequest *kreq)
{
    Strata__V1__LookupResponse *lr, *lg = NULL;
    srpc_error_t err;
    answer_t *a;

    raw_call(r, TCALL_LOOKUP, 105, r->key, 16, &kreq->base);
    raw_wait(r, 5);
    assert_non_null(a = raw_answer(r, 105));
    assert_int_equal(a->code, 0);
    lr = strata__v1__lookup_response__unpack(NULL, a->body_len, a->body);
    assert_non_null(lr);
    assert_int_equal(srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_LOOKUP], &kreq->base, 30000,
                               (ProtobufCMessage **)&lg, &err),
                     ST_OK);
    assert_int_equal(lr->n_segments, 1);
    assert_int_equal(lg->n_segments, 1);
    assert_int_equal(lr->segments[0]->matched_blocks, N_BLOCKS);
    assert_int_equal(lr->segments[0]->matched_blocks, lg->segments[0]->matched_blocks);
    strata__v1__lookup_response__free_unpacked(lr, NULL);
    protobuf_c_message_free_unpacked(&lg->base, NULL);
}

/* No key, another key, a short key: refused, nothing served. */
static void raw_bad_keys(raw_t *r, const Strata__V1__LookupRequest *kreq)
{
    uint8_t other[16];
    answer_t *a;

    memcpy(other, r->key, 16);
    other[7] ^= 1;
    raw_call(r, TCALL_LOOKUP, 106, NULL, 0, &kreq->base);
    raw_call(r, TCALL_LOOKUP, 107, other, 16, &kreq->base);
    raw_call(r, TCALL_LOOKUP, 108, r->key, 15, &kreq->base);
    raw_wait(r, 8);
    for (uint64_t id = 106; id <= 108; id++) {
        assert_non_null(a = raw_answer(r, id));
        assert_int_equal(a->code, 16); /* UNAUTHENTICATED */
        assert_int_equal(a->body_len, 0);
    }
}

/* Frames that do not parse. Each one that holds a call id is answered
 * INVALID_ARGUMENT; shorter ones are dropped. */
static void raw_bad_frames(raw_t *r)
{
    int base = r->n_ans, sent_answerable;
    uint8_t frame[4096];
    size_t n;
    answer_t *a;

    /* bad magic */
    n = tcall_head(frame, 0, TCALL_LOCATE, 200, (const char *)r->key, 16);
    frame[0] ^= 0xff;
    raw_send(r, frame, n);
    /* unknown methods */
    n = tcall_head(frame, 0, 0, 201, (const char *)r->key, 16);
    raw_send(r, frame, n);
    n = tcall_head(frame, 0, 9, 202, (const char *)r->key, 16);
    raw_send(r, frame, n);
    /* a token longer than the frame */
    n = tcall_head(frame, 0, TCALL_LOCATE, 203, (const char *)r->key, 16);
    frame[16] = 200;
    raw_send(r, frame, n);
    /* reserved bytes set */
    n = tcall_head(frame, 0, TCALL_LOCATE, 204, (const char *)r->key, 16);
    frame[21] = 1;
    raw_send(r, frame, n);
    /* a body that is not a LocateRequest */
    n = tcall_head(frame, 0, TCALL_LOCATE, 205, (const char *)r->key, 16);
    memset(frame + n, 0xff, 64);
    raw_send(r, frame, n + 64);
    sent_answerable = 6;
    /* random frames: short ones are dropped, the others answered by id */
    for (int i = 0; i < 300; i++) {
        size_t len = 1 + rnd() % 200;

        for (size_t k = 0; k < len; k++) {
            frame[k] = (uint8_t)rnd();
        }
        if (i % 3 == 0 && len >= TCALL_HDR) {
            /* a real header with random rest: reaches the parser's later checks */
            uint64_t id = 1000 + (uint64_t)i;

            tcall_head(frame, 0, 1 + (uint32_t)(rnd() % 3), id, NULL, 0);
            frame[16] = (uint8_t)rnd();
        }
        raw_send(r, frame, len);
        sent_answerable += len >= TCALL_HDR;
    }
    raw_wait(r, base + sent_answerable);
    assert_int_equal(r->bad, 0);
    assert_int_equal(r->n_ans - base, sent_answerable);
    for (uint64_t id = 200; id <= 205; id++) {
        assert_non_null(a = raw_answer(r, id));
        assert_int_equal(a->code, 3); /* INVALID_ARGUMENT */
    }
    for (int i = base; i < r->n_ans; i++) {
        /* random frames are refused or, holding the key by chance never, denied */
        assert_true(r->ans[i].code == 3 || r->ans[i].code == 16);
        assert_int_equal(r->ans[i].body_len, 0);
    }
}

/* A daemon that does not serve calls over the transport says so and
 * answers none. */
static void raw_not_served(tc_cluster_t *cl, raw_t *r, const Strata__V1__LookupRequest *kreq)
{
    uint64_t start;

    assert_int_equal(tc_start(cl, stratad_path, 1, "--transport-calls=false"), 0);
    raw_open(r, cl->node[0].addr);
    assert_false(r->serves);
    raw_call(r, TCALL_LOOKUP, 400, r->key, 16, &kreq->base);
    start = lg_now_ms();
    while (lg_now_ms() - start < 300) {
        (void)tp_progress(r->tp);
        usleep(1000);
    }
    assert_int_equal(r->n_ans, 0);
    raw_close(r);
    tc_stop_all(cl);
}

static void test_raw_frames(void **state)
{
    tc_cluster_t cl;
    raw_t *r = calloc(1, sizeof(*r));
    st_client_t *c;
    st_hash_t *chain;
    gc_lookup_t look;
    answer_t *a;

    (void)state;
    assert_non_null(r);
    assert_int_equal(tc_start(&cl, stratad_path, 1, NULL), 0);
    c = connect_nodes(cl.node[0].addr, 1);
    chain = cf_chain(c, 11, N_BLOCKS);
    put_chain(c, chain, N_BLOCKS);
    raw_open(r, cl.node[0].addr);
    assert_true(r->serves);

    raw_locate_as_grpc(r, chain);
    raw_lease_release(r, chain);

    /* Lookup of the whole chain and of a diverging one. */
    gc_lookup_build(&look, r->ns, chain, N_BLOCKS);
    raw_lookup_as_grpc(r, &look.req);
    raw_bad_keys(r, &look.req);
    raw_bad_frames(r);

    /* Still serving. */
    raw_call(r, TCALL_LOOKUP, 300, r->key, 16, &look.req.base);
    raw_wait(r, r->n_ans + 1);
    assert_non_null(a = raw_answer(r, 300));
    assert_int_equal(a->code, 0);

    raw_close(r);
    st_client_close(c);
    tc_stop_all(&cl);

    raw_not_served(&cl, r, &look.req);
    free(chain);
    free(r);
}

/* ------------------------------------------------- through libstrata -- */

static void lookup_both(st_client_t *on, st_client_t *off, const st_hash_t *chain, size_t n,
                        size_t *matched)
{
    st_lookup_result_t a, b;

    assert_int_equal(st_client_lookup(on, chain, n, 0, &a), ST_OK);
    assert_int_equal(st_client_lookup(off, chain, n, 0, &b), ST_OK);
    assert_int_equal(a.matched_blocks, b.matched_blocks);
    *matched = a.matched_blocks;
}

/* Reads blocks [0, n) through c; returns how many objects came back, and
 * checks every one's bytes. */
static size_t get_all(st_client_t *c, const st_hash_t *chain, size_t n)
{
    st_get_op_t *ops = calloc(2 * n, sizeof(*ops));
    uint8_t *buf = malloc(2 * n * OBJ), want[OBJ];
    st_handle_t *h;
    size_t ok = 0;

    assert_true(ops && buf);
    for (size_t i = 0; i < 2 * n; i++) {
        ops[i] = (st_get_op_t){
            i / 2, ST_KIND_KV, (uint16_t)(i % 2), buf + i * OBJ, OBJ, 0, NULL, 0, ST_ERR_BUSY, 0};
    }
    assert_int_equal(st_client_get(c, chain, n, ops, 2 * n, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, 60000), ST_OK);
    st_handle_release(h);
    for (size_t i = 0; i < 2 * n; i++) {
        if (ops[i].status != ST_OK) {
            assert_true(ops[i].status == ST_ERR_NOT_FOUND || ops[i].status == ST_ERR_UNAVAILABLE);
            continue;
        }
        fill_obj(want, i / 2, (uint16_t)(i % 2));
        assert_int_equal(ops[i].length, OBJ);
        assert_memory_equal(buf + i * OBJ, want, OBJ);
        ok++;
    }
    free(ops);
    free(buf);
    return ok;
}

/* A Stats counter of the node at addr (the node as a whole). */
static uint64_t node_counter(const char *addr, const char *name)
{
    Strata__V1__StatsRequest req = STRATA__V1__STATS_REQUEST__INIT;
    Strata__V1__StatsResponse *resp = NULL;
    srpc_channel_t *ch;
    srpc_error_t err;
    uint64_t v = UINT64_MAX;

    assert_int_equal(srpc_channel_open(addr, NULL, &ch), ST_OK);
    assert_int_equal(srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_STATS], &req.base, 30000,
                               (ProtobufCMessage **)&resp, &err),
                     ST_OK);
    for (size_t i = 0; i < resp->n_counters; i++) {
        if (strcmp(resp->counters[i]->key, name) == 0) {
            v = resp->counters[i]->value;
        }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    srpc_channel_close(ch);
    assert_true(v != UINT64_MAX);
    return v;
}

/* The leases of whole-object reads are released (over the transport, not
 * waited for) well before they would end by time (the daemon's lease: 5 s). */
static void expect_leases_released(const tc_cluster_t *cl, int n)
{
    uint64_t start = lg_now_ms(), active = 1, released = 0;

    while (lg_now_ms() - start < 2000) {
        active = released = 0;
        for (int i = 0; i < n; i++) {
            active += node_counter(cl->node[i].addr, "leases_active");
            released += node_counter(cl->node[i].addr, "leases_released");
        }
        if (active == 0) {
            break;
        }
        usleep(20000);
    }
    assert_int_equal(active, 0);
    assert_true(released > 0);
}

static void test_client_on_off(void **state)
{
    tc_cluster_t cl;
    st_client_t *on, *off;
    st_hash_t *chain;
    size_t m, all, n = 4 * N_BLOCKS;
    char nodes[256];

    (void)state;
    assert_int_equal(tc_start(&cl, stratad_path, 3, NULL), 0);
    snprintf(nodes, sizeof(nodes), "%s,%s,%s", cl.node[0].addr, cl.node[1].addr, cl.node[2].addr);
    on = connect_nodes(nodes, 1);
    off = connect_nodes(nodes, 0);
    chain = cf_chain(on, 22, n);
    put_chain(on, chain, n);
    lookup_both(on, off, chain, n, &m);
    assert_int_equal(m, n);
    assert_int_equal(get_all(on, chain, n), 2 * n);
    expect_leases_released(&cl, 3);
    assert_int_equal(get_all(off, chain, n), 2 * n);

    /* One node dies: the calls to it fall back to gRPC, which finds it down;
     * both clients see the same shorter prefix and the same surviving bytes. */
    tc_kill(&cl, 1);
    lookup_both(on, off, chain, n, &m);
    assert_true(m < n);
    all = get_all(on, chain, n);
    assert_true(all < 2 * n);
    assert_int_equal(get_all(off, chain, n), all);
    printf("after the kill: %zu of %zu blocks matched, %zu of %zu objects read\n", m, n, all,
           2 * n);

    /* It comes back without calls over the transport: a batch's Locates go
     * to it over gRPC and to the others over the transport. */
    snprintf(cl.extra, sizeof(cl.extra), "--transport-calls=false");
    assert_int_equal(tc_restart(&cl, 1), 0);
    {
        /* Both clients see it again once gRPC's reconnect backoff lets them. */
        st_lookup_result_t r = {0}, q = {0};
        uint64_t start = lg_now_ms();

        do {
            usleep(50000);
            assert_int_equal(st_client_lookup(on, chain, n, 0, &r), ST_OK);
            assert_int_equal(st_client_lookup(off, chain, n, 0, &q), ST_OK);
        } while ((r.nodes_down > 0 || q.nodes_down > 0) && lg_now_ms() - start < 60000);
        assert_int_equal(r.nodes_down, 0);
        assert_int_equal(q.nodes_down, 0);
    }
    put_chain(on, chain, n);
    lookup_both(on, off, chain, n, &m);
    assert_int_equal(m, n);
    assert_int_equal(get_all(on, chain, n), 2 * n);
    assert_int_equal(get_all(off, chain, n), 2 * n);
    expect_leases_released(&cl, 3);

    st_client_close(on);
    st_client_close(off);
    free(chain);
    tc_stop_all(&cl);
}

/* Locate of one key of ns over the transport with key; returns the answer's code. */
static uint32_t raw_locate_code(raw_t *r, uint64_t ns, const uint8_t *key, uint64_t id)
{
    Strata__V1__LocateRequest req = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__ObjectKey k = STRATA__V1__OBJECT_KEY__INIT, *kp = &k;
    uint8_t hash[16];
    answer_t *a;

    memset(hash, 9, sizeof(hash));
    k.block_hash.data = hash;
    k.block_hash.len = 16;
    k.kind = STRATA__V1__OBJECT_KIND__KV;
    req.namespace_id = ns;
    req.keys = &kp;
    req.n_keys = 1;
    raw_call(r, TCALL_LOCATE, id, key, 16, &req.base);
    raw_wait(r, r->n_ans + 1);
    assert_non_null(a = raw_answer(r, id));
    return a->code;
}

static void write_tenants(const char *path, int with_beta)
{
    static const char *const toks[2] = {"tc-alpha-token-123456", "tc-beta-token-654321"};
    FILE *f = fopen(path, "w");

    assert_non_null(f);
    for (int t = 0; t < 1 + with_beta; t++) {
        unsigned char h[32];
        unsigned int n = 0;

        assert_int_equal(EVP_Digest(toks[t], strlen(toks[t]), h, &n, EVP_sha256(), NULL), 1);
        fprintf(f, "%s sha256:", t == 0 ? "alpha" : "beta");
        for (int i = 0; i < 32; i++) {
            fprintf(f, "%02x", h[i]);
        }
        fprintf(f, "\n");
    }
    fclose(f);
}

/* Transport keys are per Hello and bound to its tenant: A's key on B's
 * namespace answers as an unknown namespace; a key of a tenant a reload
 * removed is refused. */
static void test_tenant_keys(void **state)
{
    tc_cluster_t cl;
    raw_t *ra = calloc(1, sizeof(*ra)), *rb = calloc(1, sizeof(*rb));
    char path[64], extra[128];
    uint32_t code;

    (void)state;
    snprintf(path, sizeof(path), "/tmp/strata-tc-tenants-%d", (int)getpid());
    write_tenants(path, 1);
    /* Two tenants over UCX (transport calls are UCX's): the opt-in. */
    snprintf(extra, sizeof(extra), "--tenants-file %s --allow-shared-dataplane", path);
    assert_int_equal(tc_start(&cl, stratad_path, 1, extra), 0);
    raw_open_as(ra, cl.node[0].addr, "tc-alpha-token-123456", "alpha");
    raw_open_as(rb, cl.node[0].addr, "tc-beta-token-654321", "beta");
    assert_true(ra->serves && rb->serves);
    assert_memory_not_equal(ra->key, rb->key, 16);
    assert_int_equal(raw_locate_code(ra, ra->ns, ra->key, 1), 0);
    assert_int_equal(raw_locate_code(rb, rb->ns, rb->key, 2), 0);
    /* A's key (over A's own endpoint) on B's namespace: as an unknown namespace. */
    code = raw_locate_code(ra, rb->ns, ra->key, 3);
    assert_int_equal(code, 5); /* NOT_FOUND */
    assert_int_equal(raw_locate_code(ra, rb->ns ^ 0x77, ra->key, 4), 5);
    /* beta leaves: its key dies with it; alpha's still serves. */
    write_tenants(path, 0);
    assert_int_equal(kill(cl.node[0].pid, SIGHUP), 0);
    for (int i = 0; i < 100; i++) {
        code = raw_locate_code(rb, rb->ns, rb->key, 100 + (uint64_t)i);
        if (code != 0) {
            break;
        }
        usleep(50000);
    }
    assert_int_equal(code, 16); /* UNAUTHENTICATED */
    assert_int_equal(raw_locate_code(ra, ra->ns, ra->key, 5), 0);
    raw_close(ra);
    raw_close(rb);
    free(ra);
    free(rb);
    tc_stop_all(&cl);
    unlink(path);
}

int main(int argc, char **argv)
{
    const char *s = getenv("STRATA_TEST_SEED");
    uint64_t seed = s != NULL ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
    tp_transport_t *probe;
    tp_config_t cfg = {.backend = TP_UCX};

    if (tm_stratad_arg(argc, argv, 2, NULL, "STRATAD", &stratad_path) != 0) {
        return 2;
    }
    printf("test_transport_calls: seed %llu (STRATA_TEST_SEED)\n", (unsigned long long)seed);
    rng_state = seed * 2654435761u + 1;
    if (tp_create(&cfg, &probe) != ST_OK) {
        printf("skip: UCX is not available here\n");
        return 77;
    }
    tp_destroy(probe);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_raw_frames),
        cmocka_unit_test(test_client_on_off),
        cmocka_unit_test(test_tenant_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
