/*
 * test_durable.c - "durable means W of R replicas", through libstrata against
 * two real stratad daemons on loopback, each with its own SSD tier (real LMDB
 * files in a mkdtemp directory):
 *   - with R = 2 and one replica killed, a durable session append and a
 *     durable KDA put return ST_ERR_PARTIAL with the count 1 (not ST_OK);
 *     with write_quorum = 1 they return ST_OK;
 *   - daemons without data_dir refuse durable writes: no replica counts, the
 *     caller gets ST_ERR_UNSUPPORTED, never ST_OK;
 *   - with both up, a series of durable appends and KDA puts, then kill -9 of
 *     either daemon and its restart: every acknowledged version and object is
 *     readable from the cluster, and from the restarted node alone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "data_dirs.h"
#include "client_fixture.h"
#include "cluster.h"
#include "strata/strata.h"

static const char *stratad_path;

#define OBJ      4096
#define BLOCKS   24 /* KDA objects of the kill test */
#define SESSIONS 3
#define APPENDS  8 /* per session and run */

static void mk_dirs(char *dir, size_t cap)
{
    char p[128];

    snprintf(dir, cap, "/tmp/strata-durable-XXXXXX");
    assert_non_null(mkdtemp(dir));
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof(p), "%s/%d", dir, i);
        assert_int_equal(mkdir(p, 0700), 0);
    }
}

/* Two daemons; with dir, each on its own data directory dir/<node>. */
static void start2(tc_cluster_t *cl, const char *dir)
{
    char args[256];

    if (dir != NULL) {
        snprintf(args, sizeof(args),
                 "--memory-limit 64M --chunk-bytes 4M --max-object 1M --transport none "
                 "--ssd-map-size 256M --data-dir %s/{node}",
                 dir);
    } else {
        snprintf(args, sizeof(args),
                 "--memory-limit 64M --chunk-bytes 4M --max-object 1M --transport none");
    }
    assert_int_equal(tc_start(cl, stratad_path, 2, args), 0);
}

/* A client of nodes ("a,b"), R = replicas, W = quorum (0: the default, R).
 * Retried for up to 5 s: right after a restart, gRPC may still hand a new
 * channel the connection it shares with an older channel to the killed
 * daemon ("Socket closed"). */
static st_client_t *connect_to(const char *nodes, uint32_t replicas, uint32_t quorum)
{
    st_client_params_t p;

    cf_params_session(&p, nodes, "k3", 5000);
    p.field_mask |= ST_CLIENT_FIELD_REPLICAS;
    p.replicas = replicas;
    if (quorum != 0) {
        p.field_mask |= ST_CLIENT_FIELD_WRITE_QUORUM;
        p.write_quorum = quorum;
    }
    return cf_connect_retry(&p, 50);
}

static st_client_t *connect2(const tc_cluster_t *cl, uint32_t quorum)
{
    char nodes[80];

    snprintf(nodes, sizeof(nodes), "%s,%s", cl->node[0].addr, cl->node[1].addr);
    return connect_to(nodes, 2, quorum);
}

/* A chain of n made-up blocks (hashed tokens of the client's namespace). */
static st_hash_t *mk_chain(st_client_t *c, uint32_t salt, size_t n)
{
    size_t nt = n * st_client_block_tokens(c);
    uint32_t *tok = cf_token_buf(c, n);

    for (size_t i = 0; i < nt; i++) {
        tok[i] = salt * 1000003u + (uint32_t)i;
    }
    return cf_hash(c, tok, n);
}

static void fill(uint8_t *p, uint64_t block, uint32_t salt)
{
    for (size_t i = 0; i < OBJ; i++) {
        p[i] = (uint8_t)(block * 31 + i * 7 + salt);
    }
}

/* One durable KDA put of block b; returns its status, *written its count. */
static st_status_t put_kda(st_client_t *c, const st_hash_t *chain, size_t n_chain, uint64_t b,
                           uint32_t salt, uint32_t *written)
{
    static uint8_t buf[OBJ];
    st_put_op_t op = {.block = b, .kind = ST_KIND_KDA, .src = buf, .len = OBJ};
    st_handle_t *h = NULL;

    fill(buf, b, salt);
    assert_int_equal(st_client_put(c, chain, n_chain, &op, 1, ST_PUT_DURABLE, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    *written = st_handle_replicas_written(h, 0);
    st_handle_release(h);
    return op.status;
}

/* Reads KDA block b and checks its bytes; returns the op's status. */
static st_status_t get_kda(st_client_t *c, const st_hash_t *chain, size_t n_chain, uint64_t b,
                           uint32_t salt)
{
    uint8_t want[OBJ], got[OBJ];
    st_get_op_t op = {.block = b, .kind = ST_KIND_KDA, .dst = got, .dst_len = OBJ};
    st_handle_t *h = NULL;

    fill(want, b, salt);
    assert_int_equal(st_client_get(c, chain, n_chain, &op, 1, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    st_handle_release(h);
    if (op.status == ST_OK) {
        assert_int_equal(op.length, OBJ);
        assert_memory_equal(got, want, OBJ);
    }
    return op.status;
}

/*
 * R = 2, W = 2 (the default): with one replica down, a durable append and a
 * durable KDA put are ST_ERR_PARTIAL with the count 1 (before this change both
 * were ST_OK: acknowledged when any one replica took them); what was written
 * is readable. With W = 1 the same writes are ST_OK.
 */
static void test_partial_with_one_replica_down(void **state)
{
    tc_cluster_t cl;
    char dir[64];
    st_client_t *c, *c1;
    st_hash_t *chain;
    st_session_info_t info;
    st_write_result_t wr;
    uint32_t written = 0;

    (void)state;
    mk_dirs(dir, sizeof(dir));
    start2(&cl, dir);
    c = connect2(&cl, 0);
    assert_int_equal(st_client_replicas(c), 2);
    assert_int_equal(st_client_write_quorum(c), 2);
    chain = mk_chain(c, 1, 4);

    /* Both up: durable on both. */
    assert_int_equal(st_session_open_ex(c, "conv-1", 0, ST_SESSION_DURABLE, &info, &wr), ST_OK);
    assert_int_equal(wr.replicas, 2);
    assert_int_equal(wr.quorum, 2);
    assert_int_equal(wr.written, 2);
    assert_int_equal(st_session_append_ex(c, "conv-1", &chain[0], st_client_block_tokens(c),
                                          ST_SESSION_DURABLE, &wr),
                     ST_OK);
    assert_int_equal(wr.written, 2);
    assert_int_equal(put_kda(c, chain, 4, 0, 1, &written), ST_OK);
    assert_int_equal(written, 2);

    /* One of the two replicas down. */
    tc_kill(&cl, 1);
    assert_int_equal(st_session_append_ex(c, "conv-1", &chain[1], 2 * st_client_block_tokens(c),
                                          ST_SESSION_DURABLE, &wr),
                     ST_ERR_PARTIAL);
    assert_int_equal(wr.written, 1);
    assert_int_equal(wr.replicas, 2);
    assert_non_null(strstr(st_client_last_error(), "durable on 1 of 2 replicas"));
    /* The record is there, on the one replica. */
    assert_int_equal(st_session_get(c, "conv-1", &info), ST_OK);
    assert_int_equal(info.length, 2 * st_client_block_tokens(c));
    assert_int_equal(put_kda(c, chain, 4, 1, 1, &written), ST_ERR_PARTIAL);
    assert_int_equal(written, 1);
    assert_int_equal(get_kda(c, chain, 4, 1, 1), ST_OK);
    /* A write that is not durable needs one replica, as before. */
    assert_int_equal(
        st_session_append_ex(c, "conv-1", &chain[2], 3 * st_client_block_tokens(c), 0, &wr), ST_OK);
    assert_int_equal(wr.quorum, 1);
    assert_int_equal(wr.written, 1);

    /* W = 1: the same durable writes succeed. */
    c1 = connect2(&cl, 1);
    assert_int_equal(st_client_write_quorum(c1), 1);
    assert_int_equal(st_session_append_ex(c1, "conv-1", &chain[3], 4 * st_client_block_tokens(c1),
                                          ST_SESSION_DURABLE, &wr),
                     ST_OK);
    assert_int_equal(wr.written, 1);
    assert_int_equal(put_kda(c1, chain, 4, 2, 1, &written), ST_OK);
    assert_int_equal(written, 1);
    st_client_close(c1);

    st_client_close(c);
    free(chain);
    tc_stop_all(&cl);
    dd_rm_node_dirs(dir, 2);
}

/* A write quorum above the replicas (at most the nodes) is refused at connect. */
static void test_quorum_above_replicas(void **state)
{
    st_client_params_t p = {0};
    st_client_t *c = NULL;

    (void)state;
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_REPLICAS | ST_CLIENT_FIELD_WRITE_QUORUM;
    p.nodes = "127.0.0.1:1,127.0.0.1:2";
    p.replicas = 2;
    p.write_quorum = 3;
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(st_client_last_error(), "write_quorum 3 is above replicas 2"));
    /* R is at most the nodes there are: one node holds one copy. */
    p.nodes = "127.0.0.1:1";
    p.write_quorum = 2;
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_INVALID);
    assert_non_null(strstr(st_client_last_error(), "write_quorum 2 is above replicas 1"));
}

/*
 * Daemons without data_dir cannot commit to disk: they refuse a durable write
 * (UNSUPPORTED) and count as no replica, so the caller never sees ST_OK.
 */
static void test_no_ssd_tier_is_not_durable(void **state)
{
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    st_session_info_t info;
    st_write_result_t wr;
    uint32_t written = 9;

    (void)state;
    start2(&cl, NULL);
    c = connect2(&cl, 1);
    chain = mk_chain(c, 2, 2);
    assert_int_equal(st_session_open_ex(c, "conv-2", 0, ST_SESSION_DURABLE, &info, &wr),
                     ST_ERR_UNSUPPORTED);
    assert_int_equal(wr.written, 0);
    assert_non_null(strstr(st_client_last_error(), "no SSD tier"));
    assert_int_equal(put_kda(c, chain, 2, 0, 2, &written), ST_ERR_UNSUPPORTED);
    assert_int_equal(written, 0);
    {
        /* A durable batch: the KV object is stored (durable means nothing for it),
         * the KDA object is refused. */
        static uint8_t kv[OBJ], kd[OBJ];
        st_put_op_t ops[2] = {{.block = 1, .kind = ST_KIND_KV, .src = kv, .len = OBJ},
                              {.block = 1, .kind = ST_KIND_KDA, .src = kd, .len = OBJ}};
        st_handle_t *h = NULL;

        assert_int_equal(st_client_put(c, chain, 2, ops, 2, ST_PUT_DURABLE, &h), ST_OK);
        assert_int_equal(st_handle_wait(h, -1), ST_OK);
        assert_int_equal(ops[0].status, ST_OK);
        assert_int_equal(st_handle_replicas_written(h, 0), 1);
        assert_int_equal(ops[1].status, ST_ERR_UNSUPPORTED);
        assert_int_equal(st_handle_replicas_written(h, 1), 0);
        st_handle_release(h);
    }
    /* Not durable: served from DRAM as before. */
    assert_int_equal(st_session_open_ex(c, "conv-2", 0, 0, &info, &wr), ST_OK);
    assert_int_equal(wr.written, 2);
    st_client_close(c);
    free(chain);
    tc_stop_all(&cl);
}

/* Without replicas in the parameters, R is the cluster's (Hello), and so is W. */
static void test_replicas_from_hello(void **state)
{
    tc_cluster_t cl;
    st_client_params_t p = {0};
    st_client_t *c = NULL;
    char nodes[80];

    (void)state;
    assert_int_equal(
        tc_start(&cl, stratad_path, 2,
                 "--memory-limit 64M --chunk-bytes 4M --max-object 1M --transport none "
                 "--replicas 1"),
        0);
    snprintf(nodes, sizeof(nodes), "%s,%s", cl.node[0].addr, cl.node[1].addr);
    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TENANT | ST_CLIENT_FIELD_MODEL;
    p.nodes = nodes;
    p.tenant = "acme";
    p.model = "k3";
    assert_int_equal(st_client_connect(&p, &c), ST_OK);
    assert_int_equal(st_client_replicas(c), 1);
    assert_int_equal(st_client_write_quorum(c), 1);
    st_client_close(c);
    /* A write quorum above the cluster's R is refused once Hello said it. */
    p.field_mask |= ST_CLIENT_FIELD_WRITE_QUORUM;
    p.write_quorum = 2;
    c = NULL;
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_INVALID);
    assert_null(c);
    assert_non_null(strstr(st_client_last_error(), "write_quorum 2 is above replicas 1"));
    tc_stop_all(&cl);
}

/* What the kill test acknowledged. */
typedef struct acked {
    uint64_t length[SESSIONS]; /* last acknowledged length (0: none) */
    st_hash_t head[SESSIONS];
    uint8_t kda[BLOCKS]; /* 1: acknowledged */
} acked_t;

static void check_acked(st_client_t *c, const st_hash_t *chain, const acked_t *a, const char *who)
{
    size_t kda = 0;

    for (int s = 0; s < SESSIONS; s++) {
        st_session_info_t info;
        char id[16];

        snprintf(id, sizeof(id), "kill-%d", s);
        if (a->length[s] == 0) {
            continue;
        }
        assert_int_equal(st_session_get(c, id, &info), ST_OK);
        if (info.length != a->length[s]) {
            print_error("%s: session %s length %llu, acknowledged %llu\n", who, id,
                        (unsigned long long)info.length, (unsigned long long)a->length[s]);
        }
        assert_int_equal(info.length, a->length[s]);
        assert_memory_equal(info.head.b, a->head[s].b, ST_HASH_BYTES);
    }
    for (uint64_t b = 0; b < BLOCKS; b++) {
        if (a->kda[b]) {
            assert_int_equal(get_kda(c, chain, BLOCKS, b, 3), ST_OK);
            kda++;
        }
    }
    print_message("%s: %d sessions and %zu KDA objects as acknowledged\n", who, SESSIONS, kda);
}

/*
 * Both replicas up: durable appends and KDA puts, each acknowledged (ST_OK,
 * written on both), then kill -9 of node 0, restart, more writes, kill -9 of
 * node 1, restart. After each restart every acknowledged version and object
 * is readable from the cluster and from the restarted node alone (it had
 * committed them to disk before they were acknowledged).
 */
static void test_kill9_loses_nothing_acknowledged(void **state)
{
    tc_cluster_t cl;
    char dir[64];
    st_client_t *c;
    st_hash_t *chain, *heads;
    acked_t a;
    uint64_t next_block = 0;

    (void)state;
    memset(&a, 0, sizeof(a));
    mk_dirs(dir, sizeof(dir));
    start2(&cl, dir);
    c = connect2(&cl, 0);
    chain = mk_chain(c, 3, BLOCKS);
    heads = mk_chain(c, 4, SESSIONS * APPENDS * 2);
    for (int s = 0; s < SESSIONS; s++) {
        st_session_info_t info;
        st_write_result_t wr;
        char id[16];

        snprintf(id, sizeof(id), "kill-%d", s);
        assert_int_equal(st_session_open_ex(c, id, 0, ST_SESSION_DURABLE, &info, &wr), ST_OK);
        assert_int_equal(wr.written, 2);
    }
    for (int victim = 0; victim < 2; victim++) {
        char who[64];
        st_client_t *alone, *fresh;

        for (int k = 0; k < APPENDS; k++) {
            for (int s = 0; s < SESSIONS; s++) {
                st_write_result_t wr;
                uint64_t len = a.length[s] + 64;
                const st_hash_t *head = &heads[(victim * APPENDS + k) * SESSIONS + s];
                char id[16];

                snprintf(id, sizeof(id), "kill-%d", s);
                assert_int_equal(st_session_append_ex(c, id, head, len, ST_SESSION_DURABLE, &wr),
                                 ST_OK);
                assert_int_equal(wr.written, 2);
                a.length[s] = len;
                a.head[s] = *head;
            }
            if (next_block < BLOCKS) {
                uint32_t written = 0;

                assert_int_equal(put_kda(c, chain, BLOCKS, next_block, 3, &written), ST_OK);
                assert_int_equal(written, 2);
                a.kda[next_block++] = 1;
            }
        }
        /* kill -9 right after the last acknowledgement, and a restart. */
        tc_kill(&cl, victim);
        assert_int_equal(tc_restart(&cl, victim), 0);

        alone = connect_to(cl.node[victim].addr, 1, 0);
        snprintf(who, sizeof(who), "node %d alone after its kill -9", victim);
        check_acked(alone, chain, &a, who);
        st_client_close(alone);
        fresh = connect2(&cl, 0);
        snprintf(who, sizeof(who), "the cluster after node %d's kill -9", victim);
        check_acked(fresh, chain, &a, who);
        st_client_close(fresh);
        /* The old client sees the restarted node again after a health check. */
        for (int t = 0; t < 50; t++) {
            st_session_info_t info;
            st_write_result_t wr;

            if (st_session_open_ex(c, "kill-0", 0, ST_SESSION_DURABLE, &info, &wr) == ST_OK &&
                wr.written == 2) {
                break;
            }
            usleep(100 * 1000);
        }
    }
    st_client_close(c);
    free(chain);
    free(heads);
    tc_stop_all(&cl);
    dd_rm_node_dirs(dir, 2);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_partial_with_one_replica_down),
        cmocka_unit_test(test_quorum_above_replicas),
        cmocka_unit_test(test_no_ssd_tier_is_not_durable),
        cmocka_unit_test(test_replicas_from_hello),
        cmocka_unit_test(test_kill9_loses_nothing_acknowledged),
    };

    stratad_path = argc > 1 ? argv[1] : "stratad";
    return cmocka_run_group_tests(tests, NULL, NULL);
}
