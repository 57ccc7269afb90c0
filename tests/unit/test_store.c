/* test_store.c - the object store through its public contract: namespaces
 * and seeds, put/get, checksums, immutability, reserve/commit/abort/expiry,
 * leases and pins against eviction, limits, exhaustion, stats, the memory
 * limit (accounting and resident pages), threads, and a 1M-token chain. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <pthread.h>
#include <cmocka.h>
#include <xxhash.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "store_internal.h"
#include "rowsum.h"
#include "test_store_util.h"
#include "support/unit_main.h"

static cd_store_t *st_;
static uint32_t ns1;

static int setup(void **state)
{
    cd_store_config_t c;
    cd_err_t err;

    t_now = 1000;
    t_config(&c, 32 * MiB);
    assert_int_equal(cd_store_create(&c, &st_, &err), ST_OK);
    assert_int_equal(cd_store_ns_create(st_, "acme", "hybrid-2.8t", 64, &ns1, &err), ST_OK);
    return 0;
}

static int teardown(void **state)
{
    cd_store_destroy(st_);
    st_ = NULL;
    return 0;
}

/* Puts block i of a chain (its parent block i-1, or none for i = 0). */
static void put_obj(cd_store_t *s, uint32_t ns, uint32_t chain, uint32_t i, uint32_t kind,
                    uint32_t layer, size_t len)
{
    cd_key_t k = t_key(chain, i, kind, layer);
    st_hash_t p = t_hash(chain, i - 1);
    uint8_t *buf = malloc(len);
    cd_err_t err;

    t_fill(buf, len, &k);
    if (cd_store_put(s, ns, &k, i > 0 ? &p : NULL, buf, len, &err) != ST_OK) {
        fail_msg("put chain=%u block=%u: %s", chain, i, err.msg);
    }
    free(buf);
}

static void put_block(uint32_t ns, uint32_t chain, uint32_t i, uint32_t kind, uint32_t layer,
                      size_t len)
{
    put_obj(st_, ns, chain, i, kind, layer, len);
}

static void test_namespaces_and_seeds(void **state)
{
    cd_err_t err;
    uint32_t id;
    cd_ns_info_t info;
    st_hash_t a, b, c, d;

    assert_int_equal(cd_store_ns_create(st_, "acme", "hybrid-2.8t", 64, &id, &err), ST_OK);
    assert_int_equal(id, ns1);
    assert_int_equal(cd_store_ns_create(st_, "acme", "hybrid-2.8t", 128, &id, &err), ST_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "block size 64"));
    assert_int_equal(cd_store_ns_create(st_, "acme", "m", 100, &id, &err), ST_ERR_INVALID);
    assert_int_equal(cd_store_ns_create(st_, "", "m", 64, &id, &err), ST_ERR_INVALID);
    assert_int_equal(cd_store_ns_create(st_, "other", "hybrid-2.8t", 64, &id, &err), ST_OK);
    assert_true(id != ns1);
    assert_int_equal(cd_store_ns_info(st_, id, &info), ST_OK);
    assert_string_equal(info.tenant, "other");
    assert_int_equal(cd_store_ns_info(st_, 99, &info), ST_ERR_NOT_FOUND);

    /* Seeds: the message of the header, byte for byte. */
    uint8_t msg[256];
    size_t n = 0;
    memcpy(msg, "strata-ns-v1", 12);
    n = 12;
    uint32_t l32 = 4;
    memcpy(msg + n, &l32, 4), n += 4, memcpy(msg + n, "acme", 4), n += 4;
    l32 = 11;
    memcpy(msg + n, &l32, 4), n += 4, memcpy(msg + n, "hybrid-2.8t", 11), n += 11;
    uint8_t mac[32];
    unsigned int mac_len = 0;
    assert_non_null(HMAC(EVP_sha256(), t_secret, 32, msg, n, mac, &mac_len));
    assert_int_equal(cd_store_ns_info(st_, ns1, &info), ST_OK);
    assert_memory_equal(info.seed.b, mac, 16);
    /* Every input changes the seed; the same inputs give the same seed. */
    assert_int_equal(cd_ns_seed(t_secret, 32, "acme", "m", &a), ST_OK);
    assert_int_equal(cd_ns_seed(t_secret, 32, "acme", "m", &b), ST_OK);
    assert_memory_equal(&a, &b, 16);
    assert_int_equal(cd_ns_seed(t_secret, 31, "acme", "m", &c), ST_OK);
    assert_memory_not_equal(&a, &c, 16);
    assert_int_equal(cd_ns_seed(t_secret, 32, "acmf", "m", &d), ST_OK);
    assert_memory_not_equal(&a, &d, 16);
    /* Length prefixes keep ("ab","c") and ("a","bc") apart. */
    assert_int_equal(cd_ns_seed(t_secret, 32, "ab", "c", &c), ST_OK);
    assert_int_equal(cd_ns_seed(t_secret, 32, "a", "bc", &d), ST_OK);
    assert_memory_not_equal(&c, &d, 16);
    assert_int_equal(cd_ns_seed(NULL, 0, "a", "b", &d), ST_ERR_INVALID);
}

static void test_put_get_immutable(void **state)
{
    cd_key_t k = t_key(1, 0, CD_KIND_KV, 3);
    uint8_t data[5000], out[5000];
    uint64_t len = 0;
    cd_location_t w;
    cd_err_t err;

    t_fill(data, sizeof(data), &k);
    assert_int_equal(cd_store_put(st_, ns1, &k, NULL, data, sizeof(data), &err), ST_OK);
    assert_int_equal(cd_store_get(st_, ns1, &k, out, sizeof(out), &len, &w, &err), ST_OK);
    assert_int_equal(len, sizeof(data));
    assert_memory_equal(out, data, sizeof(data));
    assert_int_equal(w.checksum, XXH3_64bits(data, sizeof(data)));
    assert_int_equal(w.length, sizeof(data));
    assert_memory_equal((uint8_t *)t_region_base[ns1][w.region] + w.offset, data, sizeof(data));
    /* Same bytes again: fine. Other bytes: refused. */
    assert_int_equal(cd_store_put(st_, ns1, &k, NULL, data, sizeof(data), &err), ST_OK);
    data[7] ^= 1;
    assert_int_equal(cd_store_put(st_, ns1, &k, NULL, data, sizeof(data), &err), ST_ERR_EXISTS);
    assert_non_null(strstr(err.msg, "immutable"));
    data[7] ^= 1;
    /* Another layer of the same block is another object. */
    cd_key_t k2 = t_key(1, 0, CD_KIND_KV, 4);
    assert_int_equal(cd_store_get(st_, ns1, &k2, out, sizeof(out), &len, NULL, &err),
                     ST_ERR_NOT_FOUND);
    /* Buffer too small: the length comes back. */
    len = 0;
    assert_int_equal(cd_store_get(st_, ns1, &k, out, 10, &len, NULL, &err), ST_ERR_INVALID);
    assert_int_equal(len, sizeof(data));
    /* Bytes damaged in the arena are never served. */
    cd_stats_t c0, c1;
    assert_int_equal(cd_store_stats(st_, ns1, &c0), ST_OK);
    ((uint8_t *)t_region_base[ns1][w.region])[w.offset + 99] ^= 0x40;
    assert_int_equal(cd_store_get(st_, ns1, &k, out, sizeof(out), &len, NULL, &err),
                     ST_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "dropped"));
    /* Counted once and dropped (nothing leases it): later reads miss. */
    assert_int_equal(cd_store_get(st_, ns1, &k, out, sizeof(out), &len, NULL, &err),
                     ST_ERR_NOT_FOUND);
    assert_int_equal(cd_store_stats(st_, ns1, &c1), ST_OK);
    assert_int_equal(c1.corrupt, c0.corrupt + 1);
    assert_int_equal(c1.objects[CD_KIND_KV], c0.objects[CD_KIND_KV] - 1);
    /* Bad keys and sizes are refused naming the limit. */
    cd_key_t bad = t_key(1, 0, CD_KIND_KV, 128);
    assert_int_equal(cd_store_put(st_, ns1, &bad, NULL, data, 10, &err), ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_layers"));
    bad = t_key(1, 0, CD_KIND_SESSION, 0);
    assert_int_equal(cd_store_put(st_, ns1, &bad, NULL, data, 10, &err), ST_ERR_INVALID);
    assert_int_equal(cd_store_put(st_, ns1, &k2, NULL, data, 2 * MiB + 1, &err), ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_object_bytes"));
    assert_int_equal(cd_store_put(st_, ns1, &k2, NULL, data, 0, &err), ST_ERR_INVALID);
    assert_int_equal(cd_store_put(st_, 77, &k2, NULL, data, 10, &err), ST_ERR_NOT_FOUND);
}

static void test_reserve_commit_abort_expire(void **state)
{
    cd_resv_req_t rq[3] = {0};
    cd_resv_t rs[3];
    cd_err_t err;
    cd_stats_t s0, s1;
    uint8_t data[3][3000], out[3000];
    uint64_t len;

    assert_int_equal(cd_store_stats(st_, ns1, &s0), ST_OK);
    for (int i = 0; i < 3; i++) {
        rq[i].key = t_key(2, (uint32_t)i, CD_KIND_IDX, 0);
        rq[i].parent = NULL;
        rq[i].length = sizeof(data[i]);
        t_fill(data[i], sizeof(data[i]), &rq[i].key);
    }
    st_hash_t p0 = t_hash(2, 0), p1 = t_hash(2, 1);
    rq[1].parent = &p0;
    rq[2].parent = &p1;
    assert_int_equal(cd_store_reserve(st_, ns1, rq, 3, rs, &err), ST_OK);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(rs[i].status, ST_OK);
        assert_int_equal(rs[i].expires_ms, t_now + 30000);
        /* The remote writer's one-sided put. */
        memcpy((uint8_t *)t_region_base[ns1][rs[i].where.region] + rs[i].where.offset, data[i],
               sizeof(data[i]));
    }
    /* Not visible before commit. */
    assert_int_equal(cd_store_get(st_, ns1, &rq[0].key, out, sizeof(out), &len, NULL, &err),
                     ST_ERR_NOT_FOUND);
    /* A wrong checksum is refused and the object stays invisible. */
    assert_int_equal(cd_store_commit(st_, ns1, rs[0].id, XXH3_64bits(data[1], 3000), &err),
                     ST_ERR_CORRUPT);
    assert_non_null(strstr(err.msg, "claims"));
    assert_int_equal(cd_store_get(st_, ns1, &rq[0].key, out, sizeof(out), &len, NULL, &err),
                     ST_ERR_NOT_FOUND);
    /* The right one commits (the reservation survived the refusal). */
    assert_int_equal(cd_store_commit(st_, ns1, rs[0].id, XXH3_64bits(data[0], 3000), &err), ST_OK);
    assert_int_equal(cd_store_get(st_, ns1, &rq[0].key, out, sizeof(out), &len, NULL, &err), ST_OK);
    assert_memory_equal(out, data[0], 3000);
    assert_int_equal(cd_store_commit(st_, ns1, rs[0].id, 0, &err), ST_ERR_NOT_FOUND);
    /* Abort frees; a reserve of a committed key says it exists. */
    assert_int_equal(cd_store_abort(st_, ns1, rs[1].id), ST_OK);
    assert_int_equal(cd_store_abort(st_, ns1, rs[1].id), ST_ERR_NOT_FOUND);
    assert_int_equal(cd_store_commit(st_, ns1, rs[1].id, 0, &err), ST_ERR_NOT_FOUND);
    cd_resv_t again;
    assert_int_equal(cd_store_reserve(st_, ns1, &rq[0], 1, &again, &err), ST_OK);
    assert_int_equal(again.status, ST_ERR_EXISTS);
    assert_int_equal(again.id, 0);
    /* The third expires: the reaper gives its space back. */
    assert_int_equal(cd_store_stats(st_, ns1, &s1), ST_OK);
    assert_int_equal(s1.reservations_active, 1);
    t_now += 30000;
    cd_reaped_t r;
    cd_store_reap(st_, t_now, &r);
    assert_int_equal(r.reservations, 1);
    assert_int_equal(cd_store_commit(st_, ns1, rs[2].id, XXH3_64bits(data[2], 3000), &err),
                     ST_ERR_NOT_FOUND);
    assert_non_null(strstr(err.msg, "expired"));
    assert_int_equal(cd_store_stats(st_, ns1, &s1), ST_OK);
    assert_int_equal(s1.reservations_active, 0);
    assert_int_equal(s1.reserved_bytes, 0);
    assert_int_equal(s1.reservations_expired, 1);
    assert_int_equal(s1.reservations_aborted, 1);
    assert_int_equal(s1.reservations_committed, 1);
    assert_int_equal(s1.objects[CD_KIND_IDX], s0.objects[CD_KIND_IDX] + 1);
    /* Only the committed object's extent is still in use. */
    assert_int_equal(s1.arena_used,
                     s0.arena_used +
                         st_->ss_ns[0]
                             ->ns_slab.sl_classes[cd_slab_class_for(&st_->ss_ns[0]->ns_slab, 3000)]
                             .sc_size);
    /* Two writers race on one key: the second, with the same bytes, is fine. */
    cd_resv_req_t rq2 = {t_key(2, 9, CD_KIND_KV, 0), NULL, 100, 0};
    cd_resv_t a, b;
    uint8_t d9[100];
    t_fill(d9, 100, &rq2.key);
    assert_int_equal(cd_store_reserve(st_, ns1, &rq2, 1, &a, &err), ST_OK);
    assert_int_equal(cd_store_reserve(st_, ns1, &rq2, 1, &b, &err), ST_OK);
    memcpy((uint8_t *)t_region_base[ns1][a.where.region] + a.where.offset, d9, 100);
    memcpy((uint8_t *)t_region_base[ns1][b.where.region] + b.where.offset, d9, 100);
    assert_true(a.where.generation != b.where.generation);
    assert_int_equal(cd_store_commit(st_, ns1, a.id, XXH3_64bits(d9, 100), &err), ST_OK);
    assert_int_equal(cd_store_commit(st_, ns1, b.id, XXH3_64bits(d9, 100), &err), ST_OK);
    /* Batches above the limit are refused before anything is reserved. */
    assert_int_equal(cd_store_reserve(st_, ns1, rq, 5000, rs, &err), ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_batch"));
}

/* What the resv_end hook saw (test_reservation_fence). */
static uint64_t t_fenced[16];
static int t_n_fenced;
static uint8_t *t_scribble_at; /* when set: the hook writes over these 100 bytes */

static void t_resv_end(void *ctx, uint32_t ns, uint64_t id)
{
    (void)ctx;
    (void)ns;
    if (t_n_fenced < 16) {
        t_fenced[t_n_fenced++] = id;
    }
    if (t_scribble_at != NULL) {
        memset(t_scribble_at, 0xee, 100);
    }
}

/*
 * The fence (cd_store_config_t.resv_end, where the daemon revokes a
 * reservation's write key): told at Commit before the bytes are checksummed
 * (a write that lands at the fence makes the commit fail, it is never
 * committed unchecked), at Abort, and at expiry before the extent is freed.
 */
static void test_reservation_fence(void **state)
{
    cd_store_config_t c;
    cd_store_t *s;
    uint32_t ns;
    cd_err_t err;
    cd_resv_req_t rq[3];
    cd_resv_t rs[3];
    uint8_t data[100];
    cd_reaped_t r;

    (void)state;
    t_now = 1000;
    t_n_fenced = 0;
    t_scribble_at = NULL;
    t_config(&c, 32 * MiB);
    c.resv_end = t_resv_end;
    assert_int_equal(cd_store_create(&c, &s, &err), ST_OK);
    assert_int_equal(cd_store_ns_create(s, "acme", "m", 64, &ns, &err), ST_OK);
    for (int i = 0; i < 3; i++) {
        rq[i] = (cd_resv_req_t){t_key(3, (uint32_t)i, CD_KIND_VIS, 0), NULL, sizeof(data), 0};
    }
    assert_int_equal(cd_store_reserve(s, ns, rq, 3, rs, &err), ST_OK);
    assert_int_equal(t_n_fenced, 0);
    /* Commit: the fence comes first; bytes written at the fence are checked. */
    t_fill(data, sizeof(data), &rq[0].key);
    uint8_t *ext = (uint8_t *)t_region_base[ns][rs[0].where.region] + rs[0].where.offset;
    memcpy(ext, data, sizeof(data));
    t_scribble_at = ext;
    assert_int_equal(cd_store_commit(s, ns, rs[0].id, XXH3_64bits(data, sizeof(data)), &err),
                     ST_ERR_CORRUPT);
    t_scribble_at = NULL;
    assert_true(t_n_fenced >= 1);
    assert_true(t_fenced[0] == rs[0].id);
    /* Abort and expiry: fenced before the extent goes back. */
    t_n_fenced = 0;
    assert_int_equal(cd_store_abort(s, ns, rs[1].id), ST_OK);
    assert_int_equal(t_n_fenced, 1);
    assert_true(t_fenced[0] == rs[1].id);
    t_now += 30000;
    cd_store_reap(s, t_now, &r);
    assert_int_equal(r.reservations, 2); /* rs[0] (refused) and rs[2] */
    assert_int_equal(t_n_fenced, 3);
    assert_true(t_fenced[1] == rs[0].id || t_fenced[2] == rs[0].id);
    assert_true(t_fenced[1] == rs[2].id || t_fenced[2] == rs[2].id);
    cd_store_destroy(s);
}

/* Fills the store until it must evict, with chain 10 leased and chain 11
 * pinned: neither loses a block; chain 12's blocks go. */
static void test_leases_and_pins_block_eviction(void **state)
{
    enum { NB = 16 };
    st_hash_t hs[NB];
    cd_segment_t seg = {0, NB, hs};
    cd_seg_answer_t ans;
    uint64_t lease = 0, exp = 0, kda[NB];
    size_t kn;
    cd_err_t err;
    cd_stats_t s;
    uint32_t chain = 100;

    for (uint32_t i = 0; i < NB; i++) {
        put_block(ns1, 10, i, CD_KIND_KV, 0, 60000);
        put_block(ns1, 11, i, CD_KIND_KV, 0, 60000);
        hs[i] = t_hash(10, i);
    }
    assert_int_equal(cd_store_lookup(st_, ns1, &seg, 1, NULL, CD_LEASE_DEFAULT, &ans, kda, NB, &kn,
                                     &lease, &exp, &err),
                     ST_OK);
    assert_int_equal(ans.matched, NB);
    assert_true(lease != 0);
    assert_int_equal(exp, t_now + 5000);
    st_hash_t last11 = t_hash(11, NB - 1);
    assert_int_equal(cd_store_pin(st_, ns1, &last11), ST_OK);
    /* 30 MiB of other chains: eviction must happen. */
    for (int n = 0; n < 500; n++) {
        put_block(ns1, chain + (uint32_t)n / 8, (uint32_t)n % 8, CD_KIND_KV, 0, 60000);
    }
    assert_int_equal(cd_store_stats(st_, ns1, &s), ST_OK);
    assert_true(s.evicted_blocks > 0);
    assert_true(s.memory_used <= s.memory_limit);
    assert_int_equal(s.leases_active, 1);
    assert_int_equal(s.pins_active, 1);
    for (uint32_t i = 0; i < NB; i++) {
        cd_key_t k10 = t_key(10, i, CD_KIND_KV, 0), k11 = t_key(11, i, CD_KIND_KV, 0);
        uint8_t buf[60000];
        uint64_t len;

        assert_int_equal(cd_store_get(st_, ns1, &k10, buf, sizeof(buf), &len, NULL, &err), ST_OK);
        assert_int_equal(cd_store_get(st_, ns1, &k11, buf, sizeof(buf), &len, NULL, &err), ST_OK);
    }
    /* A leased block cannot be deleted. */
    cd_key_t k = t_key(10, NB - 1, CD_KIND_KV, 0);
    assert_int_equal(cd_store_delete(st_, ns1, &k, &err), ST_ERR_BUSY);
    /* Pin everything left and fill: the store says exhausted, with numbers. */
    uint64_t used_before = s.memory_used;
    for (uint32_t c = chain; c < chain + 63; c++) {
        for (uint32_t i = 0; i < 8; i++) {
            st_hash_t h = t_hash(c, i);
            (void)cd_store_pin(st_, ns1, &h);
        }
    }
    cd_key_t big = t_key(999, 0, CD_KIND_KV, 0);
    static uint8_t data[2 * MiB];
    st_status_t rc = ST_OK;
    for (int i = 0; i < 40 && rc == ST_OK; i++) {
        big.layer = (uint32_t)i;
        rc = cd_store_put(st_, ns1, &big, NULL, data, 1 * MiB, &err);
        if (rc == ST_OK) {
            /* the new block is pinned too */
            assert_int_equal(cd_store_pin(st_, ns1, &big.hash), ST_OK);
        }
    }
    assert_int_equal(rc, ST_ERR_EXHAUSTED);
    assert_non_null(strstr(err.msg, "requested=1048576"));
    assert_non_null(strstr(err.msg, "limit=33554432"));
    assert_non_null(strstr(err.msg, "evictable="));
    assert_int_equal(cd_store_stats(st_, ns1, &s), ST_OK);
    assert_true(s.memory_used <= s.memory_limit);
    assert_true(s.exhausted > 0);
    (void)used_before;
    /* Release the lease: chain 10 becomes evictable; unpin of an unpinned
     * block is refused. */
    assert_int_equal(cd_store_release(st_, ns1, lease), ST_OK);
    assert_int_equal(cd_store_release(st_, ns1, lease), ST_ERR_NOT_FOUND);
    st_hash_t h0 = t_hash(10, 0);
    assert_int_equal(cd_store_unpin(st_, ns1, &h0), ST_ERR_INVALID);
    big.hash = t_hash(998, 0);
    big.layer = 0;
    assert_int_equal(cd_store_put(st_, ns1, &big, NULL, data, 60000, &err), ST_OK);
}

/* ---- write-behind: cd_store_clean_take / cd_store_clean_finish ---- */

static int wb_victims, wb_victims_tiered;
static uint32_t wb_victim_chain[4096];
static uint64_t wb_victim_tiered[4096]; /* the hint eviction passed: the token, or 0 */

static void wb_evicted(void *ctx, uint32_t ns, const cd_key_t *key, const st_hash_t *parent,
                       const void *data, uint64_t len, uint64_t tiered, uint32_t row_bytes)
{
    (void)ctx, (void)ns, (void)parent, (void)data, (void)len, (void)row_bytes;
    if (key->kind != CD_KIND_KV || wb_victims == 4096) {
        return;
    }
    memcpy(&wb_victim_chain[wb_victims], key->hash.b, 4);
    wb_victim_tiered[wb_victims++] = tiered;
    wb_victims_tiered += tiered != 0;
}

/* cd_store_clean_take, which must succeed; returns how many it took. */
static size_t wb_take(cd_store_t *s, uint32_t ns, uint32_t kinds, uint64_t ahead,
                      uint64_t max_bytes, cd_clean_t *items, size_t cap, uint64_t *window_p)
{
    size_t n = 0;

    assert_int_equal(cd_store_clean_take(s, ns, kinds, ahead, max_bytes, items, cap, &n, window_p),
                     ST_OK);
    return n;
}

/*
 * The SSD tier's write-behind takes the coldest objects that the tier has
 * no copy of, in eviction's order (the coldest chain's last block first),
 * only of the kinds asked for, bounded by count and bytes; their blocks are
 * held (eviction passes over them, delete is refused) until finish, which
 * marks the written ones tiered (eviction then reports tiered = 1). The
 * hold moves nothing in the LRU; a block read meanwhile goes hot as usual.
 */
static void test_write_behind_take_finish(void **state)
{
    enum { LEN = 60000, NB = 8 };
    cd_store_config_t c;
    cd_store_t *s;
    cd_clean_t items[64];
    size_t n;
    uint64_t window;
    uint32_t ns;
    cd_err_t err;
    uint8_t buf[LEN];
    uint64_t len;

    (void)state;
    t_now = 1000;
    t_config(&c, 32 * MiB);
    c.evicted = wb_evicted;
    assert_int_equal(cd_store_create(&c, &s, &err), ST_OK);
    assert_int_equal(cd_store_ns_create(s, "acme", "wb", 64, &ns, &err), ST_OK);
    /* At most an eighth of the namespace's bytes (and one object) is held
     * at a time: with two blocks, the first take gets one object. */
    put_obj(s, ns, 900, 0, CD_KIND_KV, 0, LEN);
    put_obj(s, ns, 901, 0, CD_KIND_KV, 0, LEN);
    n = wb_take(s, ns, 1u << CD_KIND_KV, UINT64_MAX, UINT64_MAX, items, 64, &window);
    assert_int_equal(n, 1);
    items[0].status = ST_OK;
    items[0].token = 90;
    cd_store_clean_finish(s, ns, items, n);
    n = wb_take(s, ns, 1u << CD_KIND_KV, UINT64_MAX, UINT64_MAX, items, 64, &window);
    assert_int_equal(n, 1);
    items[0].status = ST_OK;
    items[0].token = 91;
    cd_store_clean_finish(s, ns, items, n);
    t_now += 10;
    /* Chains 0..7 of NB blocks, coldest first (after those two); chain 2's
     * blocks also carry a KDA object, which write-behind must leave alone;
     * then 24 hotter chains, so that the takes below hold under an eighth. */
    for (uint32_t ch = 0; ch < 8 + 24; ch++) {
        for (uint32_t i = 0; i < NB; i++) {
            put_obj(s, ns, ch < 8 ? ch : 500 + ch, i, CD_KIND_KV, 0, LEN);
            if (ch == 2) {
                put_obj(s, ns, ch, i, CD_KIND_KDA, 0, 1000);
            }
        }
        t_now += 10;
    }
    /* Bounded by bytes: five objects, the coldest chain's last five blocks. */
    n = wb_take(s, ns, 1u << CD_KIND_KV | 1u << CD_KIND_IDX, UINT64_MAX, 5 * LEN, items, 64,
                &window);
    assert_int_equal(n, 5);
    for (size_t j = 0; j < n; j++) {
        cd_key_t want = t_key(0, NB - 1 - (uint32_t)j, CD_KIND_KV, 0);

        assert_memory_equal(&items[j].key, &want, sizeof(want));
        assert_int_equal(items[j].len, LEN);
        t_fill(buf, LEN, &want);
        assert_memory_equal(items[j].data, buf, LEN);
        assert_true(items[j].checksum == XXH3_64bits(buf, LEN));
        assert_true(items[j].has_parent);
        items[j].status = ST_ERR_IO; /* none written */
    }
    cd_store_clean_finish(s, ns, items, n);

    /* Bounded by count: chains 0, 1 and 2 (KV only), in eviction order. */
    n = wb_take(s, ns, 1u << CD_KIND_KV | 1u << CD_KIND_IDX, UINT64_MAX, UINT64_MAX, items, 3 * NB,
                &window);
    assert_int_equal(n, 3 * NB);
    for (size_t j = 0; j < n; j++) {
        cd_key_t want = t_key((uint32_t)j / NB, NB - 1 - (uint32_t)j % NB, CD_KIND_KV, 0);

        assert_memory_equal(&items[j].key, &want, sizeof(want));
        items[j].status = ST_OK;
        items[j].token = 70 + j / NB; /* the hint eviction hands back */
    }
    items[3].status = ST_ERR_IO; /* chain 0, block 4: this write failed */
    /* Held: not deletable meanwhile. */
    cd_key_t k05 = t_key(0, 5, CD_KIND_KV, 0);
    assert_int_equal(cd_store_delete(s, ns, &k05, &err), ST_ERR_BUSY);
    /* Chain 1 is read meanwhile: it is no longer cold. */
    cd_key_t k13 = t_key(1, 3, CD_KIND_KV, 0);
    t_now += 10;
    assert_int_equal(cd_store_get(s, ns, &k13, buf, sizeof(buf), &len, NULL, &err), ST_OK);
    cd_store_clean_finish(s, ns, items, n);

    /* Only the failed one is left in the window of chains 0 and 2 (chain 1
     * was read meanwhile: it went to the hot end). */
    n = wb_take(s, ns, 1u << CD_KIND_KV, 2ull * NB * LEN, UINT64_MAX, items, 64, &window);
    assert_int_equal(n, 1);
    cd_key_t k04 = t_key(0, 4, CD_KIND_KV, 0);
    assert_memory_equal(&items[0].key, &k04, sizeof(k04));
    items[0].status = ST_OK;
    items[0].token = 70;
    cd_store_clean_finish(s, ns, items, n);
    /* Chains 0 and 2 lead the LRU, all written now; chain 3 comes next. */
    n = wb_take(s, ns, 1u << CD_KIND_KV, 2ull * NB * LEN, UINT64_MAX, items, 64, &window);
    assert_int_equal(n, 0);
    assert_true(window >= 2ull * NB * LEN);
    n = wb_take(s, ns, 1u << CD_KIND_KV, 3ull * NB * LEN, UINT64_MAX, items, 64, &window);
    assert_true(n > 0);
    cd_key_t k37 = t_key(3, NB - 1, CD_KIND_KV, 0);
    assert_memory_equal(&items[0].key, &k37, sizeof(k37));
    cd_store_clean_finish(s, ns, items, n); /* status not ST_OK: not tiered */

    /* Evictions: the two single blocks, chain 0, chain 2, all written (the
     * eviction hook gets each one's token). */
    wb_victims = wb_victims_tiered = 0;
    for (uint32_t i = 0; wb_victims < 2 * NB + 3; i++) {
        put_obj(s, ns, 100 + i / NB, i % NB, CD_KIND_KV, 0, LEN);
    }
    assert_int_equal(wb_victim_chain[0], 900);
    assert_int_equal(wb_victim_tiered[0], 90);
    assert_int_equal(wb_victim_chain[1], 901);
    assert_int_equal(wb_victim_tiered[1], 91);
    for (int v = 2; v < 2 + 2 * NB; v++) {
        assert_int_equal(wb_victim_chain[v], v < 2 + NB ? 0 : 2);
        assert_int_equal(wb_victim_tiered[v], v < 2 + NB ? 70 : 72);
    }
    /* The next victim is chain 3's, never written: tiered = 0. */
    assert_int_equal(wb_victim_chain[2 + 2 * NB], 3);
    assert_int_equal(wb_victim_tiered[2 + 2 * NB], 0);
    /* While chain 3 is being written, eviction passes over it (chain 4's
     * last block goes); after the finish, chain 3 is still the coldest. */
    n = wb_take(s, ns, 1u << CD_KIND_KV, UINT64_MAX, UINT64_MAX, items, 2, &window);
    assert_int_equal(n, 2);
    cd_key_t k36 = t_key(3, NB - 2, CD_KIND_KV, 0);
    assert_memory_equal(&items[0].key, &k36, sizeof(k36));
    wb_victims = 0;
    for (uint32_t i = 0; wb_victims < 1; i++) {
        put_obj(s, ns, 200 + i / NB, i % NB, CD_KIND_KV, 0, LEN);
    }
    assert_int_equal(wb_victim_chain[0], 4);
    items[0].status = items[1].status = ST_OK;
    items[0].token = items[1].token = 0; /* a zero token still marks them: 1 */
    cd_store_clean_finish(s, ns, items, n);
    wb_victims = 0;
    for (uint32_t i = 0; wb_victims < 2; i++) {
        put_obj(s, ns, 300 + i / NB, i % NB, CD_KIND_KV, 0, LEN);
    }
    assert_int_equal(wb_victim_chain[0], 3);
    assert_int_equal(wb_victim_tiered[0], 1);
    cd_store_destroy(s);
}

/* The walk is bounded (CD_CLEAN_WALK_MAX blocks from the cold end): with
 * every block there written, the objects beyond are not looked at. */
static void test_write_behind_walk_bound(void **state)
{
    enum { NBLK = CD_CLEAN_WALK_MAX + 2000 };
    cd_store_config_t c;
    cd_store_t *s;
    static cd_clean_t items[1024];
    size_t n, total = 0;
    uint64_t window = 0;
    uint32_t ns;
    cd_err_t err;

    (void)state;
    t_now = 1000;
    t_config(&c, 64 * MiB);
    assert_int_equal(cd_store_create(&c, &s, &err), ST_OK);
    assert_int_equal(cd_store_ns_create(s, "acme", "wb-walk", 64, &ns, &err), ST_OK);
    for (uint32_t i = 0; i < NBLK; i++) {
        put_obj(s, ns, 7000 + i, 0, CD_KIND_KV, 0, 64); /* one-block chains */
    }
    do {
        n = wb_take(s, ns, 1u << CD_KIND_KV, UINT64_MAX, UINT64_MAX, items, 1024, &window);
        for (size_t j = 0; j < n; j++) {
            items[j].status = ST_OK;
        }
        cd_store_clean_finish(s, ns, items, n);
        total += n;
    } while (n > 0);
    assert_int_equal(total, CD_CLEAN_WALK_MAX);
    assert_int_equal(cd_store_clean_take(s, ns + 1, 1u << CD_KIND_KV, UINT64_MAX, UINT64_MAX, items,
                                         1024, &n, &window),
                     ST_ERR_NOT_FOUND);
    cd_store_destroy(s);
}

static void test_lease_expiry(void **state)
{
    st_hash_t h = t_hash(20, 0);
    cd_key_t k = t_key(20, 0, CD_KIND_KV, 0);
    cd_located_t loc;
    uint64_t lease = 0;
    cd_err_t err;
    cd_stats_t s;
    cd_reaped_t r;

    put_block(ns1, 20, 0, CD_KIND_KV, 0, 1000);
    assert_int_equal(cd_store_locate(st_, ns1, &k, 1, CD_LEASE_DEFAULT, &loc, &lease, NULL, &err),
                     ST_OK);
    assert_int_equal(loc.status, ST_OK);
    assert_int_equal(loc.where.length, 1000);
    assert_true(lease != 0);
    assert_int_equal(cd_store_delete(st_, ns1, &k, &err), ST_ERR_BUSY);
    r = t_reap_after(st_, 4999);
    assert_int_equal(r.leases, 0);
    r = t_reap_after(st_, 1);
    assert_int_equal(r.leases, 1);
    assert_int_equal(cd_store_release(st_, ns1, lease), ST_ERR_NOT_FOUND);
    assert_int_equal(cd_store_stats(st_, ns1, &s), ST_OK);
    assert_int_equal(s.leases_expired, 1);
    assert_int_equal(s.leases_active, 0);
    assert_int_equal(cd_store_delete(st_, ns1, &k, &err), ST_OK);
    assert_null(cd_radix_find(&st_->ss_ns[0]->ns_radix, &h)); /* the empty leaf left */
    /* Leases of their own durations expire in expiry order, whatever order
     * they were granted in; above max_lease_ms is refused. */
    uint64_t la, lb, ea, eb;
    put_block(ns1, 21, 0, CD_KIND_KV, 0, 1000);
    cd_key_t k21 = t_key(21, 0, CD_KIND_KV, 0);
    assert_int_equal(cd_store_locate(st_, ns1, &k21, 1, 10000, &loc, &la, &ea, &err), ST_OK);
    assert_int_equal(cd_store_locate(st_, ns1, &k21, 1, 1000, &loc, &lb, &eb, &err), ST_OK);
    assert_int_equal(ea, t_now + 10000);
    assert_int_equal(eb, t_now + 1000);
    cd_store_reap(st_, t_now + 1000, &r);
    assert_int_equal(r.leases, 1);
    assert_int_equal(cd_store_release(st_, ns1, lb), ST_ERR_NOT_FOUND);
    assert_int_equal(cd_store_delete(st_, ns1, &k21, &err), ST_ERR_BUSY); /* a still holds */
    cd_store_reap(st_, t_now + 10000, &r);
    assert_int_equal(r.leases, 1);
    assert_int_equal(cd_store_locate(st_, ns1, &k21, 1, 60001, &loc, &la, NULL, &err),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_lease_ms"));
    /* Locate of a missing key: not found, no lease. */
    assert_int_equal(cd_store_locate(st_, ns1, &k, 1, CD_LEASE_DEFAULT, &loc, &lease, NULL, &err),
                     ST_OK);
    assert_int_equal(loc.status, ST_ERR_NOT_FOUND);
    assert_int_equal(lease, 0);
}

static void test_lookup_limits_and_stats(void **state)
{
    static st_hash_t hs[70000];
    cd_segment_t seg = {0, 70000, hs};
    cd_seg_answer_t ans[2];
    size_t kn;
    cd_err_t err;
    cd_stats_t s;

    assert_int_equal(cd_store_lookup(st_, ns1, &seg, 1, NULL, CD_LEASE_NONE, ans, NULL, 0, &kn,
                                     NULL, NULL, &err),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_hashes"));
    assert_int_equal(cd_store_lookup(st_, ns1, &seg, 0, NULL, CD_LEASE_NONE, ans, NULL, 0, &kn,
                                     NULL, NULL, &err),
                     ST_ERR_INVALID);
    cd_require_t bad = {1u << CD_KIND_SESSION, {0, 0}};
    seg.n = 4;
    assert_int_equal(cd_store_lookup(st_, ns1, &seg, 1, &bad, CD_LEASE_NONE, ans, NULL, 0, &kn,
                                     NULL, NULL, &err),
                     ST_ERR_INVALID);
    /* 3 of 4 blocks with KV and IDX layer 0; block 2 lacks IDX. */
    for (uint32_t i = 0; i < 4; i++) {
        hs[i] = t_hash(30, i);
        put_block(ns1, 30, i, CD_KIND_KV, 0, 100);
        if (i != 2) {
            put_block(ns1, 30, i, CD_KIND_IDX, 0, 100);
        }
    }
    cd_require_t both = {(1u << CD_KIND_KV) | (1u << CD_KIND_IDX), {1, 0}};
    assert_int_equal(cd_store_lookup(st_, ns1, &seg, 1, &both, CD_LEASE_NONE, ans, NULL, 0, &kn,
                                     NULL, NULL, &err),
                     ST_OK);
    assert_int_equal(ans[0].matched, 2);
    cd_require_t kv = {1u << CD_KIND_KV, {1, 0}};
    assert_int_equal(
        cd_store_lookup(st_, ns1, &seg, 1, &kv, CD_LEASE_NONE, ans, NULL, 0, &kn, NULL, NULL, &err),
        ST_OK);
    assert_int_equal(ans[0].matched, 4);
    assert_int_equal(cd_store_stats(st_, ns1, &s), ST_OK);
    assert_int_equal(s.lookups, 2);
    assert_int_equal(s.lookup_hits, 2);
    assert_int_equal(s.lookup_tokens, 8 * 64);
    assert_int_equal(s.hit_tokens, 6 * 64); /* token hit rate 6/8 */
    assert_int_equal(s.objects[CD_KIND_KV], 4);
    assert_int_equal(s.objects[CD_KIND_IDX], 3);
    assert_int_equal(s.bytes[CD_KIND_KV], 400);
    assert_int_equal(s.blocks, 4);
    /* Per-class accounting: 7 extents of 100 bytes, all in the 112 B class. */
    cd_class_stats_t cls[CD_SLAB_MAX_CLASSES + 1];
    size_t ncls = cd_store_class_stats(st_, ns1, cls, CD_SLAB_MAX_CLASSES + 1);
    uint64_t used = 0;
    assert_true(ncls > 2 && ncls <= CD_SLAB_MAX_CLASSES + 1);
    assert_int_equal(cls[ncls - 1].size, 0);
    for (size_t i = 0; i < ncls; i++) {
        used += cls[i].used;
        if (cls[i].used != 0) {
            assert_true(cls[i].size >= 100 && cls[i].size < 125);
            assert_int_equal(cls[i].pages, 1);
        }
    }
    assert_int_equal(used, 7);
    assert_int_equal(cd_store_class_stats(st_, 42, cls, 4), 0);
}

/* The accounting never passes the limit under churn, and the arena's
 * resident pages (mincore) never pass its committed bytes. */
static void test_memory_limit_and_resident(void **state)
{
    cd_stats_t s;
    uint64_t resident = 0;

    for (int n = 0; n < 3000; n++) {
        put_block(ns1, 40 + (uint32_t)n / 16, (uint32_t)n % 16, CD_KIND_KV, (uint32_t)n % 3,
                  1000 + (size_t)(n * 7919) % 120000);
        if (n % 100 == 0) {
            assert_int_equal(cd_store_stats(st_, 0, &s), ST_OK);
            assert_true(s.memory_used <= s.memory_limit);
        }
    }
    assert_int_equal(cd_store_stats(st_, 0, &s), ST_OK);
    assert_true(s.evicted_blocks > 0);
    assert_true(s.memory_used <= s.memory_limit);
    for (uint32_t i = 0; i < st_->ss_n_ns; i++) {
        resident += cd_arena_resident(&st_->ss_ns[i]->ns_slab.sl_arena);
    }
    print_message("memory used=%llu limit=%llu arena committed=%llu resident=%llu\n",
                  (unsigned long long)s.memory_used, (unsigned long long)s.memory_limit,
                  (unsigned long long)s.arena_committed, (unsigned long long)resident);
    assert_true(resident > 0);
    assert_true(resident <= s.arena_committed);
    assert_true(s.arena_committed <= s.memory_limit);
}

/* 16,384 blocks (1M tokens) x 2 layers of small objects, with a KDA
 * checkpoint every 16 blocks, looked up in 1,024 segments. */
static void test_million_token_chain(void **state)
{
    enum { NB = 16384, SEG = 16 };
    cd_store_config_t c;
    cd_store_t *big;
    cd_err_t err;
    uint32_t ns;
    st_hash_t *hs = malloc(NB * sizeof(*hs));
    cd_segment_t *segs = malloc((NB / SEG) * sizeof(*segs));
    cd_seg_answer_t *ans = malloc((NB / SEG) * sizeof(*ans));
    uint64_t *kda = malloc(NB * sizeof(*kda));
    uint8_t obj[128];
    size_t kn = 0;
    uint64_t lease = 0;

    t_config(&c, 256 * MiB);
    assert_int_equal(cd_store_create(&c, &big, &err), ST_OK);
    assert_int_equal(cd_store_ns_create(big, "t", "m", 64, &ns, &err), ST_OK);
    for (uint32_t i = 0; i < NB; i++) {
        hs[i] = t_hash(7, i);
        for (uint32_t layer = 0; layer < 2; layer++) {
            cd_key_t k = t_key(7, i, CD_KIND_KV, layer);

            t_fill(obj, sizeof(obj), &k);
            assert_int_equal(
                cd_store_put(big, ns, &k, i > 0 ? &hs[i - 1] : NULL, obj, sizeof(obj), &err),
                ST_OK);
        }
        if (i % 16 == 15) {
            cd_key_t k = t_key(7, i, CD_KIND_KDA, 0);

            assert_int_equal(cd_store_put(big, ns, &k, i > 0 ? &hs[i - 1] : NULL, obj, 64, &err),
                             ST_OK);
        }
    }
    for (uint32_t s = 0; s < NB / SEG; s++) {
        segs[s].first_block = (uint64_t)s * SEG;
        segs[s].n = SEG;
        segs[s].hashes = &hs[s * SEG];
    }
    cd_require_t req = {1u << CD_KIND_KV, {3, 0}};
    assert_int_equal(cd_store_lookup(big, ns, segs, NB / SEG, &req, CD_LEASE_DEFAULT, ans, kda, NB,
                                     &kn, &lease, NULL, &err),
                     ST_OK);
    for (uint32_t s = 0; s < NB / SEG; s++) {
        assert_int_equal(ans[s].matched, SEG);
        assert_int_equal(ans[s].kda_count, 1);
        assert_int_equal(kda[ans[s].kda_first], (uint64_t)s * SEG + 15);
    }
    assert_int_equal(kn, NB / 16);
    assert_int_equal(cd_store_release(big, ns, lease), ST_OK);
    cd_stats_t s;
    assert_int_equal(cd_store_stats(big, ns, &s), ST_OK);
    assert_int_equal(s.objects[CD_KIND_KV], 2 * NB);
    assert_int_equal(s.blocks, NB);
    assert_int_equal(s.nodes, 1); /* one compressed run */
    assert_int_equal(s.evicted_blocks, 0);
    print_message("1M-token chain: blocks=%llu nodes=%llu memory used=%llu\n",
                  (unsigned long long)s.blocks, (unsigned long long)s.nodes,
                  (unsigned long long)s.memory_used);
    cd_store_destroy(big);
    free(hs);
    free(segs);
    free(ans);
    free(kda);
}

/* Threads on two namespaces: puts, gets, lookups with leases, releases. */
struct worker {
    uint32_t ns;
    uint32_t id;
    int errors;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    uint8_t buf[4096], out[4096];
    cd_err_t err;

    for (uint32_t n = 0; n < 2000; n++) {
        uint32_t chain = 500 + w->id * 100 + n / 20, i = n % 20;
        cd_key_t k = t_key(chain, i, CD_KIND_KV, 0);
        st_hash_t p = t_hash(chain, i - 1), hs[20];
        uint64_t len, lease = 0;
        size_t kn;
        cd_segment_t seg = {0, 20, hs};
        cd_seg_answer_t ans;

        t_fill(buf, sizeof(buf), &k);
        if (cd_store_put(st_, w->ns, &k, i ? &p : NULL, buf, 1000 + n % 3000, &err) != ST_OK) {
            w->errors++;
        }
        st_status_t rc = cd_store_get(st_, w->ns, &k, out, sizeof(out), &len, NULL, &err);
        if (rc == ST_OK && memcmp(out, buf, len) != 0) {
            w->errors++;
        }
        for (uint32_t j = 0; j < 20; j++) {
            hs[j] = t_hash(chain, j);
        }
        if (cd_store_lookup(st_, w->ns, &seg, 1, NULL, CD_LEASE_DEFAULT, &ans, NULL, 0, &kn, &lease,
                            NULL, &err) != ST_OK ||
            ans.matched > i + 1) {
            w->errors++;
        }
        if (lease != 0 && cd_store_release(st_, w->ns, lease) != ST_OK) {
            w->errors++;
        }
    }
    return NULL;
}

static atomic_int reaper_stop;

static void *reaper_main(void *arg)
{
    (void)arg;
    while (!atomic_load(&reaper_stop)) {
        cd_store_reap(st_, t_now, NULL);
    }
    return NULL;
}

static void test_threads(void **state)
{
    pthread_t th[4], reaper;
    struct worker w[4];
    uint32_t ns2;
    cd_err_t err;
    cd_stats_t s;

    assert_int_equal(cd_store_ns_create(st_, "acme", "second", 64, &ns2, &err), ST_OK);
    atomic_store(&reaper_stop, 0);
    assert_int_equal(pthread_create(&reaper, NULL, reaper_main, NULL), 0);
    for (uint32_t i = 0; i < 4; i++) {
        w[i] = (struct worker){i % 2 ? ns2 : ns1, i, 0};
        assert_int_equal(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].errors, 0);
    }
    atomic_store(&reaper_stop, 1);
    pthread_join(reaper, NULL);
    assert_int_equal(cd_store_stats(st_, 0, &s), ST_OK);
    assert_int_equal(s.namespaces, 2);
    assert_int_equal(s.puts, 8000);
    assert_int_equal(s.leases_active, 0);
    assert_true(s.memory_used <= s.memory_limit);
}

static void count_region(void *ctx, uint32_t ns, uint32_t region, void *base, size_t len)
{
    int *n = ctx;

    assert_ptr_equal(t_region_base[ns][region], base);
    assert_int_equal(len, 2 * MiB);
    (*n)++;
}

/* Regions: announced on growth, listed on demand, given back by the reaper
 * when wholly free (one free chunk is kept). */
static void test_regions_and_trim(void **state)
{
    int listed = 0, added0 = t_regions_added, removed0 = t_regions_removed;
    cd_err_t err;
    cd_reaped_t r;

    for (uint32_t i = 0; i < 64; i++) {
        put_block(ns1, 50, i, CD_KIND_KV, 0, 100000); /* ~6.4 MB: 4 chunks */
    }
    assert_int_equal(t_regions_added - added0, 4);
    cd_store_regions(st_, ns1, count_region, &listed);
    assert_int_equal(listed, 4);
    for (uint32_t i = 64; i-- > 0;) {
        cd_key_t k = t_key(50, i, CD_KIND_KV, 0);

        assert_int_equal(cd_store_delete(st_, ns1, &k, &err), ST_OK);
    }
    cd_store_reap(st_, t_now, &r);
    assert_int_equal(r.trimmed_bytes, 3 * 2 * MiB);
    assert_int_equal(t_regions_removed - removed0, 3);
    listed = 0;
    cd_store_regions(st_, ns1, count_region, &listed);
    assert_int_equal(listed, 1);
    cd_stats_t s;
    assert_int_equal(cd_store_stats(st_, ns1, &s), ST_OK);
    assert_int_equal(s.arena_committed, 2 * MiB);
    assert_int_equal(s.blocks, 0);
}

/* A namespace full of cold data does not starve another one: the second
 * namespace's allocations reclaim chunks from the first. */
static void test_reclaim_from_another_namespace(void **state)
{
    uint32_t ns2;
    cd_err_t err;
    cd_stats_t s1, s2, all;

    assert_int_equal(cd_store_ns_create(st_, "acme", "second", 64, &ns2, &err), ST_OK);
    for (uint32_t n = 0; n < 600; n++) { /* ~36 MB into a 32 MiB store */
        put_block(ns1, 60 + n / 16, n % 16, CD_KIND_KV, 0, 60000);
    }
    assert_int_equal(cd_store_stats(st_, ns1, &s1), ST_OK);
    assert_true(s1.evicted_blocks > 0);
    for (uint32_t n = 0; n < 150; n++) { /* ~9 MB into the second namespace */
        put_block(ns2, 200 + n / 16, n % 16, CD_KIND_IDX, 1, 60000);
    }
    assert_int_equal(cd_store_stats(st_, ns2, &s2), ST_OK);
    assert_int_equal(s2.objects[CD_KIND_IDX], 150);
    assert_true(s2.reclaims > 0);
    assert_int_equal(s2.evicted_blocks, 0);
    assert_int_equal(cd_store_stats(st_, ns1, &s1), ST_OK);
    assert_true(s1.objects[CD_KIND_KV] < 600);
    assert_int_equal(cd_store_stats(st_, 0, &all), ST_OK);
    assert_true(all.memory_used <= all.memory_limit);
    assert_int_equal(all.arena_committed, s1.arena_committed + s2.arena_committed);
}

/* Puts blocks [from, to) of chain 70 (KV layer 0, 1000 bytes) into ns1, then
 * looks up the two segments of 16 blocks into ans. */
static void put_then_lookup(uint32_t from, uint32_t to, cd_segment_t *segs, cd_seg_answer_t *ans)
{
    size_t kn;
    cd_err_t err;

    for (uint32_t i = from; i < to; i++) {
        put_block(ns1, 70, i, CD_KIND_KV, 0, 1000);
    }
    assert_int_equal(cd_store_lookup(st_, ns1, segs, 2, NULL, CD_LEASE_NONE, ans, NULL, 0, &kn,
                                     NULL, NULL, &err),
                     ST_OK);
}

/* Segments written out of order through the store: the second segment's
 * first block starts a root that names its remote parent; when the first
 * segment arrives, the root is adopted, and eviction then goes leaf first
 * across the segment boundary. */
static void test_out_of_order_segments(void **state)
{
    st_hash_t hs[32];
    cd_segment_t segs[2] = {{0, 16, hs}, {16, 16, hs + 16}};
    cd_seg_answer_t ans[2];
    cd_radix_t *rx = &st_->ss_ns[0]->ns_radix;

    for (uint32_t i = 0; i < 32; i++) {
        hs[i] = t_hash(70, i);
    }
    put_then_lookup(16, 32, segs, ans);
    assert_int_equal(ans[0].matched, 0);
    assert_int_equal(ans[1].matched, 16);
    assert_true(cd_radix_find(rx, &hs[16])->bk_node->rn_has_remote);
    put_then_lookup(0, 16, segs, ans);
    assert_int_equal(ans[0].matched, 16);
    assert_int_equal(ans[1].matched, 16);
    assert_ptr_equal(cd_radix_find(rx, &hs[16])->bk_node->rn_parent,
                     cd_radix_find(rx, &hs[15])->bk_node);
    assert_int_equal(rx->rx_adoptions, 1);
    /* Evict everything, one block at a time: block 15 outlives block 16. */
    cd_ns_t *ns = st_->ss_ns[0];
    pthread_mutex_lock(&ns->ns_lock);
    for (int n = 0; n < 32; n++) {
        int has15 = cd_radix_find(rx, &hs[15]) != NULL, has16 = cd_radix_find(rx, &hs[16]) != NULL;

        assert_true(has15 || !has16);
        assert_int_equal(do_evict_one(ns), 1);
    }
    assert_int_equal(rx->rx_blocks, 0);
    pthread_mutex_unlock(&ns->ns_lock);
}

static void test_bad_config(void **state)
{
    cd_store_config_t c;
    cd_store_t *s;
    cd_err_t err;

    t_config(&c, 32 * MiB);
    c.cluster_secret_len = 8;
    assert_int_equal(cd_store_create(&c, &s, &err), ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "secret"));
    t_config(&c, 32 * MiB);
    c.limits.max_object_bytes = 4 * MiB;
    assert_int_equal(cd_store_create(&c, &s, &err), ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_object_bytes"));
    t_config(&c, 3 * MiB);
    assert_int_equal(cd_store_create(&c, &s, &err), ST_ERR_INVALID);
    t_config(&c, 32 * MiB);
    c.limits.max_layers = 129;
    assert_int_equal(cd_store_create(&c, &s, &err), ST_ERR_INVALID);
}

/* Row sums: a row-major object committed from a reservation, or put
 * inline, carries one XXH3-64 per row of the bytes as committed (bytes
 * scribbled over the extent later do not change them); an object without
 * row_bytes, or rows too small, gets none; cd_store_row_sums copies them. */
static void test_row_sums(void **state)
{
    enum { RB = 656, ROWS = 64, LEN = RB * ROWS + 100 };
    cd_resv_req_t rq = {0};
    cd_resv_t rs;
    cd_located_t loc[3];
    cd_key_t keys[3];
    cd_err_t err;
    uint8_t *data = malloc(LEN), *sums = malloc(3 * ROWS * 8);
    uint8_t *arena;

    (void)state;
    rq.key = t_key(9, 0, CD_KIND_KV, 0);
    rq.length = LEN;
    rq.row_bytes = RB;
    t_fill(data, LEN, &rq.key);
    assert_int_equal(cd_store_reserve(st_, ns1, &rq, 1, &rs, &err), ST_OK);
    arena = (uint8_t *)t_region_base[ns1][rs.where.region] + rs.where.offset;
    memcpy(arena, data, LEN);
    assert_int_equal(cd_store_commit(st_, ns1, rs.id, XXH3_64bits(data, LEN), &err), ST_OK);
    keys[0] = rq.key;
    keys[1] = t_key(9, 1, CD_KIND_IDX, 0); /* put inline with rows */
    keys[2] = t_key(9, 2, CD_KIND_KV, 0);  /* put without rows */
    assert_int_equal(cd_store_put_rows(st_, ns1, &keys[1], NULL, data, LEN, RB, &err), ST_OK);
    assert_int_equal(cd_store_put(st_, ns1, &keys[2], NULL, data, LEN, &err), ST_OK);
    assert_int_equal(cd_store_put_rows(st_, ns1, &keys[2], NULL, data, LEN, 8, &err),
                     ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "row_bytes 8"));
    assert_int_equal(cd_store_locate(st_, ns1, keys, 3, CD_LEASE_NONE, loc, NULL, NULL, &err),
                     ST_OK);
    assert_int_equal(loc[0].where.row_bytes, RB);
    assert_int_equal(loc[0].where.row_group, 1);
    assert_int_equal(loc[0].where.n_rowsum, ROWS);
    assert_int_equal(loc[1].where.n_rowsum, ROWS);
    assert_int_equal(loc[2].where.n_rowsum, 0);
    assert_int_equal(loc[2].where.row_group, 0);
    /* Scribbled after the commit: the sums are still of the committed rows. */
    memset(arena + 5 * RB, 0xee, RB);
    assert_int_equal(cd_store_row_sums(st_, ns1, keys, loc, 3, sums, 3 * ROWS * 8), ST_OK);
    for (int k = 0; k < 2; k++) {
        assert_non_null(loc[k].where.rowsum);
        for (uint64_t r = 0; r < ROWS; r++) {
            assert_true(pr_rowsum_at(loc[k].where.rowsum, r) == XXH3_64bits(data + r * RB, RB));
        }
    }
    assert_true(pr_rowsum_at(loc[0].where.rowsum, 5) != XXH3_64bits(arena + 5 * RB, RB));
    assert_null(loc[2].where.rowsum);
    /* Too little room: the entries past it go without sums. */
    assert_int_equal(cd_store_locate(st_, ns1, keys, 2, CD_LEASE_NONE, loc, NULL, NULL, &err),
                     ST_OK);
    assert_int_equal(cd_store_row_sums(st_, ns1, keys, loc, 2, sums, ROWS * 8), ST_OK);
    assert_non_null(loc[0].where.rowsum);
    assert_null(loc[1].where.rowsum);
    assert_int_equal(loc[1].where.n_rowsum, 0);
    free(data), free(sums);
}

int main(void)
{
    UNIT_RUN(
        UNIT_FIXTURE(test_namespaces_and_seeds), UNIT_FIXTURE(test_put_get_immutable),
        UNIT_FIXTURE(test_reserve_commit_abort_expire), cmocka_unit_test(test_reservation_fence),
        UNIT_FIXTURE(test_leases_and_pins_block_eviction), UNIT_FIXTURE(test_lease_expiry),
        cmocka_unit_test(test_write_behind_take_finish),
        cmocka_unit_test(test_write_behind_walk_bound), UNIT_FIXTURE(test_lookup_limits_and_stats),
        UNIT_FIXTURE(test_memory_limit_and_resident), UNIT_FIXTURE(test_million_token_chain),
        UNIT_FIXTURE(test_threads), UNIT_FIXTURE(test_regions_and_trim),
        UNIT_FIXTURE(test_reclaim_from_another_namespace), UNIT_FIXTURE(test_out_of_order_segments),
        cmocka_unit_test(test_bad_config), UNIT_FIXTURE(test_row_sums));
}
