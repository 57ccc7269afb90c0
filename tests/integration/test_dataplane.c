/*
 * test_dataplane.c - the one-sided data plane through stratad and libstrata
 * on loopback, over a real transport (argv[2]: "ucx", "libfabric:tcp;ofi_rxm",
 * "libfabric:shm"; UCX_TLS is set per registration): put/get round trips of
 * random sizes from 1 B to 8 MiB, 10,000 row reads, readers racing eviction
 * (zero wrong bytes), a read after its lease expired and its extent was
 * reused, a commit with a wrong checksum, abort and expiry reclaiming space.
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

#include "cluster.h"
#include "dp_harness.h"
#include "st_log.h"
#include "srpc.h"
#include "st_transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"

static const char *stratad_path;
static const char *spec; /* the client's transport */
static char daemon_args[256];
static char spec_buf[128];

static st_client_t *connect_to(const tc_cluster_t *cl)
{
    st_client_params_t p = {0};
    st_client_t *c = NULL;

    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_TIMEOUT;
    p.nodes = cl->node[0].addr;
    p.transport = spec;
    p.timeout_ms = 20000;
    if (st_client_connect(&p, &c) != ST_OK) {
        fail_msg("connect: %s", st_client_last_error());
    }
    return c;
}

/* Starts one daemon and checks that it really serves the transport (skips
 * when this machine cannot run it: the daemon then falls back to inline). */
static void start(tc_cluster_t *cl, const char *more)
{
    dh_start(cl, stratad_path, 1, daemon_args, more);
}

/* ------------------------------------------------------------ round trip -- */

static void test_roundtrip_random_sizes(void **state)
{
    enum { N = 24 };
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    st_put_op_t puts[N];
    st_get_op_t gets[N];
    uint8_t *src[N], *dst[N], *reg;
    size_t len[N], reg_len = 0, wrong = 0;
    st_handle_t *h;

    (void)state;
    start(&cl, "--memory-limit 512M --chunk-bytes 32M");
    c = connect_to(&cl);
    chain = dh_make_chain(c, 1, N);
    srand(7);
    for (int i = 0; i < N; i++) {
        /* log-uniform in 1 B .. 8 MiB, both ends included */
        len[i] = i == 0 ? 1 : i == 1 ? (8u << 20) : (size_t)1 << (rand() % 23);
        len[i] += i > 1 ? (size_t)rand() % len[i] : 0;
        len[i] = len[i] > (8u << 20) ? (8u << 20) : len[i];
        src[i] = malloc(len[i]);
        assert_non_null(src[i]);
        dh_fill(src[i], len[i], (uint64_t)i, 11);
        puts[i] =
            (st_put_op_t){.block = (uint64_t)i, .kind = ST_KIND_KV, .src = src[i], .len = len[i]};
        reg_len += len[i];
    }
    assert_int_equal(st_client_put(c, chain, N, puts, N, 0, &h), ST_OK);
    dh_run(h);
    for (int i = 0; i < N; i++) {
        assert_int_equal(puts[i].status, ST_OK);
    }
    /* Half the reads land in one registered buffer, half in plain ones. */
    reg = malloc(reg_len);
    assert_non_null(reg);
    assert_int_equal(st_client_register(c, reg, reg_len), ST_OK);
    for (int i = 0, off = 0; i < N; off += (int)len[i], i++) {
        dst[i] = i % 2 ? reg + off : malloc(len[i]);
        memset(dst[i], 0xEE, len[i]);
        gets[i] = (st_get_op_t){
            .block = (uint64_t)i, .kind = ST_KIND_KV, .dst = dst[i], .dst_len = len[i]};
    }
    assert_int_equal(st_client_get(c, chain, N, gets, N, &h), ST_OK);
    dh_run(h);
    for (int i = 0; i < N; i++) {
        assert_int_equal(gets[i].status, ST_OK);
        assert_int_equal(gets[i].length, len[i]);
        wrong += memcmp(dst[i], src[i], len[i]) != 0;
    }
    assert_int_equal(wrong, 0);
    /* A buffer too small is refused, and says how much is needed. */
    gets[1].dst_len = len[1] - 1;
    assert_int_equal(st_client_get(c, chain, N, &gets[1], 1, &h), ST_OK);
    dh_run(h);
    assert_int_equal(gets[1].status, ST_ERR_INVALID);
    assert_int_equal(st_client_deregister(c, reg), ST_OK);
    assert_int_equal(st_client_deregister(c, reg), ST_ERR_NOT_FOUND);
    for (int i = 0; i < N; i++) {
        free(src[i]);
        if (i % 2 == 0) {
            free(dst[i]);
        }
    }
    free(reg);
    free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

/* ------------------------------------------------------------------ rows -- */

static void test_row_reads(void **state)
{
    enum { ROWS = 4096, RB = 64, OPS = 10, PER = 1000 };
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    uint8_t *obj = malloc(ROWS * RB), *dst = malloc((size_t)OPS * PER * RB);
    uint32_t *rows = malloc(sizeof(*rows) * OPS * PER);
    st_put_op_t put;
    st_get_op_t gets[OPS];
    st_handle_t *h;
    size_t wrong = 0;

    (void)state;
    assert_non_null(obj);
    assert_non_null(dst);
    assert_non_null(rows);
    start(&cl, "--memory-limit 256M --chunk-bytes 16M --max-object 16M");
    c = connect_to(&cl);
    chain = dh_make_chain(c, 2, 1);
    dh_fill(obj, ROWS * RB, 0, 22);
    put = (st_put_op_t){
        .block = 0, .kind = ST_KIND_IDX, .layer = 3, .src = obj, .len = ROWS * RB, .row_bytes = RB};
    assert_int_equal(st_client_put(c, chain, 1, &put, 1, 0, &h), ST_OK);
    dh_run(h);
    assert_int_equal(put.status, ST_OK);
    assert_int_equal(st_client_register(c, dst, (size_t)OPS * PER * RB), ST_OK);
    srand(3);
    for (int k = 0; k < OPS * PER; k++) {
        rows[k] = (uint32_t)rand() % ROWS;
    }
    for (int k = 0; k < OPS; k++) {
        gets[k] = (st_get_op_t){.block = 0,
                                .kind = ST_KIND_IDX,
                                .layer = 3,
                                .dst = dst + (size_t)k * PER * RB,
                                .dst_len = PER * RB,
                                .row_bytes = RB,
                                .rows = rows + k * PER,
                                .n_rows = PER};
    }
    assert_int_equal(st_client_get(c, chain, 1, gets, OPS, &h), ST_OK);
    dh_run(h);
    for (int k = 0; k < OPS; k++) {
        assert_int_equal(gets[k].status, ST_OK);
        assert_int_equal(gets[k].length, PER * RB);
    }
    for (int r = 0; r < OPS * PER; r++) {
        wrong += memcmp(dst + (size_t)r * RB, obj + (size_t)rows[r] * RB, RB) != 0;
    }
    assert_int_equal(wrong, 0);
    /* A row past the end is refused. */
    rows[0] = ROWS;
    assert_int_equal(st_client_get(c, chain, 1, gets, 1, &h), ST_OK);
    dh_run(h);
    assert_int_equal(gets[0].status, ST_ERR_INVALID);
    free(obj), free(dst), free(rows), free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

/* ------------------------------------------------------ lease cache -- */

/* The daemon's count of answered Locate calls, from its /metrics. */
static long locate_calls(int port)
{
    double v = tc_metric(port, "strata_request_duration_seconds_count{method=\"Locate\"}");

    assert_true(v >= 0);
    return (long)v;
}

/*
 * Row reads keep their lease and reuse the location without a Locate while
 * more than a second of it is left (dataplane.c): a second row read of the
 * same object costs no RPC, is read on the calling thread (complete when
 * st_client_get returns) and returns the right bytes, also with runs of
 * adjacent rows (one get each); a whole-object read still locates; once the
 * lease is nearly over, the next row read locates again.
 */
static void test_row_lease_cache(void **state)
{
    enum { ROWS = 256, RB = 128, PER = 32 };
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    uint8_t *obj = malloc(ROWS * RB), *dst = malloc(ROWS * RB);
    uint32_t rows[PER];
    st_put_op_t put;
    st_get_op_t g;
    st_handle_t *h;
    char more[160];
    int port = tc_free_port();
    long n0, n1;

    (void)state;
    assert_non_null(obj);
    assert_non_null(dst);
    snprintf(more, sizeof(more), "--memory-limit 128M --metrics-listen 127.0.0.1:%d", port);
    start(&cl, more);
    c = connect_to(&cl);
    chain = dh_make_chain(c, 9, 1);
    dh_fill(obj, ROWS * RB, 0, 77);
    put = (st_put_op_t){
        .block = 0, .kind = ST_KIND_KV, .layer = 1, .src = obj, .len = ROWS * RB, .row_bytes = RB};
    assert_int_equal(st_client_put(c, chain, 1, &put, 1, 0, &h), ST_OK);
    dh_run(h);
    assert_int_equal(put.status, ST_OK);
    for (int round = 0; round < 4; round++) {
        for (int r = 0; r < PER; r++) {
            rows[r] = (uint32_t)((r * 7 + round * 13) % ROWS);
            if (round == 2) {
                rows[r] = (uint32_t)(r / 5 * 11 + r % 5 + (r / 5 == 3 ? 200 : 0)); /* runs of 5 */
            }
        }
        g = (st_get_op_t){.block = 0,
                          .kind = ST_KIND_KV,
                          .layer = 1,
                          .dst = dst,
                          .dst_len = PER * RB,
                          .row_bytes = RB,
                          .rows = rows,
                          .n_rows = PER};
        if (round == 3) {
            usleep(3700 * 1000); /* 5 s lease: less than a second of its 90% is left */
        }
        n0 = locate_calls(port);
        assert_int_equal(st_client_get(c, chain, 1, &g, 1, &h), ST_OK);
        if (round == 1 || round == 2) {
            assert_int_equal(st_handle_test(h), 1); /* read on this thread */
        }
        dh_run(h);
        n1 = locate_calls(port);
        assert_int_equal(g.status, ST_OK);
        for (int r = 0; r < PER; r++) {
            assert_memory_equal(dst + (size_t)r * RB, obj + (size_t)rows[r] * RB, RB);
        }
        printf("# row read %d: Locate calls %ld -> %ld\n", round, n0, n1);
        /* The first read locates; the next two ride its lease; the last, late, locates. */
        assert_int_equal(n1 - n0, round == 0 || round == 3 ? 1 : 0);
    }
    /* A whole-object read is checked by its checksum and always locates. */
    g = (st_get_op_t){.block = 0, .kind = ST_KIND_KV, .layer = 1, .dst = dst, .dst_len = ROWS * RB};
    n0 = locate_calls(port);
    assert_int_equal(st_client_get(c, chain, 1, &g, 1, &h), ST_OK);
    dh_run(h);
    assert_int_equal(g.status, ST_OK);
    assert_memory_equal(dst, obj, ROWS * RB);
    assert_int_equal(locate_calls(port) - n0, 1);
    free(obj), free(dst), free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

/*
 * The lease cache keeps the locations of many objects at once: after one
 * row read of each of 1200 objects, batches of 200 reading rows of all of
 * them are read on the calling thread (every location cached), with the
 * right bytes. A direct-mapped cache of 16384 slots loses about 40 of them
 * to collisions.
 */
static void test_row_lease_cache_many(void **state)
{
    enum { BLOCKS = 600, LAYERS = 2, N = BLOCKS * LAYERS, ROWS = 16, RB = 64 };
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    uint8_t *obj = malloc((size_t)N * ROWS * RB), *dst = malloc((size_t)N * 3 * RB);
    uint32_t rows[3] = {1, 2, 9};
    st_put_op_t *puts = calloc(N, sizeof(*puts));
    st_get_op_t *gets = calloc(N, sizeof(*gets));
    st_handle_t *h;

    (void)state;
    assert_non_null(obj);
    assert_non_null(dst);
    assert_non_null(puts);
    assert_non_null(gets);
    start(&cl, "--memory-limit 128M");
    c = connect_to(&cl);
    chain = dh_make_chain(c, 11, BLOCKS);
    for (int i = 0; i < N; i++) {
        dh_fill(obj + (size_t)i * ROWS * RB, ROWS * RB, (uint64_t)i, 5);
        puts[i] = (st_put_op_t){.block = (uint64_t)(i / LAYERS),
                                .kind = ST_KIND_KV,
                                .layer = (uint16_t)(i % LAYERS),
                                .src = obj + (size_t)i * ROWS * RB,
                                .len = ROWS * RB,
                                .row_bytes = RB};
    }
    assert_int_equal(st_client_put(c, chain, BLOCKS, puts, N, 0, &h), ST_OK);
    dh_run(h);
    for (int i = 0; i < N; i++) {
        assert_int_equal(puts[i].status, ST_OK);
    }
    assert_int_equal(st_client_register(c, dst, (size_t)N * 3 * RB), ST_OK);
    for (int round = 0; round < 2; round++) {
        memset(dst, 0, (size_t)N * 3 * RB);
        for (int i = 0; i < N; i++) {
            gets[i] = (st_get_op_t){.block = (uint64_t)(i / LAYERS),
                                    .kind = ST_KIND_KV,
                                    .layer = (uint16_t)(i % LAYERS),
                                    .dst = dst + (size_t)i * 3 * RB,
                                    .dst_len = 3 * RB,
                                    .row_bytes = RB,
                                    .rows = rows,
                                    .n_rows = 3};
        }
        if (round == 0) {
            assert_int_equal(st_client_get(c, chain, BLOCKS, gets, N, &h), ST_OK);
            dh_run(h);
        }
        for (int i = 0; round == 1 && i < N; i += 200) { /* batches of up to 256 ops */
            assert_int_equal(st_client_get(c, chain, BLOCKS, gets + i, 200, &h), ST_OK);
            assert_int_equal(st_handle_test(h), 1); /* every location was cached */
            dh_run(h);
        }
        for (int i = 0; i < N; i++) {
            assert_int_equal(gets[i].status, ST_OK);
            for (int r = 0; r < 3; r++) {
                assert_memory_equal(dst + ((size_t)i * 3 + (size_t)r) * RB,
                                    obj + ((size_t)i * ROWS + rows[r]) * RB, RB);
            }
        }
    }
    free(obj), free(dst), free(puts), free(gets), free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

/* ------------------------------------------------- readers vs eviction -- */

enum { EV_BLOCKS = 480, EV_OBJ = 256 << 10, EV_READERS = 2 };

typedef struct ev_shared {
    tc_cluster_t *cl;
    st_hash_t *chain;
    _Atomic size_t written;
    _Atomic int done;
    _Atomic uint64_t hits, misses, wrong;
} ev_shared_t;

static void *ev_reader(void *arg)
{
    ev_shared_t *s = arg;
    st_client_t *c = connect_to(s->cl);
    uint8_t *buf = malloc(4 * EV_OBJ), *want = malloc(EV_OBJ);
    unsigned seed = (unsigned)(uintptr_t)&seed;

    st_client_register(c, buf, 4 * EV_OBJ);
    while (!s->done) {
        size_t w = s->written;
        st_get_op_t g[4];
        st_handle_t *h;

        if (w == 0) {
            usleep(1000);
            continue;
        }
        for (int k = 0; k < 4; k++) {
            g[k] = (st_get_op_t){.block = (uint64_t)(rand_r(&seed) % w),
                                 .kind = ST_KIND_KV,
                                 .dst = buf + (size_t)k * EV_OBJ,
                                 .dst_len = EV_OBJ};
        }
        if (st_client_get(c, s->chain, EV_BLOCKS, g, 4, &h) != ST_OK) {
            continue;
        }
        st_handle_wait(h, -1);
        st_handle_release(h);
        for (int k = 0; k < 4; k++) {
            if (g[k].status != ST_OK) {
                s->misses++;
                continue;
            }
            dh_fill(want, EV_OBJ, g[k].block, 33);
            s->hits++;
            if (g[k].length != EV_OBJ || memcmp(buf + (size_t)k * EV_OBJ, want, EV_OBJ) != 0) {
                s->wrong++;
            }
        }
    }
    free(buf), free(want);
    st_client_close(c);
    return NULL;
}

static void test_readers_during_eviction(void **state)
{
    tc_cluster_t cl;
    ev_shared_t s = {0};
    pthread_t rd[EV_READERS];
    st_client_t *w;
    uint8_t *obj = malloc((size_t)8 * EV_OBJ);

    (void)state;
    assert_non_null(obj);
    start(&cl, "--memory-limit 64M --chunk-bytes 2M --max-object 1M");
    w = connect_to(&cl);
    s.cl = &cl;
    s.chain = dh_make_chain(w, 3, EV_BLOCKS);
    for (int r = 0; r < EV_READERS; r++) {
        assert_int_equal(pthread_create(&rd[r], NULL, ev_reader, &s), 0);
    }
    /* 480 x 256 KiB = 120 MiB through a 64 MiB daemon: it must evict. */
    for (size_t b = 0; b < EV_BLOCKS; b += 8) {
        st_put_op_t p[8];
        st_handle_t *h;

        for (int k = 0; k < 8; k++) {
            dh_fill(obj + (size_t)k * EV_OBJ, EV_OBJ, b + (size_t)k, 33);
            p[k] = (st_put_op_t){.block = b + (size_t)k,
                                 .kind = ST_KIND_KV,
                                 .src = obj + (size_t)k * EV_OBJ,
                                 .len = EV_OBJ};
        }
        assert_int_equal(st_client_put(w, s.chain, EV_BLOCKS, p, 8, 0, &h), ST_OK);
        dh_run(h);
        s.written = b + 8;
    }
    usleep(200000);
    s.done = 1;
    for (int r = 0; r < EV_READERS; r++) {
        pthread_join(rd[r], NULL);
    }
    print_message("readers: hits=%llu misses=%llu wrong=%llu\n", (unsigned long long)s.hits,
                  (unsigned long long)s.misses, (unsigned long long)s.wrong);
    assert_int_equal(s.wrong, 0);
    assert_true(s.hits > 0);
    free(obj);
    free(s.chain);
    st_client_close(w);
    tc_stop_all(&cl);
}

/* ------------------------------------------------------ protocol level -- */

/* A raw connection: gRPC channel, namespace, transport, endpoint, keys. */
typedef struct raw {
    srpc_channel_t *ch;
    uint64_t ns;
    st_hash_t seed;
    st_transport_t *tp;
    st_transport_ep_t *ep;
    st_transport_rkey_t *rkey[64];
    uint64_t base[64];
    st_transport_mem_t *mem;
    int committed_ro; /* Hello's committed_read_only */
    uint8_t buf[1 << 16];
} raw_t;

static st_status_t rcall(raw_t *r, int m, const void *req, void **resp)
{
    srpc_error_t err;

    return srpc_call(r->ch, &srpc_cache_methods[m], (const ProtobufCMessage *)req, 10000,
                     (ProtobufCMessage **)resp, &err);
}

/* Says Hello again and unpacks the keys of regions not seen yet. */
static void raw_hello(raw_t *r)
{
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;

    req.protocol_version = 1;
    assert_int_equal(rcall(r, SRPC_CACHE_HELLO, &req, (void **)&resp), ST_OK);
    r->ns = resp->namespace_id;
    r->committed_ro = resp->committed_read_only;
    memcpy(r->seed.b, resp->namespace_seed.data, 16);
    if (r->ep == NULL) {
        assert_int_equal(st_transport_connect(r->tp, resp->transport_address.data,
                                              resp->transport_address.len, &r->ep),
                         ST_OK);
    }
    for (size_t i = 0; i < resp->n_regions; i++) {
        const Strata__V1__Region *g = resp->regions[i];

        assert_true(g->id < 64);
        assert_true(g->rkey.len > 0);
        if (r->rkey[g->id] == NULL) {
            assert_int_equal(
                st_transport_rkey_unpack(r->ep, g->rkey.data, g->rkey.len, &r->rkey[g->id]), ST_OK);
            r->base[g->id] = g->remote_addr;
        }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

static void raw_open(raw_t *r, const char *addr)
{
    srpc_channel_config_t cc = {.token = NULL};
    st_transport_config_t tc = {0};
    const char *colon = strchr(spec, ':');

    memset(r, 0, sizeof(*r));
    assert_int_equal(srpc_channel_open(addr, &cc, &r->ch), ST_OK);
    tc.backend = strncmp(spec, "ucx", 3) == 0 ? ST_TRANSPORT_UCX : ST_TRANSPORT_FABRIC;
    tc.fabric_provider = colon != NULL ? colon + 1 : NULL;
    assert_int_equal(st_transport_create(&tc, &r->tp), ST_OK);
    assert_int_equal(st_transport_mem_register(r->tp, r->buf, sizeof(r->buf), &r->mem), ST_OK);
    raw_hello(r);
}

static void raw_close(raw_t *r)
{
    st_transport_destroy(r->tp);
    srpc_channel_close(r->ch);
}

static void cb_done(void *user, st_status_t st)
{
    *(st_status_t *)user = st;
}

/* One blocking get or put of len bytes at (region, offset). */
static st_status_t raw_xfer(raw_t *r, int put, uint32_t region, uint64_t off, size_t len)
{
    st_status_t done = ST_ERR_BUSY, st;

    if (r->rkey[region] == NULL) {
        raw_hello(r);
    }
    st = put ? st_transport_put(r->ep, r->buf, len, r->mem, r->base[region] + off, r->rkey[region],
                                cb_done, &done)
             : st_transport_get(r->ep, r->buf, len, r->mem, r->base[region] + off, r->rkey[region],
                                cb_done, &done);
    if (st != ST_OK) {
        return st;
    }
    while (done == ST_ERR_BUSY) {
        st_transport_progress(r->tp);
    }
    if (put && done == ST_OK) {
        done = st_transport_ep_flush(r->ep, 10000);
    }
    return done;
}

/*
 * A put of r->buf[0..len) to remote_addr through rkey, waiting at most
 * wait_ms for it (a put the daemon refuses may never complete: libfabric
 * shm). Returns its status, or ST_ERR_TIMEOUT.
 */
static st_status_t raw_put_key(raw_t *r, st_transport_rkey_t *rkey, uint64_t remote_addr,
                               size_t len, int wait_ms)
{
    st_status_t done = ST_ERR_BUSY, st;
    uint64_t until = st_log_now_ms() + (uint64_t)wait_ms;

    st = st_transport_put(r->ep, r->buf, len, r->mem, remote_addr, rkey, cb_done, &done);
    if (st != ST_OK) {
        return st;
    }
    while (done == ST_ERR_BUSY && st_log_now_ms() < until) {
        st_transport_progress(r->tp);
    }
    if (done == ST_ERR_BUSY) {
        return ST_ERR_TIMEOUT;
    }
    return done == ST_OK ? st_transport_ep_flush(r->ep, wait_ms) : done;
}

/*
 * The key that writes extent 0 of rv: its write key (unpacked into
 * *wkey_p, the caller destroys it) where the daemon hands them out, else
 * the region's key. Writes its remote address to *addr_p.
 */
static st_transport_rkey_t *raw_resv_key(raw_t *r, const Strata__V1__ReserveResponse *rv,
                                         st_transport_rkey_t **wkey_p, uint64_t *addr_p)
{
    uint32_t region = rv->extents->region_id[0];

    if (r->rkey[region] == NULL) {
        raw_hello(r);
    }
    *addr_p = r->base[region] + rv->extents->offset[0];
    *wkey_p = NULL;
    if (rv->n_write_rkeys == 1 && rv->write_rkeys[0].len > 0) {
        assert_int_equal(st_transport_rkey_unpack(r->ep, rv->write_rkeys[0].data,
                                                  rv->write_rkeys[0].len, wkey_p),
                         ST_OK);
        return *wkey_p;
    }
    return r->rkey[region];
}

/* A put of r->buf[0..len) into the extent reserved by rv, through its key. */
static st_status_t raw_put_resv(raw_t *r, const Strata__V1__ReserveResponse *rv, size_t len)
{
    st_transport_rkey_t *wkey;
    uint64_t addr;
    st_transport_rkey_t *key = raw_resv_key(r, rv, &wkey, &addr);
    st_status_t st = raw_put_key(r, key, addr, len, 10000);

    st_transport_rkey_destroy(wkey);
    return st;
}

static Strata__V1__ObjectKey key_of(const st_hash_t *h)
{
    Strata__V1__ObjectKey k = STRATA__V1__OBJECT_KEY__INIT;

    k.block_hash.data = (uint8_t *)h->b;
    k.block_hash.len = 16;
    k.kind = STRATA__V1__OBJECT_KIND__KV;
    return k;
}

static Strata__V1__ReserveResponse *raw_reserve(raw_t *r, const st_hash_t *h, uint64_t len,
                                                uint32_t ttl_ms)
{
    Strata__V1__ReserveRequest req = STRATA__V1__RESERVE_REQUEST__INIT;
    Strata__V1__ObjectKey k = key_of(h), *kp = &k;
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

static int raw_present(raw_t *r, const st_hash_t *h)
{
    Strata__V1__LocateRequest req = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__ObjectKey k = key_of(h), *kp = &k;
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

static uint64_t stat_of(raw_t *r, const char *name)
{
    Strata__V1__StatsRequest req = STRATA__V1__STATS_REQUEST__INIT;
    Strata__V1__StatsResponse *resp = NULL;
    uint64_t v = UINT64_MAX;

    assert_int_equal(rcall(r, SRPC_CACHE_STATS, &req, (void **)&resp), ST_OK);
    for (size_t i = 0; i < resp->n_counters; i++) {
        if (strcmp(resp->counters[i]->key, name) == 0) {
            v = resp->counters[i]->value;
        }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    assert_true(v != UINT64_MAX);
    return v;
}

static void test_commit_checksum_abort_expiry(void **state)
{
    tc_cluster_t cl;
    raw_t *r = calloc(1, sizeof(*r));
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
    start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M --reservation-ttl 1s");
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
    assert_int_equal(stat_of(r, "reservations_active"), 0);
    rv = raw_reserve(r, &h[1], 1 << 20, 0);
    assert_int_equal(stat_of(r, "reservations_active"), 1);
    ar.namespace_id = r->ns;
    ar.reservation_id = rv->reservation_id;
    assert_int_equal(rcall(r, SRPC_CACHE_ABORT, &ar, (void **)&aresp), ST_OK);
    protobuf_c_message_free_unpacked(&aresp->base, NULL);
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    assert_int_equal(stat_of(r, "reservations_active"), 0);
    /* Two: the refused commit freed its extent at once, then this abort. */
    assert_int_equal(stat_of(r, "reservations_aborted"), 2);
    rv = raw_reserve(r, &h[2], 1 << 20, 0);
    uint64_t expired_id = rv->reservation_id; /* ids are random: not the last one + 1 */
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    for (int i = 0; i < 200 && stat_of(r, "reservations_expired") == 0; i++) {
        usleep(50000);
    }
    assert_int_equal(stat_of(r, "reservations_expired"), 1);
    assert_int_equal(stat_of(r, "reservations_active"), 0);
    assert_false(raw_present(r, &h[2]));
    /* Abort is idempotent for ids this daemon issued (aborted, committed or
     * expired: OK, nothing more is freed); an id never issued is NOT_FOUND. */
    uint64_t issued[3] = {ar.reservation_id, cr.reservation_id, expired_id};
    for (int i = 0; i < 3; i++) {
        ar.reservation_id = issued[i];
        assert_int_equal(rcall(r, SRPC_CACHE_ABORT, &ar, (void **)&aresp), ST_OK);
        protobuf_c_message_free_unpacked(&aresp->base, NULL);
    }
    assert_int_equal(stat_of(r, "reservations_aborted"), 2);
    ar.reservation_id = issued[2] + 1000;
    assert_int_equal(rcall(r, SRPC_CACHE_ABORT, &ar, (void **)&aresp), ST_ERR_NOT_FOUND);
    raw_close(r);
    free(r);
    tc_stop_all(&cl);
}

static void test_read_after_lease_expiry_is_a_miss(void **state)
{
    enum { LEN = 60000 };
    tc_cluster_t cl;
    raw_t *r = calloc(1, sizeof(*r));
    st_client_t *c;
    st_hash_t *a, *b;
    uint8_t *x = malloc(LEN), *y = malloc(LEN);
    st_put_op_t p;
    st_get_op_t g;
    st_handle_t *hd;
    Strata__V1__LocateRequest lq = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__LocateResponse *lr = NULL, *lr2 = NULL;
    Strata__V1__ReleaseRequest rq = STRATA__V1__RELEASE_REQUEST__INIT;
    Strata__V1__ReleaseResponse *rr = NULL;
    Strata__V1__ObjectKey k, *kp = &k;
    uint64_t lease, sum;
    uint32_t region;
    uint64_t off;

    (void)state;
    start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M");
    c = connect_to(&cl);
    raw_open(r, cl.node[0].addr);
    a = dh_make_chain(c, 5, 1);
    b = dh_make_chain(c, 6, 1);
    dh_fill(x, LEN, 0, 55);
    dh_fill(y, LEN, 0, 66);
    p = (st_put_op_t){.block = 0, .kind = ST_KIND_KV, .src = x, .len = LEN};
    assert_int_equal(st_client_put(c, a, 1, &p, 1, 0, &hd), ST_OK);
    dh_run(hd);
    assert_int_equal(p.status, ST_OK);
    /* Locate with a 20 ms lease, then let it lapse. */
    k = key_of(&a[0]);
    lq.namespace_id = r->ns;
    lq.keys = &kp;
    lq.n_keys = 1;
    lq.lease = 1;
    lq.lease_ms = 20;
    assert_int_equal(rcall(r, SRPC_CACHE_LOCATE, &lq, (void **)&lr), ST_OK);
    assert_int_equal(lr->locations->state[0], STRATA__V1__OBJECT_STATE__OBJECT_PRESENT);
    lease = lr->lease_id;
    region = lr->locations->region_id[0];
    off = lr->locations->offset[0];
    sum = lr->locations->checksum[0];
    usleep(300000);
    /* The extent is freed and reused by another object of the same size. */
    assert_int_equal(st_client_delete(c, a, 1, 1u << ST_KIND_KV, 1), ST_OK);
    p = (st_put_op_t){.block = 0, .kind = ST_KIND_KV, .src = y, .len = LEN};
    assert_int_equal(st_client_put(c, b, 1, &p, 1, 0, &hd), ST_OK);
    dh_run(hd);
    assert_int_equal(p.status, ST_OK);
    k = key_of(&b[0]);
    lq.lease = 0;
    assert_int_equal(rcall(r, SRPC_CACHE_LOCATE, &lq, (void **)&lr2), ST_OK);
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
    g = (st_get_op_t){.block = 0, .kind = ST_KIND_KV, .dst = x, .dst_len = LEN};
    assert_int_equal(st_client_get(c, a, 1, &g, 1, &hd), ST_OK);
    dh_run(hd);
    assert_int_equal(g.status, ST_ERR_NOT_FOUND);
    assert_int_equal(st_client_get(c, b, 1, &g, 1, &hd), ST_OK);
    dh_run(hd);
    assert_int_equal(g.status, ST_OK);
    assert_memory_equal(x, y, LEN);
    protobuf_c_message_free_unpacked(&rr->base, NULL);
    protobuf_c_message_free_unpacked(&lr->base, NULL);
    protobuf_c_message_free_unpacked(&lr2->base, NULL);
    free(x), free(y), free(a), free(b);
    raw_close(r);
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
static void test_committed_not_writable(void **state)
{
    enum { LEN = 60000 };
    tc_cluster_t cl;
    raw_t *r = calloc(1, sizeof(*r));
    st_client_t *c;
    st_hash_t *a, other;
    uint8_t *x = malloc(LEN), *got = malloc(LEN);
    Strata__V1__ReserveResponse *rv;
    Strata__V1__LocateRequest lq = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__LocateResponse *lr = NULL;
    Strata__V1__ObjectKey k, *kp = &k;
    st_transport_rkey_t *wkey;
    st_put_op_t p;
    st_get_op_t g;
    st_handle_t *hd;
    uint64_t addr, waddr;
    st_status_t by_region, by_wkey = ST_ERR_UNSUPPORTED;
    uint32_t region;

    (void)state;
    start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M");
    c = connect_to(&cl);
    a = dh_make_chain(c, 9, 1);
    dh_fill(x, LEN, 0, 31);
    p = (st_put_op_t){.block = 0, .kind = ST_KIND_KV, .src = x, .len = LEN};
    assert_int_equal(st_client_put(c, a, 1, &p, 1, 0, &hd), ST_OK);
    dh_run(hd);
    assert_int_equal(p.status, ST_OK);
    raw_open(r, cl.node[0].addr);
    assert_int_equal(r->committed_ro, strncmp(spec, "libfabric", 9) == 0);
    k = key_of(&a[0]);
    lq.namespace_id = r->ns;
    lq.keys = &kp;
    lq.n_keys = 1;
    assert_int_equal(rcall(r, SRPC_CACHE_LOCATE, &lq, (void **)&lr), ST_OK);
    assert_int_equal(lr->locations->state[0], STRATA__V1__OBJECT_STATE__OBJECT_PRESENT);
    region = lr->locations->region_id[0];
    if (r->rkey[region] == NULL) {
        raw_hello(r);
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
    memset(got, 0, LEN);
    g = (st_get_op_t){.block = 0, .kind = ST_KIND_KV, .dst = got, .dst_len = LEN};
    assert_int_equal(st_client_get(c, a, 1, &g, 1, &hd), ST_OK);
    dh_run(hd);
    if (r->committed_ro) {
        /* Enforced: the put failed and the bytes are the committed ones. */
        assert_int_not_equal(by_region, ST_OK);
        assert_int_equal(g.status, ST_OK);
        assert_memory_equal(got, x, LEN);
    } else {
        /* Not enforced: the put landed; the reader checks and misses. */
        assert_int_equal(g.status, ST_ERR_NOT_FOUND);
    }
    protobuf_c_message_free_unpacked(&lr->base, NULL);
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    free(x), free(got), free(a);
    raw_close(r);
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
static void test_put_outlives_reservation(void **state)
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
    start(&cl, "--memory-limit 256M --chunk-bytes 64M --max-object 4M --reservation-ttl 10ms");
    cp.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_TIMEOUT;
    cp.nodes = cl.node[0].addr;
    cp.transport = spec;
    cp.timeout_ms = 3000;
    if (st_client_connect(&cp, &c) != ST_OK) {
        fail_msg("connect: %s", st_client_last_error());
    }
    chain = dh_make_chain(c, 10, N);
    for (int i = 0; i < N; i++) {
        dh_fill(src + (size_t)i * LEN, LEN, (uint64_t)i, 5);
        puts[i] = (st_put_op_t){
            .block = (uint32_t)i, .kind = ST_KIND_KV, .src = src + (size_t)i * LEN, .len = LEN};
    }
    t0 = st_log_now_ms();
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
           (unsigned long long)(st_log_now_ms() - t0));
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
static void test_put_after_expiry_fenced(void **state)
{
    enum { LEN = 60000 };
    tc_cluster_t cl;
    raw_t *r = calloc(1, sizeof(*r));
    st_client_t *c;
    st_hash_t *a;
    uint8_t *y = malloc(LEN), *got = malloc(LEN);
    Strata__V1__ReserveResponse *rv;
    Strata__V1__LocateRequest lq = STRATA__V1__LOCATE_REQUEST__INIT;
    Strata__V1__LocateResponse *lr = NULL;
    Strata__V1__ObjectKey k, *kp = &k;
    st_transport_rkey_t *wkey, *key;
    st_put_op_t p;
    st_get_op_t g;
    st_handle_t *hd;
    uint64_t addr;
    st_status_t late;

    (void)state;
    start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M --reservation-ttl 300ms");
    c = connect_to(&cl);
    raw_open(r, cl.node[0].addr);
    a = dh_make_chain(c, 8, 1);
    /* The stalled writer: reserves, takes its key, and writes nothing yet. */
    rv = raw_reserve(r, &a[0], LEN, 0);
    key = raw_resv_key(r, rv, &wkey, &addr);
    for (int i = 0; i < 200 && stat_of(r, "reservations_expired") == 0; i++) {
        usleep(20000);
    }
    assert_int_equal(stat_of(r, "reservations_expired"), 1);
    /* Another writer puts the same key: same size, the same extent again. */
    dh_fill(y, LEN, 0, 77);
    p = (st_put_op_t){.block = 0, .kind = ST_KIND_KV, .src = y, .len = LEN};
    assert_int_equal(st_client_put(c, a, 1, &p, 1, 0, &hd), ST_OK);
    dh_run(hd);
    assert_int_equal(p.status, ST_OK);
    k = key_of(&a[0]);
    lq.namespace_id = r->ns;
    lq.keys = &kp;
    lq.n_keys = 1;
    assert_int_equal(rcall(r, SRPC_CACHE_LOCATE, &lq, (void **)&lr), ST_OK);
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
    memset(got, 0, LEN);
    g = (st_get_op_t){.block = 0, .kind = ST_KIND_KV, .dst = got, .dst_len = LEN};
    assert_int_equal(st_client_get(c, a, 1, &g, 1, &hd), ST_OK);
    dh_run(hd);
    printf("reader after the late put: %s\n", st_strerror(g.status));
    if (g.status == ST_OK) {
        assert_memory_equal(got, y, LEN);
    } else {
        assert_true(g.status == ST_ERR_NOT_FOUND || g.status == ST_ERR_CORRUPT);
    }
    if (wkey != NULL) {
        /* A revoked key: refused, and the object is still a hit. */
        assert_int_not_equal(late, ST_OK);
        assert_int_equal(g.status, ST_OK);
    }
    protobuf_c_message_free_unpacked(&lr->base, NULL);
    protobuf_c_message_free_unpacked(&rv->base, NULL);
    free(y), free(got), free(a);
    raw_close(r); /* closes the endpoint: destroys wkey */
    free(r);
    st_client_close(c);
    tc_stop_all(&cl);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_random_sizes),
        cmocka_unit_test(test_row_reads),
        cmocka_unit_test(test_row_lease_cache),
        cmocka_unit_test(test_row_lease_cache_many),
        cmocka_unit_test(test_readers_during_eviction),
        cmocka_unit_test(test_commit_checksum_abort_expiry),
        cmocka_unit_test(test_read_after_lease_expiry_is_a_miss),
        cmocka_unit_test(test_put_after_expiry_fenced),
        cmocka_unit_test(test_committed_not_writable),
        cmocka_unit_test(test_put_outlives_reservation),
    };
    const char *colon;

    if (argc < 3) {
        fprintf(stderr, "usage: %s STRATAD ucx|libfabric:<provider>\n", argv[0]);
        return 2;
    }
    stratad_path = argv[1];
    snprintf(spec_buf, sizeof(spec_buf), "%s", argv[2]);
    for (char *q = spec_buf; *q; q++) {
        *q = *q == '+' ? ';' : *q; /* "tcp+ofi_rxm": CMake lists split on ';' */
    }
    spec = spec_buf;
    colon = strchr(spec, ':');
    if (colon != NULL) {
        snprintf(daemon_args, sizeof(daemon_args), "--transport libfabric --fabric-provider %s",
                 colon + 1);
    } else {
        snprintf(daemon_args, sizeof(daemon_args), "--transport %s", spec);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
