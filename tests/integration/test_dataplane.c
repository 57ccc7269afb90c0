/*
 * test_dataplane.c - the one-sided data plane through stratad and libstrata
 * on loopback, over a real transport (argv[2]: "ucx", "libfabric:tcp;ofi_rxm",
 * "libfabric:shm"; UCX_TLS is set per registration): put/get round trips of
 * random sizes from 1 B to 8 MiB, 10,000 row reads, readers racing eviction
 * (zero wrong bytes); the protocol-level cases (a read after its lease
 * expired and its extent was reused, a commit with a wrong checksum, abort
 * and expiry reclaiming space, fencing) are in test_dataplane_raw.c.
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
#include "stratad_arg.h"

static const char *stratad_path;
const char *td_spec; /* the client's transport */
static char daemon_args[256];
static char spec_buf[128];

st_client_t *td_connect(const tc_cluster_t *cl)
{
    st_client_params_t p;

    cf_params_transport(&p, cl->node[0].addr, td_spec, 20000);
    return cf_connect(&p);
}

/* Starts one daemon and checks that it really serves the transport (skips
 * when this machine cannot run it: the daemon then falls back to inline). */
void td_start(tc_cluster_t *cl, const char *more)
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
    td_start(&cl, "--memory-limit 512M --chunk-bytes 32M");
    c = td_connect(&cl);
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
    td_start(&cl, "--memory-limit 256M --chunk-bytes 16M --max-object 16M");
    c = td_connect(&cl);
    chain = dh_make_chain(c, 2, 1);
    dh_fill(obj, ROWS * RB, 0, 22);
    put = (st_put_op_t){
        .block = 0, .kind = ST_KIND_IDX, .layer = 3, .src = obj, .len = ROWS * RB, .row_bytes = RB};
    dh_put_one(c, chain, &put);
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
    td_start(&cl, more);
    c = td_connect(&cl);
    chain = dh_make_chain(c, 9, 1);
    dh_fill(obj, ROWS * RB, 0, 77);
    put = (st_put_op_t){
        .block = 0, .kind = ST_KIND_KV, .layer = 1, .src = obj, .len = ROWS * RB, .row_bytes = RB};
    dh_put_one(c, chain, &put);
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
    td_start(&cl, "--memory-limit 128M");
    c = td_connect(&cl);
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
    st_client_t *c = td_connect(s->cl);
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
    td_start(&cl, "--memory-limit 64M --chunk-bytes 2M --max-object 1M");
    w = td_connect(&cl);
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
        cmocka_unit_test(test_get_deadline_stopped_daemon),
    };
    const char *colon;

    if (tm_stratad_arg(argc, argv, 3, NULL, "STRATAD ucx|libfabric:<provider>", &stratad_path) !=
        0) {
        return 2;
    }
    snprintf(spec_buf, sizeof(spec_buf), "%s", argv[2]);
    for (char *q = spec_buf; *q; q++) {
        *q = *q == '+' ? ';' : *q; /* "tcp+ofi_rxm": CMake lists split on ';' */
    }
    td_spec = spec_buf;
    colon = strchr(td_spec, ':');
    if (colon != NULL) {
        snprintf(daemon_args, sizeof(daemon_args), "--transport libfabric --fabric-provider %s",
                 colon + 1);
    } else {
        snprintf(daemon_args, sizeof(daemon_args), "--transport %s", td_spec);
    }
    if (getenv("TD_FILTER") != NULL) {
        cmocka_set_test_filter(getenv("TD_FILTER")); /* one case by name, by hand */
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
