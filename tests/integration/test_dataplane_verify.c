/*
 * test_dataplane_verify.c - how libstrata vouches for whole objects read
 * with one-sided gets (client/dataplane.c, verify_reads), against real
 * stratad daemons over UCX on loopback:
 *
 *   - a read that may have landed after its lease's bound is checked by its
 *     checksum: with the extent's bytes changed behind the daemon's back it
 *     is a miss, never data; with the committed bytes it is a hit;
 *   - with verify_reads = always (from st_client_params_t or the config
 *     file) every object is checked: the same changed extent is a miss even
 *     under a live lease; so is a read under a live lease in the default
 *     mode, because UCX enforces no key (a put through the region's key
 *     lands over committed bytes: docs/transport.md, "What each transport
 *     enforces"), Hello says committed_read_only = false, and libstrata
 *     then checks every object of that node: bytes changed behind the
 *     daemon's back are never a hit;
 *   - with cache_locations = all, a whole object read again within its lease
 *     costs no Locate (the daemon's /metrics count them) and is vouched for
 *     like a located one: late and changed, a miss;
 *   - a large batch over two daemons, read in several Locate waves per node
 *     (dataplane.c pipelines them), returns every byte right, both under
 *     the lease and when every object is checked;
 *   - copy_threads 1, 2, 4: the copy threads take shares of a batch's
 *     copies, every byte right, also with two batches at once.
 *
 * Changing an extent behind the daemon's back (a one-sided put with the
 * region's key, no reservation) is what a hostile or stalled client of an
 * unenforcing transport can do; it also stands in for an extent reused
 * after a lease ran out, which the lease bound cannot be made to race on
 * purpose; sc_dp_test_lease_skew() makes the client's lease clock run
 * ahead instead.
 *
 * usage: test_dataplane_verify STRATAD
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "client_internal.h"
#include "client_fixture.h"
#include "cluster.h"
#include "dp_harness.h"
#include "srpc.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "stratad_arg.h"

static const char *stratad_path;

static st_client_t *connect_cache(const char *nodes, const char *verify, const char *cache)
{
    st_client_params_t p;

    cf_params_transport(&p, nodes, "ucx", 20000);
    if (cache != NULL) {
        p.field_mask |= ST_CLIENT_FIELD_CACHE_LOCATIONS;
        p.cache_locations = cache;
    }
    if (verify != NULL) {
        p.field_mask |= ST_CLIENT_FIELD_VERIFY_READS;
        p.verify_reads = verify;
    }
    return cf_connect(&p);
}

static st_client_t *connect_mode(const char *nodes, const char *verify)
{
    return connect_cache(nodes, verify, NULL);
}

/* The daemon's count of answered Locate calls, from its /metrics. */
static long locate_calls(int port)
{
    double v = tc_metric(port, "strata_request_duration_seconds_count{method=\"Locate\"}");

    assert_true(v >= 0);
    return (long)v;
}

/* Starts n daemons over UCX; skips when UCX cannot run here. */
static void start(tc_cluster_t *cl, int n, const char *more)
{
    dh_start(cl, stratad_path, n, "--transport ucx", more);
}

/* One whole-object read of block 0 (KV, layer 0) into dst. */
static st_status_t read_one(st_client_t *c, const st_hash_t *chain, uint8_t *dst, size_t len)
{
    size_t length;
    st_status_t st = dh_get_block0(c, chain, dst, len, &length);

    if (st == ST_OK) {
        assert_int_equal(length, len);
    } else {
        assert_int_equal(length, 0);
    }
    return st;
}

/* ------------------------------------------------ a raw UCX connection -- */

/* Where the daemon holds KV block 0 of chain (no lease): it must be there. */
static void raw_locate(dh_raw_t *r, const st_hash_t *chain, uint32_t *region, uint64_t *off)
{
    assert_true(dh_raw_locate(r, chain, region, off));
    assert_non_null(r->rkey[*region]);
}

/* ------------------------------------------------------------- tests -- */

enum { LEN = 60000 };

/*
 * The object both tests read: LEN bytes (x) committed as KV block 0 of
 * chain, other bytes of that length (y) to put over its extent, a buffer to
 * read into (dst), and a raw connection to its node.
 */
typedef struct one_obj {
    dh_raw_t *r;
    st_hash_t *chain;
    uint8_t *x, *y, *dst;
} one_obj_t;

static void one_obj_alloc(one_obj_t *o)
{
    o->r = calloc(1, sizeof(*o->r));
    o->x = malloc(LEN), o->y = malloc(LEN), o->dst = malloc(LEN);
    assert_non_null(o->r);
}

/* Puts x (salt_x) through c, then opens the raw connection to addr (after
 * the put: its region exists now). */
static void one_obj_put(one_obj_t *o, st_client_t *c, const char *addr, uint32_t stream,
                        uint64_t salt_x, uint64_t salt_y)
{
    st_put_op_t p;

    o->chain = dh_make_chain(c, stream, 1);
    dh_fill(o->x, LEN, 0, salt_x);
    dh_fill(o->y, LEN, 0, salt_y);
    p = (st_put_op_t){.block = 0, .kind = ST_KIND_KV, .src = o->x, .len = LEN};
    dh_put_one(c, o->chain, &p);
    dh_raw_open(o->r, addr);
}

static void one_obj_free(one_obj_t *o)
{
    free(o->x), free(o->y), free(o->dst), free(o->chain);
    dh_raw_close(o->r);
    free(o->r);
}

static void test_late_or_always_reads_are_checked(void **state)
{
    tc_cluster_t cl;
    one_obj_t o;
    st_client_t *lease, *always, *file_always;
    uint32_t region;
    uint64_t off;
    char path[] = "/tmp/test_dataplane_verify_XXXXXX";
    FILE *f;
    int fd;

    (void)state;
    one_obj_alloc(&o);
    start(&cl, 1, "--memory-limit 128M --chunk-bytes 4M --max-object 4M");
    lease = connect_mode(cl.node[0].addr, NULL); /* the default: lease */
    always = connect_mode(cl.node[0].addr, "always");
    /* The same setting from a client config file. */
    fd = mkstemp(path);
    assert_true(fd >= 0);
    f = fdopen(fd, "w");
    assert_non_null(f);
    fprintf(f, "nodes = %s\ntransport = ucx\nverify_reads = always\n", cl.node[0].addr);
    fclose(f);
    {
        st_client_params_t fp = {0};

        fp.field_mask = ST_CLIENT_FIELD_CONFIG_FILE;
        fp.config_file = path;
        assert_int_equal(st_client_connect(&fp, &file_always), ST_OK);
    }
    unlink(path);
    one_obj_put(&o, lease, cl.node[0].addr, 7, 11, 12);

    /* Committed bytes: a hit in every mode, checked or not. */
    assert_int_equal(read_one(lease, o.chain, o.dst, LEN), ST_OK);
    assert_memory_equal(o.dst, o.x, LEN);
    assert_int_equal(read_one(always, o.chain, o.dst, LEN), ST_OK);
    assert_memory_equal(o.dst, o.x, LEN);
    sc_dp_test_lease_skew(lease, 3600ll * 1000000000ll);
    assert_int_equal(read_one(lease, o.chain, o.dst, LEN), ST_OK); /* late, checked, right */
    assert_memory_equal(o.dst, o.x, LEN);

    /* The extent now holds other bytes (as if reused after a lease ran out). */
    raw_locate(o.r, o.chain, &region, &off);
    dh_raw_scribble(o.r, region, off, o.y, LEN);
    /* Late (the lease clock runs an hour ahead): checked, a miss, never data. */
    assert_int_equal(read_one(lease, o.chain, o.dst, LEN), ST_ERR_NOT_FOUND);
    /* verify_reads = always: checked under a live lease too, a miss. */
    assert_int_equal(read_one(always, o.chain, o.dst, LEN), ST_ERR_NOT_FOUND);
    assert_int_equal(read_one(file_always, o.chain, o.dst, LEN), ST_ERR_NOT_FOUND);
    /* The default under a live lease: the node's transport does not keep
     * committed bytes read-only (Hello's committed_read_only is false for
     * UCX), so the object is checked anyway: a miss, never the scribbled
     * bytes as a hit. */
    sc_dp_test_lease_skew(lease, 0);
    memset(o.dst, 0, LEN);
    assert_int_equal(read_one(lease, o.chain, o.dst, LEN), ST_ERR_NOT_FOUND);

    /* The committed bytes back in place: hits again. */
    dh_raw_scribble(o.r, region, off, o.x, LEN);
    assert_int_equal(read_one(always, o.chain, o.dst, LEN), ST_OK);
    assert_memory_equal(o.dst, o.x, LEN);
    sc_dp_test_lease_skew(lease, 3600ll * 1000000000ll);
    assert_int_equal(read_one(lease, o.chain, o.dst, LEN), ST_OK);
    assert_memory_equal(o.dst, o.x, LEN);

    one_obj_free(&o);
    st_client_close(lease);
    st_client_close(always);
    st_client_close(file_always);
    tc_stop_all(&cl);
}

/*
 * cache_locations = all: the second read of a whole object rides the first
 * one's lease (no Locate); a late read of a changed extent through the
 * cached location is a miss; the default (rows) locates every whole read.
 */
static void test_cache_locations_all(void **state)
{
    tc_cluster_t cl;
    one_obj_t o;
    st_client_t *all, *rows;
    uint32_t region;
    uint64_t off;
    char more[160];
    int port = tc_free_port();
    long n0;

    (void)state;
    one_obj_alloc(&o);
    snprintf(more, sizeof(more),
             "--memory-limit 128M --chunk-bytes 4M --max-object 4M --metrics-listen 127.0.0.1:%d",
             port);
    start(&cl, 1, more);
    all = connect_cache(cl.node[0].addr, NULL, "all");
    rows = connect_cache(cl.node[0].addr, NULL, NULL);
    one_obj_put(&o, all, cl.node[0].addr, 8, 21, 22);

    n0 = locate_calls(port);
    assert_int_equal(read_one(all, o.chain, o.dst, LEN), ST_OK);
    assert_memory_equal(o.dst, o.x, LEN);
    assert_int_equal(locate_calls(port) - n0, 1);
    assert_int_equal(read_one(all, o.chain, o.dst, LEN), ST_OK); /* from the lease cache */
    assert_memory_equal(o.dst, o.x, LEN);
    assert_int_equal(locate_calls(port) - n0, 1);
    assert_int_equal(read_one(rows, o.chain, o.dst, LEN), ST_OK); /* the default locates */
    assert_int_equal(read_one(rows, o.chain, o.dst, LEN), ST_OK);
    assert_int_equal(locate_calls(port) - n0, 3);

    /* Through the cached location, late, of changed bytes: a miss, never data. */
    raw_locate(o.r, o.chain, &region, &off);
    dh_raw_scribble(o.r, region, off, o.y, LEN);
    sc_dp_test_lease_skew(all, 3600ll * 1000000000ll);
    {
        /* A cached location that fails is read again inline, where the daemon's
         * own check of the changed extent answers CORRUPT: no bytes either way. */
        st_status_t st = read_one(all, o.chain, o.dst, LEN);

        assert_true(st == ST_ERR_NOT_FOUND || st == ST_ERR_CORRUPT);
    }
    dh_raw_scribble(o.r, region, off, o.x, LEN);
    assert_int_equal(read_one(all, o.chain, o.dst, LEN), ST_OK);
    assert_memory_equal(o.dst, o.x, LEN);

    one_obj_free(&o);
    st_client_close(all);
    st_client_close(rows);
    tc_stop_all(&cl);
}

static void test_bad_verify_reads_refused(void **state)
{
    tc_cluster_t cl;
    st_client_params_t p = {0};
    st_client_t *c = NULL;

    (void)state;
    start(&cl, 1, "--memory-limit 128M --chunk-bytes 4M --max-object 4M");
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_VERIFY_READS;
    p.nodes = cl.node[0].addr;
    p.transport = "ucx";
    p.verify_reads = "sometimes";
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(st_client_last_error(), "verify_reads"));
    p.field_mask =
        ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_CACHE_LOCATIONS;
    p.cache_locations = "everything";
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(st_client_last_error(), "cache_locations"));
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_COPY_THREADS;
    for (int k = 0; k < 2; k++) {
        p.copy_threads = k == 0 ? 0 : 17;
        assert_int_equal(st_client_connect(&p, &c), ST_ERR_INVALID);
        assert_null(c);
        assert_non_null(strstr(st_client_last_error(), "copy_threads"));
    }
    tc_stop_all(&cl);
}

/*
 * One batch of many objects over two daemons (84 MiB): each node's share is
 * located in waves (512 KiB, 2 MiB, 8 MiB, 32 MiB, ... per node), the first
 * 32 MiB or so on the batch's thread and the rest on the locator threads,
 * their gets posted as the answers come in; every object must come back
 * right, under the lease, with every object checked (always), and checked
 * as late reads.
 */
static void test_waves_over_two_nodes(void **state)
{
    enum { BLOCKS = 1792, OBJ = 48 << 10 };
    tc_cluster_t cl;
    st_client_t *c[2];
    st_hash_t *chain;
    uint8_t *src = malloc((size_t)BLOCKS * OBJ), *dst = malloc((size_t)BLOCKS * OBJ);
    st_put_op_t *puts = calloc(BLOCKS, sizeof(*puts));
    st_get_op_t *gets = calloc(BLOCKS + 1, sizeof(*gets));
    st_handle_t *h;
    char nodes[128];

    (void)state;
    assert_non_null(src);
    assert_non_null(dst);
    assert_non_null(puts);
    assert_non_null(gets);
    start(&cl, 2, "--memory-limit 512M --chunk-bytes 8M --max-object 4M");
    snprintf(nodes, sizeof(nodes), "%s,%s", cl.node[0].addr, cl.node[1].addr);
    c[0] = connect_mode(nodes, "lease");
    c[1] = connect_mode(nodes, "always");
    chain = dh_make_chain(c[0], 21, BLOCKS);
    for (size_t b = 0; b < BLOCKS; b++) {
        dh_fill(src + b * OBJ, OBJ, b, 5);
        puts[b] = (st_put_op_t){.block = b, .kind = ST_KIND_KV, .src = src + b * OBJ, .len = OBJ};
    }
    assert_int_equal(st_client_put(c[0], chain, BLOCKS, puts, BLOCKS, 0, &h), ST_OK);
    dh_run(h);
    for (size_t b = 0; b < BLOCKS; b++) {
        assert_int_equal(puts[b].status, ST_OK);
    }
    for (int pass = 0; pass < 3; pass++) {
        st_client_t *cc = c[pass == 1];

        assert_int_equal(st_client_register(cc, dst, (size_t)BLOCKS * OBJ), ST_OK);
        sc_dp_test_lease_skew(cc, pass == 2 ? 3600ll * 1000000000ll : 0);
        memset(dst, 0, (size_t)BLOCKS * OBJ);
        for (size_t b = 0; b < BLOCKS; b++) {
            gets[b] =
                (st_get_op_t){.block = b, .kind = ST_KIND_KV, .dst = dst + b * OBJ, .dst_len = OBJ};
        }
        assert_int_equal(st_client_get(cc, chain, BLOCKS, gets, BLOCKS, &h), ST_OK);
        dh_run(h);
        for (size_t b = 0; b < BLOCKS; b++) {
            assert_int_equal(gets[b].status, ST_OK);
            assert_int_equal(gets[b].length, OBJ);
        }
        assert_memory_equal(dst, src, (size_t)BLOCKS * OBJ);
        assert_int_equal(st_client_deregister(cc, dst), ST_OK);
    }
    free(src), free(dst), free(puts), free(gets), free(chain);
    st_client_close(c[0]);
    st_client_close(c[1]);
    tc_stop_all(&cl);
}

typedef struct cp_reader {
    pthread_t th;
    st_client_t *c;
    const st_hash_t *chain;
    size_t n_blocks, lo, hi;
    st_get_op_t *gets;
    int status;
} cp_reader_t;

static void *cp_read(void *arg)
{
    cp_reader_t *r = arg;
    st_handle_t *h = NULL;

    r->status = st_client_get(r->c, r->chain, r->n_blocks, r->gets + r->lo, r->hi - r->lo, &h);
    if (r->status == ST_OK) {
        r->status = st_handle_wait(h, -1);
        st_handle_release(h);
    }
    return NULL;
}

/*
 * copy_threads: objects of mixed sizes (4 KiB .. 196 KiB, 64 MiB over two
 * daemons) read with 1, 2 and 4 copy threads: every byte right, and with
 * more than one the copy threads did copy a share; then two batches at once
 * on one client (one of them has the copy threads, the other copies alone),
 * both right.
 */
static void test_copy_threads(void **state)
{
    enum { BLOCKS = 640 };
    static const uint32_t threads[] = {1, 2, 4};
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    size_t off[BLOCKS + 1], total = 0;
    uint8_t *src, *dst;
    st_put_op_t *puts = calloc(BLOCKS, sizeof(*puts));
    st_get_op_t *gets = calloc(BLOCKS, sizeof(*gets));
    st_client_params_t p = {0};
    st_handle_t *h;
    char nodes[128];

    (void)state;
    assert_non_null(puts);
    assert_non_null(gets);
    for (size_t b = 0; b < BLOCKS; b++) {
        off[b] = total;
        total += (4u << 10) + ((b * 7919u) % 48u) * (4u << 10);
    }
    off[BLOCKS] = total;
    src = malloc(total);
    dst = malloc(total);
    assert_non_null(src);
    assert_non_null(dst);
    start(&cl, 2, "--memory-limit 512M --chunk-bytes 8M --max-object 4M");
    snprintf(nodes, sizeof(nodes), "%s,%s", cl.node[0].addr, cl.node[1].addr);
    c = connect_mode(nodes, NULL);
    chain = dh_make_chain(c, 33, BLOCKS);
    for (size_t b = 0; b < BLOCKS; b++) {
        dh_fill(src + off[b], off[b + 1] - off[b], b, 9);
        puts[b] = (st_put_op_t){
            .block = b, .kind = ST_KIND_KV, .src = src + off[b], .len = off[b + 1] - off[b]};
    }
    assert_int_equal(st_client_put(c, chain, BLOCKS, puts, BLOCKS, 0, &h), ST_OK);
    dh_run(h);
    for (size_t b = 0; b < BLOCKS; b++) {
        assert_int_equal(puts[b].status, ST_OK);
    }
    st_client_close(c);
    for (size_t t = 0; t < sizeof(threads) / sizeof(threads[0]); t++) {
        cp_reader_t r[4];

        cf_params_transport(&p, nodes, "ucx", 20000);
        p.field_mask |= ST_CLIENT_FIELD_COPY_THREADS;
        p.copy_threads = threads[t];
        c = cf_connect(&p);
        assert_int_equal(st_client_register(c, dst, total), ST_OK);
        memset(dst, 0, total);
        for (size_t b = 0; b < BLOCKS; b++) {
            gets[b] = (st_get_op_t){.block = b,
                                    .kind = ST_KIND_KV,
                                    .dst = dst + off[b],
                                    .dst_len = off[b + 1] - off[b]};
        }
        assert_int_equal(st_client_get(c, chain, BLOCKS, gets, BLOCKS, &h), ST_OK);
        dh_run(h);
        for (size_t b = 0; b < BLOCKS; b++) {
            assert_int_equal(gets[b].status, ST_OK);
            assert_int_equal(gets[b].length, off[b + 1] - off[b]);
        }
        assert_memory_equal(dst, src, total);
        if (threads[t] == 1) {
            assert_int_equal(sc_dp_test_shared_bytes(c), 0);
        } else {
            assert_true(sc_dp_test_shared_bytes(c) > 0);
        }
        /* Four batches at once, quarters of the blocks: their shares share the copy
         * threads' queue, and each batch also runs the others' while it waits. */
        memset(dst, 0, total);
        for (int k = 0; k < 4; k++) {
            r[k] = (cp_reader_t){.c = c,
                                 .chain = chain,
                                 .n_blocks = BLOCKS,
                                 .lo = (size_t)k * BLOCKS / 4,
                                 .hi = (size_t)(k + 1) * BLOCKS / 4,
                                 .gets = gets,
                                 .status = -1};
            assert_int_equal(pthread_create(&r[k].th, NULL, cp_read, &r[k]), 0);
        }
        for (int k = 0; k < 4; k++) {
            pthread_join(r[k].th, NULL);
            assert_int_equal(r[k].status, ST_OK);
        }
        for (size_t b = 0; b < BLOCKS; b++) {
            assert_int_equal(gets[b].status, ST_OK);
        }
        assert_memory_equal(dst, src, total);
        assert_int_equal(st_client_deregister(c, dst), ST_OK);
        st_client_close(c);
    }
    free(src), free(dst), free(puts), free(gets), free(chain);
    tc_stop_all(&cl);
}

TM_STRATAD_MAIN(NULL, "STRATAD", &stratad_path,
                cmocka_unit_test(test_late_or_always_reads_are_checked),
                cmocka_unit_test(test_bad_verify_reads_refused),
                cmocka_unit_test(test_cache_locations_all),
                cmocka_unit_test(test_waves_over_two_nodes), cmocka_unit_test(test_copy_threads))
