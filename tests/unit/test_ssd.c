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

#include "st_log.h"
#include "st_ssd.h"

/* ---- helpers -------------------------------------------------------------- */

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    return remove(path);
}

static char *make_dir(void)
{
    char *dir = strdup("/tmp/st_test_ssd_XXXXXX");

    assert_non_null(dir);
    assert_non_null(mkdtemp(dir));
    return dir;
}

static void remove_dir(char *dir)
{
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

static st_ssd_t *open_env(const char *dir, uint64_t map_size, uint64_t budget)
{
    st_ssd_params_t p = {0};
    st_ssd_t *ssd = NULL;

    p.dir = dir;
    p.map_size = map_size;
    p.spill_budget = budget;
    assert_int_equal(st_ssd_open(&p, &ssd), ST_OK);
    assert_non_null(ssd);
    return ssd;
}

static void fill(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;

    for (size_t i = 0; i < len; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (uint8_t)x;
    }
}

static st_ssd_key_t mkkey(uint64_t ns, uint64_t n, unsigned kind, uint16_t layer)
{
    st_ssd_key_t k;

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
static void check_value(st_ssd_t *ssd, const st_ssd_key_t *key, size_t len, uint64_t seed)
{
    uint8_t *want = malloc(len + 1), *got = malloc(len + 1);
    size_t got_len = 0;
    st_ssd_meta_t meta;

    assert_non_null(want);
    assert_non_null(got);
    fill(want, len, seed);
    assert_int_equal(st_ssd_get_buf(ssd, key, got, len + 1, &got_len, &meta), ST_OK);
    assert_int_equal(got_len, len);
    assert_int_equal(meta.length, len);
    assert_true(meta.checksum == XXH3_64bits(want, len));
    assert_memory_equal(got, want, len);
    free(want);
    free(got);
}

static void put_durable(st_ssd_t *ssd, const st_ssd_key_t *key, size_t len, uint64_t seed)
{
    uint8_t *buf = malloc(len + 1);

    assert_non_null(buf);
    fill(buf, len, seed);
    assert_int_equal(st_ssd_put(ssd, key, buf, len, ST_SSD_DURABLE, NULL, NULL), ST_OK);
    free(buf);
}

static void spill_copy(st_ssd_t *ssd, const st_ssd_key_t *key, size_t len, uint64_t seed)
{
    uint8_t *buf = malloc(len + 1);

    assert_non_null(buf);
    fill(buf, len, seed);
    assert_int_equal(st_ssd_spill(ssd, key, buf, len, 0, NULL, NULL), ST_OK);
    free(buf); /* copied by the tier */
}

static void *alloc_malloc(void *arg, size_t length, const st_ssd_meta_t *meta)
{
    void **slot = arg;

    *slot = malloc(length + 1);
    return *slot;
}

/* ---- tests ---------------------------------------------------------------- */

static void test_key_layout(void **state)
{
    st_ssd_key_t k = mkkey(0x0102030405060708ull, 7, ST_SSD_IDX, 0x0A0B), back;
    uint8_t b[ST_SSD_KEY_BYTES], b2[ST_SSD_KEY_BYTES];

    st_ssd_key_encode(&k, b);
    assert_int_equal(b[0], 0x01);
    assert_int_equal(b[7], 0x08);
    assert_memory_equal(b + 8, k.id.b, 16);
    assert_int_equal(b[24], ST_SSD_IDX);
    assert_int_equal(b[25], 0x0A);
    assert_int_equal(b[26], 0x0B);
    assert_int_equal(st_ssd_key_decode(b, &back), ST_OK);
    assert_true(back.ns == k.ns && back.kind == k.kind && back.layer == k.layer);
    assert_memory_equal(back.id.b, k.id.b, 16);
    b[24] = 9;
    assert_int_equal(st_ssd_key_decode(b, &back), ST_ERR_INVALID);
    /* A smaller namespace sorts first whatever the hash; a layer after the block. */
    k = mkkey(1, 0xFFFFFFFF, ST_SSD_KV, 900);
    st_ssd_key_encode(&k, b);
    k = mkkey(2, 0, ST_SSD_KV, 0);
    st_ssd_key_encode(&k, b2);
    assert_true(memcmp(b, b2, sizeof(b)) < 0);
    assert_string_equal(st_ssd_kind_name(ST_SSD_SESSION), "SESSION");
}

static void test_roundtrip_kinds(void **state)
{
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    st_ssd_key_t kda = mkkey(1, 1, ST_SSD_KDA, 3), ses = mkkey(1, 2, ST_SSD_SESSION, 0);
    st_ssd_key_t kv = mkkey(1, 1, ST_SSD_KV, 5), idx = mkkey(1, 1, ST_SSD_IDX, 5);
    st_ssd_key_t empty = mkkey(2, 9, ST_SSD_SESSION, 0), missing = mkkey(1, 77, ST_SSD_KDA, 0);
    st_ssd_stats_t st;
    size_t len;
    uint8_t small[4];

    put_durable(ssd, &kda, 100000, 11);
    put_durable(ssd, &ses, 200, 12);
    put_durable(ssd, &empty, 0, 0);
    spill_copy(ssd, &kv, 43008, 13);
    spill_copy(ssd, &idx, 8448, 14);
    assert_int_equal(st_ssd_flush(ssd, 1), ST_OK);

    check_value(ssd, &kda, 100000, 11);
    check_value(ssd, &ses, 200, 12);
    check_value(ssd, &empty, 0, 0);
    check_value(ssd, &kv, 43008, 13);
    check_value(ssd, &idx, 8448, 14);
    assert_int_equal(st_ssd_get_buf(ssd, &missing, small, sizeof(small), &len, NULL),
                     ST_ERR_NOT_FOUND);
    /* Too small a buffer: the length comes back, nothing else. */
    assert_int_equal(st_ssd_get_buf(ssd, &ses, small, sizeof(small), &len, NULL), ST_ERR_EXHAUSTED);
    assert_int_equal(len, 200);

    /* A put replaces: new bytes, still one object. */
    put_durable(ssd, &kda, 5000, 99);
    check_value(ssd, &kda, 5000, 99);
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.objects[ST_SSD_KDA], 1);
    assert_int_equal(st.bytes[ST_SSD_KDA], 5000);
    assert_int_equal(st.objects[ST_SSD_SESSION], 2);
    assert_int_equal(st.objects[ST_SSD_KV], 1);
    assert_int_equal(st.objects[ST_SSD_IDX], 1);
    assert_int_equal(st.spill_bytes, 43008 + 8448);
    assert_int_equal(st.durable_puts, 4);
    assert_int_equal(st.spills, 2);
    assert_true(st.map_used > 0 && st.map_used <= st.map_size);

    /* Deletes. */
    assert_int_equal(st_ssd_delete(ssd, &ses, ST_SSD_DURABLE, NULL, NULL), ST_OK);
    assert_int_equal(st_ssd_delete(ssd, &ses, ST_SSD_DURABLE, NULL, NULL), ST_ERR_NOT_FOUND);
    assert_int_equal(st_ssd_get_buf(ssd, &ses, small, sizeof(small), &len, NULL), ST_ERR_NOT_FOUND);
    st_ssd_close(ssd);
    remove_dir(dir);
}

static int done_ok, done_other;

static void count_done(void *arg, const st_ssd_key_t *key, st_status_t status)
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
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    uint8_t *bufs = malloc((size_t)N * LEN);
    st_ssd_stats_t st;
    st_ssd_meta_t meta;
    size_t len;
    uint8_t one;

    assert_non_null(bufs);
    done_ok = done_other = 0;
    for (int i = 0; i < N; i++) {
        st_ssd_key_t k = mkkey(3, (uint64_t)i, i % 2 ? ST_SSD_IDX : ST_SSD_KV, (uint16_t)i);

        fill(bufs + (size_t)i * LEN, LEN, 1000 + (uint64_t)i);
        /* Not copied: the buffers stay valid until count_done ran. */
        assert_int_equal(st_ssd_spill(ssd, &k, bufs + (size_t)i * LEN, LEN, 0, count_done, NULL),
                         ST_OK);
    }
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(done_ok, N);
    assert_int_equal(done_other, 0);
    for (int i = 0; i < N; i++) {
        st_ssd_key_t k = mkkey(3, (uint64_t)i, i % 2 ? ST_SSD_IDX : ST_SSD_KV, (uint16_t)i);
        void *got = NULL;

        assert_int_equal(st_ssd_promote(ssd, &k, alloc_malloc, &got, &meta), ST_OK);
        assert_non_null(got);
        assert_int_equal(meta.length, LEN);
        assert_memory_equal(got, bufs + (size_t)i * LEN, LEN);
        free(got);
    }
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    for (int i = 0; i < N; i++) {
        st_ssd_key_t k = mkkey(3, (uint64_t)i, i % 2 ? ST_SSD_IDX : ST_SSD_KV, (uint16_t)i);

        /* Promoted objects live in DRAM again: the tier dropped them. */
        assert_int_equal(st_ssd_get_buf(ssd, &k, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
    }
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.spills, N);
    assert_int_equal(st.promotions, N);
    assert_int_equal(st.objects[ST_SSD_KV] + st.objects[ST_SSD_IDX], 0);
    assert_int_equal(st.spill_bytes, 0);

    /* A promote of a durable kind keeps it. */
    st_ssd_key_t kda = mkkey(3, 1, ST_SSD_KDA, 0);
    void *got = NULL;

    put_durable(ssd, &kda, 1000, 5);
    assert_int_equal(st_ssd_promote(ssd, &kda, alloc_malloc, &got, NULL), ST_OK);
    free(got);
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    check_value(ssd, &kda, 1000, 5);
    st_ssd_close(ssd);
    free(bufs);
    remove_dir(dir);
}

/*
 * st_ssd_spill_parts: a copied head in front of bytes that are not copied.
 * What is stored is exactly the one-buffer payload head || data (the same
 * checksum, the same bytes read back, split again by st_ssd_get_split);
 * the head is copied at the call, the data read at the commit; a missing
 * head or done callback, or a head over ST_SSD_HEAD_MAX, is refused.
 */
static void test_spill_parts(void **state)
{
    enum { N = 12, LEN = 43008, HEAD = 24 };
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    uint8_t *whole = malloc((size_t)N * (HEAD + LEN)), head[HEAD], *got = malloc(HEAD + LEN);
    st_ssd_key_t k0 = mkkey(9, 0, ST_SSD_KV, 0);
    size_t got_len;
    st_ssd_meta_t meta;

    assert_non_null(whole);
    assert_non_null(got);
    done_ok = done_other = 0;
    for (int i = 0; i < N; i++) {
        st_ssd_key_t k = mkkey(9, (uint64_t)i, i % 2 ? ST_SSD_IDX : ST_SSD_KV, 3);
        uint8_t *w = whole + (size_t)i * (HEAD + LEN);

        fill(w, HEAD + LEN, 7000 + (uint64_t)i);
        memcpy(head, w, HEAD);
        assert_int_equal(
            st_ssd_spill_parts(ssd, &k, head, HEAD, w + HEAD, LEN, 0, count_done, NULL), ST_OK);
        memset(head, 0xEE, HEAD); /* copied at the call: reusing it changes nothing */
    }
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(done_ok, N);
    assert_int_equal(done_other, 0);
    for (int i = 0; i < N; i++) {
        st_ssd_key_t k = mkkey(9, (uint64_t)i, i % 2 ? ST_SSD_IDX : ST_SSD_KV, 3);
        const uint8_t *w = whole + (size_t)i * (HEAD + LEN);

        assert_int_equal(st_ssd_get_buf(ssd, &k, got, HEAD + LEN, &got_len, &meta), ST_OK);
        assert_int_equal(got_len, HEAD + LEN);
        assert_true(meta.checksum == XXH3_64bits(w, HEAD + LEN));
        assert_memory_equal(got, w, HEAD + LEN);
    }
    /* Refused, with nothing queued. */
    assert_int_equal(st_ssd_spill_parts(ssd, &k0, NULL, HEAD, got, LEN, 0, count_done, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(st_ssd_spill_parts(ssd, &k0, head, HEAD, got, LEN, 0, NULL, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(
        st_ssd_spill_parts(ssd, &k0, got, ST_SSD_HEAD_MAX + 1, got, LEN, 0, count_done, NULL),
        ST_ERR_INVALID);
    k0.kind = ST_SSD_KDA;
    assert_int_equal(st_ssd_spill_parts(ssd, &k0, head, HEAD, got, LEN, 0, count_done, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(done_ok, N);
    st_ssd_close(ssd);
    free(whole);
    free(got);
    remove_dir(dir);
}

/*
 * st_ssd_removals: unchanged by writes of new keys and by reads; grows with
 * a delete, a replaced value and an eviction by the spill budget (the
 * daemon trusts an earlier copy only while it stands still).
 */
static void test_removals(void **state)
{
    enum { LEN = 43008 };
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 4 * LEN); /* room for four */
    st_ssd_key_t k0 = mkkey(11, 0, ST_SSD_KV, 0), k1 = mkkey(11, 1, ST_SSD_KV, 0);
    uint64_t r0, r1;
    uint8_t one;
    size_t len;

    (void)state;
    r0 = st_ssd_removals(ssd);
    spill_copy(ssd, &k0, LEN, 1);
    spill_copy(ssd, &k1, LEN, 2);
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    check_value(ssd, &k0, LEN, 1);
    assert_int_equal(st_ssd_contains(ssd, &k1), 1);
    assert_true(st_ssd_removals(ssd) == r0);
    /* Replaced. */
    spill_copy(ssd, &k1, LEN, 3);
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    r1 = st_ssd_removals(ssd);
    assert_true(r1 > r0);
    check_value(ssd, &k1, LEN, 3);
    /* Deleted. */
    assert_int_equal(st_ssd_delete(ssd, &k1, ST_SSD_DURABLE, NULL, NULL), ST_OK);
    assert_true(st_ssd_removals(ssd) > r1);
    r1 = st_ssd_removals(ssd);
    /* Aged out by the budget: four more values push k0 out. */
    for (uint64_t i = 2; i < 6; i++) {
        st_ssd_key_t k = mkkey(11, i, ST_SSD_KV, 0);

        spill_copy(ssd, &k, LEN, 10 + i);
    }
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(st_ssd_get_buf(ssd, &k0, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
    assert_true(st_ssd_removals(ssd) > r1);
    st_ssd_close(ssd);
    remove_dir(dir);
}

static uint64_t evicted[64];
static int n_evicted;

static void record_evict(void *arg, const st_ssd_key_t *key, uint64_t length)
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
    st_ssd_params_t p = {0};
    st_ssd_t *ssd = NULL;
    st_ssd_stats_t st;
    const uint64_t want[5] = {0, 1, 3, 4, 5};
    uint8_t one;
    size_t len;

    p.dir = dir;
    p.map_size = 64ull << 20;
    p.spill_budget = 10 * LEN;
    p.on_evict = record_evict;
    assert_int_equal(st_ssd_open(&p, &ssd), ST_OK);
    n_evicted = 0;
    for (uint64_t i = 0; i < 10; i++) {
        st_ssd_key_t k = mkkey(4, i, ST_SSD_KV, 0);

        spill_copy(ssd, &k, LEN, i);
        /* One batch each, so the LRU order is the order of the calls. */
        assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    }
    assert_int_equal(n_evicted, 0);
    /* Spilling 2 again makes it the newest. */
    st_ssd_key_t k2 = mkkey(4, 2, ST_SSD_KV, 0);
    spill_copy(ssd, &k2, LEN, 102);
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    for (uint64_t i = 10; i < 15; i++) {
        st_ssd_key_t k = mkkey(4, i, ST_SSD_KV, 0);

        spill_copy(ssd, &k, LEN, i);
    }
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);

    assert_int_equal(n_evicted, 5);
    assert_memory_equal(evicted, want, sizeof(want));
    for (uint64_t i = 0; i < 15; i++) {
        st_ssd_key_t k = mkkey(4, i, ST_SSD_KV, 0);
        int gone = i == 0 || i == 1 || i == 3 || i == 4 || i == 5;

        if (gone) {
            assert_int_equal(st_ssd_get_buf(ssd, &k, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
        } else {
            check_value(ssd, &k, LEN, i == 2 ? 102 : i);
        }
    }
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.evictions, 5);
    assert_int_equal(st.evicted_bytes, 5 * LEN);
    assert_int_equal(st.spill_bytes, 10 * LEN);
    assert_int_equal(st.objects[ST_SSD_KV], 10);
    /* A payload over the whole budget is refused at once. */
    uint8_t *big = calloc(1, 11 * LEN);
    assert_non_null(big);
    assert_int_equal(st_ssd_spill(ssd, &k2, big, 11 * LEN, 0, NULL, NULL), ST_ERR_EXHAUSTED);
    free(big);
    st_ssd_close(ssd);
    remove_dir(dir);
}

/* on_usage: bytes per namespace, summed over every commit's deltas. */
static int64_t usage_ns[8];

static void record_usage(void *arg, const st_ssd_key_t *key, int64_t delta)
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
    st_ssd_params_t p = {0};
    st_ssd_t *ssd = NULL;
    st_ssd_stats_t st;

    (void)state;
    p.dir = dir;
    p.map_size = 64ull << 20;
    p.spill_budget = 5 * LEN;
    p.on_usage = record_usage;
    assert_int_equal(st_ssd_open(&p, &ssd), ST_OK);
    memset(usage_ns, 0, sizeof(usage_ns));
    for (uint64_t i = 0; i < 4; i++) {
        st_ssd_key_t k1 = mkkey(1, i, ST_SSD_KV, 0), k2 = mkkey(2, i, ST_SSD_IDX, 1);

        spill_copy(ssd, &k1, LEN, i);
        spill_copy(ssd, &k2, LEN / 2, i);
    }
    st_ssd_key_t d = mkkey(3, 0, ST_SSD_KDA, 0);
    put_durable(ssd, &d, 1000, 7);
    put_durable(ssd, &d, 3000, 8); /* replaced: -1000 +3000 */
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    /* 4 x 4096 + 4 x 2048 spilled over a budget of 5 x 4096: the oldest went. */
    st_ssd_stats(ssd, &st);
    assert_true(st.evictions > 0);
    assert_int_equal(usage_ns[1] + usage_ns[2], st.bytes[ST_SSD_KV] + st.bytes[ST_SSD_IDX]);
    assert_int_equal(usage_ns[3], 3000);
    st_ssd_key_t k = mkkey(1, 3, ST_SSD_KV, 0);
    int64_t before = usage_ns[1];
    assert_int_equal(st_ssd_delete(ssd, &k, ST_SSD_DURABLE, NULL, NULL), ST_OK);
    assert_int_equal(usage_ns[1], before - LEN);
    assert_int_equal(st_ssd_delete(ssd, &d, ST_SSD_DURABLE, NULL, NULL), ST_OK);
    assert_int_equal(usage_ns[3], 0);
    st_ssd_stats(ssd, &st);
    assert_int_equal(usage_ns[1], st.bytes[ST_SSD_KV]);
    assert_int_equal(usage_ns[2], st.bytes[ST_SSD_IDX]);
    st_ssd_close(ssd);
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

static void put_marked(st_ssd_t *ssd, const st_ssd_key_t *key, const char *marker, int spill)
{
    uint8_t buf[20000];

    fill(buf, sizeof(buf), 4242);
    memcpy(buf + 7000, marker, strlen(marker));
    if (spill) {
        assert_int_equal(st_ssd_spill(ssd, key, buf, sizeof(buf), 0, NULL, NULL), ST_OK);
    } else {
        assert_int_equal(st_ssd_put(ssd, key, buf, sizeof(buf), ST_SSD_DURABLE, NULL, NULL), ST_OK);
    }
}

static void test_corrupt_value(void **state)
{
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    st_ssd_key_t kda = mkkey(5, 1, ST_SSD_KDA, 0), kv = mkkey(5, 1, ST_SSD_KV, 2);
    st_ssd_key_t good = mkkey(5, 2, ST_SSD_KDA, 0);
    uint8_t buf[20000];
    st_ssd_stats_t st;
    size_t len;
    void *got = NULL;

    put_marked(ssd, &kda, "<<strata-test-marker-KDA-0001>>", 0);
    put_marked(ssd, &kv, "<<strata-test-marker-KV-00002>>", 1);
    put_durable(ssd, &good, 3000, 77);
    st_ssd_close(ssd);

    corrupt_on_disk(dir, "<<strata-test-marker-KDA-0001>>");
    corrupt_on_disk(dir, "<<strata-test-marker-KV-00002>>");

    ssd = open_env(dir, 64ull << 20, 0);
    assert_int_equal(st_ssd_get_buf(ssd, &kda, buf, sizeof(buf), &len, NULL), ST_ERR_NOT_FOUND);
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 1);
    assert_int_equal(st_ssd_promote(ssd, &kv, alloc_malloc, &got, NULL), ST_ERR_NOT_FOUND);
    free(got);
    assert_int_equal(st_ssd_flush(ssd, 1), ST_OK);
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 2);
    assert_int_equal(st.promotions, 0);
    /* Removed: a second read is a plain miss, not a second detection. */
    assert_int_equal(st_ssd_get_buf(ssd, &kda, buf, sizeof(buf), &len, NULL), ST_ERR_NOT_FOUND);
    assert_int_equal(st_ssd_get_buf(ssd, &kv, buf, sizeof(buf), &len, NULL), ST_ERR_NOT_FOUND);
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 2);
    assert_int_equal(st.objects[ST_SSD_KDA], 1);
    assert_int_equal(st.objects[ST_SSD_KV], 0);
    check_value(ssd, &good, 3000, 77);
    st_ssd_close(ssd);
    remove_dir(dir);
}

static void *alloc_refuse(void *arg, size_t length, const st_ssd_meta_t *meta)
{
    int *calls = arg;

    (*calls)++;
    return NULL;
}

/* Spills a value of 20000 bytes with marker at offset at. */
static void spill_marked_at(st_ssd_t *ssd, const st_ssd_key_t *key, const char *marker, size_t at)
{
    uint8_t buf[20000];

    fill(buf, sizeof(buf), 4343);
    memcpy(buf + at, marker, strlen(marker));
    assert_int_equal(st_ssd_spill(ssd, key, buf, sizeof(buf), 0, NULL, NULL), ST_OK);
}

/*
 * st_ssd_promote_split: the head and the rest land apart, large values
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
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    st_ssd_key_t tiny = mkkey(6, 9, ST_SSD_KV, 0);
    st_ssd_key_t in_head = mkkey(6, 10, ST_SSD_KV, 0), in_rest = mkkey(6, 11, ST_SSD_IDX, 3);
    uint8_t head[HEAD], one;
    st_ssd_meta_t meta;
    st_ssd_stats_t st;
    uint64_t sum;
    size_t len;
    int calls = 0;

    for (int i = 0; i < 2; i++) {
        st_ssd_key_t k = mkkey(6, (uint64_t)i, ST_SSD_KV, (uint16_t)i);

        spill_copy(ssd, &k, lens[i], 600 + (uint64_t)i);
    }
    spill_copy(ssd, &tiny, HEAD - 1, 7);
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    for (int i = 0; i < 2; i++) {
        st_ssd_key_t k = mkkey(6, (uint64_t)i, ST_SSD_KV, (uint16_t)i);
        uint8_t *want = malloc(lens[i]);
        void *got = NULL;

        assert_non_null(want);
        fill(want, lens[i], 600 + (uint64_t)i);
        calls = 0;
        assert_int_equal(
            st_ssd_promote_split(ssd, &k, head, HEAD, alloc_refuse, &calls, &sum, NULL),
            ST_ERR_NOMEM);
        assert_int_equal(calls, 1);
        assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
        check_value(ssd, &k, lens[i], 600 + (uint64_t)i); /* still there, intact */

        /* st_ssd_get_split: the same bytes and sums, and the value stays. */
        sum = 0;
        assert_int_equal(st_ssd_get_split(ssd, &k, head, HEAD, alloc_malloc, &got, &sum, &meta),
                         ST_OK);
        assert_memory_equal(head, want, HEAD);
        assert_memory_equal(got, want + HEAD, lens[i] - HEAD);
        assert_true(sum == XXH3_64bits(want + HEAD, lens[i] - HEAD));
        free(got);
        got = NULL;
        assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
        assert_int_equal(st_ssd_contains(ssd, &k), 1);
        check_value(ssd, &k, lens[i], 600 + (uint64_t)i);

        sum = 0;
        assert_int_equal(st_ssd_promote_split(ssd, &k, head, HEAD, alloc_malloc, &got, &sum, &meta),
                         ST_OK);
        assert_non_null(got);
        assert_int_equal(meta.length, lens[i]);
        assert_true(meta.checksum == XXH3_64bits(want, lens[i]));
        assert_memory_equal(head, want, HEAD);
        assert_memory_equal(got, want + HEAD, lens[i] - HEAD);
        assert_true(sum == XXH3_64bits(want + HEAD, lens[i] - HEAD));
        free(got);
        free(want);
        assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
        assert_int_equal(st_ssd_get_buf(ssd, &k, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
        assert_int_equal(st_ssd_contains(ssd, &k), 0);
    }
    assert_int_equal(st_ssd_contains(ssd, &tiny), 1);
    assert_int_equal(st_ssd_contains(ssd, NULL), 0);
    calls = 0;
    assert_int_equal(st_ssd_promote_split(ssd, &tiny, head, HEAD, alloc_refuse, &calls, &sum, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(calls, 0);
    assert_int_equal(st_ssd_promote_split(ssd, &tiny, head, 0, alloc_refuse, &calls, &sum, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(st_ssd_promote_split(ssd, &tiny, head, ST_SSD_HEAD_MAX + 1, alloc_refuse,
                                          &calls, &sum, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(calls, 0);
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    check_value(ssd, &tiny, HEAD - 1, 7);
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.promotions, 2);
    assert_int_equal(st.corrupt, 0);

    spill_marked_at(ssd, &in_head, "<<strata-split-marker-HEAD-01>>", 0);
    spill_marked_at(ssd, &in_rest, "<<strata-split-marker-REST-02>>", 9000);
    st_ssd_close(ssd);
    corrupt_on_disk(dir, "<<strata-split-marker-HEAD-01>>"); /* flips byte 3 of the head */
    corrupt_on_disk(dir, "<<strata-split-marker-REST-02>>");
    ssd = open_env(dir, 64ull << 20, 0);
    for (int i = 0; i < 2; i++) {
        void *got = NULL;

        sum = 0;
        assert_int_equal(st_ssd_promote_split(ssd, i == 0 ? &in_head : &in_rest, head, HEAD,
                                              alloc_malloc, &got, &sum, NULL),
                         ST_ERR_NOT_FOUND);
        assert_true(sum == 0);
        free(got);
    }
    assert_int_equal(st_ssd_flush(ssd, 1), ST_OK);
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 2);
    assert_int_equal(st.promotions, 0); /* counted since the reopen */
    /* Dropped: a second read is a plain miss. */
    assert_int_equal(st_ssd_get_buf(ssd, &in_head, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
    assert_int_equal(st_ssd_get_buf(ssd, &in_rest, &one, 1, &len, NULL), ST_ERR_NOT_FOUND);
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.corrupt, 2);
    st_ssd_close(ssd);
    remove_dir(dir);
}

static void test_map_full(void **state)
{
    enum { LEN = 65536, MAX = 64 };
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 1ull << 20, 0);
    uint8_t *buf = malloc(LEN);
    st_ssd_stats_t st;
    st_status_t status = ST_OK;
    int n = 0;

    assert_non_null(buf);
    for (n = 0; n < MAX; n++) {
        st_ssd_key_t k = mkkey(6, (uint64_t)n, ST_SSD_KDA, 0);

        fill(buf, LEN, (uint64_t)n);
        status = st_ssd_put(ssd, &k, buf, LEN, ST_SSD_DURABLE, NULL, NULL);
        if (status != ST_OK) {
            break;
        }
    }
    assert_int_equal(status, ST_ERR_EXHAUSTED);
    assert_true(n > 2);
    st_ssd_stats(ssd, &st);
    assert_true(st.map_full >= 1);
    assert_int_equal(st.objects[ST_SSD_KDA], (uint64_t)n);
    /* Nothing of the refused write is there; everything before it reads back. */
    st_ssd_key_t failed = mkkey(6, (uint64_t)n, ST_SSD_KDA, 0);
    size_t len;
    assert_int_equal(st_ssd_get_buf(ssd, &failed, buf, LEN, &len, NULL), ST_ERR_NOT_FOUND);
    for (int i = 0; i < n; i++) {
        st_ssd_key_t k = mkkey(6, (uint64_t)i, ST_SSD_KDA, 0);

        check_value(ssd, &k, LEN, (uint64_t)i);
    }
    /* A queued put reports the same through its callback. */
    done_ok = done_other = 0;
    fill(buf, LEN, 999);
    assert_int_equal(st_ssd_put(ssd, &failed, buf, LEN, 0, count_done, NULL), ST_OK);
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    assert_int_equal(done_other, 1);
    /* Deleting makes room again (LMDB reuses freed pages from the second
     * transaction after the one that freed them). */
    for (uint64_t i = 0; i < 2; i++) {
        st_ssd_key_t del = mkkey(6, i, ST_SSD_KDA, 0);

        assert_int_equal(st_ssd_delete(ssd, &del, ST_SSD_DURABLE, NULL, NULL), ST_OK);
    }
    put_durable(ssd, &failed, 4096, 1234);
    check_value(ssd, &failed, 4096, 1234);
    st_ssd_close(ssd);
    remove_dir(dir);

    /* Spilled data gives way to durable writes when the map is full. */
    dir = make_dir();
    ssd = open_env(dir, 2ull << 20, 1ull << 30);
    for (int i = 0; i < 100; i++) {
        st_ssd_key_t k = mkkey(7, (uint64_t)i, ST_SSD_KV, 0);

        spill_copy(ssd, &k, LEN, (uint64_t)i);
        assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    }
    st_ssd_stats(ssd, &st);
    assert_true(st.evictions > 0);
    assert_int_equal(st.spill_failed, 0);
    st_ssd_key_t kda = mkkey(7, 1, ST_SSD_KDA, 0);
    put_durable(ssd, &kda, 4 * LEN, 55);
    check_value(ssd, &kda, 4 * LEN, 55);
    st_ssd_key_t newest = mkkey(7, 99, ST_SSD_KV, 0);
    check_value(ssd, &newest, LEN, 99);
    st_ssd_close(ssd);
    free(buf);
    remove_dir(dir);
}

static void test_reopen(void **state)
{
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    st_ssd_stats_t st;
    st_ssd_meta_t m1, m2;
    uint8_t b[2048];
    size_t len;

    for (uint64_t i = 0; i < 50; i++) {
        st_ssd_key_t kd = mkkey(8, i, ST_SSD_KDA, 1), kv = mkkey(8, i, ST_SSD_KV, 1);

        put_durable(ssd, &kd, 1000 + i, i);
        spill_copy(ssd, &kv, 2000 + i, 500 + i);
    }
    st_ssd_key_t k0 = mkkey(8, 0, ST_SSD_KDA, 1);
    assert_int_equal(st_ssd_get_buf(ssd, &k0, NULL, 0, &len, &m1), ST_ERR_EXHAUSTED);
    assert_int_equal(len, 1000);
    assert_int_equal(st_ssd_get_buf(ssd, &k0, b, sizeof(b), &len, &m1), ST_OK);
    st_ssd_close(ssd); /* commits the queued spills */

    ssd = open_env(dir, 64ull << 20, 0);
    for (uint64_t i = 0; i < 50; i++) {
        st_ssd_key_t kd = mkkey(8, i, ST_SSD_KDA, 1), kv = mkkey(8, i, ST_SSD_KV, 1);

        check_value(ssd, &kd, 1000 + i, i);
        check_value(ssd, &kv, 2000 + i, 500 + i);
    }
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.objects[ST_SSD_KDA], 50);
    assert_int_equal(st.objects[ST_SSD_KV], 50);
    assert_int_equal(st.bytes[ST_SSD_KDA], 50 * 1000 + 49 * 50 / 2);
    /* The write sequence continues across opens. */
    put_durable(ssd, &k0, 8, 1);
    assert_int_equal(st_ssd_get_buf(ssd, &k0, b, sizeof(b), &len, &m2), ST_OK);
    assert_true(m2.seq > m1.seq);
    assert_true(m2.flags & ST_SSD_DURABLE);
    st_ssd_close(ssd);
    remove_dir(dir);
}

static void test_async_batching(void **state)
{
    enum { N = 1000, LEN = 1024 };
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    st_ssd_stats_t before, after;
    uint8_t buf[LEN];
    st_ssd_params_t p = {0};

    st_ssd_stats(ssd, &before);
    st_ssd_pause(ssd, 1);
    for (uint64_t i = 0; i < N; i++) {
        st_ssd_key_t k = mkkey(9, i, i % 2 ? ST_SSD_SESSION : ST_SSD_KDA, 0);

        fill(buf, LEN, i);
        assert_int_equal(st_ssd_put(ssd, &k, buf, LEN, 0, NULL, NULL), ST_OK);
    }
    st_ssd_stats(ssd, &after);
    assert_int_equal(after.txns, before.txns); /* held: nothing committed yet */
    st_ssd_pause(ssd, 0);
    assert_int_equal(st_ssd_flush(ssd, 1), ST_OK);
    st_ssd_stats(ssd, &after);
    /* 1000 puts (1 MB) fit one batch; the flush barrier may need one more. */
    assert_true(after.txns - before.txns <= 2);
    assert_int_equal(after.puts, N);
    assert_int_equal(after.durable_puts, 0);
    for (uint64_t i = 0; i < N; i++) {
        st_ssd_key_t k = mkkey(9, i, i % 2 ? ST_SSD_SESSION : ST_SSD_KDA, 0);

        check_value(ssd, &k, LEN, i);
    }
    st_ssd_close(ssd);
    remove_dir(dir);

    /* A full queue: NOWAIT callers are told, not blocked. */
    dir = make_dir();
    p.dir = dir;
    p.map_size = 16ull << 20;
    p.queue_max = 8;
    assert_int_equal(st_ssd_open(&p, &ssd), ST_OK);
    st_ssd_pause(ssd, 1);
    for (uint64_t i = 0; i < 8; i++) {
        st_ssd_key_t k = mkkey(10, i, ST_SSD_KV, 0);

        assert_int_equal(st_ssd_spill(ssd, &k, buf, 64, ST_SSD_NOWAIT, NULL, NULL), ST_OK);
    }
    st_ssd_key_t k9 = mkkey(10, 9, ST_SSD_KV, 0);
    assert_int_equal(st_ssd_spill(ssd, &k9, buf, 64, ST_SSD_NOWAIT, NULL, NULL), ST_ERR_BUSY);
    st_ssd_stats(ssd, &after);
    assert_int_equal(after.spill_failed, 1);
    st_ssd_pause(ssd, 0);
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    st_ssd_stats(ssd, &after);
    assert_int_equal(after.objects[ST_SSD_KV], 8);
    st_ssd_close(ssd);
    remove_dir(dir);
}

typedef struct iter_state {
    uint8_t prev[ST_SSD_KEY_BYTES];
    uint64_t n;
    uint64_t per_kind[ST_SSD_KIND_MAX_];
    int ordered;
    int checks_ok;
    uint64_t stop_after;
} iter_state_t;

static int iter_cb(void *arg, const st_ssd_key_t *key, const st_ssd_meta_t *meta)
{
    iter_state_t *s = arg;
    uint8_t kb[ST_SSD_KEY_BYTES];
    uint8_t buf[4096];
    uint64_t i = 0;

    st_ssd_key_encode(key, kb);
    if (s->n > 0 && memcmp(s->prev, kb, sizeof(kb)) >= 0) {
        s->ordered = 0;
    }
    memcpy(s->prev, kb, sizeof(kb));
    for (int b = 7; b >= 0; b--) {
        i = (i << 8) | key->id.b[b];
    }
    /* Every object was written as 100 + i bytes from seed ns * 1000 + i. */
    fill(buf, 100 + i, key->ns * 1000 + i + key->kind);
    if (meta->length != 100 + i || meta->checksum != XXH3_64bits(buf, 100 + i)) {
        s->checks_ok = 0;
    }
    s->per_kind[key->kind]++;
    s->n++;
    return s->stop_after != 0 && s->n >= s->stop_after;
}

static void test_iterate(void **state)
{
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    iter_state_t s;
    uint64_t count = 0;
    uint8_t buf[4096];

    /* Written out of order, namespaces interleaved. */
    for (uint64_t i = 30; i-- > 0;) {
        for (uint64_t ns = 3; ns >= 1; ns--) {
            for (unsigned kind = ST_SSD_KV; kind <= ST_SSD_SESSION; kind++) {
                st_ssd_key_t k = mkkey(ns, i, kind, (uint16_t)(i % 3));

                fill(buf, 100 + i, ns * 1000 + i + kind);
                if (kind == ST_SSD_KV || kind == ST_SSD_IDX) {
                    assert_int_equal(st_ssd_spill(ssd, &k, buf, 100 + i, 0, NULL, NULL), ST_OK);
                } else {
                    assert_int_equal(st_ssd_put(ssd, &k, buf, 100 + i, 0, NULL, NULL), ST_OK);
                }
            }
        }
    }
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    memset(&s, 0, sizeof(s));
    s.ordered = s.checks_ok = 1;
    assert_int_equal(st_ssd_iterate(ssd, iter_cb, &s, &count), ST_OK);
    assert_int_equal(count, 360);
    assert_int_equal(s.n, 360);
    assert_true(s.ordered);
    assert_true(s.checks_ok);
    for (unsigned kind = ST_SSD_KV; kind <= ST_SSD_SESSION; kind++) {
        assert_int_equal(s.per_kind[kind], 90);
    }
    memset(&s, 0, sizeof(s));
    s.ordered = s.checks_ok = 1;
    s.stop_after = 7;
    assert_int_equal(st_ssd_iterate(ssd, iter_cb, &s, &count), ST_OK);
    assert_int_equal(count, 7);
    st_ssd_close(ssd);
    remove_dir(dir);
}

static void test_invalid(void **state)
{
    char *dir = make_dir();
    char path[512];
    st_ssd_params_t p = {0};
    st_ssd_t *ssd = NULL;
    st_ssd_key_t kv = mkkey(1, 1, ST_SSD_KV, 0), kda = mkkey(1, 1, ST_SSD_KDA, 0);
    st_ssd_key_t bad = mkkey(1, 1, 9, 0);
    uint8_t b[8] = {0};
    size_t len;
    int fd;

    assert_int_equal(st_ssd_open(NULL, &ssd), ST_ERR_INVALID);
    assert_int_equal(st_ssd_open(&p, &ssd), ST_ERR_INVALID);
    snprintf(path, sizeof(path), "%s/no/such/parent", dir);
    p.dir = path;
    assert_int_equal(st_ssd_open(&p, &ssd), ST_ERR_IO);
    snprintf(path, sizeof(path), "%s/plainfile", dir);
    fd = open(path, O_CREAT | O_WRONLY, 0600);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(st_ssd_open(&p, &ssd), ST_ERR_IO);
    p.dir = dir;
    p.map_size = 4096;
    assert_int_equal(st_ssd_open(&p, &ssd), ST_ERR_INVALID);
    assert_null(ssd);

    ssd = open_env(dir, 16ull << 20, 0);
    assert_int_equal(st_ssd_put(ssd, &kv, b, sizeof(b), ST_SSD_DURABLE, NULL, NULL),
                     ST_ERR_INVALID);
    assert_int_equal(st_ssd_spill(ssd, &kda, b, sizeof(b), 0, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(st_ssd_put(ssd, &bad, b, sizeof(b), 0, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(st_ssd_put(ssd, &kda, NULL, 5, 0, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(st_ssd_get_buf(ssd, &bad, b, sizeof(b), &len, NULL), ST_ERR_INVALID);
    assert_int_equal(st_ssd_delete(ssd, &bad, 0, NULL, NULL), ST_ERR_INVALID);
    assert_int_equal(st_ssd_iterate(ssd, NULL, NULL, NULL), ST_ERR_INVALID);
    st_ssd_close(ssd);
    st_ssd_close(NULL);
    remove_dir(dir);
}

/* The disk refuses more bytes (a file size limit stands in for a full disk). */
static void test_disk_full(void **state)
{
    enum { LEN = 65536 };
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 256ull << 20, 0);
    char path[512];
    struct stat sb;
    struct rlimit old, lim;
    st_status_t status = ST_OK;
    st_ssd_stats_t st;
    uint8_t *buf = malloc(LEN);
    int n;

    assert_non_null(buf);
    for (n = 0; n < 4; n++) {
        st_ssd_key_t k = mkkey(11, (uint64_t)n, ST_SSD_KDA, 0);

        put_durable(ssd, &k, LEN, (uint64_t)n);
    }
    snprintf(path, sizeof(path), "%s/data.mdb", dir);
    assert_int_equal(stat(path, &sb), 0);
    signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)sb.st_size + 512 * 1024;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    for (; n < 64; n++) {
        st_ssd_key_t k = mkkey(11, (uint64_t)n, ST_SSD_KDA, 0);

        fill(buf, LEN, (uint64_t)n);
        status = st_ssd_put(ssd, &k, buf, LEN, ST_SSD_DURABLE, NULL, NULL);
        if (status != ST_OK) {
            break;
        }
    }
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, SIG_DFL);
    assert_int_equal(status, ST_ERR_EXHAUSTED);
    st_ssd_stats(ssd, &st);
    assert_true(st.write_errors >= 1);
    assert_int_equal(st.objects[ST_SSD_KDA], (uint64_t)n);
    /* Reads keep working; the refused write left nothing. */
    for (int i = 0; i < n; i++) {
        st_ssd_key_t k = mkkey(11, (uint64_t)i, ST_SSD_KDA, 0);

        check_value(ssd, &k, LEN, (uint64_t)i);
    }
    st_ssd_key_t failed = mkkey(11, (uint64_t)n, ST_SSD_KDA, 0);
    size_t len;
    assert_int_equal(st_ssd_get_buf(ssd, &failed, buf, LEN, &len, NULL), ST_ERR_NOT_FOUND);
    /* With room again, writes succeed, and everything survives a reopen. */
    put_durable(ssd, &failed, LEN, 4321);
    st_ssd_close(ssd);
    ssd = open_env(dir, 256ull << 20, 0);
    check_value(ssd, &failed, LEN, 4321);
    st_ssd_key_t first = mkkey(11, 0, ST_SSD_KDA, 0);
    check_value(ssd, &first, LEN, 0);
    st_ssd_close(ssd);
    free(buf);
    remove_dir(dir);
}

/*
 * A process that died inside a read transaction leaves a reader slot with
 * its pid, which a live environment must clear. The helper is this binary
 * run again (fork + exec, so it inherits no environment): it opens the
 * environment with raw LMDB, begins a read transaction and exits.
 */
static int hold_reader_main(const char *dir)
{
    MDB_env *env;
    MDB_txn *txn;

    if (mdb_env_create(&env) != 0 || mdb_env_set_maxdbs(env, 8) != 0 ||
        mdb_env_open(env, dir, MDB_NOTLS, 0640) != 0 ||
        mdb_txn_begin(env, NULL, MDB_RDONLY, &txn) != 0) {
        return 1;
    }
    _exit(0); /* dies holding the read transaction */
}

static void test_stale_reader(void **state)
{
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 16ull << 20, 0);
    char *argv[] = {"/proc/self/exe", "--hold-reader", dir, NULL};
    int wstatus, cleared = -1;
    st_ssd_stats_t st;
    pid_t pid;

    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        execv("/proc/self/exe", argv);
        _exit(127);
    }
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    assert_int_equal(st_ssd_reader_check(ssd, &cleared), ST_OK);
    assert_int_equal(cleared, 1);
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.stale_readers, 1);
    assert_int_equal(st_ssd_reader_check(ssd, &cleared), ST_OK);
    assert_int_equal(cleared, 0);
    st_ssd_close(ssd);
    remove_dir(dir);
}

/* A child that inherited an open environment is refused, and touches nothing. */
static void test_fork_guard(void **state)
{
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 16ull << 20, 0);
    st_ssd_key_t k = mkkey(12, 1, ST_SSD_KDA, 0);
    int wstatus;
    pid_t pid;

    put_durable(ssd, &k, 100, 1);
    st_ssd_flush(ssd, 0);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint8_t b[128];
        size_t len;
        int log_fd = open("/dev/null", O_WRONLY);

        st_log_set_fd(log_fd);
        _exit(st_ssd_get_buf(ssd, &k, b, sizeof(b), &len, NULL) == ST_ERR_INVALID &&
                      st_ssd_put(ssd, &k, b, 10, 0, NULL, NULL) == ST_ERR_INVALID
                  ? 0
                  : 1);
    }
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    check_value(ssd, &k, 100, 1);
    st_ssd_close(ssd);
    remove_dir(dir);
}

/* Several writers (durable puts, spills) and readers at once. */
enum { CW_THREADS = 4, CW_PUTS = 100, CW_LEN = 2048 };

typedef struct cw_arg {
    st_ssd_t *ssd;
    int id;
    _Atomic int *acked; /* per writer: durable puts acknowledged so far */
    _Atomic int *stop;
    int failures;
} cw_arg_t;

static void *cw_writer(void *p)
{
    cw_arg_t *a = p;
    uint8_t buf[CW_LEN];

    for (int i = 0; i < CW_PUTS; i++) {
        st_ssd_key_t k = mkkey(20, (uint64_t)(a->id * 1000 + i), ST_SSD_KDA, 0);
        st_ssd_key_t kv = mkkey(20, (uint64_t)(a->id * 1000 + i), ST_SSD_KV, 1);

        fill(buf, CW_LEN, (uint64_t)(a->id * 1000 + i));
        if (st_ssd_put(a->ssd, &k, buf, CW_LEN, ST_SSD_DURABLE, NULL, NULL) != ST_OK ||
            st_ssd_spill(a->ssd, &kv, buf, CW_LEN, 0, NULL, NULL) != ST_OK) {
            a->failures++;
        }
        atomic_store(&a->acked[a->id], i + 1);
    }
    return NULL;
}

static void *cw_reader(void *p)
{
    cw_arg_t *a = p;
    uint8_t want[CW_LEN], got[CW_LEN];
    uint64_t x = 12345 + (uint64_t)a->id;

    while (!atomic_load(a->stop)) {
        int w, n, i;
        size_t len;

        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        w = (int)(x % CW_THREADS);
        n = atomic_load(&a->acked[w]);
        if (n == 0) {
            continue;
        }
        i = (int)((x >> 8) % (uint64_t)n);
        st_ssd_key_t k = mkkey(20, (uint64_t)(w * 1000 + i), ST_SSD_KDA, 0);
        fill(want, CW_LEN, (uint64_t)(w * 1000 + i));
        /* An acknowledged durable put is readable, with its bytes, at once. */
        if (st_ssd_get_buf(a->ssd, &k, got, sizeof(got), &len, NULL) != ST_OK || len != CW_LEN ||
            memcmp(want, got, CW_LEN) != 0) {
            a->failures++;
        }
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    char *dir = make_dir();
    st_ssd_t *ssd = open_env(dir, 64ull << 20, 0);
    pthread_t wt[CW_THREADS], rt[2];
    cw_arg_t wa[CW_THREADS], ra[2];
    _Atomic int acked[CW_THREADS], stop = 0;
    st_ssd_stats_t st;

    for (int i = 0; i < CW_THREADS; i++) {
        atomic_init(&acked[i], 0);
    }
    for (int i = 0; i < 2; i++) {
        ra[i] = (cw_arg_t){ssd, i, acked, &stop, 0};
        assert_int_equal(pthread_create(&rt[i], NULL, cw_reader, &ra[i]), 0);
    }
    for (int i = 0; i < CW_THREADS; i++) {
        wa[i] = (cw_arg_t){ssd, i, acked, &stop, 0};
        assert_int_equal(pthread_create(&wt[i], NULL, cw_writer, &wa[i]), 0);
    }
    for (int i = 0; i < CW_THREADS; i++) {
        pthread_join(wt[i], NULL);
        assert_int_equal(wa[i].failures, 0);
    }
    atomic_store(&stop, 1);
    for (int i = 0; i < 2; i++) {
        pthread_join(rt[i], NULL);
        assert_int_equal(ra[i].failures, 0);
    }
    assert_int_equal(st_ssd_flush(ssd, 0), ST_OK);
    st_ssd_stats(ssd, &st);
    assert_int_equal(st.durable_puts, CW_THREADS * CW_PUTS);
    assert_int_equal(st.spills, CW_THREADS * CW_PUTS);
    assert_int_equal(st.objects[ST_SSD_KDA], CW_THREADS * CW_PUTS);
    assert_int_equal(st.objects[ST_SSD_KV], CW_THREADS * CW_PUTS);
    assert_int_equal(st.corrupt, 0);
    for (int w = 0; w < CW_THREADS; w++) {
        for (int i = 0; i < CW_PUTS; i += 7) {
            st_ssd_key_t kv = mkkey(20, (uint64_t)(w * 1000 + i), ST_SSD_KV, 1);

            check_value(ssd, &kv, CW_LEN, (uint64_t)(w * 1000 + i));
        }
    }
    st_ssd_close(ssd);
    remove_dir(dir);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_key_layout),     cmocka_unit_test(test_roundtrip_kinds),
        cmocka_unit_test(test_spill_promote),  cmocka_unit_test(test_spill_parts),
        cmocka_unit_test(test_removals),       cmocka_unit_test(test_budget_lru),
        cmocka_unit_test(test_corrupt_value),  cmocka_unit_test(test_promote_split),
        cmocka_unit_test(test_map_full),       cmocka_unit_test(test_reopen),
        cmocka_unit_test(test_async_batching), cmocka_unit_test(test_iterate),
        cmocka_unit_test(test_invalid),        cmocka_unit_test(test_disk_full),
        cmocka_unit_test(test_stale_reader),   cmocka_unit_test(test_fork_guard),
        cmocka_unit_test(test_concurrent),     cmocka_unit_test(test_usage_deltas),
    };

    if (argc == 3 && strcmp(argv[1], "--hold-reader") == 0) {
        return hold_reader_main(argv[2]);
    }
    st_log_set_level(ST_LOG_WARN);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
