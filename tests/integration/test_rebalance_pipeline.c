/*
 * test_rebalance_pipeline.c - the rebalancer's pipelined pushes (several
 * chunks, and so several Replicate calls, in flight at once:
 * cached/rebalance_worker.c) when the target fails mid-stream.
 *
 * Real stratad daemons on loopback with their own SSD tiers, static
 * membership, R = 2. Three daemons take 1,280 durable KDA checkpoints (16 KiB
 * each, 20 chunks of each pusher's share) and 64 durable sessions through
 * libstrata. A 4th joins with the pushes paced (rebalance_rate 1M, so that
 * the move lasts seconds); once the first copies reached it, and while calls
 * are still pending, it is killed with -9; its pushers' calls fail and are
 * retried; it is restarted on the same data directory. Then every object is
 * on exactly its 2 replicas of the 4-member ring, with its bytes (KDA) and
 * its length (sessions), asked of each node alone, and readable through
 * libstrata: nothing lost, nothing dropped before the new replica held it,
 * the failed copies retried. The pushers report failures (the kill did
 * land mid-stream, or the test proves nothing and fails).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "client_fixture.h"
#include "cluster.h"
#include "data_dirs.h"
#include "grpc_conn.h"
#include "ring.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"

#define SLOTS    4
#define R        2
#define OBJ      16384
#define CHAINS   80
#define BLOCKS   256 /* per chain: 16 segments of 16, a KDA checkpoint at each one's end */
#define S        16  /* segment_blocks (the default) */
#define PER      (BLOCKS / S)
#define SESSIONS 64

static const char *stratad_path;
static st_hash_t *chain[CHAINS];

static void fill(uint8_t *p, int k, uint64_t b)
{
    for (size_t i = 0; i < OBJ; i++) {
        p[i] = (uint8_t)(b * 29 + i * 11 + (uint64_t)k * 17);
    }
}

static st_client_t *client_of(const tc_cluster_t *cl, const int *idx, int n, uint32_t replicas)
{
    char nodes[256];
    size_t off = 0;
    st_client_params_t p;

    nodes[0] = '\0';
    for (int k = 0; k < n; k++) {
        off += (size_t)snprintf(nodes + off, sizeof(nodes) - off, "%s%s", k ? "," : "",
                                cl->node[idx[k]].addr);
    }
    cf_params_session(&p, nodes, "k3", 5000);
    p.field_mask |= ST_CLIENT_FIELD_REPLICAS;
    p.replicas = replicas;
    return cf_connect_retry(&p, 50);
}

static void mk_dirs(char *dir, size_t cap)
{
    assert_int_equal(dd_mk_node_dirs(dir, cap, "/tmp/strata-rbpipe-XXXXXX", SLOTS), 0);
}

static void session_name(int k, char *id, size_t cap)
{
    snprintf(id, cap, "pipe-%d", k);
}

/* The load, each write acknowledged by both replicas. */
static void write_all(const tc_cluster_t *cl)
{
    int m3[] = {0, 1, 2};
    st_client_t *c = client_of(cl, m3, 3, R);
    uint8_t *buf = malloc((size_t)PER * OBJ);
    st_put_op_t ops[PER];
    st_session_info_t info;
    st_write_result_t wr;
    char id[32];

    assert_non_null(buf);
    for (int k = 0; k < CHAINS; k++) {
        st_handle_t *h = NULL;

        chain[k] = cf_chain(c, 500 + (uint64_t)k, BLOCKS);
        for (int j = 0; j < PER; j++) {
            uint64_t b = (uint64_t)j * S + S - 1;

            fill(buf + (size_t)j * OBJ, k, b);
            ops[j] = (st_put_op_t){
                .block = b, .kind = ST_KIND_KDA, .src = buf + (size_t)j * OBJ, .len = OBJ};
        }
        assert_int_equal(st_client_put(c, chain[k], BLOCKS, ops, PER, ST_PUT_DURABLE, &h), ST_OK);
        assert_int_equal(st_handle_wait(h, -1), ST_OK);
        for (int j = 0; j < PER; j++) {
            assert_int_equal(ops[j].status, ST_OK);
        }
        assert_int_equal(st_handle_replicas_written(h, 0), R);
        st_handle_release(h);
    }
    for (int k = 0; k < SESSIONS; k++) {
        session_name(k, id, sizeof(id));
        assert_int_equal(st_session_open_ex(c, id, 0, ST_SESSION_DURABLE, &info, &wr), ST_OK);
        assert_int_equal(st_session_append_ex(c, id, &chain[k % CHAINS][S - 1],
                                              (uint64_t)(k + 1) * st_client_block_tokens(c),
                                              ST_SESSION_DURABLE, &wr),
                         ST_OK);
        assert_int_equal(wr.written, R);
    }
    free(buf);
    st_client_close(c);
}

/* Which KDA checkpoints of chain k the client c reads with their bytes: bit j. */
static uint32_t kda_held(st_client_t *c, int k)
{
    uint8_t *got = malloc((size_t)PER * OBJ), want[OBJ];
    st_get_op_t ops[PER];
    st_handle_t *h = NULL;
    uint32_t held = 0;

    assert_non_null(got);
    for (int j = 0; j < PER; j++) {
        ops[j] = (st_get_op_t){.block = (uint64_t)j * S + S - 1,
                               .kind = ST_KIND_KDA,
                               .dst = got + (size_t)j * OBJ,
                               .dst_len = OBJ};
    }
    assert_int_equal(st_client_get(c, chain[k], BLOCKS, ops, PER, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, -1), ST_OK);
    st_handle_release(h);
    for (int j = 0; j < PER; j++) {
        if (ops[j].status == ST_OK) {
            fill(want, k, ops[j].block);
            assert_int_equal(ops[j].length, OBJ);
            assert_memory_equal(got + (size_t)j * OBJ, want, OBJ);
            held |= 1u << j;
        }
    }
    free(got);
    return held;
}

/* 1 when the client c reads session k with the length written. */
static int session_held(st_client_t *c, int k)
{
    st_session_info_t info;
    char id[32];

    session_name(k, id, sizeof(id));
    return st_session_get(c, id, &info) == ST_OK && info.length == (uint64_t)(k + 1) * 64;
}

/* 1 when member j of ring holds exactly what it places on j. */
static int in_set(const ring_t *ring, const st_hash_t *at, int j)
{
    uint32_t set[R];
    size_t n = ring_place(ring, at, set, R);

    for (size_t x = 0; x < n; x++) {
        if ((int)set[x] == j) {
            return 1;
        }
    }
    return 0;
}

/* The objects not on exactly their R replicas of the ring over idx[0..n). */
static int misplaced(const tc_cluster_t *cl, const int *idx, int n)
{
    const char *names[SLOTS];
    ring_t ring;
    int bad = 0;

    for (int j = 0; j < n; j++) {
        names[j] = cl->node[idx[j]].addr;
    }
    assert_int_equal(ring_init(&ring, names, (uint32_t)n, 128), ST_OK);
    for (int j = 0; j < n; j++) {
        st_client_t *one = client_of(cl, &idx[j], 1, 1);

        for (int k = 0; k < CHAINS; k++) {
            uint32_t held = kda_held(one, k);

            for (int s = 0; s < PER; s++) {
                bad += in_set(&ring, &chain[k][s * S], j) != (int)((held >> s) & 1);
            }
        }
        for (int k = 0; k < SESSIONS; k++) {
            char id[32];
            st_hash_t sid;

            session_name(k, id, sizeof(id));
            cf_session_hash(id, &sid);
            bad += in_set(&ring, &sid, j) != session_held(one, k);
        }
        st_client_close(one);
    }
    ring_destroy(&ring);
    return bad;
}

/* The sum of a node-wide Stats counter over the three pushers (asserted there). */
static int64_t pushers_sum(const tc_cluster_t *cl, const char *name)
{
    int64_t sum = 0;

    for (int i = 0; i < 3; i++) {
        srpc_channel_config_t cc = {0};
        srpc_channel_t *ch = NULL;

        assert_int_equal(srpc_channel_open(cl->node[i].addr, &cc, &ch), ST_OK);
        sum += (int64_t)gc_stat(ch, name);
        srpc_channel_close(ch);
    }
    return sum;
}

static void apply(tc_cluster_t *cl, const int *idx, int n)
{
    assert_int_equal(tc_set_peers(cl, idx, n), 0);
    for (int k = 0; k < n; k++) {
        tc_signal(cl, idx[k], SIGHUP);
    }
}

/* Waits (up to 60 s) until every object is on exactly its replicas. */
static void settled(const tc_cluster_t *cl, const int *idx, int n, const char *step)
{
    int bad = 0;

    for (int tries = 0; tries < 120; tries++) {
        if ((bad = misplaced(cl, idx, n)) == 0) {
            break;
        }
        nanosleep(&(struct timespec){0, 500 * 1000 * 1000}, NULL);
    }
    print_message("after %s: %d objects not on exactly their %d replicas\n", step, bad, R);
    assert_int_equal(bad, 0);
}

/* Every object through libstrata over the members. */
static void readable(const tc_cluster_t *cl, const int *idx, int n)
{
    st_client_t *c = client_of(cl, idx, n, R);

    for (int k = 0; k < CHAINS; k++) {
        assert_int_equal(kda_held(c, k), (1u << PER) - 1);
    }
    for (int k = 0; k < SESSIONS; k++) {
        assert_true(session_held(c, k));
    }
    st_client_close(c);
}

static void test_target_killed_mid_stream(void **state)
{
    tc_cluster_t cl;
    char dir[64], args[512];
    int m3[] = {0, 1, 2}, m4[] = {0, 1, 2, 3};
    int64_t objects = 0, pending = 0, failed0, failed;

    (void)state;
    mk_dirs(dir, sizeof(dir));
    snprintf(args, sizeof(args),
             "--memory-limit 128M --chunk-bytes 4M --max-object 1M --transport none "
             "--ssd-map-size 256M --ssd-sync none --replicas 2 --rebalance-rate 1M "
             "--data-dir %s/{node}",
             dir);
    assert_int_equal(tc_start_static(&cl, stratad_path, SLOTS, 3, dir, args), 0);
    write_all(&cl);
    settled(&cl, m3, 3, "the writes");
    failed0 = pushers_sum(&cl, "rebalance_failed");

    /* The join; the new member killed once its first copies arrived. */
    assert_int_equal(tc_set_peers(&cl, m4, 4), 0);
    assert_int_equal(tc_restart(&cl, 3), 0);
    apply(&cl, m4, 4);
    for (int tries = 0; tries < 3000 && objects <= 0; tries++) {
        objects = pushers_sum(&cl, "rebalance_objects");
        pending = pushers_sum(&cl, "rebalance_pending");
        usleep(2000);
    }
    tc_kill(&cl, 3);
    print_message("node 3 killed with %lld copies acknowledged, %lld objects pending\n",
                  (long long)objects, (long long)pending);
    assert_true(objects > 0);
    assert_true(pending > 0);
    /* The pushers' next calls fail (once their pacing lets them send), and
     * are retried every 250 ms. */
    for (int tries = 0;
         tries < 600 && (failed = pushers_sum(&cl, "rebalance_failed") - failed0) <= 0; tries++) {
        usleep(50000);
    }
    usleep(500000); /* a few retries more */
    print_message("pushes and checks failed while node 3 was down: %lld\n", (long long)failed);
    assert_true(failed > 0);
    assert_int_equal(tc_restart(&cl, 3), 0);
    settled(&cl, m4, 4, "the join, its target killed and restarted mid-stream");
    readable(&cl, m4, 4);
    readable(&cl, m3, 3); /* a client of the old list: the copies it finds */

    for (int k = 0; k < CHAINS; k++) {
        free(chain[k]);
    }
    tc_stop_all(&cl);
    unlink(cl.peers_file);
    dd_rm_node_dirs(dir, SLOTS);
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_target_killed_mid_stream),
    };

    stratad_path = argc > 1 ? argv[1] : "stratad";
    return cmocka_run_group_tests(tests, NULL, NULL);
}
