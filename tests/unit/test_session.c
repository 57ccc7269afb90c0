/* test_session.c - session records: open, append, get, close, TTL expiry
 * in the reaper, limits. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "test_store_util.h"
#include "support/unit_main.h"

static void test_session_lifecycle(void **state)
{
    cd_store_config_t c;
    cd_store_t *s;
    cd_err_t err;
    uint32_t ns;
    st_hash_t a = t_hash(7, 1), b = t_hash(7, 2), unknown = t_hash(7, 3), picked;
    cd_session_t rec;
    cd_stats_t st;
    cd_reaped_t r;
    st_hash_t h1 = t_hash(1, 10), h2 = t_hash(1, 20);

    t_now = 1000;
    t_config(&c, 32 * MiB);
    c.limits.max_sessions = 2;
    assert_int_equal(cd_store_create(&c, &s, &err), ST_OK);
    assert_int_equal(cd_store_ns_create(s, "t", "m", 64, &ns, &err), ST_OK);

    assert_int_equal(cd_store_session_open(s, ns, &a, 0, &rec, &err), ST_OK);
    assert_int_equal(rec.length, 0);
    assert_int_equal(rec.version, 0);
    assert_int_equal(cd_store_session_append(s, ns, &a, &h1, 640, 0, &rec, &err), ST_OK);
    assert_int_equal(rec.version, 1);
    assert_int_equal(cd_store_session_open(s, ns, &b, 10000, &rec, &err), ST_OK);
    assert_memory_equal(&rec.id, &b, sizeof(b));
    assert_int_equal(cd_store_session_open(s, ns, NULL, 0, &rec, &err), ST_ERR_EXHAUSTED);
    assert_non_null(strstr(err.msg, "max_sessions"));
    /* Reopening an existing session is not a new one. */
    assert_int_equal(cd_store_session_open(s, ns, &a, 0, &rec, &err), ST_OK);
    assert_int_equal(rec.length, 640);
    assert_int_equal(cd_store_session_get(s, ns, &a, &rec), ST_OK);
    assert_int_equal(rec.length, 640);
    assert_int_equal(rec.ns_id, ns);
    assert_int_equal(rec.ttl_ms, c.limits.session_ttl_ms);
    assert_int_equal(rec.created_ms, 1000);
    assert_memory_equal(&rec.head, &h1, sizeof(h1));

    t_now = 5000;
    /* A writer that expects an older version is refused. */
    assert_int_equal(cd_store_session_append(s, ns, &a, &h2, 1280, 7, &rec, &err), ST_ERR_BUSY);
    assert_int_equal(cd_store_session_append(s, ns, &a, &h2, 1280, 1, &rec, &err), ST_OK);
    assert_int_equal(cd_store_session_get(s, ns, &a, &rec), ST_OK);
    assert_int_equal(rec.length, 1280);
    assert_int_equal(rec.version, 2);
    assert_int_equal(rec.updated_ms, 5000);
    assert_memory_equal(&rec.head, &h2, sizeof(h2));
    assert_int_equal(cd_store_session_append(s, ns, &a, &h1, 64, 0, NULL, &err), ST_ERR_INVALID);
    assert_non_null(strstr(err.msg, "shrink"));
    assert_int_equal(cd_store_session_append(s, ns, &unknown, &h1, 64, 0, NULL, &err),
                     ST_ERR_NOT_FOUND);

    /* b's 10 s TTL runs from its last update (t=1000). */
    t_now = 11000;
    cd_store_reap(s, t_now, &r);
    assert_int_equal(r.sessions, 1);
    assert_int_equal(cd_store_session_get(s, ns, &b, &rec), ST_ERR_NOT_FOUND);
    assert_int_equal(cd_store_session_get(s, ns, &a, &rec), ST_OK);
    assert_int_equal(cd_store_stats(s, ns, &st), ST_OK);
    assert_int_equal(st.sessions_active, 1);
    assert_int_equal(st.sessions_expired, 1);
    assert_int_equal(st.objects[CD_KIND_SESSION], 1);

    assert_int_equal(cd_store_session_close(s, ns, &a), ST_OK);
    assert_int_equal(cd_store_session_close(s, ns, &a), ST_ERR_NOT_FOUND);
    assert_int_equal(cd_store_session_open(s, ns, &b, c.limits.session_ttl_max_ms + 1, &rec, &err),
                     ST_ERR_INVALID);
    assert_int_equal(cd_store_session_open(s, 9, &b, 0, &rec, &err), ST_ERR_NOT_FOUND);
    /* A day later the default TTL has run out too; the store picks this id. */
    assert_int_equal(cd_store_session_open(s, ns, NULL, 0, &rec, &err), ST_OK);
    picked = rec.id;
    assert_int_equal(cd_store_session_get(s, ns, &picked, &rec), ST_OK);
    cd_store_reap(s, t_now + c.limits.session_ttl_ms, &r);
    assert_int_equal(r.sessions, 1);
    cd_store_destroy(s);
}

int main(void)
{
    UNIT_RUN(cmocka_unit_test(test_session_lifecycle));
}
