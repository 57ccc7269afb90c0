/*
 * test_membership.c - membership on etcd (docs/membership.md) with a real
 * etcd-server started by the test (tests/support/etcd_fixture.c) and real
 * daemons on loopback: three register, a fourth joins, one stops cleanly
 * (deregistered at once), one is killed with -9 (its lease expires after
 * etcd_ttl), etcd is restarted (with its data, then empty: the daemons
 * register again and serve meanwhile), a malformed record is ignored, and
 * an unreachable etcd at start is a clear error. After each change every
 * daemon's Hello must give the same ring (its peers) and the same epoch.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cluster.h"
#include "etcd_fixture.h"
#include "grpc_conn.h"
#include "ring_check.h"
#include "stratad_arg.h"

#define TTL_S 4

static const char *stratad_path;
static et_etcd_t etcd;
static tc_cluster_t cl;
static int live[TC_MAX_NODES];
static uint64_t last_epoch;

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Node i's ring as its Hello says it: the sorted peer list and the epoch. */
static void hello_ring(int i, char *ring, size_t cap, uint64_t *epoch_p)
{
    *epoch_p = rc_hello_ring(cl.node[i].addr, ring, cap);
}

/* The live nodes' addresses, sorted, comma-separated. */
static void want_ring(char *ring, size_t cap)
{
    rc_live_ring(&cl, live, ring, cap);
}

/*
 * Waits (at most timeout_ms) until every live node's ring is the live set
 * and all give one epoch; returns how long it took. Fails the test otherwise.
 */
static uint64_t converge(uint64_t timeout_ms, const char *what)
{
    uint64_t t0 = now_ms();
    char want[1024], got[1024] = "";
    uint64_t epoch = 0;

    want_ring(want, sizeof(want));
    for (;;) {
        int agree = 1;

        epoch = 0;
        for (int i = 0; i < cl.n && agree; i++) {
            uint64_t e;

            if (!live[i]) {
                continue;
            }
            hello_ring(i, got, sizeof(got), &e);
            agree = strcmp(got, want) == 0 && (epoch == 0 || e == epoch);
            epoch = e;
        }
        if (agree) {
            break;
        }
        if (now_ms() - t0 > timeout_ms) {
            fail_msg("%s: no agreement after %llu ms: want ring %s, a node says %s (epoch %llu)",
                     what, (unsigned long long)timeout_ms, want, got, (unsigned long long)epoch);
        }
        usleep(100000);
    }
    assert_true(epoch > last_epoch); /* every change moves the epoch forward */
    last_epoch = epoch;
    printf("# %s: ring %s epoch %llu after %llu ms\n", what, want, (unsigned long long)epoch,
           (unsigned long long)(now_ms() - t0));
    return now_ms() - t0;
}

static int count_keys(void)
{
    char *out = et_ctl(&etcd, "get --prefix --keys-only /strata/members/");
    int n = 0;

    assert_non_null(out);
    for (char *p = out; (p = strstr(p, "/strata/members/")) != NULL; p++) {
        n++;
    }
    free(out);
    return n;
}

static int group_setup(void **state)
{
    (void)state;
    rc_start_etcd_cluster(&etcd, &cl, stratad_path, 3, TTL_S, live);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    tc_stop_all(&cl);
    et_destroy(&etcd);
    return 0;
}

static void t_three_register(void **state)
{
    (void)state;
    converge(10000, "three register");
    assert_int_equal(count_keys(), 3);
}

static void t_fourth_joins(void **state)
{
    (void)state;
    assert_int_equal(tc_add(&cl), 3);
    live[3] = 1;
    converge(10000, "a fourth joins");
    assert_int_equal(count_keys(), 4);
}

static void t_clean_stop(void **state)
{
    uint64_t took;

    (void)state;
    assert_int_equal(tc_stop(&cl, 3, 15000), 0);
    live[3] = 0;
    took = converge(10000, "one stops cleanly");
    /* Deregistered, not expired: well before the lease would run out. */
    assert_true(took < TTL_S * 1000 / 2);
    assert_int_equal(count_keys(), 3);
}

static void t_kill9(void **state)
{
    uint64_t took;

    (void)state;
    tc_kill(&cl, 2);
    live[2] = 0;
    took = converge(TTL_S * 1000 + 5000, "one killed with -9");
    printf("# lease of the killed node expired %llu ms after the kill (etcd_ttl %d s)\n",
           (unsigned long long)took, TTL_S);
    assert_int_equal(count_keys(), 2);
}

static void t_etcd_restart(void **state)
{
    char want[1024], got[1024];
    uint64_t e;
    char cmd[600];

    (void)state;
    /* etcd down: the daemons keep serving with the last ring. */
    et_stop(&etcd);
    want_ring(want, sizeof(want));
    sleep(TTL_S);
    for (int i = 0; i < 2; i++) {
        hello_ring(i, got, sizeof(got), &e);
        assert_string_equal(got, want);
        assert_int_equal(e, last_epoch);
    }
    /* Back with its data: the same members, nothing to re-register. */
    assert_int_equal(et_restart(&etcd), 0);
    sleep(1);
    assert_int_equal(count_keys(), 2);
    /* Back empty (its data lost): the daemons register again. */
    et_kill(&etcd);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s/data'", etcd.dir);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(et_restart(&etcd), 0);
    for (uint64_t t0 = now_ms(); count_keys() < 2; usleep(200000)) {
        assert_true(now_ms() - t0 < (uint64_t)TTL_S * 1000 + 8000);
    }
    assert_int_equal(count_keys(), 2);
}

static void t_malformed_record(void **state)
{
    char *out;

    (void)state;
    out = et_ctl(&etcd, "put /strata/members/bogus 'v=1\nname=bogus\nstate=serving'");
    assert_non_null(out);
    free(out);
    out = et_ctl(&etcd, "put /strata/members/junk $'\\x01\\x02 not a record'");
    assert_non_null(out);
    free(out);
    /* Ignored: the ring stays the two live nodes (the epoch moves: a change). */
    converge(10000, "malformed records");
    out = et_ctl(&etcd, "del /strata/members/bogus");
    free(out);
    out = et_ctl(&etcd, "del /strata/members/junk");
    free(out);
    converge(10000, "malformed records removed");
    for (int i = 0; i < 2; i++) {
        char cmd[300];

        snprintf(cmd, sizeof(cmd), "grep -q 'malformed member record ignored' %s", cl.node[i].log);
        assert_int_equal(system(cmd), 0);
    }
}

/* A member that is draining (or joining) is registered but off every ring. */
static void t_draining_off_ring(void **state)
{
    char *out;

    (void)state;
    out = et_ctl(&etcd, "put /strata/members/leaving "
                        "'v=1\nname=leaving\ngrpc=127.0.0.1:1\nstate=draining\n'");
    assert_non_null(out);
    free(out);
    out = et_ctl(&etcd, "put /strata/members/coming "
                        "'v=1\nname=coming\ngrpc=127.0.0.1:2\nstate=joining\n'");
    assert_non_null(out);
    free(out);
    converge(10000, "a draining and a joining member registered");
    free(et_ctl(&etcd, "del /strata/members/leaving"));
    free(et_ctl(&etcd, "del /strata/members/coming"));
}

/* SIGHUP re-reads the static peers; with etcd it must leave the members alone. */
static void t_sighup_keeps_members(void **state)
{
    char want[1024], got[1024];
    uint64_t before, after;

    (void)state;
    usleep(1000000); /* the last events of the case before have settled */
    hello_ring(0, got, sizeof(got), &before);
    tc_signal(&cl, 0, SIGHUP);
    usleep(500000);
    want_ring(want, sizeof(want));
    hello_ring(0, got, sizeof(got), &after);
    assert_string_equal(got, want);
    assert_int_equal(after, before);
}

/* A drain (the Drain call, as `strata drain NODE`): the node publishes
 * draining (off every ring), hands over, deregisters and exits 0. */
static void t_drain(void **state)
{
    Strata__V1__DrainRequest req = STRATA__V1__DRAIN_REQUEST__INIT;
    void *resp = NULL;
    srpc_error_t err;
    gc_conn_t c;
    char *out;

    (void)state;
    assert_int_equal(tc_add(&cl), 4);
    live[4] = 1;
    converge(10000, "a fifth joins");
    gc_open(&c, cl.node[4].addr, NULL);
    assert_int_equal(gc_call(&c, SRPC_CACHE_DRAIN, &req, &resp, &err), ST_OK);
    protobuf_c_message_free_unpacked(resp, NULL);
    gc_close(&c);
    live[4] = 0;
    assert_int_equal(tc_wait_exit(&cl, 4, 20000), 0);
    converge(10000, "the fifth drained");
    out = et_ctl(&etcd, "get --prefix --keys-only /strata/members/");
    assert_non_null(out);
    assert_null(strstr(out, cl.node[4].addr));
    free(out);
}

static void t_unreachable_etcd(void **state)
{
    char cmd[1024], buf[4096];
    size_t len;
    FILE *p;
    int rc;
    uint64_t t0 = now_ms();

    (void)state;
    snprintf(cmd, sizeof(cmd),
             "%s --listen 127.0.0.1:%d --etcd http://127.0.0.1:%d --etcd-ttl 2 "
             "--cluster-secret integration-test-cluster-secret 2>&1",
             stratad_path, tc_free_port(), tc_free_port());
    p = popen(cmd, "r");
    assert_non_null(p);
    len = fread(buf, 1, sizeof(buf) - 1, p);
    buf[len] = '\0';
    rc = pclose(p);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) != 0);
    assert_non_null(strstr(buf, "cannot register with etcd"));
    assert_null(strstr(buf, "stratad ready"));
    assert_true(now_ms() - t0 < 10000);
    /* A wildcard listen address without advertise is refused at once. */
    snprintf(cmd, sizeof(cmd),
             "%s --listen 0.0.0.0:%d --etcd %s --cluster-secret "
             "integration-test-cluster-secret --auth-token tok-for-the-test-only 2>&1",
             stratad_path, tc_free_port(), etcd.endpoint);
    p = popen(cmd, "r");
    assert_non_null(p);
    len = fread(buf, 1, sizeof(buf) - 1, p);
    buf[len] = '\0';
    rc = pclose(p);
    assert_true(WIFEXITED(rc) && WEXITSTATUS(rc) != 0);
    assert_non_null(strstr(buf, "set advertise"));
}

TM_STRATAD_GROUP_MAIN("test_membership", "PATH-TO-STRATAD", &stratad_path, group_setup,
                      group_teardown, cmocka_unit_test(t_three_register),
                      cmocka_unit_test(t_fourth_joins), cmocka_unit_test(t_clean_stop),
                      cmocka_unit_test(t_kill9), cmocka_unit_test(t_etcd_restart),
                      cmocka_unit_test(t_malformed_record), cmocka_unit_test(t_draining_off_ring),
                      cmocka_unit_test(t_sighup_keeps_members), cmocka_unit_test(t_drain),
                      cmocka_unit_test(t_unreachable_etcd))
