/*
 * test_dataplane_rows.c - row reads accept only verified rows
 * (docs/transport.md "Row verification"), against a real stratad over UCX
 * on loopback:
 *
 *   - rows of a row-major object (put with row_bytes) scribbled after its
 *     commit, through the transport with the region's key, are refused
 *     under a live lease (the read is a miss, counted, never data), while
 *     the rows nobody touched still read one-sided; also in a batch of 300
 *     cached row reads copied in bulk with the copy threads;
 *   - a row read through a cached location after the daemon let the lease
 *     go and reused the extent for another object (the client's lease clock
 *     made to run slow) never returns the other object's bytes;
 *   - an object put inline with row_bytes gets row sums too, and its rows
 *     read one-sided and verified.
 *
 * usage: test_dataplane_rows STRATAD
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <xxhash.h>

#include "client_internal.h"
#include "client_fixture.h"
#include "cluster.h"
#include "dp_harness.h"
#include "grpc_conn.h"
#include "rowsum.h"
#include "srpc.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "stratad_arg.h"

enum { RB = 656, ROWS = 64, LEN = RB * ROWS };

static const char *stratad_path;

static void fill(uint8_t *p, size_t len, uint64_t salt)
{
    uint64_t x = salt * 0x9e3779b97f4a7c15ull | 1;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        p[i] = (uint8_t)x;
    }
}

static st_client_t *connect_to(const char *nodes, const char *transport_calls)
{
    st_client_params_t p;

    (void)transport_calls;
    cf_params_transport(&p, nodes, "ucx", 20000);
    return cf_connect(&p);
}

/* One daemon over UCX; skips when UCX cannot run here. */
static void start(tc_cluster_t *cl, const char *more)
{
    dh_start(cl, stratad_path, 1, "--transport ucx", more);
}

static void put_rows(st_client_t *c, const st_hash_t *chain, const uint8_t *src)
{
    st_put_op_t p = {.block = 0, .kind = ST_KIND_KV, .src = src, .len = LEN, .row_bytes = RB};
    st_handle_t *h;

    assert_int_equal(st_client_put(c, chain, 1, &p, 1, 0, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    st_handle_release(h);
    assert_int_equal(p.status, ST_OK);
}

/* Reads rows[0..n) of KV block 0 into dst; returns the op's status. */
static st_status_t read_rows(st_client_t *c, const st_hash_t *chain, const uint32_t *rows,
                             uint32_t n, uint8_t *dst)
{
    st_get_op_t g = {.block = 0,
                     .kind = ST_KIND_KV,
                     .dst = dst,
                     .dst_len = (size_t)n * RB,
                     .row_bytes = RB,
                     .rows = rows,
                     .n_rows = n};
    st_handle_t *h;

    memset(dst, 0, (size_t)n * RB);
    assert_int_equal(st_client_get(c, chain, 1, &g, 1, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    st_handle_release(h);
    return g.status;
}

static void expect_rows(const uint8_t *dst, const uint8_t *obj, const uint32_t *rows, uint32_t n)
{
    for (uint32_t x = 0; x < n; x++) {
        assert_memory_equal(dst + (size_t)x * RB, obj + (size_t)rows[x] * RB, RB);
    }
}

/* ------------------------------------------------ a raw UCX connection -- */

/* KV block 0 of chain located with its row sums: 1 when present with one
 * sum per row of obj (as it was put), each right. */
static int raw_sums_right(dh_raw_t *r, const st_hash_t *chain, const uint8_t *obj)
{
    Strata__V1__LocateResponse *resp = dh_raw_locate_resp(r, chain, 1);
    const Strata__V1__Locations *l = resp->locations;
    int ok;

    ok = l->state[0] == STRATA__V1__OBJECT_STATE__OBJECT_PRESENT && l->n_row_group == 1 &&
         l->row_group[0] == 1 && l->n_row_bytes == 1 && l->row_bytes[0] == RB &&
         l->n_row_sums == 1 && l->row_sums[0].len == ROWS * 8;
    for (uint32_t x = 0; ok && x < ROWS; x++) {
        ok = pr_rowsum_at(l->row_sums[0].data, x) == pr_rowsum(obj + (size_t)x * RB, RB);
    }
    if (!ok) {
        print_message("located: state %d, %zu row groups (%u), row_bytes %u, %zu sums bytes\n",
                      l->state[0], l->n_row_group, l->n_row_group ? l->row_group[0] : 0,
                      l->n_row_bytes ? l->row_bytes[0] : 0, l->n_row_sums ? l->row_sums[0].len : 0);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return ok;
}

/* ------------------------------------------------------------- tests -- */

/* Rows changed after the commit are refused under a live lease; the others
 * still read, one-sided, from the cached lease. */
static void test_scribbled_rows_refused(void **state)
{
    static const uint32_t rows[3] = {1, 5, 9}, clean[2] = {1, 9};
    tc_cluster_t cl;
    dh_raw_t *r = calloc(1, sizeof(*r));
    uint8_t *x = malloc(LEN), *bad = malloc(RB), *dst = malloc(3 * RB);
    st_client_t *c;
    st_hash_t *chain;
    uint32_t region;
    uint64_t off, refused;

    (void)state;
    assert_non_null(r);
    start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M");
    c = connect_to(cl.node[0].addr, NULL);
    chain = dh_make_chain(c, 41, 1);
    fill(x, LEN, 41);
    fill(bad, RB, 42);
    put_rows(c, chain, x);
    dh_raw_open(r, cl.node[0].addr);

    assert_int_equal(read_rows(c, chain, rows, 3, dst), ST_OK); /* located, leased, cached */
    expect_rows(dst, x, rows, 3);
    assert_int_equal(read_rows(c, chain, rows, 3, dst), ST_OK); /* from the lease cache */
    expect_rows(dst, x, rows, 3);
    refused = sc_dp_rows_refused(c);

    /* Row 5 changed in the arena, under the client's live lease. */
    assert_true(dh_raw_locate(r, chain, &region, &off));
    dh_raw_scribble(r, region, off + 5 * RB, bad, RB);
    {
        st_status_t st = read_rows(c, chain, rows, 3, dst);

        /* A miss (read again inline, where the daemon's own check of the
         * object answers CORRUPT): never the changed row. */
        assert_true(st == ST_ERR_NOT_FOUND || st == ST_ERR_CORRUPT);
        assert_true(memcmp(dst + RB, bad, RB) != 0 || st != ST_OK);
    }
    assert_true(sc_dp_rows_refused(c) > refused);
    /* The rows nobody touched still read, one-sided and verified. */
    assert_int_equal(read_rows(c, chain, clean, 2, dst), ST_OK);
    expect_rows(dst, x, clean, 2);
    /* The committed row back in place: the rows read again. */
    dh_raw_scribble(r, region, off + 5 * RB, x + 5 * RB, RB);
    assert_int_equal(read_rows(c, chain, rows, 3, dst), ST_OK);
    expect_rows(dst, x, rows, 3);

    free(x), free(bad), free(dst), free(chain);
    dh_raw_close(r);
    free(r);
    st_client_close(c);
    tc_stop_all(&cl);
}

/* A batch of many cached row reads (more than the calling thread reads inline, more bytes than
 * the client shares with its copy threads: sc_dp_post_cached_rows) refuses exactly the op whose
 * row changed after its commit and returns every other op's rows as committed. */
static void test_scribbled_rows_refused_bulk(void **state)
{
    enum { NB = 300, NR = 6 };
    static const uint32_t rows[NR] = {1, 2, 3, 10, 20, 30}; /* runs: 1-3, 10, 20, 30 */
    const size_t hit = 150;
    tc_cluster_t cl;
    dh_raw_t *r = calloc(1, sizeof(*r));
    uint8_t *x = malloc((size_t)NB * LEN), *bad = malloc(RB), *dst = malloc((size_t)NB * NR * RB);
    st_get_op_t *g = calloc(NB, sizeof(*g));
    st_client_t *c;
    st_hash_t *chain;
    uint32_t region;
    uint64_t off, refused;

    (void)state;
    assert_non_null(r);
    assert_non_null(g);
    start(&cl, "--memory-limit 256M --chunk-bytes 4M --max-object 4M");
    c = connect_to(cl.node[0].addr, NULL);
    chain = dh_make_chain(c, 43, NB);
    fill(bad, RB, 44);
    for (size_t b = 0; b < NB; b++) {
        st_put_op_t p = {
            .block = b, .kind = ST_KIND_KV, .src = x + b * LEN, .len = LEN, .row_bytes = RB};
        st_handle_t *h;

        fill(x + b * LEN, LEN, 1000 + b);
        assert_int_equal(st_client_put(c, chain, NB, &p, 1, 0, &h), ST_OK);
        assert_int_equal(st_handle_wait(h, -1), ST_OK);
        st_handle_release(h);
        assert_int_equal(p.status, ST_OK);
    }
    dh_raw_open(r, cl.node[0].addr);
    assert_int_equal(st_client_register(c, dst, (size_t)NB * NR * RB), ST_OK);
    for (int pass = 0; pass < 3; pass++) {
        st_handle_t *h;

        if (pass == 2) {
            /* Row 20 of block `hit` changed in the arena, under the client's live lease. */
            refused = sc_dp_rows_refused(c);
            assert_true(dh_raw_locate(r, chain + hit, &region, &off));
            dh_raw_scribble(r, region, off + 20 * RB, bad, RB);
        }
        memset(dst, 0, (size_t)NB * NR * RB);
        for (size_t b = 0; b < NB; b++) {
            g[b] = (st_get_op_t){.block = b,
                                 .kind = ST_KIND_KV,
                                 .dst = dst + b * NR * RB,
                                 .dst_len = (size_t)NR * RB,
                                 .row_bytes = RB,
                                 .rows = rows,
                                 .n_rows = NR};
        }
        assert_int_equal(st_client_get(c, chain, NB, g, NB, &h), ST_OK);
        assert_int_equal(st_handle_wait(h, -1), ST_OK);
        st_handle_release(h);
        for (size_t b = 0; b < NB; b++) {
            if (pass == 2 && b == hit) {
                /* A miss (or the daemon's own check answering CORRUPT): never the changed row. */
                assert_true(g[b].status == ST_ERR_NOT_FOUND || g[b].status == ST_ERR_CORRUPT);
                continue;
            }
            assert_int_equal(g[b].status, ST_OK);
            expect_rows(dst + b * NR * RB, x + b * LEN, rows, NR);
        }
    }
    assert_true(sc_dp_rows_refused(c) > refused);

    (void)st_client_deregister(c, dst);
    free(x), free(bad), free(dst), free(g), free(chain);
    dh_raw_close(r);
    free(r);
    st_client_close(c);
    tc_stop_all(&cl);
}

/* A cached location whose lease the daemon let go, and whose extent now
 * holds another object: never that object's rows. */
static void test_reused_extent_never_served(void **state)
{
    static const uint32_t rows[4] = {0, 7, 8, 63};
    tc_cluster_t cl;
    dh_raw_t *r = calloc(1, sizeof(*r));
    uint8_t *a = malloc(LEN), *b = malloc(LEN), *dst = malloc(4 * RB);
    st_client_t *c, *w;
    st_hash_t *ca, *cb;
    uint32_t region_a, region_b;
    uint64_t off_a, off_b;
    st_status_t st;

    (void)state;
    assert_non_null(r);
    start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M --lease 1500ms");
    c = connect_to(cl.node[0].addr, NULL);
    w = connect_to(cl.node[0].addr, NULL);
    ca = dh_make_chain(c, 51, 1);
    cb = NULL;
    fill(a, LEN, 51);
    put_rows(w, ca, a);
    dh_raw_open(r, cl.node[0].addr);
    assert_true(dh_raw_locate(r, ca, &region_a, &off_a));

    assert_int_equal(read_rows(c, ca, rows, 4, dst), ST_OK); /* leased, cached */
    expect_rows(dst, a, rows, 4);
    /* The daemon's lease ends (1.5 s); A is deleted and B takes its extent. */
    for (int i = 0; i < 100 && dh_raw_locate(r, ca, &region_b, &off_b); i++) {
        usleep(100000); /* a leased block is not deleted */
        assert_int_equal(st_client_delete(w, ca, 1, 1u << ST_KIND_KV, 1), ST_OK);
    }
    assert_false(dh_raw_locate(r, ca, &region_b, &off_b));
    /* Objects of A's size until one lands in A's extent. */
    for (uint32_t k = 0;; k++) {
        assert_true(k < 256);
        free(cb);
        cb = dh_make_chain(c, 1000 + k, 1);
        fill(b, LEN, 1000 + k);
        put_rows(w, cb, b);
        assert_true(dh_raw_locate(r, cb, &region_b, &off_b));
        if (region_b == region_a && off_b == off_a) {
            break;
        }
    }

    /* The client's lease clock runs a minute slow: its cached entry for A
     * seems alive, and its gets land on B's bytes. */
    sc_dp_test_row_clock_slow(c, 60ll * 1000000000ll);
    st = read_rows(c, ca, rows, 4, dst);
    /* A miss: the landed bytes (B's) are not delivered as A's rows (what a
     * missed op leaves in dst is unspecified). */
    assert_int_equal(st, ST_ERR_NOT_FOUND);
    assert_true(sc_dp_rows_refused(c) > 0);
    sc_dp_test_row_clock_slow(c, 0);
    /* B's own rows read right. */
    assert_int_equal(read_rows(c, cb, rows, 4, dst), ST_OK);
    expect_rows(dst, b, rows, 4);

    free(a), free(b), free(dst), free(ca), free(cb);
    dh_raw_close(r);
    free(r);
    st_client_close(c);
    st_client_close(w);
    tc_stop_all(&cl);
}

/* Spilled to SSD and promoted back (write-behind on and off), an object
 * keeps its row sums: they are computed again from the bytes the promote
 * verified, and its rows read one-sided and verified. */
static void test_spill_promote_keeps_row_sums(void **state)
{
    static const uint32_t rows[3] = {2, 3, 60};
    static const char *const modes[2] = {"--ssd-writeback 0", "--ssd-writeback 16M"};
    enum { FILL = 1 << 20, N_FILL = 96 };

    (void)state;
    for (int m = 0; m < 2; m++) {
        char dir[] = "/tmp/test_dataplane_rows_XXXXXX", args[512], cmd[600];
        tc_cluster_t cl;
        dh_raw_t *r = calloc(1, sizeof(*r));
        uint8_t *a = malloc(LEN), *big = malloc(FILL), *dst = malloc(3 * RB);
        st_client_t *c;
        st_hash_t *ca, *cf;
        st_put_op_t *fp = calloc(N_FILL, sizeof(*fp));
        st_handle_t *h;
        int mport = tc_free_port();
        double promoted;
        uint64_t refused;

        assert_non_null(mkdtemp(dir));
        snprintf(args, sizeof(args),
                 "--memory-limit 64M --chunk-bytes 4M --max-object 1M --data-dir %s "
                 "--ssd-map-size 1G --ssd-sync none --metrics-listen 127.0.0.1:%d %s",
                 dir, mport, modes[m]);
        start(&cl, args);
        c = connect_to(cl.node[0].addr, NULL);
        ca = dh_make_chain(c, 61, 1);
        fill(a, LEN, 61);
        put_rows(c, ca, a);
        dh_raw_open(r, cl.node[0].addr);
        assert_true(raw_sums_right(r, ca, a));
        /* 96 MiB of other blocks through a 64 MiB daemon: A goes to SSD. */
        fill(big, FILL, 62);
        {
            size_t bt = st_client_block_tokens(c), nb = 0;
            uint32_t *tok = malloc(sizeof(*tok) * bt * N_FILL);

            cf = malloc(sizeof(*cf) * N_FILL);
            for (size_t i = 0; i < bt * N_FILL; i++) {
                tok[i] = (uint32_t)(i * 2246822519u) ^ 62;
            }
            assert_int_equal(st_client_hash(c, tok, bt * N_FILL, NULL, 0, cf, N_FILL, &nb), ST_OK);
            free(tok);
        }
        for (int i = 0; i < N_FILL; i++) {
            fp[i] =
                (st_put_op_t){.block = (uint64_t)i, .kind = ST_KIND_KV, .src = big, .len = FILL};
            assert_int_equal(st_client_put(c, cf, N_FILL, &fp[i], 1, 0, &h), ST_OK);
            assert_int_equal(st_handle_wait(h, -1), ST_OK);
            st_handle_release(h);
        }
        promoted = tc_metric(mport, "strata_promotions_total{namespace=\"default/default\","
                                    "kind=\"kv\"}");
        /* Located again: promoted from SSD, with its row sums. */
        assert_true(raw_sums_right(r, ca, a));
        assert_true(tc_metric(mport, "strata_promotions_total{namespace=\"default/default\","
                                     "kind=\"kv\"}") > promoted);
        refused = sc_dp_rows_refused(c);
        assert_int_equal(read_rows(c, ca, rows, 3, dst), ST_OK);
        expect_rows(dst, a, rows, 3);
        assert_int_equal(sc_dp_rows_refused(c), refused);

        free(a), free(big), free(dst), free(ca), free(cf), free(fp);
        dh_raw_close(r);
        free(r);
        st_client_close(c);
        tc_stop_all(&cl);
        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        assert_int_equal(system(cmd), 0);
    }
}

/* KV block 0 of chain put inline (gRPC Put) with row_bytes rb. */
static void raw_put(dh_raw_t *r, const st_hash_t *chain, const uint8_t *obj, uint32_t rb)
{
    Strata__V1__PutRequest req = STRATA__V1__PUT_REQUEST__INIT;
    Strata__V1__ObjectKey k = gc_key(&chain[0], STRATA__V1__OBJECT_KIND__KV);
    Strata__V1__InlineObject o, *op = &o;
    Strata__V1__PutResponse *resp = NULL;
    srpc_error_t err;

    gc_inline(&o, &k, obj, LEN);
    o.row_bytes = rb;
    req.namespace_id = r->ns;
    req.objects = &op;
    req.n_objects = 1;
    assert_int_equal(srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_PUT], &req.base, 10000,
                               (ProtobufCMessage **)&resp, &err),
                     ST_OK);
    assert_int_equal(resp->status[0], STRATA__V1__KEY_STATUS__KEY_OK);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* An inline Get of rows[0..n) of KV block 0 of chain: the key's status;
 * with KEY_OK, the rows are checked against obj and the answer's checksum. */
static int raw_get_rows(dh_raw_t *r, const st_hash_t *chain, const uint32_t *rows, size_t n,
                        const uint8_t *obj)
{
    Strata__V1__GetRequest req = STRATA__V1__GET_REQUEST__INIT;
    Strata__V1__ObjectKey k = STRATA__V1__OBJECT_KEY__INIT, *kp = &k;
    Strata__V1__RowSelection sel = STRATA__V1__ROW_SELECTION__INIT, *sp = &sel;
    Strata__V1__GetResponse *resp = NULL;
    srpc_error_t err;
    int ks;

    k.block_hash.data = (uint8_t *)chain[0].b;
    k.block_hash.len = ST_HASH_BYTES;
    k.kind = STRATA__V1__OBJECT_KIND__KV;
    sel.key_index = 0;
    sel.rows = (uint32_t *)rows;
    sel.n_rows = n;
    req.namespace_id = r->ns;
    req.keys = &kp;
    req.n_keys = 1;
    req.rows = &sp;
    req.n_rows = 1;
    if (srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_GET], &req.base, 10000,
                  (ProtobufCMessage **)&resp, &err) != ST_OK) {
        fail_msg("Get with rows: %s", err.message);
    }
    ks = resp->status[0];
    if (ks == STRATA__V1__KEY_STATUS__KEY_OK) {
        const Strata__V1__InlineObject *o = resp->objects[0];

        assert_int_equal(o->data.len, n * RB);
        assert_int_equal(o->row_bytes, RB);
        assert_true(o->checksum == XXH3_64bits(o->data.data, o->data.len));
        expect_rows(o->data.data, obj, rows, (uint32_t)n);
    } else {
        assert_int_equal(resp->objects[0]->data.len, 0);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return ks;
}

/* An inline Put with row_bytes gets row sums; an inline Get with a row
 * selection answers those rows, each checked against its row sum: a changed
 * row is KEY_CORRUPT (never its bytes), the others still read; an object
 * without a row size is KEY_INVALID, not its whole bytes. */
static void test_inline_rows(void **state)
{
    static const uint32_t rows[3] = {9, 5, 1}, clean[2] = {1, 9}, past[1] = {ROWS};
    tc_cluster_t cl;
    dh_raw_t *r = calloc(1, sizeof(*r));
    uint8_t *x = malloc(LEN), *bad = malloc(RB), *dst = malloc(3 * RB);
    st_client_t *c;
    st_hash_t *chain, *plain;
    uint32_t region;
    uint64_t off;

    (void)state;
    assert_non_null(r);
    start(&cl, "--memory-limit 128M --chunk-bytes 4M --max-object 4M");
    c = connect_to(cl.node[0].addr, NULL);
    chain = dh_make_chain(c, 71, 1);
    plain = dh_make_chain(c, 72, 1);
    fill(x, LEN, 71);
    fill(bad, RB, 72);
    dh_raw_open(r, cl.node[0].addr);
    raw_put(r, chain, x, RB);
    raw_put(r, plain, x, 0);
    dh_raw_close(r);
    dh_raw_open(r, cl.node[0].addr); /* the keys of the region the puts made */
    assert_true(raw_sums_right(r, chain, x));
    assert_int_equal(raw_get_rows(r, chain, rows, 3, x), STRATA__V1__KEY_STATUS__KEY_OK);
    assert_int_equal(raw_get_rows(r, chain, past, 1, x), STRATA__V1__KEY_STATUS__KEY_INVALID);
    assert_int_equal(raw_get_rows(r, plain, rows, 3, x), STRATA__V1__KEY_STATUS__KEY_INVALID);
    /* Its rows read one-sided too, verified. */
    assert_int_equal(read_rows(c, chain, rows, 3, dst), ST_OK);
    expect_rows(dst, x, rows, 3);

    assert_true(dh_raw_locate(r, chain, &region, &off));
    dh_raw_scribble(r, region, off + 5 * RB, bad, RB);
    assert_int_equal(raw_get_rows(r, chain, rows, 3, x), STRATA__V1__KEY_STATUS__KEY_CORRUPT);
    assert_int_equal(raw_get_rows(r, chain, clean, 2, x), STRATA__V1__KEY_STATUS__KEY_OK);

    free(x), free(bad), free(dst), free(chain), free(plain);
    dh_raw_close(r);
    free(r);
    st_client_close(c);
    tc_stop_all(&cl);
}

TM_STRATAD_MAIN(NULL, "STRATAD", &stratad_path, cmocka_unit_test(test_scribbled_rows_refused),
                cmocka_unit_test(test_scribbled_rows_refused_bulk),
                cmocka_unit_test(test_reused_extent_never_served),
                cmocka_unit_test(test_spill_promote_keeps_row_sums),
                cmocka_unit_test(test_inline_rows))
