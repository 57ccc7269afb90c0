/*
 * test_membership_client.c - libstrata with etcd in place of a node list
 * (docs/membership.md): it finds the cluster in etcd, and follows a join
 * and a clean leave while it runs. Each time, what it writes must be where
 * a fresh client with the full static node list looks for it: a client that
 * did not follow (its ring without the new node, or with the one that left)
 * places some segments elsewhere, and those reads miss.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "client_fixture.h"
#include "cluster.h"
#include "etcd_fixture.h"
#include "grpc_conn.h"
#include "stratad_arg.h"

#define SEGMENTS 64
#define OBJ      256

static const char *stratad_path;
static et_etcd_t etcd;
static tc_cluster_t cl;

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Node i's ring epoch (its Hello's). */
static uint64_t node_epoch(int i)
{
    gc_conn_t c;
    Strata__V1__HelloResponse *h = gc_hello(&c, cl.node[i].addr, "acme", "k3", NULL);
    uint64_t e = h->ring_epoch;

    protobuf_c_message_free_unpacked(&h->base, NULL);
    gc_close(&c);
    return e;
}

/* Waits until the client's epoch is node 0's, which every live node shares. */
static void wait_epoch(st_client_t *c, int n_live)
{
    uint64_t t0 = now_ms(), want = 0;

    for (;;) {
        int agree = 1;

        want = node_epoch(0);
        for (int i = 1; i < n_live; i++) {
            agree &= node_epoch(i) == want;
        }
        if (agree && st_client_ring_epoch(c) == want) {
            break;
        }
        assert_true(now_ms() - t0 < 10000);
        usleep(100000);
    }
    printf("# client at epoch %llu after %llu ms\n", (unsigned long long)want,
           (unsigned long long)(now_ms() - t0));
}

static st_client_t *etcd_client(void)
{
    st_client_params_t p;

    cf_params_session(&p, "127.0.0.1:1", "k3", 5000); /* nodes: ignored with etcd */
    p.field_mask |= ST_CLIENT_FIELD_ETCD;
    p.etcd = etcd.endpoint;
    return cf_connect(&p);
}

static st_client_t *static_client(int n)
{
    static char nodes[TC_MAX_NODES * 32];
    st_client_params_t p;
    size_t off = 0;

    for (int i = 0; i < n; i++) {
        off += (size_t)snprintf(nodes + off, sizeof(nodes) - off, "%s%s", i ? "," : "",
                                cl.node[i].addr);
    }
    cf_params_session(&p, nodes, "k3", 5000);
    return cf_connect(&p);
}

/* Writes the KV of every segment's first block of chain with c. */
static void put_all(st_client_t *c, const st_hash_t *chain, size_t n_chain)
{
    uint32_t S = st_client_segment_blocks(c);
    static uint8_t data[SEGMENTS][OBJ];
    st_put_op_t ops[SEGMENTS];
    st_handle_t *h;

    for (int s = 0; s < SEGMENTS; s++) {
        memset(data[s], 0x40 + s, OBJ);
        ops[s] = (st_put_op_t){(uint64_t)s * S, ST_KIND_KV, 0, data[s], OBJ, 0, 0};
    }
    assert_int_equal(st_client_put(c, chain, n_chain, ops, SEGMENTS, 0, &h), ST_OK);
    st_handle_wait(h, -1);
    st_handle_release(h);
    for (int s = 0; s < SEGMENTS; s++) {
        assert_int_equal(ops[s].status, ST_OK);
    }
}

/* How many of those a client reads back. */
static int hits(st_client_t *c, const st_hash_t *chain, size_t n_chain)
{
    uint32_t S = st_client_segment_blocks(c);
    static uint8_t got[SEGMENTS][OBJ];
    st_get_op_t ops[SEGMENTS];
    st_handle_t *h;
    int n = 0;

    for (int s = 0; s < SEGMENTS; s++) {
        ops[s] = (st_get_op_t){(uint64_t)s * S, ST_KIND_KV, 0, got[s], OBJ, 0, NULL, 0, 0, 0};
    }
    assert_int_equal(st_client_get(c, chain, n_chain, ops, SEGMENTS, &h), ST_OK);
    st_handle_wait(h, -1);
    st_handle_release(h);
    for (int s = 0; s < SEGMENTS; s++) {
        n += ops[s].status == ST_OK && got[s][0] == 0x40 + s;
    }
    return n;
}

static void t_client_follows(void **state)
{
    st_client_t *a, *b;
    st_hash_t *chain;
    size_t n_chain;

    (void)state;
    assert_int_equal(tc_start_etcd(&cl, stratad_path, 2, etcd.endpoint, "--etcd-ttl 4"), 0);
    a = etcd_client(); /* finds the two in etcd */
    wait_epoch(a, 2);
    n_chain = (size_t)SEGMENTS * st_client_segment_blocks(a);
    chain = cf_chain(a, 1, n_chain);
    put_all(a, chain, n_chain);
    b = static_client(2);
    assert_int_equal(hits(b, chain, n_chain), SEGMENTS);
    st_client_close(b);

    /* A third joins: the client follows, and writes where everyone reads. */
    assert_int_equal(tc_add(&cl), 2);
    wait_epoch(a, 3);
    free(chain);
    chain = cf_chain(a, 2, n_chain);
    put_all(a, chain, n_chain);
    b = static_client(3);
    assert_int_equal(hits(b, chain, n_chain), SEGMENTS);
    assert_int_equal(hits(a, chain, n_chain), SEGMENTS);
    st_client_close(b);

    /* The third leaves cleanly: the client drops it. */
    assert_int_equal(tc_stop(&cl, 2, 15000), 0);
    wait_epoch(a, 2);
    free(chain);
    chain = cf_chain(a, 3, n_chain);
    put_all(a, chain, n_chain);
    b = static_client(2);
    assert_int_equal(hits(b, chain, n_chain), SEGMENTS);
    st_client_close(b);

    /* etcd unreachable: the client keeps working with the ring it has. */
    et_stop(&etcd);
    usleep(1500 * 1000);
    assert_int_equal(hits(a, chain, n_chain), SEGMENTS);
    free(chain);
    st_client_close(a);
}

static void t_bad_etcd(void **state)
{
    st_client_params_t p;
    st_client_t *c = NULL;
    char ep[64];

    (void)state;
    cf_params(&p, "127.0.0.1:1", 2000);
    p.field_mask |= ST_CLIENT_FIELD_ETCD;
    p.etcd = "https://127.0.0.1:2379";
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_INVALID);
    assert_non_null(strstr(st_client_last_error(), "etcd"));
    snprintf(ep, sizeof(ep), "http://127.0.0.1:%d", tc_free_port());
    p.etcd = ep;
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_UNAVAILABLE);
    assert_non_null(strstr(st_client_last_error(), "cannot read the members from etcd"));
}

static int group_setup(void **state)
{
    int rc = et_start(&etcd, NULL);

    (void)state;
    if (rc == 77) {
        printf("SKIP: no etcd-server\n");
        exit(77);
    }
    return rc;
}

/* Also after a failed case: no daemon and no etcd is left behind. */
static int group_teardown(void **state)
{
    (void)state;
    tc_stop_all(&cl);
    et_destroy(&etcd);
    return 0;
}

TM_STRATAD_GROUP_MAIN("test_membership_client", "PATH-TO-STRATAD", &stratad_path, group_setup,
                      group_teardown, cmocka_unit_test(t_client_follows),
                      cmocka_unit_test(t_bad_etcd))
