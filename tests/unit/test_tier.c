/*
 * test_tier.c - stratad's SSD tier glue (cached/tier*.c) below the daemon: the
 * daemon's values in the tier (tier_format.c), and a tier on a real LMDB
 * directory with a real store, reopened and recovered through the
 * namespace resolver, then a promote out of the T2 index.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <cmocka.h>

#include "test_store_util.h"
#include "tier_internal.h"
#include "support/unit_main.h"

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

static st_hash_t mkhash(uint8_t seed)
{
    st_hash_t h;

    for (int i = 0; i < ST_HASH_BYTES; i++) {
        h.b[i] = (uint8_t)(seed * 31 + i);
    }
    return h;
}

/* ------------------------------------------------------------ formats -- */

static void test_prefix(void **state)
{
    uint8_t p[CD_TIER_PREFIX];
    st_hash_t parent = mkhash(7), got;
    uint32_t rowb = 0;
    int has = -1;

    (void)state;
    cd_tier_prefix_put(p, &parent, 4096);
    assert_int_equal(cd_tier_prefix_get(p, &has, &got, &rowb), 0);
    assert_int_equal(has, 1);
    assert_memory_equal(got.b, parent.b, ST_HASH_BYTES);
    assert_int_equal(rowb, 4096);

    cd_tier_prefix_put(p, NULL, 1u << 24); /* a row size too large to keep: none */
    assert_int_equal(cd_tier_prefix_get(p, &has, &got, &rowb), 0);
    assert_int_equal(has, 0);
    assert_int_equal(rowb, 0);

    memset(p, 0, sizeof(p)); /* no magic */
    assert_int_equal(cd_tier_prefix_get(p, NULL, NULL, NULL), -1);
}

static void test_ns_record(void **state)
{
    uint8_t buf[CD_TIER_NS_BYTES];
    char tenant[CD_NAME_MAX + 1], model[CD_NAME_MAX + 1], longname[CD_NAME_MAX + 2];
    uint32_t bt = 0;
    size_t len;

    (void)state;
    len = cd_tier_ns_encode(buf, "acme", "hybrid", 64);
    assert_int_equal(len, 16 + 4 + 6);
    assert_int_equal(cd_tier_ns_decode(buf, len, tenant, model, &bt), 0);
    assert_string_equal(tenant, "acme");
    assert_string_equal(model, "hybrid");
    assert_int_equal(bt, 64);
    assert_int_equal(cd_tier_ns_decode(buf, len - 1, tenant, model, &bt), -2); /* lengths */
    assert_int_equal(cd_tier_ns_decode(buf, 15, tenant, model, &bt), -1);      /* no header */
    buf[0] ^= 1;
    assert_int_equal(cd_tier_ns_decode(buf, len, tenant, model, &bt), -1); /* no magic */

    memset(longname, 'x', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(cd_tier_ns_encode(buf, longname, "m", 64), 0);
}

static void test_session_record(void **state)
{
    uint8_t buf[CD_TIER_SESS_BYTES];
    cd_session_t rec = {0}, out = {0};
    uint64_t created = 0, updated = 0;

    (void)state;
    rec.head = mkhash(3);
    rec.length = 4096;
    rec.version = 9;
    rec.ttl_ms = 60000;
    rec.created_ms = 100;
    rec.updated_ms = 400;
    /* Store clock 1000 is wall clock 5,000,000: ages are kept. */
    cd_tier_session_encode(buf, &rec, 5000000, 1000);
    assert_int_equal(cd_tier_session_decode(buf, sizeof(buf), &out, &created, &updated), 0);
    assert_memory_equal(out.head.b, rec.head.b, ST_HASH_BYTES);
    assert_int_equal(out.length, 4096);
    assert_int_equal(out.version, 9);
    assert_int_equal(out.ttl_ms, 60000);
    assert_int_equal(created, 5000000 - 900);
    assert_int_equal(updated, 5000000 - 600);
    assert_int_equal(cd_tier_session_decode(buf, sizeof(buf) - 1, &out, &created, &updated), -1);
}

/* ------------------------------------------- open, recover, promote -- */

#define WIRE_ACME 0x1234ull
#define WIRE_GONE 0x5678ull

/* The test's namespace resolver: re-creates acme/m in the store and binds
 * it, as the daemon does; the tenant "gone" is not served any more. */
typedef struct resolver {
    cd_store_t *store;
    cd_tier_t *tier;
    uint32_t local;
    int calls;
    uint64_t wires[4];
    uint32_t block_tokens[4];
} resolver_t;

static cd_tier_ns_result_t resolve(void *arg, uint64_t wire_id, const char *tenant,
                                   const char *model, uint32_t block_tokens, cd_err_t *err)
{
    resolver_t *r = arg;

    if (r->calls < 4) {
        r->wires[r->calls] = wire_id;
        r->block_tokens[r->calls] = block_tokens;
    }
    r->calls++;
    if (strcmp(tenant, "gone") == 0) {
        return CD_TIER_NS_NOT_SERVED;
    }
    if (strcmp(tenant, "acme") != 0 || strcmp(model, "m") != 0 || wire_id != WIRE_ACME) {
        return CD_TIER_NS_OTHER_ID;
    }
    if (cd_store_ns_create(r->store, tenant, model, block_tokens, &r->local, err) != ST_OK) {
        return CD_TIER_NS_FAILED;
    }
    cd_tier_ns_bind(r->tier, r->local, wire_id);
    return CD_TIER_NS_OPENED;
}

/* A tier on dir and a store whose hooks point to it, recovered. */
static void start(const char *dir, resolver_t *r, cd_tier_t **t_p, cd_store_t **s_p)
{
    cd_tier_params_t p = {.dir = dir,
                          .node_id = "test-node",
                          .map_size = 64 * MiB,
                          .sync_none = 1,
                          .spill = 1,
                          .ns_open = resolve,
                          .ns_arg = r};
    cd_store_config_t c;
    cd_err_t err;

    assert_int_equal(cd_tier_open(&p, t_p), ST_OK);
    t_config(&c, 32 * MiB);
    c.evicted = cd_tier_evicted;
    c.session_expired = cd_tier_session_expired;
    c.evicted_ctx = *t_p;
    assert_int_equal(cd_store_create(&c, s_p, &err), ST_OK);
    r->store = *s_p;
    r->tier = *t_p;
    assert_int_equal(cd_tier_recover(*t_p, *s_p), ST_OK);
}

static void stop(cd_tier_t *t, cd_store_t *s)
{
    cd_tier_shutdown(t);
    cd_store_destroy(s);
    cd_tier_free(t);
}

static void test_recover_promote(void **state)
{
    char dir[] = "/tmp/st_test_tier_XXXXXX";
    resolver_t r = {0};
    cd_tier_t *t;
    cd_store_t *s;
    cd_tier_counters_t tc;
    cd_key_t key = {mkhash(1), CD_KIND_KDA, 0};
    st_hash_t sid = mkhash(2);
    cd_session_t rec, got;
    uint8_t data[1000], back[1000];
    uint64_t len = 0;
    uint32_t local;
    cd_err_t err;

    (void)state;
    for (size_t i = 0; i < sizeof(data); i++) {
        data[i] = (uint8_t)(i * 7);
    }
    assert_non_null(mkdtemp(dir));

    /* First run: an empty directory; a namespace, a KDA object, a session. */
    start(dir, &r, &t, &s);
    assert_int_equal(r.calls, 0);
    assert_int_equal(cd_store_ns_create(s, "acme", "m", 64, &local, &err), ST_OK);
    cd_tier_ns_bind(t, local, WIRE_ACME);
    assert_int_equal(cd_tier_ns_put(t, WIRE_ACME, "acme", "m", 64, &err), ST_OK);
    assert_int_equal(cd_tier_ns_put(t, WIRE_GONE, "gone", "m", 32, &err), ST_OK);
    assert_int_equal(cd_tier_put_object(t, WIRE_ACME, &key, NULL, data, sizeof(data), 1, &err),
                     ST_OK);
    assert_int_equal(cd_store_session_open(s, local, &sid, 0, &rec, &err), ST_OK);
    assert_int_equal(cd_tier_session_put(t, WIRE_ACME, &rec, 1, &err), ST_OK);
    stop(t, s);

    /* Second run: recovery asks the resolver for both records. */
    memset(&r, 0, sizeof(r));
    start(dir, &r, &t, &s);
    assert_int_equal(r.calls, 2);
    assert_true((r.wires[0] == WIRE_ACME && r.block_tokens[0] == 64 && r.wires[1] == WIRE_GONE &&
                 r.block_tokens[1] == 32) ||
                (r.wires[1] == WIRE_ACME && r.block_tokens[1] == 64 && r.wires[0] == WIRE_GONE &&
                 r.block_tokens[0] == 32));
    cd_tier_stats(t, NULL, &tc);
    assert_int_equal(tc.recovered_sessions, 1);
    assert_int_equal(tc.recovered_objects, 1);
    assert_int_equal(tc.t2_blocks, 1);
    assert_int_equal(tc.t2_objects, 1);
    assert_int_equal(cd_store_session_get(s, r.local, &sid, &got), ST_OK);
    assert_int_equal(got.version, rec.version);

    /* The KDA object is promoted out of the index, byte-exact, once. */
    assert_int_equal(cd_store_get(s, r.local, &key, back, sizeof(back), &len, NULL, &err),
                     ST_ERR_NOT_FOUND);
    assert_int_equal(cd_tier_promote(t, r.local, &key.hash), 1);
    assert_int_equal(cd_store_get(s, r.local, &key, back, sizeof(back), &len, NULL, &err), ST_OK);
    assert_int_equal(len, sizeof(data));
    assert_memory_equal(back, data, sizeof(data));
    cd_tier_stats(t, NULL, &tc);
    assert_int_equal(tc.promoted, 1);
    assert_int_equal(tc.t2_blocks, 0);
    assert_int_equal(cd_tier_promote(t, r.local, &key.hash), 0);
    assert_int_equal(cd_tier_promote(NULL, r.local, &key.hash), 0);
    stop(t, s);
    nftw(dir, rm_one, 8, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_prefix), cmocka_unit_test(test_ns_record),
             cmocka_unit_test(test_session_record), cmocka_unit_test(test_recover_promote));
}
