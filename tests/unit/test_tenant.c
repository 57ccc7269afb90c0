/* test_tenant.c - tenants' quotas in the store (cached/core/quota.c, cached/core/pin.c):
 * one tenant's pins and leases leave room for another's puts, a memory quota
 * evicts the tenant's own blocks, eviction under the process-wide limit takes
 * from the tenant above its quota first, the count quotas refuse with their
 * numbers, and pins expire after their TTL. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "store.h"
#include "test_store_util.h"
#include "support/unit_main.h"

#define OBJ 60000 /* bytes per test object: ~17 per 1 MiB */

static cd_store_t *st_;

static int setup(void **state)
{
    cd_store_config_t c;
    cd_err_t err;

    (void)state;
    t_now = 1000;
    t_config(&c, 32 * MiB);
    c.limits.max_pin_ms = 10000;
    assert_int_equal(cd_store_create(&c, &st_, &err), ST_OK);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    cd_store_destroy(st_);
    st_ = NULL;
    return 0;
}

static uint32_t ns_of(const char *tenant, const char *model)
{
    uint32_t id;
    cd_err_t err;

    if (cd_store_ns_create(st_, tenant, model, 64, &id, &err) != ST_OK) {
        fail_msg("namespace %s/%s: %s", tenant, model, err.msg);
    }
    return id;
}

/* Puts block i of chain (parent i-1); returns the status, err filled. */
static st_status_t put(uint32_t ns, uint32_t chain, uint32_t i, cd_err_t *err)
{
    static uint8_t buf[OBJ];
    cd_key_t k = t_key(chain, i, CD_KIND_KV, 0);
    st_hash_t p = t_hash(chain, i - 1);

    t_fill(buf, sizeof(buf), &k);
    return cd_store_put(st_, ns, &k, i > 0 ? &p : NULL, buf, sizeof(buf), err);
}

static void must_put(uint32_t ns, uint32_t chain, uint32_t i)
{
    cd_err_t err;

    if (put(ns, chain, i, &err) != ST_OK) {
        fail_msg("put ns=%u chain=%u block=%u: %s", ns, chain, i, err.msg);
    }
}

static int present(uint32_t ns, uint32_t chain, uint32_t i)
{
    static uint8_t buf[OBJ];
    cd_key_t k = t_key(chain, i, CD_KIND_KV, 0);
    uint64_t len;
    cd_err_t err;

    return cd_store_get(st_, ns, &k, buf, sizeof(buf), &len, NULL, &err) == ST_OK;
}

static void set_quota(const char *tenant, const cd_tenant_quota_t *q)
{
    cd_err_t err;

    if (cd_store_tenant_set(st_, tenant, q, &err) != ST_OK) {
        fail_msg("quota of %s: %s", tenant, err.msg);
    }
}

static cd_tenant_usage_t usage(const char *tenant)
{
    cd_tenant_usage_t u;

    assert_int_equal(cd_store_tenant_usage(st_, tenant, &u), ST_OK);
    return u;
}

/* A leases and pins all it can (at its quotas); B's puts still find room.
 * Without quotas A's holds covered the whole arena and B's put failed. */
static void test_holds_leave_room_for_others(void **state)
{
    enum { CHAINS = 38, LEN = 16 }; /* 608 objects of 64 KiB extents: more than the store */
    cd_tenant_quota_t qa = {.memory_bytes = 12 * MiB, .pins = 100, .leases = 10};
    uint32_t a, b;
    uint64_t pinned = 0, leased = 0, pin_refused = 0, lease_refused = 0;
    cd_err_t err;
    cd_stats_t sa, sb;

    (void)state;
    set_quota("acme", &qa);
    a = ns_of("acme", "m");
    b = ns_of("blue", "m");
    for (uint32_t c = 0; c < CHAINS; c++) {
        for (uint32_t i = 0; i < LEN; i++) {
            must_put(a, c, i);
        }
    }
    /* Every block A still has: pinned, and every chain leased. */
    for (uint32_t c = 0; c < CHAINS; c++) {
        st_hash_t hs[LEN];
        cd_segment_t seg = {0, LEN, hs};
        cd_seg_answer_t ans;
        uint64_t lease = 0, kda[LEN];
        size_t kn;

        for (uint32_t i = 0; i < LEN; i++) {
            hs[i] = t_hash(c, i);
            if (cd_store_pin_ttl(st_, a, &hs[i], 0, &err) == ST_OK) {
                pinned++;
            } else if (strstr(err.msg, "pins quota") != NULL) {
                pin_refused++;
            }
        }
        if (cd_store_lookup(st_, a, &seg, 1, NULL, CD_LEASE_DEFAULT, &ans, kda, LEN, &kn, &lease,
                            NULL, &err) == ST_OK) {
            leased += lease != 0;
        } else {
            assert_non_null(strstr(err.msg, "tenant acme: leases in flight quota 10"));
            lease_refused++;
        }
    }
    assert_true(pinned <= 100);
    assert_true(pin_refused > 0);
    assert_true(leased <= 10);
    assert_true(lease_refused > 0);
    assert_true(usage("acme").used.memory_bytes <= 12 * MiB);
    /* B: 15 MiB of puts, every one succeeds and stays. (Before quotas A's
     * holds covered the arena: "memory exhausted ... evictable=0".) */
    for (uint32_t n = 0; n < 240; n++) {
        must_put(b, 1000 + n / LEN, n % LEN);
    }
    assert_int_equal(cd_store_stats(st_, b, &sb), ST_OK);
    assert_int_equal(sb.objects[CD_KIND_KV], 240);
    assert_int_equal(sb.evicted_blocks, 0);
    assert_int_equal(cd_store_stats(st_, a, &sa), ST_OK);
    assert_int_equal(sa.pins_active, pinned);
    assert_int_equal(usage("acme").used.pins, pinned);
    assert_int_equal(usage("acme").used.leases, leased);
}

/* A's puts past its memory quota evict A's own blocks; B's stay. */
static void test_memory_quota_evicts_own(void **state)
{
    cd_tenant_quota_t qa = {.memory_bytes = 8 * MiB};
    uint32_t a, b;
    cd_stats_t sa, sb;
    cd_tenant_usage_t u;
    cd_err_t err;

    (void)state;
    a = ns_of("acme", "m");
    b = ns_of("blue", "m");
    set_quota("acme", &qa);
    for (uint32_t n = 0; n < 40; n++) { /* 2.4 MB of B's first: colder than A's */
        must_put(b, 500 + n / 8, n % 8);
    }
    for (uint32_t n = 0; n < 300; n++) { /* 18 MB of A's */
        must_put(a, n / 8, n % 8);
    }
    u = usage("acme");
    assert_true(u.used.memory_bytes <= 8 * MiB);
    assert_true(u.used.memory_bytes > 6 * MiB);
    assert_int_equal(u.quota.memory_bytes, 8 * MiB);
    assert_int_equal(cd_store_stats(st_, a, &sa), ST_OK);
    assert_int_equal(cd_store_stats(st_, b, &sb), ST_OK);
    assert_true(sa.evicted_blocks > 0);
    assert_int_equal(sa.arena_used, u.used.memory_bytes);
    assert_int_equal(sb.evicted_blocks, 0);
    for (uint32_t n = 0; n < 40; n++) {
        assert_true(present(b, 500 + n / 8, n % 8));
    }
    assert_true(present(a, 299 / 8, 299 % 8)); /* the newest stays */
    assert_false(present(a, 0, 0));            /* the oldest went */

    /* Everything A has pinned: a put past the quota is refused, with the
     * quota and the numbers, and B is untouched. */
    for (uint32_t n = 0; n < 300; n++) {
        st_hash_t h = t_hash(n / 8, n % 8);

        (void)cd_store_pin_ttl(st_, a, &h, 0, &err);
    }
    assert_int_equal(put(a, 900, 0, &err), ST_ERR_EXHAUSTED);
    assert_non_null(strstr(err.msg, "tenant acme: memory quota 8.0 MiB, in use "));
    assert_non_null(strstr(err.msg, "asked 58.6 KiB"));
    must_put(b, 901, 0);
    /* An object above the whole quota: refused at once. */
    qa.memory_bytes = 32 * KiB;
    set_quota("acme", &qa);
    assert_int_equal(put(a, 902, 0, &err), ST_ERR_EXHAUSTED);
    assert_non_null(strstr(err.msg, "memory quota 32.0 KiB"));
}

/* The process-wide limit reached: the tenant above its (lowered) quota gives
 * first; the other tenant, colder in the LRU and above its fair share, keeps
 * everything. */
static void test_global_eviction_over_quota_first(void **state)
{
    cd_tenant_quota_t qa = {.memory_bytes = 4 * MiB};
    uint32_t a, b, c;
    cd_stats_t sa, sc;

    (void)state;
    c = ns_of("cyan", "m");
    a = ns_of("acme", "m");
    b = ns_of("blue", "m");
    for (uint32_t n = 0; n < 200; n++) { /* 12 MB of C's, the coldest */
        must_put(c, 2000 + n / 8, n % 8);
    }
    for (uint32_t n = 0; n < 200; n++) { /* 12 MB of A's */
        must_put(a, n / 8, n % 8);
    }
    set_quota("acme", &qa); /* a reload lowers A's quota below its use */
    assert_true(usage("acme").used.memory_bytes > 4 * MiB);
    for (uint32_t n = 0; n < 160; n++) { /* 9.6 MB of B's: past the limit */
        must_put(b, 1000 + n / 8, n % 8);
    }
    assert_int_equal(cd_store_stats(st_, a, &sa), ST_OK);
    assert_int_equal(cd_store_stats(st_, c, &sc), ST_OK);
    assert_true(sa.evicted_blocks > 0);
    assert_int_equal(sc.evicted_blocks, 0);
    for (uint32_t n = 0; n < 200; n++) {
        assert_true(present(c, 2000 + n / 8, n % 8));
    }
}

/* Sessions, pins, leases, reservations and namespaces: refused at the quota
 * with the numbers; room again once one ends. */
static void test_count_quotas_refuse_with_message(void **state)
{
    cd_tenant_quota_t q = {
        .sessions = 2, .pins = 2, .leases = 1, .reservations = 2, .namespaces = 1};
    st_hash_t h0 = t_hash(1, 0), h1 = t_hash(1, 1), hs[2] = {h0, h1};
    cd_segment_t seg = {0, 2, hs};
    cd_seg_answer_t ans;
    cd_session_t se[3];
    cd_resv_req_t rq[3];
    cd_resv_t rs[3];
    cd_stats_t s;
    uint64_t lease, lease2, kda[2];
    size_t kn;
    uint32_t a, other;
    cd_err_t err;

    (void)state;
    set_quota("acme", &q);
    a = ns_of("acme", "m");
    assert_int_equal(cd_store_ns_create(st_, "acme", "second", 64, &other, &err), ST_ERR_EXHAUSTED);
    assert_string_equal(err.msg, "tenant acme: namespaces quota 1, in use 1, asked 1");
    (void)ns_of("blue", "second"); /* another tenant is not limited by it */

    assert_int_equal(cd_store_session_open(st_, a, NULL, 0, &se[0], &err), ST_OK);
    assert_int_equal(cd_store_session_open(st_, a, NULL, 0, &se[1], &err), ST_OK);
    assert_int_equal(cd_store_session_open(st_, a, NULL, 0, &se[2], &err), ST_ERR_EXHAUSTED);
    assert_string_equal(err.msg, "tenant acme: sessions quota 2, in use 2, asked 1");
    assert_int_equal(cd_store_session_open(st_, a, &se[0].id, 0, &se[2], &err), ST_OK); /* reopen */
    assert_int_equal(cd_store_session_close(st_, a, &se[1].id), ST_OK);
    assert_int_equal(cd_store_session_open(st_, a, NULL, 0, &se[2], &err), ST_OK);
    assert_int_equal(usage("acme").used.sessions, 2);

    must_put(a, 1, 0);
    must_put(a, 1, 1);
    assert_int_equal(cd_store_pin_ttl(st_, a, &h0, 0, &err), ST_OK);
    assert_int_equal(cd_store_pin_ttl(st_, a, &h0, 0, &err), ST_OK);
    assert_int_equal(cd_store_pin_ttl(st_, a, &h1, 0, &err), ST_ERR_EXHAUSTED);
    assert_string_equal(err.msg, "tenant acme: pins quota 2, in use 2, asked 1");
    assert_int_equal(cd_store_unpin(st_, a, &h0), ST_OK);
    assert_int_equal(cd_store_pin_ttl(st_, a, &h1, 0, &err), ST_OK);

    assert_int_equal(cd_store_lookup(st_, a, &seg, 1, NULL, CD_LEASE_DEFAULT, &ans, kda, 2, &kn,
                                     &lease, NULL, &err),
                     ST_OK);
    assert_int_equal(cd_store_lookup(st_, a, &seg, 1, NULL, CD_LEASE_DEFAULT, &ans, kda, 2, &kn,
                                     &lease2, NULL, &err),
                     ST_ERR_EXHAUSTED);
    assert_string_equal(err.msg, "tenant acme: leases in flight quota 1, in use 1, asked 1");
    assert_int_equal(cd_store_lookup(st_, a, &seg, 1, NULL, CD_LEASE_NONE, &ans, kda, 2, &kn,
                                     &lease2, NULL, &err),
                     ST_OK); /* without a lease: no quota */
    assert_int_equal(cd_store_release(st_, a, lease), ST_OK);
    assert_int_equal(cd_store_lookup(st_, a, &seg, 1, NULL, CD_LEASE_DEFAULT, &ans, kda, 2, &kn,
                                     &lease, NULL, &err),
                     ST_OK);

    for (int i = 0; i < 3; i++) {
        rq[i].key = t_key(7, (uint32_t)i, CD_KIND_KV, 0);
        rq[i].parent = NULL;
        rq[i].length = 1000;
    }
    assert_int_equal(cd_store_reserve(st_, a, rq, 3, rs, &err), ST_ERR_EXHAUSTED);
    assert_string_equal(err.msg, "tenant acme: reservations in flight quota 2, in use 2, asked 1");
    assert_int_equal(cd_store_stats(st_, a, &s), ST_OK);
    assert_int_equal(s.reservations_active, 0); /* all or nothing */
    assert_int_equal(usage("acme").used.reservations, 0);
    assert_int_equal(cd_store_reserve(st_, a, rq, 2, rs, &err), ST_OK);
    assert_int_equal(cd_store_commit(st_, a, rs[0].id, 0, &err), ST_ERR_CORRUPT);
    assert_int_equal(cd_store_abort(st_, a, rs[0].id), ST_OK);
    assert_int_equal(usage("acme").used.reservations, 1);

    /* A raised quota (a reload) takes effect at once. */
    q.sessions = 3;
    set_quota("acme", &q);
    assert_int_equal(cd_store_session_open(st_, a, NULL, 0, &se[1], &err), ST_OK);
}

/* Pins end by themselves: after their TTL, or max_pin_ms for a TTL of 0; a
 * TTL above max_pin_ms is refused; pinning again moves the expiry later. */
static void test_pins_expire(void **state)
{
    st_hash_t h0 = t_hash(3, 0), h1 = t_hash(3, 1), none = t_hash(99, 0);
    uint32_t a;
    cd_reaped_t r;
    cd_stats_t s;
    cd_err_t err;

    (void)state;
    a = ns_of("acme", "m");
    must_put(a, 3, 0);
    must_put(a, 3, 1);
    assert_int_equal(cd_store_pin_ttl(st_, a, &h0, 100, &err), ST_OK);
    assert_int_equal(cd_store_pin(st_, a, &h1), ST_OK); /* the default: max_pin_ms */
    assert_int_equal(cd_store_pin_ttl(st_, a, &h1, 10001, &err), ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "max_pin_ms=10000"));
    assert_int_equal(cd_store_pin_ttl(st_, a, &none, 100, &err), ST_ERR_NOT_FOUND);
    assert_int_equal(cd_store_unpin(st_, a, &none), ST_ERR_NOT_FOUND);

    r = t_reap_after(st_, 99);
    assert_int_equal(r.pins, 0);
    r = t_reap_after(st_, 1);
    assert_int_equal(r.pins, 1);
    assert_int_equal(cd_store_unpin(st_, a, &h0), ST_ERR_INVALID); /* no longer pinned */
    /* h1 now pinned again for 50 ms: the later expiry (max_pin) stays. */
    assert_int_equal(cd_store_pin_ttl(st_, a, &h1, 50, &err), ST_OK);
    r = t_reap_after(st_, 5000);
    assert_int_equal(r.pins, 0);
    assert_int_equal(cd_store_stats(st_, a, &s), ST_OK);
    assert_int_equal(s.pins_active, 2);
    t_now = 1000 + 10000;
    cd_store_reap(st_, t_now, &r);
    assert_int_equal(r.pins, 2);
    assert_int_equal(cd_store_stats(st_, a, &s), ST_OK);
    assert_int_equal(s.pins_active, 0);
    assert_int_equal(usage("acme").used.pins, 0);
    /* Unpinned, the blocks can be deleted again. */
    cd_key_t k = t_key(3, 1, CD_KIND_KV, 0);
    assert_int_equal(cd_store_delete(st_, a, &k, &err), ST_OK);
}

/* The records: made by a namespace or a quota, listed in order, and the
 * bad arguments refused. */
static void test_tenant_records(void **state)
{
    cd_tenant_quota_t q = {.memory_bytes = 1 * MiB};
    cd_tenant_usage_t u[4];
    cd_err_t err;

    (void)state;
    (void)ns_of("acme", "m");
    set_quota("later", &q);
    assert_int_equal(cd_store_tenants(st_, u, 4), 2);
    assert_string_equal(u[0].tenant, "acme");
    assert_int_equal(u[0].used.namespaces, 1);
    assert_int_equal(u[0].quota.memory_bytes, 0);
    assert_string_equal(u[1].tenant, "later");
    assert_int_equal(u[1].quota.memory_bytes, 1 * MiB);
    assert_int_equal(u[1].used.namespaces, 0);
    assert_int_equal(cd_store_tenant_usage(st_, "nobody", &u[0]), ST_ERR_NOT_FOUND);
    assert_int_equal(cd_store_tenant_set(st_, "", &q, &err), ST_ERR_INVALID);
    assert_int_equal(cd_store_tenant_set(st_, "acme", NULL, &err), ST_ERR_INVALID);
    assert_string_equal(cd_tenant_resource_names[0], "memory_bytes");
}

/* The quota fields of a tenants-file line (what the tenants file gives
 * cd_store_tenant_set). */
static void test_quota_parse(void **state)
{
    cd_tenant_quota_t q;
    cd_err_t err;

    (void)state;
    assert_int_equal(
        cd_tenant_quota_parse("memory=64G ssd=1T sessions=100000 pins=10000", &q, &err), ST_OK);
    assert_int_equal(q.memory_bytes, 64ull << 30);
    assert_int_equal(q.ssd_bytes, 1ull << 40);
    assert_int_equal(q.sessions, 100000);
    assert_int_equal(q.pins, 10000);
    assert_int_equal(q.leases, 0);
    assert_int_equal(cd_tenant_quota_parse("leases=5,reservations=7,namespaces=2", &q, &err),
                     ST_OK);
    assert_int_equal(q.leases, 5);
    assert_int_equal(q.reservations, 7);
    assert_int_equal(q.namespaces, 2);
    assert_int_equal(q.memory_bytes, 0);
    assert_int_equal(cd_tenant_quota_parse("", &q, &err), ST_OK);
    assert_int_equal(q.pins, 0);
    assert_int_equal(cd_tenant_quota_parse("memory=64G disk=1T", &q, &err), ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "unknown quota disk"));
    assert_int_equal(cd_tenant_quota_parse("pins=ten", &q, &err), ST_ERR_INVALID);
    assert_string_equal(err.msg, "quota pins=ten is not a count");
    assert_int_equal(cd_tenant_quota_parse("memory=lots", &q, &err), ST_ERR_INVALID);
    assert_int_equal(cd_tenant_quota_parse("pins", &q, &err), ST_ERR_INVALID);
    assert_int_equal(cd_tenant_quota_parse("pins=-1", &q, &err), ST_ERR_INVALID);
}

int main(void)
{
    UNIT_RUN(UNIT_FIXTURE(test_holds_leave_room_for_others),
             UNIT_FIXTURE(test_memory_quota_evicts_own),
             UNIT_FIXTURE(test_global_eviction_over_quota_first),
             UNIT_FIXTURE(test_count_quotas_refuse_with_message), UNIT_FIXTURE(test_pins_expire),
             UNIT_FIXTURE(test_tenant_records), cmocka_unit_test(test_quota_parse));
}
