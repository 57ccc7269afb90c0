/* test_ssd.c - the SSD tier against real LMDB files in a temporary directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <unistd.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <pthread.h>
#include <stdatomic.h>
#include <cmocka.h>

#include <lmdb.h>
#include <xxhash.h>

#include "log.h"
#include "ssd.h"
#include "test_ssd.h"
#include "support/unit_main.h"

/* ---- helpers -------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

char *make_dir(void)
{
    char *dir = strdup("/tmp/st_test_ssd_XXXXXX");

    assert_non_null(dir);
    assert_non_null(mkdtemp(dir));
    return dir;
}

void remove_dir(char *dir)
{
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

/* open_env with the callbacks of p (on_evict, on_usage); its directory,
 * map size and spill budget are set here. */
static ssd_t *open_env_cb(const char *dir, uint64_t map_size, uint64_t budget, ssd_params_t p)
{
    ssd_t *ssd = NULL;

    p.dir = dir;
    p.map_size = map_size;
    p.spill_budget = budget;
    assert_int_equal(ssd_open(&p, &ssd), ST_OK);
    return ssd;
}

ssd_t *open_env(const char *dir, uint64_t map_size, uint64_t budget)
{
    ssd_t *ssd = open_env_cb(dir, map_size, budget, (ssd_params_t){0});

    assert_non_null(ssd);
    return ssd;
}

void fill(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
}

ssd_key_t mkkey(uint64_t ns, uint64_t n, unsigned kind, uint16_t layer)
{
    ssd_key_t k;

    memset(&k, 0, sizeof(k));
    k.ns = ns;
    for (int i = 0; i < 8; i++) {
        k.id.b[i] = (uint8_t)(n >> (8 * i));
        k.id.b[8 + i] = (uint8_t)(0xA5 ^ i);
    }
    k.kind = (uint8_t)kind;
    k.layer = layer;
    return k;
}

/* Asserts that key holds len bytes generated from seed. */
void check_value(ssd_t *ssd, const ssd_key_t *key, size_t len, uint64_t seed)
{
    uint8_t *want = malloc(len + 1), *got = malloc(len + 1);
    size_t got_len = 0;
    ssd_meta_t meta;

    assert_non_null(want);
    assert_non_null(got);
    fill(want, len, seed);
    assert_int_equal(ssd_get_buf(ssd, key, got, len + 1, &got_len, &meta), ST_OK);
    assert_int_equal(got_len, len);
    assert_int_equal(meta.length, len);
    assert_true(meta.checksum == XXH3_64bits(want, len));
    assert_memory_equal(got, want, len);
    free(want);
    free(got);
}

void put_durable(ssd_t *ssd, const ssd_key_t *key, size_t len, uint64_t seed)
{
    uint8_t *buf = malloc(len + 1);

    assert_non_null(buf);
    fill(buf, len, seed);
    assert_int_equal(ssd_put(ssd, key, buf, len, SSD_DURABLE, NULL, NULL), ST_OK);
    free(buf);
}

void spill_copy(ssd_t *ssd, const ssd_key_t *key, size_t len, uint64_t seed)
{
    uint8_t *buf = malloc(len + 1);

    assert_non_null(buf);
    fill(buf, len, seed);
    assert_int_equal(ssd_spill(ssd, key, buf, len, 0, NULL, NULL), ST_OK);
    free(buf); /* copied by the tier */
}

static void *alloc_malloc(void *arg, size_t length, const ssd_meta_t *meta)
{
    void **slot = arg;

    *slot = malloc(length + 1);
    return *slot;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_key_layout(void **state)
{
    ssd_key_t k = mkkey(0x0102030405060708ull, 7, SSD_IDX, 0x0A0B), back;
    uint8_t b[SSD_KEY_BYTES], b2[SSD_KEY_BYTES];

    ssd_key_encode(&k, b);
    assert_int_equal(b[0], 0x01);
    assert_int_equal(b[7], 0x08);
    assert_memory_equal(b + 8, k.id.b, 16);
    assert_int_equal(b[24], SSD_IDX);
    assert_int_equal(b[25], 0x0A);
    assert_int_equal(b[26], 0x0B);
    assert_int_equal(ssd_key_decode(b, &back), ST_OK);
    assert_true(back.ns == k.ns && back.kind == k.kind && back.layer == k.layer);
    assert_memory_equal(back.id.b, k.id.b, 16);
    b[24] = 9;
    assert_int_equal(ssd_key_decode(b, &back), ST_ERR_INVALID);
    /* A smaller namespace sorts first whatever the hash; a layer after the block. */
    k = mkkey(1, 0xFFFFFFFF, SSD_KV, 900);
    ssd_key_encode(&k, b);
    k = mkkey(2, 0, SSD_KV, 0);
    ssd_key_encode(&k, b2);
    assert_true(memcmp(b, b2, sizeof(b)) < 0);
    assert_string_equal(ssd_kind_name(SSD_SESSION), "SESSION");
}

static void test_roundtrip_kinds(void **state)
{
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    ssd_key_t kda = mkkey(1, 1, SSD_KDA, 3), ses = mkkey(1, 2, SSD_SESSION, 0);
    ssd_key_t kv = mkkey(1, 1, SSD_KV, 5), idx = mkkey(1, 1, SSD_IDX, 5);
    ssd_key_t empty = mkkey(2, 9, SSD_SESSION, 0), missing = mkkey(1, 77, SSD_KDA, 0);
    ssd_stats_t st;
    size_t len;
    uint8_t small[4];

    put_durable(ssd, &kda, 100000, 11);
    put_durable(ssd, &ses, 200, 12);
    put_durable(ssd, &empty, 0, 0);
    spill_copy(ssd, &kv, 43008, 13);
    spill_copy(ssd, &idx, 8448, 14);
    assert_int_equal(ssd_flush(ssd, 1), ST_OK);

    check_value(ssd, &kda, 100000, 11);
    check_value(ssd, &ses, 200, 12);
    check_value(ssd, &empty, 0, 0);
    check_value(ssd, &kv, 43008, 13);
    check_value(ssd, &idx, 8448, 14);
    assert_int_equal(ssd_get_buf(ssd, &missing, small, sizeof(small), &len, NULL),
                     ST_ERR_NOT_FOUND);
    /* Too small a buffer: the length comes back, nothing else. */
    assert_int_equal(ssd_get_buf(ssd, &ses, small, sizeof(small), &len, NULL), ST_ERR_EXHAUSTED);
    assert_int_equal(len, 200);

    /* A put replaces: new bytes, still one object. */
    put_durable(ssd, &kda, 5000, 99);
    check_value(ssd, &kda, 5000, 99);
    ssd_stats(ssd, &st);
    assert_int_equal(st.objects[SSD_KDA], 1);
    assert_int_equal(st.bytes[SSD_KDA], 5000);
    assert_int_equal(st.objects[SSD_SESSION], 2);
    assert_int_equal(st.objects[SSD_KV], 1);
    assert_int_equal(st.objects[SSD_IDX], 1);
    assert_int_equal(st.spill_bytes, 43008 + 8448);
    assert_int_equal(st.durable_puts, 4);
    assert_int_equal(st.spills, 2);
    assert_true(st.map_used > 0 && st.map_used <= st.map_size);

    /* Deletes. */
    assert_int_equal(ssd_delete(ssd, &ses, SSD_DURABLE, NULL, NULL), ST_OK);
    assert_int_equal(ssd_delete(ssd, &ses, SSD_DURABLE, NULL, NULL), ST_ERR_NOT_FOUND);
    assert_int_equal(ssd_get_buf(ssd, &ses, small, sizeof(small), &len, NULL), ST_ERR_NOT_FOUND);
    ssd_close(ssd);
    remove_dir(dir);
}

int done_ok, done_other;

void count_done(void *arg, const ssd_key_t *key, st_status_t status)
{
    if (status == ST_OK) {
        done_ok++;
    } else {
        done_other++;
    }
}

static void test_spill_promote(void **state)
{
    enum { N = 20, LEN = 43008 };
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    uint8_t *bufs = malloc((size_t)N * LEN);
    ssd_stats_t st;
    ssd_meta_t meta;
    size_t len;
    uint8_t one;

    assert_non_null(bufs);
    done_ok = done_other = 0;
    for (int i = 0; i < N; i++) {
        ssd_key_t k = mkkey(3, (uint64_t)i, i % 2 ? SSD_IDX : SSD_KV, (uint16_t)i);

        fill(bufs + (size_t)i * LEN, LEN, 1000 + (uint64_t)i);
        /* Not copied: the buffers stay valid until count_done ran. */
        assert_int_equal(ssd_spill(ssd, &k, bufs + (size_t)i * LEN, LEN, 0, count_done, NULL),
                         ST_OK);
    }
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(done_ok, N);
    assert_int_equal(done_other, 0);
    for (int i = 0; i < N; i++) {
        ssd_key_t k = mkkey(3, (uint64_t)i, i % 2 ? SSD_IDX : SSD_KV, (uint16_t)i);
        void *got = NULL;

        assert_int_equal(ssd_promote(ssd, &k, alloc_malloc, &got, &meta), ST_OK);
        assert_non_null(got);
        assert_int_equal(meta.length, LEN);
        assert_memory_equal(got, bufs + (size_t)i * LEN, LEN);
        free(got);
    }
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    for (int i = 0; i < N; i++) {
        ssd_key_t k = mkkey(3, (uint64_t)i, i % 2 ? SSD_IDX : SSD_KV, (uint16_t)i);

        /* Promoted objects live in DRAM again: the tier dropped them. */
        assert_int_equal(ssd_get_buf(ssd, &k, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
    }
    ssd_stats(ssd, &st);
    assert_int_equal(st.spills, N);
    assert_int_equal(st.promotions, N);
    assert_int_equal(st.objects[SSD_KV] + st.objects[SSD_IDX], 0);
    assert_int_equal(st.spill_bytes, 0);

    /* A promote of a durable kind keeps it. */
    ssd_key_t kda = mkkey(3, 1, SSD_KDA, 0);
    void *got = NULL;

    put_durable(ssd, &kda, 1000, 5);
    assert_int_equal(ssd_promote(ssd, &kda, alloc_malloc, &got, NULL), ST_OK);
    free(got);
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    check_value(ssd, &kda, 1000, 5);
    ssd_close(ssd);
    free(bufs);
    remove_dir(dir);
}

/*
 * ssd_spill_parts: a copied head in front of bytes that are not copied.
 * What is stored is exactly the one-buffer payload head || data (the same
 * checksum, the same bytes read back, split again by ssd_get_split);
 * the head is copied at the call, the data read at the commit; a missing
 * head or done callback, or a head over SSD_HEAD_MAX, is refused.
 */
static void test_spill_parts(void **state)
{
    enum { N = 12, LEN = 43008, HEAD = 24 };
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    uint8_t *whole = malloc((size_t)N * (HEAD + LEN)), head[HEAD], *got = malloc(HEAD + LEN);
    ssd_key_t k0 = mkkey(9, 0, SSD_KV, 0);
    size_t got_len;
    ssd_meta_t meta;

    assert_non_null(whole);
    assert_non_null(got);
    done_ok = done_other = 0;
    for (int i = 0; i < N; i++) {
        ssd_key_t k = mkkey(9, (uint64_t)i, i % 2 ? SSD_IDX : SSD_KV, 3);
        uint8_t *w = whole + (size_t)i * (HEAD + LEN);

        fill(w, HEAD + LEN, 7000 + (uint64_t)i);
        memcpy(head, w, HEAD);
        assert_int_equal(ssd_spill_parts(ssd, &k, head, HEAD, w + HEAD, LEN, 0, count_done, NULL),
                         ST_OK);
        memset(head, 0xEE, HEAD); /* copied at the call: reusing it changes nothing */
    }
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(done_ok, N);
    assert_int_equal(done_other, 0);
    for (int i = 0; i < N; i++) {
        ssd_key_t k = mkkey(9, (uint64_t)i, i % 2 ? SSD_IDX : SSD_KV, 3);
        const uint8_t *w = whole + (size_t)i * (HEAD + LEN);

        assert_int_equal(ssd_get_buf(ssd, &k, got, HEAD + LEN, &got_len, &meta), ST_OK);
        assert_int_equal(got_len, HEAD + LEN);
        assert_true(meta.checksum == XXH3_64bits(w, HEAD + LEN));
        assert_memory_equal(got, w, HEAD + LEN);
    }
    /* Refused, with nothing queued. */
    assert_int_equal(ssd_spill_parts(ssd, &k0, NULL, HEAD, got, LEN, 0, count_done, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(ssd_spill_parts(ssd, &k0, head, HEAD, got, LEN, 0, NULL, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(
        ssd_spill_parts(ssd, &k0, got, SSD_HEAD_MAX + 1, got, LEN, 0, count_done, NULL),
        ST_ERR_INVALID);
    k0.kind = SSD_KDA;
    assert_int_equal(ssd_spill_parts(ssd, &k0, head, HEAD, got, LEN, 0, count_done, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(done_ok, N);
    ssd_close(ssd);
    free(whole);
    free(got);
    remove_dir(dir);
}

/*
 * ssd_put_parts: a KDA put of head || data, both copied at the call, stored
 * and read back exactly as the one-buffer payload (the same checksum); a
 * missing or oversized head, SSD_DURABLE, or a spilled kind is refused.
 */
static void test_put_parts(void **state)
{
    enum { N = 8, LEN = 65536, HEAD = 24 };
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    uint8_t *whole = malloc(HEAD + LEN), *part = malloc(LEN), *got = malloc(HEAD + LEN);
    ssd_key_t k0 = mkkey(11, 0, SSD_KDA, 0);
    size_t got_len;
    ssd_meta_t meta;

    (void)state;
    assert_non_null(whole);
    assert_non_null(part);
    assert_non_null(got);
    for (int i = 0; i < N; i++) {
        ssd_key_t k = mkkey(11, (uint64_t)i, SSD_KDA, 2);

        fill(whole, HEAD + LEN, 9000 + (uint64_t)i);
        memcpy(part, whole + HEAD, LEN);
        assert_int_equal(ssd_put_parts(ssd, &k, whole, HEAD, part, LEN, 0), ST_OK);
        memset(part, 0xEE, LEN); /* copied at the call: reusing it changes nothing */
    }
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    for (int i = 0; i < N; i++) {
        ssd_key_t k = mkkey(11, (uint64_t)i, SSD_KDA, 2);

        fill(whole, HEAD + LEN, 9000 + (uint64_t)i);
        assert_int_equal(ssd_get_buf(ssd, &k, got, HEAD + LEN, &got_len, &meta), ST_OK);
        assert_int_equal(got_len, HEAD + LEN);
        assert_true(meta.checksum == XXH3_64bits(whole, HEAD + LEN));
        assert_memory_equal(got, whole, HEAD + LEN);
    }
    assert_int_equal(ssd_put_parts(ssd, &k0, NULL, HEAD, part, LEN, 0), ST_ERR_INVALID);
    assert_int_equal(ssd_put_parts(ssd, &k0, whole, 0, part, LEN, 0), ST_ERR_INVALID);
    assert_int_equal(ssd_put_parts(ssd, &k0, whole, SSD_HEAD_MAX + 1, part, LEN, 0),
                     ST_ERR_INVALID);
    assert_int_equal(ssd_put_parts(ssd, &k0, whole, HEAD, part, LEN, SSD_DURABLE), ST_ERR_INVALID);
    k0.kind = SSD_KV;
    assert_int_equal(ssd_put_parts(ssd, &k0, whole, HEAD, part, LEN, 0), ST_ERR_INVALID);
    k0.kind = SSD_KDA;
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(ssd_get_buf(ssd, &k0, got, HEAD + LEN, &got_len, &meta), ST_ERR_NOT_FOUND);
    ssd_close(ssd);
    free(whole);
    free(part);
    free(got);
    remove_dir(dir);
}

/*
 * ssd_removals: unchanged by writes of new keys and by reads; grows with
 * a delete, a replaced value and an eviction by the spill budget (the
 * daemon trusts an earlier copy only while it stands still).
 */
static void test_removals(void **state)
{
    enum { LEN = 43008 };
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 4 * LEN); /* room for four */
    ssd_key_t k0 = mkkey(11, 0, SSD_KV, 0), k1 = mkkey(11, 1, SSD_KV, 0);
    uint64_t r0, r1;
    uint8_t one;
    size_t len;

    (void)state;
    r0 = ssd_removals(ssd);
    spill_copy(ssd, &k0, LEN, 1);
    spill_copy(ssd, &k1, LEN, 2);
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    check_value(ssd, &k0, LEN, 1);
    assert_int_equal(ssd_contains(ssd, &k1), 1);
    assert_true(ssd_removals(ssd) == r0);
    /* Replaced. */
    spill_copy(ssd, &k1, LEN, 3);
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    r1 = ssd_removals(ssd);
    assert_true(r1 > r0);
    check_value(ssd, &k1, LEN, 3);
    /* Deleted. */
    assert_int_equal(ssd_delete(ssd, &k1, SSD_DURABLE, NULL, NULL), ST_OK);
    assert_true(ssd_removals(ssd) > r1);
    r1 = ssd_removals(ssd);
    /* Aged out by the budget: four more values push k0 out. */
    for (uint64_t i = 2; i < 6; i++) {
        ssd_key_t k = mkkey(11, i, SSD_KV, 0);

        spill_copy(ssd, &k, LEN, 10 + i);
    }
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(ssd_get_buf(ssd, &k0, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
    assert_true(ssd_removals(ssd) > r1);
    ssd_close(ssd);
    remove_dir(dir);
}

static uint64_t evicted[64];
static int n_evicted;

static void record_evict(void *arg, const ssd_key_t *key, uint64_t length)
{
    uint64_t n = 0;

    for (int i = 7; i >= 0; i--) {
        n = (n << 8) | key->id.b[i];
    }
    if (n_evicted < 64) {
        evicted[n_evicted++] = n;
    }
}

static void test_budget_lru(void **state)
{
    enum { LEN = 4096 };
    char *dir = make_dir();
    ssd_t *ssd = open_env_cb(dir, 64ull << 20, 10 * LEN, (ssd_params_t){.on_evict = record_evict});
    ssd_stats_t st;
    const uint64_t want[5] = {0, 1, 3, 4, 5};
    uint8_t one;
    size_t len;

    n_evicted = 0;
    for (uint64_t i = 0; i < 10; i++) {
        ssd_key_t k = mkkey(4, i, SSD_KV, 0);

        spill_copy(ssd, &k, LEN, i);
        /* One batch each, so the LRU order is the order of the calls. */
        assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    }
    assert_int_equal(n_evicted, 0);
    /* Spilling 2 again makes it the newest. */
    ssd_key_t k2 = mkkey(4, 2, SSD_KV, 0);
    spill_copy(ssd, &k2, LEN, 102);
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    for (uint64_t i = 10; i < 15; i++) {
        ssd_key_t k = mkkey(4, i, SSD_KV, 0);

        spill_copy(ssd, &k, LEN, i);
    }
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);

    assert_int_equal(n_evicted, 5);
    assert_memory_equal(evicted, want, sizeof(want));
    for (uint64_t i = 0; i < 15; i++) {
        ssd_key_t k = mkkey(4, i, SSD_KV, 0);
        int gone = i == 0 || i == 1 || i == 3 || i == 4 || i == 5;

        if (gone) {
            assert_int_equal(ssd_get_buf(ssd, &k, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
        } else {
            check_value(ssd, &k, LEN, i == 2 ? 102 : i);
        }
    }
    ssd_stats(ssd, &st);
    assert_int_equal(st.evictions, 5);
    assert_int_equal(st.evicted_bytes, 5 * LEN);
    assert_int_equal(st.spill_bytes, 10 * LEN);
    assert_int_equal(st.objects[SSD_KV], 10);
    /* A payload over the whole budget is refused at once. */
    uint8_t *big = calloc(1, 11 * LEN);
    assert_non_null(big);
    assert_int_equal(ssd_spill(ssd, &k2, big, 11 * LEN, 0, NULL, NULL), ST_ERR_EXHAUSTED);
    free(big);
    ssd_close(ssd);
    remove_dir(dir);
}

/* on_usage: bytes per namespace, summed over every commit's deltas. */
static int64_t usage_ns[8];

static void record_usage(void *arg, const ssd_key_t *key, int64_t delta)
{
    (void)arg;
    if (key->ns < 8) {
        usage_ns[key->ns] += delta;
    }
}

/* The deltas on_usage reports add up to what each namespace holds, through
 * writes, replacements, deletes and budget evictions. */
static void test_usage_deltas(void **state)
{
    enum { LEN = 4096 };
    char *dir = make_dir();
    ssd_t *ssd = open_env_cb(dir, 64ull << 20, 5 * LEN, (ssd_params_t){.on_usage = record_usage});
    ssd_stats_t st;

    (void)state;
    memset(usage_ns, 0, sizeof(usage_ns));
    for (uint64_t i = 0; i < 4; i++) {
        ssd_key_t k1 = mkkey(1, i, SSD_KV, 0), k2 = mkkey(2, i, SSD_IDX, 1);

        spill_copy(ssd, &k1, LEN, i);
        spill_copy(ssd, &k2, LEN / 2, i);
    }
    ssd_key_t d = mkkey(3, 0, SSD_KDA, 0);
    put_durable(ssd, &d, 1000, 7);
    put_durable(ssd, &d, 3000, 8); /* replaced: -1000 +3000 */
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    /* 4 x 4096 + 4 x 2048 spilled over a budget of 5 x 4096: the oldest went. */
    ssd_stats(ssd, &st);
    assert_true(st.evictions > 0);
    assert_int_equal(usage_ns[1] + usage_ns[2], st.bytes[SSD_KV] + st.bytes[SSD_IDX]);
    assert_int_equal(usage_ns[3], 3000);
    ssd_key_t k = mkkey(1, 3, SSD_KV, 0);
    int64_t before = usage_ns[1];
    assert_int_equal(ssd_delete(ssd, &k, SSD_DURABLE, NULL, NULL), ST_OK);
    assert_int_equal(usage_ns[1], before - LEN);
    assert_int_equal(ssd_delete(ssd, &d, SSD_DURABLE, NULL, NULL), ST_OK);
    assert_int_equal(usage_ns[3], 0);
    ssd_stats(ssd, &st);
    assert_int_equal(usage_ns[1], st.bytes[SSD_KV]);
    assert_int_equal(usage_ns[2], st.bytes[SSD_IDX]);
    ssd_close(ssd);
    remove_dir(dir);
}

/* Flips one byte of the first occurrence of marker in dir/data.mdb. */
static void corrupt_on_disk(const char *dir, const char *marker)
{
    char path[512];
    struct stat sb;
    uint8_t *data;
    uint8_t *hit;
    int fd;

    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    assert_int_equal(fstat(fd, &sb), 0);
    data = malloc((size_t)sb.st_size);
    assert_non_null(data);
    assert_int_equal(pread(fd, data, (size_t)sb.st_size, 0), sb.st_size);
    hit = memmem(data, (size_t)sb.st_size, marker, strlen(marker));
    assert_non_null(hit);
    /* Exactly one copy: the value is not duplicated somewhere we missed. */
    assert_null(
        memmem(hit + 1, (size_t)sb.st_size - (size_t)(hit + 1 - data), marker, strlen(marker)));
    hit[3] ^= 0x40;
    assert_int_equal(pwrite(fd, hit + 3, 1, hit + 3 - data), 1);
    fsync(fd);
    close(fd);
    free(data);
}

static void put_marked(ssd_t *ssd, const ssd_key_t *key, const char *marker, int spill)
{
    uint8_t buf[20000];

    fill(buf, sizeof(buf), 4242);
    memcpy(buf + 7000, marker, strlen(marker));
    if (spill) {
        assert_int_equal(ssd_spill(ssd, key, buf, sizeof(buf), 0, NULL, NULL), ST_OK);
    } else {
        assert_int_equal(ssd_put(ssd, key, buf, sizeof(buf), SSD_DURABLE, NULL, NULL), ST_OK);
    }
}

static void test_corrupt_value(void **state)
{
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    ssd_key_t kda = mkkey(5, 1, SSD_KDA, 0), kv = mkkey(5, 1, SSD_KV, 2);
    ssd_key_t good = mkkey(5, 2, SSD_KDA, 0);
    uint8_t buf[20000];
    ssd_stats_t st;
    size_t len;
    void *got = NULL;

    put_marked(ssd, &kda, "<<strata-test-marker-KDA-0001>>", 0);
    put_marked(ssd, &kv, "<<strata-test-marker-KV-00002>>", 1);
    put_durable(ssd, &good, 3000, 77);
    ssd_close(ssd);

    corrupt_on_disk(dir, "<<strata-test-marker-KDA-0001>>");
    corrupt_on_disk(dir, "<<strata-test-marker-KV-00002>>");

    ssd = open_env(dir, 64ull << 20, 0);
    assert_int_equal(ssd_get_buf(ssd, &kda, buf, sizeof(buf), &len, NULL), ST_ERR_NOT_FOUND);
    ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 1);
    assert_int_equal(ssd_promote(ssd, &kv, alloc_malloc, &got, NULL), ST_ERR_NOT_FOUND);
    free(got);
    assert_int_equal(ssd_flush(ssd, 1), ST_OK);
    ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 2);
    assert_int_equal(st.promotions, 0);
    /* Removed: a second read is a plain miss, not a second detection. */
    assert_int_equal(ssd_get_buf(ssd, &kda, buf, sizeof(buf), &len, NULL), ST_ERR_NOT_FOUND);
    assert_int_equal(ssd_get_buf(ssd, &kv, buf, sizeof(buf), &len, NULL), ST_ERR_NOT_FOUND);
    ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 2);
    assert_int_equal(st.objects[SSD_KDA], 1);
    assert_int_equal(st.objects[SSD_KV], 0);
    check_value(ssd, &good, 3000, 77);
    ssd_close(ssd);
    remove_dir(dir);
}

static void *alloc_refuse(void *arg, size_t length, const ssd_meta_t *meta)
{
    int *calls = arg;

    (*calls)++;
    return NULL;
}

/* Spills a value of 20000 bytes with marker at offset at. */
static void spill_marked_at(ssd_t *ssd, const ssd_key_t *key, const char *marker, size_t at)
{
    uint8_t buf[20000];

    fill(buf, sizeof(buf), 4343);
    memcpy(buf + at, marker, strlen(marker));
    assert_int_equal(ssd_spill(ssd, key, buf, sizeof(buf), 0, NULL, NULL), ST_OK);
}

/*
 * ssd_promote_split: the head and the rest land apart, large values
 * and small ones; the rest's XXH3-64 comes back; a refused
 * allocation leaves the object as it was; a value shorter than the head and
 * bad head lengths are refused; a byte flipped on disk in the head or in the
 * rest is a miss, counted and dropped, never a promote.
 */
static void test_promote_split(void **state)
{
    enum { HEAD = 24 };
    const size_t lens[2] = {43008 + HEAD, 1000};
    char *dir = make_dir();
    ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    ssd_key_t tiny = mkkey(6, 9, SSD_KV, 0);
    ssd_key_t in_head = mkkey(6, 10, SSD_KV, 0), in_rest = mkkey(6, 11, SSD_IDX, 3);
    uint8_t head[HEAD], one;
    ssd_meta_t meta;
    ssd_stats_t st;
    uint64_t sum;
    size_t len;
    int calls = 0;

    for (int i = 0; i < 2; i++) {
        ssd_key_t k = mkkey(6, (uint64_t)i, SSD_KV, (uint16_t)i);

        spill_copy(ssd, &k, lens[i], 600 + (uint64_t)i);
    }
    spill_copy(ssd, &tiny, HEAD - 1, 7);
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    for (int i = 0; i < 2; i++) {
        ssd_key_t k = mkkey(6, (uint64_t)i, SSD_KV, (uint16_t)i);
        uint8_t *want = malloc(lens[i]);
        void *got = NULL;

        assert_non_null(want);
        fill(want, lens[i], 600 + (uint64_t)i);
        calls = 0;
        assert_int_equal(ssd_promote_split(ssd, &k, head, HEAD, alloc_refuse, &calls, &sum, NULL),
                         ST_ERR_NOMEM);
        assert_int_equal(calls, 1);
        assert_int_equal(ssd_flush(ssd, 0), ST_OK);
        check_value(ssd, &k, lens[i], 600 + (uint64_t)i); /* still there, intact */

        /* ssd_get_split: the same bytes and sums, and the value stays. */
        sum = 0;
        assert_int_equal(ssd_get_split(ssd, &k, head, HEAD, alloc_malloc, &got, &sum, &meta),
                         ST_OK);
        assert_memory_equal(head, want, HEAD);
        assert_memory_equal(got, want + HEAD, lens[i] - HEAD);
        assert_true(sum == XXH3_64bits(want + HEAD, lens[i] - HEAD));
        free(got);
        got = NULL;
        assert_int_equal(ssd_flush(ssd, 0), ST_OK);
        assert_int_equal(ssd_contains(ssd, &k), 1);
        check_value(ssd, &k, lens[i], 600 + (uint64_t)i);

        sum = 0;
        assert_int_equal(ssd_promote_split(ssd, &k, head, HEAD, alloc_malloc, &got, &sum, &meta),
                         ST_OK);
        assert_non_null(got);
        assert_int_equal(meta.length, lens[i]);
        assert_true(meta.checksum == XXH3_64bits(want, lens[i]));
        assert_memory_equal(head, want, HEAD);
        assert_memory_equal(got, want + HEAD, lens[i] - HEAD);
        assert_true(sum == XXH3_64bits(want + HEAD, lens[i] - HEAD));
        free(got);
        free(want);
        assert_int_equal(ssd_flush(ssd, 0), ST_OK);
        assert_int_equal(ssd_get_buf(ssd, &k, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
        assert_int_equal(ssd_contains(ssd, &k), 0);
    }
    assert_int_equal(ssd_contains(ssd, &tiny), 1);
    assert_int_equal(ssd_contains(ssd, NULL), 0);
    calls = 0;
    assert_int_equal(ssd_promote_split(ssd, &tiny, head, HEAD, alloc_refuse, &calls, &sum, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(calls, 0);
    assert_int_equal(ssd_promote_split(ssd, &tiny, head, 0, alloc_refuse, &calls, &sum, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(
        ssd_promote_split(ssd, &tiny, head, SSD_HEAD_MAX + 1, alloc_refuse, &calls, &sum, NULL),
        ST_ERR_INVALID);
    assert_int_equal(calls, 0);
    assert_int_equal(ssd_flush(ssd, 0), ST_OK);
    check_value(ssd, &tiny, HEAD - 1, 7);
    ssd_stats(ssd, &st);
    assert_int_equal(st.promotions, 2);
    assert_int_equal(st.corrupt, 0);

    spill_marked_at(ssd, &in_head, "<<strata-split-marker-HEAD-01>>", 0);
    spill_marked_at(ssd, &in_rest, "<<strata-split-marker-REST-02>>", 9000);
    ssd_close(ssd);
    corrupt_on_disk(dir, "<<strata-split-marker-HEAD-01>>"); /* flips byte 3 of the head */
    corrupt_on_disk(dir, "<<strata-split-marker-REST-02>>");
    ssd = open_env(dir, 64ull << 20, 0);
    for (int i = 0; i < 2; i++) {
        void *got = NULL;

        sum = 0;
        assert_int_equal(ssd_promote_split(ssd, i == 0 ? &in_head : &in_rest, head, HEAD,
                                           alloc_malloc, &got, &sum, NULL),
                         ST_ERR_NOT_FOUND);
        assert_true(sum == 0);
        free(got);
    }
    assert_int_equal(ssd_flush(ssd, 1), ST_OK);
    ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 2);
    assert_int_equal(st.promotions, 0); /* counted since the reopen */
    /* Dropped: a second read is a plain miss. */
    assert_int_equal(ssd_get_buf(ssd, &in_head, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
    assert_int_equal(ssd_get_buf(ssd, &in_rest, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
    ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 2);
    ssd_close(ssd);
    remove_dir(dir);
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--hold-reader") == 0) {
        return hold_reader_main(argv[2]);
    }
    lg_set_level(LG_WARN);
    UNIT_RUN(cmocka_unit_test(test_key_layout), cmocka_unit_test(test_roundtrip_kinds),
             cmocka_unit_test(test_spill_promote), cmocka_unit_test(test_spill_parts),
             cmocka_unit_test(test_put_parts), cmocka_unit_test(test_removals),
             cmocka_unit_test(test_budget_lru), cmocka_unit_test(test_corrupt_value),
             cmocka_unit_test(test_promote_split), cmocka_unit_test(test_map_full),
             cmocka_unit_test(test_reopen), cmocka_unit_test(test_async_batching),
             cmocka_unit_test(test_iterate), cmocka_unit_test(test_invalid),
             cmocka_unit_test(test_disk_full), cmocka_unit_test(test_stale_reader),
             cmocka_unit_test(test_fork_guard), cmocka_unit_test(test_concurrent),
             cmocka_unit_test(test_usage_deltas));
}
