/*
 * test_dataplane_raw.c - the protocol-level cases of test_dataplane (one
 * executable): a raw connection (gRPC channel, Hello's region keys, this
 * process's own transport) that reserves, writes, commits and reads behind
 * libstrata's back: a commit with a wrong checksum, abort and expiry
 * reclaiming space, a read after its lease expired and its extent was
 * reused, committed objects not writable, a put outliving its reservation,
 * a late put fenced.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "client_fixture.h"
#include "cluster.h"
#include "dp_harness.h"
#include "grpc_conn.h"
#include "log.h"
#include "srpc.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "test_dataplane.h"

static st_status_t rcall(dh_raw_t *r, int m, const void *req, void **resp)
{
    srpc_error_t err;

    return srpc_call(r->ch, &srpc_cache_methods[m], (const ProtobufCMessage *)req, 10000,
                     (ProtobufCMessage **)resp, &err);
}

/* A raw connection to addr over the client's transport (td_spec). */
static void raw_open(dh_raw_t *r, const char *addr)
{
    tp_config_t tc = {0};
    const char *colon = strchr(td_spec, ':');

    tc.backend = strncmp(td_spec, "ucx", 3) == 0 ? TP_UCX : TP_FABRIC;
    tc.fabric_provider = colon != NULL ? colon + 1 : NULL;
    dh_raw_open_with(r, addr, &tc);
}

/* One blocking get or put of len bytes at (region, offset). */
static st_status_t raw_xfer(dh_raw_t *r, int put, uint32_t region, uint64_t off, size_t len)
{
    st_status_t done = ST_ERR_BUSY, st;

    if (r->rkey[region] == NULL) {
        dh_raw_hello(r);
    }
    st = put ? tp_put(r->ep, r->buf, len, r->mem, r->base[region] + off, r->rkey[region],
                      dh_cb_done, &done)
             : tp_get(r->ep, r->buf, len, r->mem, r->base[region] + off, r->rkey[region],
                      dh_cb_done, &done);
    if (st != ST_OK) {
        return st;
    }
    while (done == ST_ERR_BUSY) {
        tp_progress(r->tp);
    }
    if (put && done == ST_OK) {
        done = tp_ep_flush(r->ep, 10000);
    }
    return done;
}

/*
 * A put of r->buf[0..len) to remote_addr through rkey, waiting at most
 * wait_ms for it (a put the daemon refuses may never complete: libfabric
 * shm). Returns its status, or ST_ERR_TIMEOUT.
 */
static st_status_t raw_put_key(dh_raw_t *r, tp_rkey_t *rkey, uint64_t remote_addr, size_t len,
                               int wait_ms)
{
    st_status_t done = ST_ERR_BUSY, st;
    uint64_t until = lg_now_ms() + (uint64_t)wait_ms;

    st = tp_put(r->ep, r->buf, len, r->mem, remote_addr, rkey, dh_cb_done, &done);
    if (st != ST_OK) {
        return st;
    }
    while (done == ST_ERR_BUSY && lg_now_ms() < until) {
        tp_progress(r->tp);
    }
    if (done == ST_ERR_BUSY) {
        return ST_ERR_TIMEOUT;
    }
    return done == ST_OK ? tp_ep_flush(r->ep, wait_ms) : done;
}

/*
 * The key that writes extent 0 of rv: its write key (unpacked into
 * *wkey_p, the caller destroys it) where the daemon hands them out, else
 * the region's key. Writes its remote address to *addr_p.
 */
static tp_rkey_t *raw_resv_key(dh_raw_t *r, const Strata__V1__ReserveResponse *rv,
                               tp_rkey_t **wkey_p, uint64_t *addr_p)
{
    uint32_t region = rv->extents->region_id[0];

    if (r->rkey[region] == NULL) {
        dh_raw_hello(r);
    }
    *addr_p = r->base[region] + rv->extents->offset[0];
    *wkey_p = NULL;
    if (rv->n_write_rkeys == 1 && rv->write_rkeys[0].len > 0) {
        assert_int_equal(
            tp_rkey_unpack(r->ep, rv->write_rkeys[0].data, rv->write_rkeys[0].len, wkey_p), ST_OK);
        return *wkey_p;
    }
    return r->rkey[region];
}

/* A put of r->buf[0..len) into the extent reserved by rv, through its key. */
static st_status_t raw_put_resv(dh_raw_t *r, const Strata__V1__ReserveResponse *rv, size_t len)
{
    tp_rkey_t *wkey;
    uint64_t addr;
    tp_rkey_t *key = raw_resv_key(r, rv, &wkey, &addr);
    st_status_t st = raw_put_key(r, key, addr, len, 10000);

    tp_rkey_destroy(wkey);
    return st;
}

static Strata__V1__ReserveResponse *raw_reserve(dh_raw_t *r, const st_hash_t *h, uint64_t len,
                                                uint32_t ttl_ms)
{
    Strata__V1__ReserveRequest req = STRATA__V1__RESERVE_REQUEST__INIT;
    Strata__V1__ObjectKey k = gc_key(h, STRATA__V1__OBJECT_KIND__KV), *kp = &k;
    Strata__V1__ReserveResponse *resp = NULL;

    req.namespace_id = r->ns;
    req.keys = &kp;
    req.n_keys = 1;
    req.lengths = &len;
    req.n_lengths = 1;
    req.ttl_ms = ttl_ms;
    assert_int_equal(rcall(r, SRPC_CACHE_RESERVE, &req, (void **)&resp), ST_OK);
    assert_int_equal(resp->status[0], STRATA__V1__KEY_STATUS__KEY_OK);
    return resp;
}

static int raw_present(dh_raw_t *r, const st_hash_t *h)
{
    Strata__V1__LocateRequest req = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__ObjectKey k = gc_key(h, STRATA__V1__OBJECT_KIND__KV), *kp = &k;
    Strata__V1__LocateResponse *resp = NULL;
    int present;

    req.namespace_id = r->ns;
    req.keys = &kp;
    req.n_keys = 1;
    assert_int_equal(rcall(r, SRPC_CACHE_LOCATE, &req, (void **)&resp), ST_OK);
    present = resp->locations->state[0] == STRATA__V1__OBJECT_STATE__OBJECT_PRESENT;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return present;
}

/* Puts len bytes of src as KV block 0 of chain through c; asserts it committed. */
static void put_block0(st_client_t *c, const st_hash_t *chain, const uint8_t *src, size_t len)
{
    st_put_op_t p = {.block = 0, .kind = ST_KIND_KV, .src = src, .len = len};
    st_handle_t *hd;

    assert_int_equal(st_client_put(c, chain, 1, &p, 1, 0, &hd), ST_OK);
    dh_run(hd);
    assert_int_equal(p.status, ST_OK);
}

/* Locates KV object h (with a lease when lease; lease_ms as given); the
 * caller frees the answer. */
static Strata__V1__LocateResponse *raw_locate1(dh_raw_t *r, const st_hash_t *h, int lease,
                                               uint32_t lease_ms)
{
    Strata__V1__LocateRequest lq = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__LocateResponse *lr = NULL;
    Strata__V1__ObjectKey k = gc_key(h, STRATA__V1__OBJECT_KIND__KV), *kp = &k;

    lq.namespace_id = r->ns;
    lq.keys = &kp;
    lq.n_keys = 1;
    lq.lease = lease;
    lq.lease_ms = lease_ms;
    assert_int_equal(rcall(r, SRPC_CACHE_LOCATE, &lq, (void **)&lr), ST_OK);
    return lr;
}

void test_commit_checksum_abort_expiry(void **state)
{
    tc_cluster_t cl;
    dh_raw_t *r = calloc(1, sizeof(*r));
    st_hash_t h[3];
    Strata__V1__ReserveResponse *rv;
    Strata__V1__CommitRequest cr = STRATA__V1__COMMIT_REQUEST__INIT;
    Strata__V1__CommitResponse *cresp = NULL;
    Strata__V1__AbortRequest ar = STRATA__V1__ABORT_REQUEST__INIT;
    Strata__V1__AbortResponse *aresp = NULL;
    uint64_t sum;

    (void)state;
    /* The daemon's reservation lifetime (ReserveRequest.ttl_ms is not
     * honoured by the store yet). */
    td_start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M --reservation-ttl 1s");
    raw_open(r, cl.node[0].addr);
    for (int i = 0; i < 3; i++) {
        memset(h[i].b, 0x40 + i, 16);
    }
    /* Write with a one-sided put, commit with a wrong checksum: refused. */
    rv = raw_reserve(r, &h[0], 4096, 0);
    dh_fill(r->buf, 4096, 0, 44);
    assert_int_equal(raw_put_resv(r, rv, 4096), ST_OK);
    sum = XXH3_64bits(r->buf, 4096) ^ 1;
    cr.namespace_id = r->ns;
    cr.reservation_id = rv->reservation_id;
    cr.checksums = &sum;
    cr.n_checksums = 1;
    assert_int_equal(rcall(r, SRPC_CACHE_COMMIT, &cr, (void **)&cresp), ST_OK);
    assert_int_equal(cresp->status[0], STRATA__V1__KEY_STATUS__KEY_CORRUPT);
    protobuf_c_message_free_unpacked(&cresp->base, NULL);
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    assert_false(raw_present(r, &h[0]));
    /* The same, with the right checksum: visible. */
    rv = raw_reserve(r, &h[0], 4096, 0);
    assert_int_equal(raw_put_resv(r, rv, 4096), ST_OK);
    sum = XXH3_64bits(r->buf, 4096);
    cr.reservation_id = rv->reservation_id;
    assert_int_equal(rcall(r, SRPC_CACHE_COMMIT, &cr, (void **)&cresp), ST_OK);
    assert_int_equal(cresp->status[0], STRATA__V1__KEY_STATUS__KEY_OK);
    protobuf_c_message_free_unpacked(&cresp->base, NULL);
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    assert_true(raw_present(r, &h[0]));
    /* Abort reclaims at once; expiry at the reaper's next pass. */
    assert_int_equal(gc_stat(r->ch, "reservations_active"), 0);
    rv = raw_reserve(r, &h[1], 1 << 20, 0);
    assert_int_equal(gc_stat(r->ch, "reservations_active"), 1);
    ar.namespace_id = r->ns;
    ar.reservation_id = rv->reservation_id;
    assert_int_equal(rcall(r, SRPC_CACHE_ABORT, &ar, (void **)&aresp), ST_OK);
    protobuf_c_message_free_unpacked(&aresp->base, NULL);
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    assert_int_equal(gc_stat(r->ch, "reservations_active"), 0);
    /* Two: the refused commit freed its extent at once, then this abort. */
    assert_int_equal(gc_stat(r->ch, "reservations_aborted"), 2);
    rv = raw_reserve(r, &h[2], 1 << 20, 0);
    uint64_t expired_id = rv->reservation_id; /* ids are random: not the last one + 1 */
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    for (int i = 0; i < 200 && gc_stat(r->ch, "reservations_expired") == 0; i++) {
        usleep(50000);
    }
    assert_int_equal(gc_stat(r->ch, "reservations_expired"), 1);
    assert_int_equal(gc_stat(r->ch, "reservations_active"), 0);
    assert_false(raw_present(r, &h[2]));
    /* Abort is idempotent for ids this daemon issued (aborted, committed or
     * expired: OK, nothing more is freed); an id never issued is NOT_FOUND. */
    uint64_t issued[3] = {ar.reservation_id, cr.reservation_id, expired_id};
    for (int i = 0; i < 3; i++) {
        ar.reservation_id = issued[i];
        assert_int_equal(rcall(r, SRPC_CACHE_ABORT, &ar, (void **)&aresp), ST_OK);
        protobuf_c_message_free_unpacked(&aresp->base, NULL);
    }
    assert_int_equal(gc_stat(r->ch, "reservations_aborted"), 2);
    ar.reservation_id = issued[2] + 1000;
    assert_int_equal(rcall(r, SRPC_CACHE_ABORT, &ar, (void **)&aresp), ST_ERR_NOT_FOUND);
    dh_raw_close(r);
    free(r);
    tc_stop_all(&cl);
}

void test_read_after_lease_expiry_is_a_miss(void **state)
{
    enum { LEN = 60000 };
    tc_cluster_t cl;
    dh_raw_t *r = calloc(1, sizeof(*r));
    st_client_t *c;
    st_hash_t *a, *b;
    uint8_t *x = malloc(LEN), *y = malloc(LEN);
    Strata__V1__LocateResponse *lr = NULL, *lr2 = NULL;
    Strata__V1__ReleaseRequest rq = STRATA__V1__RELEASE_REQUEST__INIT;
    Strata__V1__ReleaseResponse *rr = NULL;
    uint64_t lease, sum;
    uint32_t region;
    uint64_t off;

    (void)state;
    td_start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M");
    c = td_connect(&cl);
    raw_open(r, cl.node[0].addr);
    a = dh_make_chain(c, 5, 1);
    b = dh_make_chain(c, 6, 1);
    dh_fill(x, LEN, 0, 55);
    dh_fill(y, LEN, 0, 66);
    put_block0(c, a, x, LEN);
    /* Locate with a 20 ms lease, then let it lapse. */
    lr = raw_locate1(r, &a[0], 1, 20);
    assert_int_equal(lr->locations->state[0], STRATA__V1__OBJECT_STATE__OBJECT_PRESENT);
    lease = lr->lease_id;
    region = lr->locations->region_id[0];
    off = lr->locations->offset[0];
    sum = lr->locations->checksum[0];
    usleep(300000);
    /* The extent is freed and reused by another object of the same size. */
    assert_int_equal(st_client_delete(c, a, 1, 1u << ST_KIND_KV, 1), ST_OK);
    put_block0(c, b, y, LEN);
    lr2 = raw_locate1(r, &b[0], 0, 20); /* the lease_ms of the first */
    if (lr2->locations->region_id[0] == region && lr2->locations->offset[0] == off) {
        assert_int_not_equal(lr2->locations->generation[0], lr->locations->generation[0]);
    }
    /* The late read: whatever it finds, it does not pass as the old object. */
    assert_int_equal(raw_xfer(r, 0, region, off, LEN), ST_OK);
    assert_true(XXH3_64bits(r->buf, LEN) != sum || memcmp(r->buf, x, LEN) == 0);
    if (lr2->locations->region_id[0] == region && lr2->locations->offset[0] == off) {
        assert_memory_equal(r->buf, y, LEN); /* reused: the new bytes, caught by the checksum */
    }
    /* The lease is gone: a row read under it would count as a miss. */
    rq.namespace_id = r->ns;
    rq.lease_ids = &lease;
    rq.n_lease_ids = 1;
    assert_int_equal(rcall(r, SRPC_CACHE_RELEASE, &rq, (void **)&rr), ST_OK);
    assert_int_equal(rr->status[0], STRATA__V1__KEY_STATUS__KEY_NOT_FOUND);
    /* Through libstrata the old object is a miss, the new one a hit. */
    assert_int_equal(dh_get_block0(c, a, x, LEN, NULL), ST_ERR_NOT_FOUND);
    assert_int_equal(dh_get_block0(c, b, x, LEN, NULL), ST_OK);
    assert_memory_equal(x, y, LEN);
    protobuf_c_message_free_unpacked(&rr->base, NULL);
    protobuf_c_message_free_unpacked(&lr->base, NULL);
    protobuf_c_message_free_unpacked(&lr2->base, NULL);
    free(x), free(y), free(a), free(b);
    dh_raw_close(r);
    free(r);
    st_client_close(c);
    tc_stop_all(&cl);
}

/*
 * No key a client holds changes a committed object, or a changed one is
 * never served: Hello says whether the node's transport keeps committed
 * bytes read-only (libfabric tcp;ofi_rxm and shm do, UCX does not:
 * docs/transport.md). A put through the region's key over a committed
 * object, and one through a live reservation's write key aimed at it, then
 * either fail with the bytes unchanged (a hit with the committed bytes), or
 * land and the reader reports a miss.
 */
void test_committed_not_writable(void **state)
{
    enum { LEN = 60000 };
    tc_cluster_t cl;
    dh_raw_t *r = calloc(1, sizeof(*r));
    st_client_t *c;
    st_hash_t *a, other;
    uint8_t *x = malloc(LEN), *got = malloc(LEN);
    Strata__V1__ReserveResponse *rv;
    Strata__V1__LocateResponse *lr = NULL;
    tp_rkey_t *wkey;
    uint64_t addr, waddr;
    st_status_t by_region, by_wkey = ST_ERR_UNSUPPORTED, got_status;
    uint32_t region;

    (void)state;
    td_start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M");
    c = td_connect(&cl);
    a = dh_make_chain(c, 9, 1);
    dh_fill(x, LEN, 0, 31);
    put_block0(c, a, x, LEN);
    raw_open(r, cl.node[0].addr);
    assert_int_equal(r->committed_ro, strncmp(td_spec, "libfabric", 9) == 0);
    lr = raw_locate1(r, &a[0], 0, 0);
    assert_int_equal(lr->locations->state[0], STRATA__V1__OBJECT_STATE__OBJECT_PRESENT);
    region = lr->locations->region_id[0];
    if (r->rkey[region] == NULL) {
        dh_raw_hello(r);
    }
    addr = r->base[region] + lr->locations->offset[0];
    /* A live reservation of this client's own: its write key, aimed at the
     * committed object (outside its extent: refused before it is posted). */
    memset(other.b, 0x5c, sizeof(other.b));
    rv = raw_reserve(r, &other, 4096, 0);
    (void)raw_resv_key(r, rv, &wkey, &waddr);
    memset(r->buf, 0xee, LEN);
    if (wkey != NULL) {
        by_wkey = raw_put_key(r, wkey, addr, LEN, 3000);
        assert_int_not_equal(by_wkey, ST_OK);
    }
    /* The region's key, over the committed object. */
    by_region = raw_put_key(r, r->rkey[region], addr, LEN, 3000);
    printf("put over a committed object: region key %s, write key %s (committed_read_only=%d)\n",
           st_strerror(by_region), st_strerror(by_wkey), r->committed_ro);
    got_status = dh_get_block0(c, a, got, LEN, NULL);
    if (r->committed_ro) {
        /* Enforced: the put failed and the bytes are the committed ones. */
        assert_int_not_equal(by_region, ST_OK);
        assert_int_equal(got_status, ST_OK);
        assert_memory_equal(got, x, LEN);
    } else {
        /* Not enforced: the put landed; the reader checks and misses. */
        assert_int_equal(got_status, ST_ERR_NOT_FOUND);
    }
    protobuf_c_message_free_unpacked(&lr->base, NULL);
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    free(x), free(got), free(a);
    dh_raw_close(r);
    free(r);
    st_client_close(c);
    tc_stop_all(&cl);
}

/*
 * A libstrata put whose reservation expires while its bytes are still on the
 * way (reservation_ttl 10ms, 48 MiB in one batch): the late puts are refused
 * where write keys are revoked (libfabric shm drops them without a
 * completion), and the put call still returns within its timeout, with the
 * late objects failed and every object that did commit readable as written.
 */
void test_put_outlives_reservation(void **state)
{
    enum { N = 48, LEN = 1 << 20 };
    tc_cluster_t cl;
    st_client_params_t cp = {0};
    st_client_t *c = NULL;
    st_hash_t *chain;
    uint8_t *src = malloc((size_t)N * LEN), *dst = malloc(LEN);
    st_put_op_t puts[N];
    st_get_op_t g;
    st_handle_t *h;
    int ok = 0;
    uint64_t t0;

    (void)state;
    td_start(&cl, "--memory-limit 256M --chunk-bytes 64M --max-object 4M --reservation-ttl 10ms");
    cf_params_transport(&cp, cl.node[0].addr, td_spec, 3000);
    c = cf_connect(&cp);
    chain = dh_make_chain(c, 10, N);
    for (int i = 0; i < N; i++) {
        dh_fill(src + (size_t)i * LEN, LEN, (uint64_t)i, 5);
        puts[i] = (st_put_op_t){
            .block = (uint32_t)i, .kind = ST_KIND_KV, .src = src + (size_t)i * LEN, .len = LEN};
    }
    t0 = lg_now_ms();
    assert_int_equal(st_client_put(c, chain, N, puts, N, 0, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, 30000), ST_OK); /* not a speed check: no hang */
    st_handle_release(h);
    for (int i = 0; i < N; i++) {
        if (puts[i].status != ST_OK) {
            continue;
        }
        ok++;
        g = (st_get_op_t){.block = (uint32_t)i, .kind = ST_KIND_KV, .dst = dst, .dst_len = LEN};
        assert_int_equal(st_client_get(c, chain, N, &g, 1, &h), ST_OK);
        dh_run(h);
        assert_int_equal(g.status, ST_OK);
        assert_memory_equal(dst, src + (size_t)i * LEN, LEN);
    }
    printf("put with a 10 ms reservation: %d of %d committed in %llu ms\n", ok, N,
           (unsigned long long)(lg_now_ms() - t0));
    free(src), free(dst), free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

/*
 * Fencing: a writer that stalls past its reservation puts into the extent
 * after it expired and another object now owns it. Its put must never reach
 * a reader: where the daemon hands out write keys the key was revoked at
 * expiry and the put is refused (the new object's bytes stay); where the
 * transport enforces no key (UCX) the put lands, and libstrata, told by
 * Hello that the node is not committed_read_only, checks the object and
 * reports a miss. Never a hit with the stalled writer's bytes.
 */
void test_put_after_expiry_fenced(void **state)
{
    enum { LEN = 60000 };
    tc_cluster_t cl;
    dh_raw_t *r = calloc(1, sizeof(*r));
    st_client_t *c;
    st_hash_t *a;
    uint8_t *y = malloc(LEN), *got = malloc(LEN);
    Strata__V1__ReserveResponse *rv;
    Strata__V1__LocateResponse *lr = NULL;
    tp_rkey_t *wkey, *key;
    uint64_t addr;
    st_status_t late, got_status;

    (void)state;
    td_start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M --reservation-ttl 300ms");
    c = td_connect(&cl);
    raw_open(r, cl.node[0].addr);
    a = dh_make_chain(c, 8, 1);
    /* The stalled writer: reserves, takes its key, and writes nothing yet. */
    rv = raw_reserve(r, &a[0], LEN, 0);
    key = raw_resv_key(r, rv, &wkey, &addr);
    for (int i = 0; i < 200 && gc_stat(r->ch, "reservations_expired") == 0; i++) {
        usleep(20000);
    }
    assert_int_equal(gc_stat(r->ch, "reservations_expired"), 1);
    /* Another writer puts the same key: same size, the same extent again. */
    dh_fill(y, LEN, 0, 77);
    put_block0(c, a, y, LEN);
    lr = raw_locate1(r, &a[0], 0, 0);
    assert_int_equal(lr->locations->state[0], STRATA__V1__OBJECT_STATE__OBJECT_PRESENT);
    /* The premise: the expired extent was reused by the committed object. */
    assert_int_equal(lr->locations->region_id[0], rv->extents->region_id[0]);
    assert_int_equal(lr->locations->offset[0], rv->extents->offset[0]);
    /* The late put. */
    dh_fill(r->buf, LEN, 0, 99);
    late = raw_put_key(r, key, addr, LEN, 3000);
    printf("late put through the %s key: %s\n", wkey != NULL ? "write" : "region",
           st_strerror(late));
    /* What a reader gets: the committed bytes, or a miss; never the late bytes. */
    got_status = dh_get_block0(c, a, got, LEN, NULL);
    printf("reader after the late put: %s\n", st_strerror(got_status));
    if (got_status == ST_OK) {
        assert_memory_equal(got, y, LEN);
    } else {
        assert_true(got_status == ST_ERR_NOT_FOUND || got_status == ST_ERR_CORRUPT);
    }
    if (wkey != NULL) {
        /* A revoked key: refused, and the object is still a hit. */
        assert_int_not_equal(late, ST_OK);
        assert_int_equal(got_status, ST_OK);
    }
    protobuf_c_message_free_unpacked(&lr->base, NULL);
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    free(y), free(got), free(a);
    dh_raw_close(r); /* closes the endpoint: destroys wkey */
    free(r);
    st_client_close(c);
    tc_stop_all(&cl);
}
