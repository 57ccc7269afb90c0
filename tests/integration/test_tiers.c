/*
 * test_tiers.c - stratad with its SSD tier (real LMDB files in mkdtemp
 * directories), driven over gRPC:
 *   - spill and promote: a small memory_limit, more KV written than fits,
 *     everything read back byte-exact (Get, Lookup) after it spilled;
 *   - kill -9 at random points of a stream of durable session appends and
 *     KDA puts, twenty times on one data directory: after each restart every
 *     acknowledged write is there with its bytes;
 *   - a value corrupted on disk is detected, never served, and counted;
 *   - a full map refuses a durable put with RESOURCE_EXHAUSTED while reads
 *     keep working.
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include <grpc/status.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "data_dirs.h"
#include "client_fixture.h"
#include "cluster.h"
#include "grpc_conn.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/hash.h"
#include "strata/strata.h"
#include "mkhash.h"
#include "stratad_arg.h"

static const char *stratad_path;

/* Puts one object per (block, layer) of blocks[0..n) (block i's parent is
 * block i-1, or the seed). Returns the call's status; *bad counts per-key
 * statuses that are not KEY_OK. */
static st_status_t put_objs(gc_conn_t *c, const st_hash_t *blocks, const st_hash_t *parent0,
                            size_t n, uint32_t n_layers, Strata__V1__ObjectKind kind, size_t len,
                            int durable, size_t *bad, srpc_error_t *err)
{
    size_t no = n * n_layers;
    Strata__V1__PutResponse *resp = NULL;
    st_status_t st;
    gc_put_t put;

    gc_put_build(&put, c->ns, blocks, parent0, n, n_layers, kind, len, -1);
    put.req.durable = durable;
    st = gc_call(c, SRPC_CACHE_PUT, &put.req, (void **)&resp, err);
    if (st == ST_OK) {
        assert_int_equal(resp->n_status, no);
        for (size_t k = 0; k < no; k++) {
            *bad += resp->status[k] != STRATA__V1__KEY_STATUS__KEY_OK;
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    gc_put_free(&put);
    return st;
}

/* Gets (h, layer) inline; 1 when present with exactly the expected bytes,
 * 0 when missing; fails the test on wrong bytes. */
static int get_check(gc_conn_t *c, const st_hash_t *h, uint32_t layer, Strata__V1__ObjectKind kind,
                     size_t len)
{
    Strata__V1__GetRequest req = STRATA__V1__GET_REQUEST__INIT;
    Strata__V1__ObjectKey key = STRATA__V1__OBJECT_KEY__INIT, *kp = &key;
    Strata__V1__GetResponse *resp = NULL;
    srpc_error_t err;
    uint8_t *want = malloc(len);
    int ok = 0;

    assert_non_null(want);
    key.block_hash.data = (uint8_t *)h->b;
    key.block_hash.len = 16;
    key.kind = kind;
    key.layer = layer;
    req.namespace_id = c->ns;
    req.keys = &kp;
    req.n_keys = 1;
    assert_int_equal(gc_call(c, SRPC_CACHE_GET, &req, (void **)&resp, &err), ST_OK);
    assert_int_equal(resp->n_status, 1);
    if (resp->status[0] == STRATA__V1__KEY_STATUS__KEY_OK) {
        gc_fill(want, len, h, layer);
        assert_int_equal(resp->objects[0]->data.len, len);
        assert_memory_equal(resp->objects[0]->data.data, want, len);
        assert_int_equal(resp->objects[0]->checksum, XXH3_64bits(want, len));
        ok = 1;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(want);
    return ok;
}

/* Leading blocks of blocks[0..n) present with KV layers 0 and 1 (one segment). */
static uint32_t lookup_n(gc_conn_t *c, const st_hash_t *blocks, size_t n)
{
    Strata__V1__LookupResponse *resp = NULL;
    srpc_error_t err;
    gc_lookup_t l;
    uint32_t m;

    gc_lookup_build(&l, c->ns, blocks, n);
    assert_int_equal(gc_call(c, SRPC_CACHE_LOOKUP, &l.req, (void **)&resp, &err), ST_OK);
    m = resp->segments[0]->matched_blocks;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return m;
}

/* A thread's lookups of the chains at blocks[0..SP_CHAIN) and [SP_CHAIN..2 SP_CHAIN). */
typedef struct lk_arg {
    gc_conn_t *c;
    const st_hash_t *blocks;
    uint32_t matched[2];
} lk_arg_t;

#define SP_CHAIN 50

static void *lookup_thread(void *p)
{
    lk_arg_t *a = p;

    for (int k = 0; k < 2; k++) {
        Strata__V1__LookupRequest req = STRATA__V1__LOOKUP_REQUEST__INIT;
        Strata__V1__Segment seg = STRATA__V1__SEGMENT__INIT, *sp = &seg;
        Strata__V1__LookupResponse *resp = NULL;
        uint32_t layers[2] = {0, 1};
        srpc_error_t err;

        seg.block_hashes.data = (uint8_t *)a->blocks[k * SP_CHAIN].b;
        seg.block_hashes.len = SP_CHAIN * 16;
        req.namespace_id = a->c->ns;
        req.segments = &sp;
        req.n_segments = 1;
        req.kinds_mask = 1u << STRATA__V1__OBJECT_KIND__KV;
        req.layers = layers;
        req.n_layers = 2;
        if (gc_call(a->c, SRPC_CACHE_LOOKUP, &req, (void **)&resp, &err) == ST_OK) {
            a->matched[k] = resp->segments[0]->matched_blocks;
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        }
    }
    return NULL;
}

static void mk_dir(char *dir, size_t cap)
{
    snprintf(dir, cap, "/tmp/strata-tiers-XXXXXX");
    assert_non_null(mkdtemp(dir));
}

/* ------------------------------------------------------------ spill -- */

#define SP_BLOCKS 1200
#define SP_LAYERS 2
#define SP_OBJ    (64 * 1024) /* 1200 x 2 x 64 KiB = 150 MiB through a 64 MiB daemon */

static void test_spill_and_promote(void **state)
{
    tc_cluster_t cl;
    gc_conn_t c;
    char dir[64], args[256];
    st_hash_t *chain = malloc(sizeof(st_hash_t) * SP_BLOCKS);
    size_t bad = 0;
    srpc_error_t err;

    (void)state;
    assert_non_null(chain);
    mk_dir(dir, sizeof(dir));
    snprintf(args, sizeof(args),
             "--memory-limit 64M --chunk-bytes 4M --max-object 1M --transport none --data-dir %s "
             "--ssd-map-size 1G --ssd-sync none",
             dir);
    assert_int_equal(tc_start(&cl, stratad_path, 1, args), 0);
    gc_open(&c, cl.node[0].addr, NULL);
    for (size_t i = 0; i < SP_BLOCKS; i++) {
        chain[i] = mh_hash(1, i);
    }
    /* Chains of SP_CHAIN blocks, each from the seed (eviction takes the
     * coldest chain's tail; a block being written holds its parent). */
    for (size_t b = 0; b < SP_BLOCKS; b += SP_CHAIN) {
        assert_int_equal(put_objs(&c, chain + b, &c.seed, SP_CHAIN, SP_LAYERS,
                                  STRATA__V1__OBJECT_KIND__KV, SP_OBJ, 0, &bad, &err),
                         ST_OK);
    }
    assert_int_equal(bad, 0);
    assert_true(gc_stat(c.ch, "evicted_blocks") > SP_BLOCKS / 2);

    /* The first chains went to SSD; a lookup brings them back and counts them.
     * Four threads look up the same two chains at once: each block is
     * promoted once, and every answer counts every block. */
    {
        pthread_t th[4];
        lk_arg_t a[4];

        for (int i = 0; i < 4; i++) {
            a[i].c = &c;
            a[i].blocks = chain;
            a[i].matched[0] = a[i].matched[1] = 0;
            assert_int_equal(pthread_create(&th[i], NULL, lookup_thread, &a[i]), 0);
        }
        for (int i = 0; i < 4; i++) {
            pthread_join(th[i], NULL);
            assert_int_equal(a[i].matched[0], SP_CHAIN);
            assert_int_equal(a[i].matched[1], SP_CHAIN);
        }
    }
    assert_int_equal(lookup_n(&c, chain + 2 * SP_CHAIN, SP_CHAIN), SP_CHAIN);
    assert_true(gc_stat(c.ch, "ssd_promotions") >= 3 * 2 * SP_CHAIN);
    assert_int_equal(gc_stat(c.ch, "ssd_promote_misses"), 0);

    /* Every object, byte-exact, whichever tier it is in now. */
    for (size_t i = 0; i < SP_BLOCKS; i++) {
        for (uint32_t l = 0; l < SP_LAYERS; l++) {
            assert_int_equal(get_check(&c, &chain[i], l, STRATA__V1__OBJECT_KIND__KV, SP_OBJ), 1);
        }
    }
    assert_int_equal(gc_stat(c.ch, "ssd_corrupt"), 0);
    assert_true(gc_stat(c.ch, "ssd_spills") > 0);

    /* Again: objects promoted in the first pass kept their tier copy, so
     * evicting them now writes nothing (ssd_spill_clean), and reading them
     * after that promotes the kept copy, byte-exact. */
    {
        uint64_t clean0 = gc_stat(c.ch, "ssd_spill_clean"), prom0 = gc_stat(c.ch, "ssd_promotions"),
                 clean1, prom1;

        for (size_t i = 0; i < SP_BLOCKS; i++) {
            for (uint32_t l = 0; l < SP_LAYERS; l++) {
                assert_int_equal(get_check(&c, &chain[i], l, STRATA__V1__OBJECT_KIND__KV, SP_OBJ),
                                 1);
            }
        }
        clean1 = gc_stat(c.ch, "ssd_spill_clean");
        prom1 = gc_stat(c.ch, "ssd_promotions");
        print_message("second pass: %llu promotions, %llu clean evictions\n",
                      (unsigned long long)(prom1 - prom0), (unsigned long long)(clean1 - clean0));
        assert_true(prom1 - prom0 > SP_BLOCKS / 2);
        assert_true(clean1 - clean0 >= (prom1 - prom0) / 4);
        assert_int_equal(gc_stat(c.ch, "ssd_promote_misses"), 0);
        assert_int_equal(gc_stat(c.ch, "ssd_corrupt"), 0);
    }
    gc_close(&c);
    assert_int_equal(tc_stop(&cl, 0, 15000), 0);
    tc_stop_all(&cl);
    dd_rm_dir(dir);
    free(chain);
}

/* ----------------------------------------------------- write-behind -- */

#define WB_LAYERS 2
#define WB_OBJ    (64 * 1024)

/* Waits until the write-behind has been idle for a while (its counter stands
 * still over three polls); returns the counter. */
static uint64_t wb_settle(gc_conn_t *c)
{
    uint64_t last = UINT64_MAX, v = 0;
    int still = 0;

    for (int i = 0; i < 400 && still < 3; i++) {
        usleep(100 * 1000);
        v = gc_stat(c->ch, "ssd_writeback_objects");
        still = v == last ? still + 1 : 0;
        last = v;
    }
    assert_true(still >= 3);
    return v;
}

#define WB_CHAIN  40
#define WB_CHAINS 30 /* 30 x 40 x 2 x 64 KiB = 150 MiB */

/* Starts a 64 MiB daemon on a new data directory with the extra arguments,
 * connects c, and puts chains [0, n_chains) of WB_CHAIN blocks from blocks. */
static void wb_start_fill(tc_cluster_t *cl, gc_conn_t *c, char *dir, size_t dir_cap,
                          const char *extra, const st_hash_t *blocks, size_t n_chains)
{
    char args[320];
    size_t bad = 0;
    srpc_error_t err;

    mk_dir(dir, dir_cap);
    snprintf(args, sizeof(args),
             "--memory-limit 64M --chunk-bytes 4M --max-object 1M --transport none --data-dir %s "
             "--ssd-map-size 1G --ssd-sync none %s",
             dir, extra);
    assert_int_equal(tc_start(cl, stratad_path, 1, args), 0);
    gc_open(c, cl->node[0].addr, NULL);
    for (size_t ch = 0; ch < n_chains; ch++) {
        assert_int_equal(put_objs(c, blocks + ch * WB_CHAIN, &c->seed, WB_CHAIN, WB_LAYERS,
                                  STRATA__V1__OBJECT_KIND__KV, WB_OBJ, 0, &bad, &err),
                         ST_OK);
    }
    assert_int_equal(bad, 0);
}

/* Closes c, stops the daemon and removes its data directory. */
static void wb_stop(tc_cluster_t *cl, gc_conn_t *c, const char *dir)
{
    gc_close(c);
    tc_stop_all(cl);
    dd_rm_dir(dir);
}

/*
 * The write-behind (ssd_writeback) through a real daemon: once evictions
 * start, it writes the coldest 16 MiB of the namespace's objects to the SSD
 * tier while they are still in DRAM; evicting those later writes nothing
 * (ssd_spill_clean counts every one of them); and since they are on SSD, a
 * daemon killed with SIGKILL serves them after its restart, byte-exact, as
 * it serves the objects evicted before: more than eviction alone had put
 * there. With ssd_writeback 0 nothing is written ahead; writes that fail
 * are counted and mark nothing.
 */
static void test_write_behind(void **state)
{
    enum { CHAIN = WB_CHAIN, CHAINS = WB_CHAINS };
    tc_cluster_t cl;
    gc_conn_t c;
    char dir[64];
    st_hash_t *blocks = malloc(sizeof(st_hash_t) * CHAIN * (CHAINS + 1));
    size_t bad = 0, served = 0;
    uint64_t wb, clean0, ev0, clean1, ev1, on_ssd, evicted, dropped;
    srpc_error_t err;
    int mport = tc_free_port();
    char extra[128];
    static const char *const spilled_kv = "strata_spills_total{namespace=\"acme/k3\",kind=\"kv\"}",
                             *promoted_kv =
                                 "strata_promotions_total{namespace=\"acme/k3\",kind=\"kv\"}";

    (void)state;
    assert_non_null(blocks);
    for (size_t i = 0; i < (size_t)CHAIN * (CHAINS + 1); i++) {
        blocks[i] = mh_hash(5, i);
    }
    snprintf(extra, sizeof(extra), "--ssd-writeback 16M --metrics-listen 127.0.0.1:%d", mport);
    wb_start_fill(&cl, &c, dir, sizeof(dir), extra, blocks, CHAINS);
    wb = wb_settle(&c);
    print_message("write-behind: %llu objects written ahead\n", (unsigned long long)wb);
    assert_true(wb >= (16u << 20) / WB_OBJ / 2);
    assert_int_equal(gc_stat(c.ch, "ssd_writeback_failed"), 0);

    /* 5 MiB more (one chain of 40 x 2 x 64 KiB): what it evicts comes
     * from the written window, so every eviction is clean. */
    clean0 = gc_stat(c.ch, "ssd_spill_clean");
    ev0 = gc_stat(c.ch, "evicted_objects");
    assert_int_equal(put_objs(&c, blocks + CHAINS * CHAIN, &c.seed, CHAIN, WB_LAYERS,
                              STRATA__V1__OBJECT_KIND__KV, WB_OBJ, 0, &bad, &err),
                     ST_OK);
    assert_int_equal(bad, 0);
    clean1 = gc_stat(c.ch, "ssd_spill_clean");
    ev1 = gc_stat(c.ch, "evicted_objects");
    print_message("then %llu evictions, %llu of them clean\n", (unsigned long long)(ev1 - ev0),
                  (unsigned long long)(clean1 - clean0));
    assert_true(ev1 > ev0);
    assert_int_equal(clean1 - clean0, ev1 - ev0);

    /* Killed: what was written ahead is on SSD as well as what was evicted. */
    (void)wb_settle(&c);
    on_ssd = gc_stat(c.ch, "ssd_objects_kv");
    evicted = gc_stat(c.ch, "evicted_objects");
    dropped = gc_stat(c.ch, "ssd_spill_failed");
    print_message("before the kill: %llu objects on SSD, %llu evicted, %llu not spilled\n",
                  (unsigned long long)on_ssd, (unsigned long long)evicted,
                  (unsigned long long)dropped);
    assert_true(on_ssd > evicted - dropped);
    /* On /metrics: every object written from DRAM (evicted or ahead) is a
     * spill of the namespace, as the tier counts them; nothing promoted yet. */
    assert_true(tc_metric(mport, spilled_kv) == (double)gc_stat(c.ch, "ssd_spills"));
    assert_true(tc_metric(mport, spilled_kv) > 0);
    assert_true(tc_metric(mport, promoted_kv) == 0);
    assert_true(tc_metric(mport, "strata_spills_total{namespace=\"acme/k3\",kind=\"idx\"}") == 0);
    gc_close(&c);
    tc_kill(&cl, 0);
    assert_int_equal(tc_restart(&cl, 0), 0);
    gc_open(&c, cl.node[0].addr, NULL);
    for (size_t i = 0; i < (size_t)CHAIN * (CHAINS + 1); i++) {
        for (uint32_t l = 0; l < WB_LAYERS; l++) {
            served += (size_t)get_check(&c, &blocks[i], l, STRATA__V1__OBJECT_KIND__KV, WB_OBJ);
        }
    }
    print_message("after the restart: %zu objects served\n", served);
    assert_int_equal(served, on_ssd);
    assert_true(tc_metric(mport, promoted_kv) == (double)served);
    assert_int_equal(gc_stat(c.ch, "ssd_promotions"), served);
    assert_int_equal(gc_stat(c.ch, "ssd_corrupt"), 0);
    wb_stop(&cl, &c, dir);

    /* Off: nothing is written ahead. */
    wb_start_fill(&cl, &c, dir, sizeof(dir), "--ssd-writeback 0", blocks, CHAINS / 2);
    assert_true(gc_stat(c.ch, "evicted_objects") > 0);
    assert_int_equal(gc_stat(c.ch, "ssd_writeback_objects"), 0);
    assert_int_equal(gc_stat(c.ch, "ssd_spill_clean"), 0);
    wb_stop(&cl, &c, dir);

    /* A spill budget (8 MiB) smaller than the window: the budget ages out
     * copies the write-behind made while their objects are still in DRAM.
     * Evicting those must write them again, not trust the old hint: no
     * block the tier's index names may be missing on SSD (a promote miss),
     * and every object read back is byte-exact. */
    wb_start_fill(&cl, &c, dir, sizeof(dir), "--ssd-writeback 16M --ssd-spill-budget 8M", blocks,
                  CHAINS / 2);
    (void)wb_settle(&c);
    for (size_t i = 0; i < (size_t)CHAIN * (CHAINS / 2); i++) {
        for (uint32_t l = 0; l < WB_LAYERS; l++) {
            (void)get_check(&c, &blocks[i], l, STRATA__V1__OBJECT_KIND__KV, WB_OBJ);
        }
    }
    print_message("small budget: %llu written ahead, %llu clean evictions, %llu promotions\n",
                  (unsigned long long)gc_stat(c.ch, "ssd_writeback_objects"),
                  (unsigned long long)gc_stat(c.ch, "ssd_spill_clean"),
                  (unsigned long long)gc_stat(c.ch, "ssd_promotions"));
    assert_true(gc_stat(c.ch, "ssd_evictions") > 0);
    assert_int_equal(gc_stat(c.ch, "ssd_promote_misses"), 0);
    assert_int_equal(gc_stat(c.ch, "ssd_corrupt"), 0);
    wb_stop(&cl, &c, dir);

    /* Writes that fail (a spill budget smaller than one object): counted,
     * nothing marked written, and the daemon keeps serving what is in DRAM. */
    wb_start_fill(&cl, &c, dir, sizeof(dir), "--ssd-writeback 16M --ssd-spill-budget 32K", blocks,
                  CHAINS / 2);
    for (int i = 0; i < 100 && gc_stat(c.ch, "ssd_writeback_failed") == 0; i++) {
        usleep(50 * 1000);
    }
    assert_true(gc_stat(c.ch, "ssd_writeback_failed") > 0);
    assert_int_equal(gc_stat(c.ch, "ssd_writeback_objects"), 0);
    assert_int_equal(gc_stat(c.ch, "ssd_spill_clean"), 0);
    assert_int_equal(
        get_check(&c, &blocks[(CHAINS / 2) * CHAIN - 1], 0, STRATA__V1__OBJECT_KIND__KV, WB_OBJ),
        1);
    wb_stop(&cl, &c, dir);
    free(blocks);
}

/* ------------------------------------------------------------ crash -- */

#define CR_RUNS     20
#define CR_SESSIONS 4
#define CR_MAX_KDA  4096

typedef struct sess_state {
    st_hash_t id;
    uint64_t version, length; /* acknowledged */
    st_hash_t head;
    int inflight; /* an append was in flight at the kill */
    uint64_t in_version, in_length;
    st_hash_t in_head;
} sess_state_t;

typedef struct killer {
    tc_cluster_t *cl;
    unsigned delay_us;
} killer_t;

/* KDA object i's length (the same if it is written again after a kill). */
static size_t kda_len(size_t i)
{
    return 1024 + (i % 7) * 4096;
}

static void *killer_main(void *arg)
{
    killer_t *k = arg;

    usleep(k->delay_us);
    tc_kill(k->cl, 0);
    return NULL;
}

static st_status_t sess_call(gc_conn_t *c, int m, const st_hash_t *id, const st_hash_t *head,
                             uint64_t length, Strata__V1__SessionResponse **resp_p)
{
    srpc_error_t err;
    st_status_t st;

    if (m == SRPC_CACHE_OPEN_SESSION) {
        Strata__V1__OpenSessionRequest req = STRATA__V1__OPEN_SESSION_REQUEST__INIT;

        req.namespace_id = c->ns;
        req.session_id.data = (uint8_t *)id->b;
        req.session_id.len = 16;
        req.durable = 1;
        st = gc_call(c, m, &req, (void **)resp_p, &err);
    } else if (m == SRPC_CACHE_APPEND_SESSION) {
        Strata__V1__AppendSessionRequest req = STRATA__V1__APPEND_SESSION_REQUEST__INIT;

        req.namespace_id = c->ns;
        req.session_id.data = (uint8_t *)id->b;
        req.session_id.len = 16;
        req.head_hash.data = (uint8_t *)head->b;
        req.head_hash.len = 16;
        req.length = length;
        req.durable = 1;
        st = gc_call(c, m, &req, (void **)resp_p, &err);
    } else {
        Strata__V1__GetSessionRequest req = STRATA__V1__GET_SESSION_REQUEST__INIT;

        req.namespace_id = c->ns;
        req.session_id.data = (uint8_t *)id->b;
        req.session_id.len = 16;
        st = gc_call(c, m, &req, (void **)resp_p, &err);
    }
    return st;
}

static void test_kill9_durable_stream(void **state)
{
    tc_cluster_t cl;
    gc_conn_t c;
    char dir[64], args[256];
    sess_state_t ss[CR_SESSIONS];
    st_hash_t *kda = malloc(sizeof(st_hash_t) * CR_MAX_KDA);
    size_t n_kda = 0;
    uint64_t op = 0;
    unsigned seed = (unsigned)time(NULL);

    (void)state;
    assert_non_null(kda);
    print_message("kill -9 test seed=%u\n", seed);
    srand(seed);
    mk_dir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "--memory-limit 256M --transport none --data-dir %s", dir);
    assert_int_equal(tc_start(&cl, stratad_path, 1, args), 0);
    gc_open(&c, cl.node[0].addr, NULL);
    for (int s = 0; s < CR_SESSIONS; s++) {
        Strata__V1__SessionResponse *r = NULL;

        memset(&ss[s], 0, sizeof(ss[s]));
        ss[s].id = mh_hash(77, (uint64_t)s);
        assert_int_equal(sess_call(&c, SRPC_CACHE_OPEN_SESSION, &ss[s].id, NULL, 0, &r), ST_OK);
        ss[s].version = r->session->version;
        protobuf_c_message_free_unpacked(&r->base, NULL);
    }

    for (int run = 0; run < CR_RUNS; run++) {
        killer_t k = {&cl, 20000 + (unsigned)(rand() % 150000)};
        pthread_t th;

        assert_int_equal(pthread_create(&th, NULL, killer_main, &k), 0);
        /* The stream: durable appends and durable KDA puts, until the kill. */
        for (;;) {
            st_status_t st;

            op++;
            if (op % 3 == 0 && n_kda < CR_MAX_KDA) {
                size_t bad = 0, len = kda_len(n_kda);
                srpc_error_t err;

                kda[n_kda] = mh_hash(99, n_kda);
                st = put_objs(&c, &kda[n_kda], n_kda == 0 ? &c.seed : &kda[n_kda - 1], 1, 1,
                              STRATA__V1__OBJECT_KIND__KDA, len, 1, &bad, &err);
                if (st != ST_OK) {
                    break;
                }
                assert_int_equal(bad, 0);
                n_kda++;
            } else {
                int s = (int)(op % CR_SESSIONS);
                Strata__V1__SessionResponse *r = NULL;

                ss[s].inflight = 1;
                ss[s].in_head = mh_hash(55, op);
                ss[s].in_length = ss[s].length + 64;
                ss[s].in_version = ss[s].version + 1;
                st = sess_call(&c, SRPC_CACHE_APPEND_SESSION, &ss[s].id, &ss[s].in_head,
                               ss[s].in_length, &r);
                if (st != ST_OK) {
                    break;
                }
                assert_int_equal(r->session->version, ss[s].in_version);
                protobuf_c_message_free_unpacked(&r->base, NULL);
                ss[s].inflight = 0;
                ss[s].head = ss[s].in_head;
                ss[s].length = ss[s].in_length;
                ss[s].version = ss[s].in_version;
            }
        }
        pthread_join(th, NULL);
        gc_close(&c);
        assert_int_equal(tc_restart(&cl, 0), 0);
        gc_open(&c, cl.node[0].addr, NULL);

        /* Every acknowledged write, with its bytes (or the one in flight). */
        for (int s = 0; s < CR_SESSIONS; s++) {
            Strata__V1__SessionResponse *r = NULL;
            const Strata__V1__SessionInfo *si;

            assert_int_equal(sess_call(&c, SRPC_CACHE_GET_SESSION, &ss[s].id, NULL, 0, &r), ST_OK);
            si = r->session;
            if (ss[s].inflight && si->version == ss[s].in_version) {
                ss[s].head = ss[s].in_head;
                ss[s].length = ss[s].in_length;
                ss[s].version = ss[s].in_version;
            }
            ss[s].inflight = 0;
            assert_int_equal(si->version, ss[s].version);
            assert_int_equal(si->length, ss[s].length);
            if (ss[s].version > 0) {
                assert_memory_equal(si->head_hash.data, ss[s].head.b, 16);
            }
            protobuf_c_message_free_unpacked(&r->base, NULL);
        }
        for (size_t i = 0; i < n_kda; i++) {
            assert_int_equal(get_check(&c, &kda[i], 0, STRATA__V1__OBJECT_KIND__KDA, kda_len(i)),
                             1);
        }
    }
    assert_int_equal(gc_stat(c.ch, "ssd_corrupt"), 0);
    print_message("kill -9 test: %d kills, %llu operations, %zu KDA objects\n", CR_RUNS,
                  (unsigned long long)op, n_kda);
    gc_close(&c);
    tc_stop_all(&cl);
    dd_rm_dir(dir);
    free(kda);
}

/* -------------------------------------------------------- corruption -- */

/* Flips one byte in the middle of the first copy of marker (len bytes) in
 * dir/data.mdb. Returns 1 when it found it. */
static int corrupt_on_disk(const char *dir, const uint8_t *marker, size_t len)
{
    char path[512];
    FILE *f;
    uint8_t *buf;
    long size;
    int found = 0;

    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    f = fopen(path, "r+b");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    size = ftell(f);
    fseek(f, 0, SEEK_SET);
    buf = malloc((size_t)size);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, (size_t)size, f), (size_t)size);
    for (long off = 0; off + (long)len <= size; off++) {
        if (memcmp(buf + off, marker, len) == 0) {
            uint8_t b = buf[off + (long)len / 2] ^ 0x5a;

            fseek(f, off + (long)len / 2, SEEK_SET);
            assert_int_equal(fwrite(&b, 1, 1, f), 1);
            found = 1;
            break;
        }
    }
    fclose(f);
    free(buf);
    return found;
}

static void test_corrupt_value_never_served(void **state)
{
    tc_cluster_t cl;
    gc_conn_t c;
    char dir[64], args[256];
    st_hash_t h[4];
    uint8_t marker[4096], big[40000], head[24 + 8];
    size_t bad = 0;
    srpc_error_t err;

    (void)state;
    mk_dir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "--memory-limit 256M --transport none --data-dir %s", dir);
    assert_int_equal(tc_start(&cl, stratad_path, 1, args), 0);
    gc_open(&c, cl.node[0].addr, NULL);
    for (int i = 0; i < 4; i++) {
        h[i] = mh_hash(5, (uint64_t)i);
    }
    assert_int_equal(
        put_objs(&c, h, &c.seed, 2, 1, STRATA__V1__OBJECT_KIND__KDA, sizeof(marker), 1, &bad, &err),
        ST_OK);
    /* Two large ones (42 KB), h[3] under h[2]. */
    assert_int_equal(put_objs(&c, h + 2, &c.seed, 2, 1, STRATA__V1__OBJECT_KIND__KDA, sizeof(big),
                              1, &bad, &err),
                     ST_OK);
    assert_int_equal(bad, 0);
    gc_close(&c);
    assert_int_equal(tc_stop(&cl, 0, 15000), 0);

    /* The daemon is down: damage the first object's bytes in data.mdb, the
     * bytes of h[2] (large), and the tier's prefix of h[3]: "CDT1", flags 1
     * (has a parent), the parent h[2], then its first bytes; the flipped
     * byte is in the parent hash. */
    gc_fill(marker, sizeof(marker), &h[0], 0);
    assert_int_equal(corrupt_on_disk(dir, marker, sizeof(marker)), 1);
    gc_fill(big, sizeof(big), &h[2], 0);
    assert_int_equal(corrupt_on_disk(dir, big, sizeof(big)), 1);
    memcpy(head, "CDT1\x01\x00\x00\x00", 8);
    memcpy(head + 8, h[2].b, 16);
    gc_fill(big, sizeof(big), &h[3], 0);
    memcpy(head + 24, big, 8);
    assert_int_equal(corrupt_on_disk(dir, head, sizeof(head)), 1);

    assert_int_equal(tc_restart(&cl, 0), 0);
    gc_open(&c, cl.node[0].addr, NULL);
    assert_int_equal(get_check(&c, &h[0], 0, STRATA__V1__OBJECT_KIND__KDA, sizeof(marker)), 0);
    assert_int_equal(gc_stat(c.ch, "ssd_corrupt"), 1);
    /* Still a miss, counted once; the intact neighbour is served. */
    assert_int_equal(get_check(&c, &h[0], 0, STRATA__V1__OBJECT_KIND__KDA, sizeof(marker)), 0);
    assert_int_equal(get_check(&c, &h[1], 0, STRATA__V1__OBJECT_KIND__KDA, sizeof(marker)), 1);
    assert_int_equal(gc_stat(c.ch, "ssd_corrupt"), 1);
    /* The same for damage in the bytes and in the prefix of large objects. */
    assert_int_equal(get_check(&c, &h[2], 0, STRATA__V1__OBJECT_KIND__KDA, sizeof(big)), 0);
    assert_int_equal(get_check(&c, &h[3], 0, STRATA__V1__OBJECT_KIND__KDA, sizeof(big)), 0);
    assert_int_equal(gc_stat(c.ch, "ssd_corrupt"), 3);
    assert_int_equal(get_check(&c, &h[2], 0, STRATA__V1__OBJECT_KIND__KDA, sizeof(big)), 0);
    assert_int_equal(get_check(&c, &h[3], 0, STRATA__V1__OBJECT_KIND__KDA, sizeof(big)), 0);
    assert_int_equal(gc_stat(c.ch, "ssd_corrupt"), 3);
    gc_close(&c);
    tc_stop_all(&cl);
    dd_rm_dir(dir);
}

/* --------------------------------------------------------- map full -- */

static void test_full_map_refuses_durable_put(void **state)
{
    tc_cluster_t cl;
    gc_conn_t c;
    char dir[64], args[256];
    st_hash_t h[200];
    size_t n = 0, bad = 0;
    srpc_error_t err;
    st_status_t st = ST_OK;
    Strata__V1__SessionResponse *r = NULL;
    st_hash_t sid = mh_hash(8, 8);

    (void)state;
    mk_dir(dir, sizeof(dir));
    snprintf(args, sizeof(args),
             "--memory-limit 256M --transport none --data-dir %s --ssd-map-size 1M", dir);
    assert_int_equal(tc_start(&cl, stratad_path, 1, args), 0);
    gc_open(&c, cl.node[0].addr, NULL);
    assert_int_equal(sess_call(&c, SRPC_CACHE_OPEN_SESSION, &sid, NULL, 0, &r), ST_OK);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    while (n < 200) {
        h[n] = mh_hash(6, n);
        memset(&err, 0, sizeof(err));
        st = put_objs(&c, &h[n], n == 0 ? &c.seed : &h[n - 1], 1, 1, STRATA__V1__OBJECT_KIND__KDA,
                      32 * 1024, 1, &bad, &err);
        if (st != ST_OK) {
            break;
        }
        n++;
    }
    assert_int_equal(st, ST_ERR_EXHAUSTED);
    assert_int_equal(err.grpc_code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    assert_non_null(strstr(err.message, "ssd_map_size=1048576"));
    assert_true(n > 0);
    assert_true(gc_stat(c.ch, "ssd_map_full") >= 1);

    /* Reads keep working: every acknowledged object, and the session. */
    for (size_t i = 0; i < n; i++) {
        assert_int_equal(get_check(&c, &h[i], 0, STRATA__V1__OBJECT_KIND__KDA, 32 * 1024), 1);
    }
    assert_int_equal(sess_call(&c, SRPC_CACHE_GET_SESSION, &sid, NULL, 0, &r), ST_OK);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    gc_close(&c);
    tc_stop_all(&cl);
    dd_rm_dir(dir);
}

/* ---------------------------------------------------------- expiry -- */

/* A session the reaper expires leaves the tier too, so a restart does not
 * bring it back. */
static void test_expired_session_leaves_tier(void **state)
{
    tc_cluster_t cl;
    gc_conn_t c;
    char dir[64], args[256];
    st_hash_t sid = mh_hash(9, 9), keep = mh_hash(9, 10);
    Strata__V1__OpenSessionRequest req = STRATA__V1__OPEN_SESSION_REQUEST__INIT;
    Strata__V1__SessionResponse *r = NULL;
    srpc_error_t err;
    uint64_t n = 0;

    (void)state;
    mk_dir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "--memory-limit 256M --transport none --data-dir %s", dir);
    assert_int_equal(tc_start(&cl, stratad_path, 1, args), 0);
    gc_open(&c, cl.node[0].addr, NULL);
    assert_int_equal(sess_call(&c, SRPC_CACHE_OPEN_SESSION, &keep, NULL, 0, &r), ST_OK);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    req.namespace_id = c.ns;
    req.session_id.data = sid.b;
    req.session_id.len = 16;
    req.ttl_ms = 1000;
    req.durable = 1;
    assert_int_equal(gc_call(&c, SRPC_CACHE_OPEN_SESSION, &req, (void **)&r, &err), ST_OK);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    /* The namespace record and two sessions. */
    assert_int_equal(gc_stat(c.ch, "ssd_objects_session"), 3);
    for (int i = 0; i < 200 && (n = gc_stat(c.ch, "ssd_objects_session")) != 2; i++) {
        usleep(50 * 1000);
    }
    assert_int_equal(n, 2);
    gc_close(&c);
    tc_kill(&cl, 0);
    assert_int_equal(tc_restart(&cl, 0), 0);
    gc_open(&c, cl.node[0].addr, NULL);
    assert_int_equal(sess_call(&c, SRPC_CACHE_GET_SESSION, &sid, NULL, 0, &r), ST_ERR_NOT_FOUND);
    assert_int_equal(sess_call(&c, SRPC_CACHE_GET_SESSION, &keep, NULL, 0, &r), ST_OK);
    protobuf_c_message_free_unpacked(&r->base, NULL);
    gc_close(&c);
    tc_stop_all(&cl);
    dd_rm_dir(dir);
}

/* ------------------------------------------------ libstrata, durable -- */

static st_client_t *client_to(const tc_cluster_t *cl)
{
    st_client_params_t p;

    cf_params_transport(&p, cl->node[0].addr, "ucx", 20000);
    return cf_connect(&p);
}

#define LS_N   8
#define LS_LEN (300 * 1024)

/* KDA objects put with ST_PUT_DURABLE through a libstrata client with a
 * transport (durable KDA objects go by inline Put: docs/tiers.md "Durable
 * across replicas"), the daemon killed, then read back one-sided through
 * libstrata after the restart. */
static void test_libstrata_durable_kda_survives_kill(void **state)
{
    tc_cluster_t cl;
    st_client_t *c;
    char dir[64], args[256];
    st_hash_t chain[LS_N];
    uint32_t tok[LS_N * 64];
    size_t nb = 0;
    st_put_op_t puts[LS_N];
    st_get_op_t gets[LS_N];
    uint8_t *src = malloc(LS_N * LS_LEN), *dst = malloc(LS_N * LS_LEN);
    st_handle_t *h;

    (void)state;
    assert_true(src && dst);
    setenv("UCX_TLS", "sm,self", 0);
    mk_dir(dir, sizeof(dir));
    snprintf(args, sizeof(args), "--memory-limit 256M --chunk-bytes 32M --data-dir %s", dir);
    assert_int_equal(tc_start(&cl, stratad_path, 1, args), 0);
    c = client_to(&cl);
    for (size_t i = 0; i < LS_N * 64; i++) {
        tok[i] = (uint32_t)(i * 2654435761u) ^ 0x5eed;
    }
    assert_int_equal(st_client_hash(c, tok, LS_N * 64, NULL, 0, chain, LS_N, &nb), ST_OK);
    assert_int_equal(nb, LS_N);
    for (size_t i = 0; i < LS_N; i++) {
        gc_fill(src + i * LS_LEN, LS_LEN, &chain[i], 0);
        puts[i] =
            (st_put_op_t){.block = i, .kind = ST_KIND_KDA, .src = src + i * LS_LEN, .len = LS_LEN};
    }
    assert_int_equal(st_client_put(c, chain, LS_N, puts, LS_N, ST_PUT_DURABLE, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    st_handle_release(h);
    for (size_t i = 0; i < LS_N; i++) {
        assert_int_equal(puts[i].status, ST_OK);
    }
    st_client_close(c);

    tc_kill(&cl, 0);
    assert_int_equal(tc_restart(&cl, 0), 0);
    c = client_to(&cl);
    memset(dst, 0xee, LS_N * LS_LEN);
    for (size_t i = 0; i < LS_N; i++) {
        gets[i] = (st_get_op_t){
            .block = i, .kind = ST_KIND_KDA, .dst = dst + i * LS_LEN, .dst_len = LS_LEN};
    }
    assert_int_equal(st_client_get(c, chain, LS_N, gets, LS_N, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    st_handle_release(h);
    for (size_t i = 0; i < LS_N; i++) {
        assert_int_equal(gets[i].status, ST_OK);
        assert_int_equal(gets[i].length, LS_LEN);
    }
    assert_memory_equal(dst, src, LS_N * LS_LEN);
    st_client_close(c);
    tc_stop_all(&cl);
    dd_rm_dir(dir);
    free(src);
    free(dst);
}

TM_STRATAD_MAIN("test_tiers", "PATH-TO-STRATAD", &stratad_path,
                cmocka_unit_test(test_spill_and_promote), cmocka_unit_test(test_write_behind),
                cmocka_unit_test(test_kill9_durable_stream),
                cmocka_unit_test(test_corrupt_value_never_served),
                cmocka_unit_test(test_full_map_refuses_durable_put),
                cmocka_unit_test(test_expired_session_leaves_tier),
                cmocka_unit_test(test_libstrata_durable_kda_survives_kill))
