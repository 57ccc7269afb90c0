/*
 * test_client.c - libstrata against four real daemons on loopback: a
 * 1M-token session spread over all four, lookup of exactly the longest
 * stored prefix (also after a node is killed, where the prefix ends before
 * the first lost segment), KDA and SESSION objects read from replicas with a
 * node down, the lookup that finds a node down answering as the next one
 * (replicas included), a multi-turn session growing turn by turn, the node
 * coming back, and bad input.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "client_fixture.h"
#include "cluster.h"
#include "ring.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "stratad_arg.h"

#define N_NODES  4
#define N_BLOCKS 16384 /* 1M tokens of 64 */
#define OBJ      128

static const char *stratad_path;

static st_client_t *connect_cluster(const tc_cluster_t *cl)
{
    st_client_params_t p;

    /* generous: the sanitizer build on 2 busy cores is slow */
    cf_params_session(&p, cl->peers, "k3", 30000);
    return cf_connect(&p);
}

/* Waits (up to 10 s) until the client sees every node up again. */
static void wait_all_up(st_client_t *c, const st_hash_t *chain)
{
    st_lookup_result_t r;

    for (int tries = 0; tries < 200; tries++) {
        assert_int_equal(st_client_lookup(c, chain, 1, 0, &r), ST_OK);
        if (r.nodes_down == 0) {
            return;
        }
        nanosleep(&(struct timespec){0, 50 * 1000 * 1000}, NULL);
    }
    fail_msg("a restarted node was not used again within 10 s (down=%u asked=%u: %s)", r.nodes_down,
             r.nodes_asked, st_client_last_error());
}

static void fill(uint8_t *buf, size_t len, const st_hash_t *h, int kind, int layer)
{
    uint64_t x = XXH3_64bits_withSeed(h->b, 16, (uint64_t)(kind * 256 + layer));

    for (size_t i = 0; i < len; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[i] = (uint8_t)(x >> 56);
    }
}

/* Puts KV and IDX layers 0 and 1 of blocks [from, to), and KDA every 16 blocks. */
static void put_blocks(st_client_t *c, const st_hash_t *chain, size_t n_chain, size_t from,
                       size_t to)
{
    size_t n = (to - from) * 5, k = 0;
    st_put_op_t *ops = calloc(n, sizeof(*ops));
    uint8_t *data = malloc(n * OBJ);
    st_handle_t *h;

    assert_true(ops && data);
    for (size_t b = from; b < to; b++) {
        for (int l = 0; l < 2; l++) {
            for (uint8_t kind = ST_KIND_KV; kind <= ST_KIND_IDX; kind++) {
                fill(data + k * OBJ, OBJ, &chain[b], kind, l);
                ops[k] = (st_put_op_t){b, kind, (uint16_t)l, data + k * OBJ, OBJ, 0, 0};
                k++;
            }
        }
        if ((b + 1) % 16 == 0) {
            fill(data + k * OBJ, OBJ, &chain[b], ST_KIND_KDA, 0);
            ops[k] = (st_put_op_t){b, ST_KIND_KDA, 0, data + k * OBJ, OBJ, 0, 0};
            k++;
        }
    }
    assert_int_equal(st_client_put(c, chain, n_chain, ops, k, 0, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, 60000), ST_OK);
    assert_true(st_handle_test(h));
    st_handle_release(h);
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(ops[i].status, ST_OK);
    }
    free(ops);
    free(data);
}

static uint64_t node_objects(const tc_cluster_t *cl, int i)
{
    srpc_channel_t *ch;
    Strata__V1__StatsRequest req = STRATA__V1__STATS_REQUEST__INIT;
    Strata__V1__StatsResponse *resp = NULL;
    srpc_error_t err;
    uint64_t v = 0;

    assert_int_equal(srpc_channel_open(cl->node[i].addr, NULL, &ch), ST_OK);
    assert_int_equal(srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_STATS], &req.base, 5000,
                               (ProtobufCMessage **)&resp, &err),
                     ST_OK);
    for (size_t k = 0; k < resp->n_counters; k++) {
        if (strcmp(resp->counters[k]->key, "objects_kv") == 0) {
            v = resp->counters[k]->value;
        }
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    srpc_channel_close(ch);
    return v;
}

/* A thin client's view: ClusterLookup on one daemon, which asks its peers. */
static uint64_t cluster_lookup(const tc_cluster_t *cl, int via, st_client_t *c,
                               const st_hash_t *chain, size_t n)
{
    srpc_channel_t *ch;
    Strata__V1__HelloRequest hello = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *hr = NULL;
    Strata__V1__ClusterLookupRequest req = STRATA__V1__CLUSTER_LOOKUP_REQUEST__INIT;
    Strata__V1__ClusterLookupResponse *resp = NULL;
    uint32_t layers[2] = {0, 1};
    srpc_error_t err;
    uint64_t matched;

    assert_int_equal(srpc_channel_open(cl->node[via].addr, NULL, &ch), ST_OK);
    hello.tenant = "acme";
    hello.model = "k3";
    assert_int_equal(srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &hello.base, 30000,
                               (ProtobufCMessage **)&hr, &err),
                     ST_OK);
    req.namespace_id = hr->namespace_id;
    protobuf_c_message_free_unpacked(&hr->base, NULL);
    req.block_hashes.data = (uint8_t *)chain[0].b;
    req.block_hashes.len = n * 16;
    req.kinds_mask = (1u << STRATA__V1__OBJECT_KIND__KV) | (1u << STRATA__V1__OBJECT_KIND__IDX);
    req.layers = layers;
    req.n_layers = 2;
    if (srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_CLUSTER_LOOKUP], &req.base, 30000,
                  (ProtobufCMessage **)&resp, &err) != ST_OK) {
        fail_msg("ClusterLookup via node %d: %s", via, err.message);
    }
    assert_int_equal(resp->n_segments,
                     (n + st_client_segment_blocks(c) - 1) / st_client_segment_blocks(c));
    matched = resp->matched_blocks;
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    srpc_channel_close(ch);
    return matched;
}

static void test_cluster(void **state)
{
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    st_lookup_result_t r;
    ring_t ring;
    const char *names[N_NODES];
    uint32_t S;
    size_t lost_seg = SIZE_MAX, total = 0;
    int victim = 1;

    assert_int_equal(tc_start(&cl, stratad_path, N_NODES, "--memory-limit 1G"), 0);
    c = connect_cluster(&cl);
    S = st_client_segment_blocks(c);
    chain = cf_chain(c, 7, N_BLOCKS);

    /* Nothing yet. */
    assert_int_equal(st_client_lookup(c, chain, N_BLOCKS, 2, &r), ST_OK);
    assert_int_equal(r.matched_blocks, 0);

    /* The first 10,000 blocks (a bit more than 600K tokens) first. */
    put_blocks(c, chain, N_BLOCKS, 0, 10000);
    assert_int_equal(st_client_lookup(c, chain, N_BLOCKS, 2, &r), ST_OK);
    assert_int_equal(r.matched_blocks, 10000);
    assert_int_equal(r.resumable_blocks, 10000 / 16 * 16);
    /* Asking for a layer nobody wrote matches nothing. */
    assert_int_equal(st_client_lookup(c, chain, N_BLOCKS, 3, &r), ST_OK);
    assert_int_equal(r.matched_blocks, 0);

    /* The whole million tokens: every node holds a share. */
    put_blocks(c, chain, N_BLOCKS, 10000, N_BLOCKS);
    assert_int_equal(st_client_lookup(c, chain, N_BLOCKS, 2, &r), ST_OK);
    assert_int_equal(r.matched_blocks, N_BLOCKS);
    for (int i = 0; i < N_NODES; i++) {
        uint64_t objs = node_objects(&cl, i);

        print_message("node %d holds %llu KV objects\n", i, (unsigned long long)objs);
        assert_true(objs > (uint64_t)N_BLOCKS * 2 / N_NODES / 3);
        total += objs;
    }
    assert_int_equal(total, N_BLOCKS * 2);
    /* Any daemon answers for the whole cluster. */
    assert_int_equal(cluster_lookup(&cl, 0, c, chain, N_BLOCKS), N_BLOCKS);
    assert_int_equal(cluster_lookup(&cl, 3, c, chain, 5000), 5000);

    /* Kill one node: the prefix ends before its first segment. */
    for (int i = 0; i < N_NODES; i++) {
        names[i] = cl.node[i].addr;
    }
    assert_int_equal(ring_init(&ring, names, N_NODES, 128), ST_OK);
    for (size_t k = 0; k * S < N_BLOCKS; k++) {
        if (ring_home(&ring, &chain[k * S]) == (uint32_t)victim) {
            lost_seg = k;
            break;
        }
    }
    assert_true(lost_seg != SIZE_MAX);
    tc_kill(&cl, victim);
    assert_int_equal(st_client_lookup(c, chain, N_BLOCKS, 2, &r), ST_OK);
    assert_int_equal(r.matched_blocks, lost_seg * S);
    assert_true(r.resumable_blocks <= r.matched_blocks);
    assert_true(r.nodes_down >= 1);
    /* The fan-out lookup of a live daemon agrees: lost data is never claimed. */
    assert_int_equal(cluster_lookup(&cl, (victim + 1) % N_NODES, c, chain, N_BLOCKS), lost_seg * S);

    /* KDA checkpoints of segments the dead node owned are read from replicas. */
    {
        size_t b = lost_seg * S + 15;
        uint8_t got[OBJ], want[OBJ];
        st_get_op_t g = {b, ST_KIND_KDA, 0, got, sizeof(got), 0, NULL, 0, 0, 0};
        st_get_op_t kv = {b, ST_KIND_KV, 0, got, sizeof(got), 0, NULL, 0, 0, 0};
        st_handle_t *h;

        assert_int_equal(st_client_get(c, chain, N_BLOCKS, &g, 1, &h), ST_OK);
        st_handle_wait(h, -1);
        st_handle_release(h);
        assert_int_equal(g.status, ST_OK);
        fill(want, OBJ, &chain[b], ST_KIND_KDA, 0);
        assert_memory_equal(got, want, OBJ);
        /* Its KV, which is not replicated, is a miss: never claimed. */
        assert_int_equal(st_client_get(c, chain, N_BLOCKS, &kv, 1, &h), ST_OK);
        st_handle_wait(h, -1);
        st_handle_release(h);
        assert_int_equal(kv.status, ST_ERR_NOT_FOUND);
    }

    /* Back: the node is used again (empty, so the prefix still ends there). */
    assert_int_equal(tc_restart(&cl, victim), 0);
    wait_all_up(c, chain);
    assert_int_equal(r.matched_blocks, lost_seg * S);
    put_blocks(c, chain, N_BLOCKS, lost_seg * S, N_BLOCKS);
    assert_int_equal(st_client_lookup(c, chain, N_BLOCKS, 2, &r), ST_OK);
    assert_int_equal(r.matched_blocks, N_BLOCKS);

    ring_destroy(&ring);
    free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

/*
 * A chain with a KDA object on every block (replicated: R = 2): after a node
 * is killed, the very lookup that finds it down (layers 0: any object counts)
 * already routes its segments to the next nodes, whose replicas make the
 * whole chain match, as the next lookup does.
 */
static void test_lookup_that_finds_a_node_down(void **state)
{
    enum { BLOCKS = 2048 };
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *chain;
    st_lookup_result_t first, again;
    uint8_t *data = malloc((size_t)BLOCKS * OBJ);
    st_put_op_t *ops = calloc(BLOCKS, sizeof(*ops));
    st_handle_t *h;

    (void)state;
    assert_non_null(data);
    assert_non_null(ops);
    assert_int_equal(tc_start(&cl, stratad_path, N_NODES, "--memory-limit 256M"), 0);
    c = connect_cluster(&cl);
    chain = cf_chain(c, 11, BLOCKS);
    for (size_t b = 0; b < BLOCKS; b++) {
        fill(data + b * OBJ, OBJ, &chain[b], ST_KIND_KDA, 0);
        ops[b] = (st_put_op_t){b, ST_KIND_KDA, 0, data + b * OBJ, OBJ, 0, 0};
    }
    assert_int_equal(st_client_put(c, chain, BLOCKS, ops, BLOCKS, 0, &h), ST_OK);
    st_handle_wait(h, -1);
    st_handle_release(h);
    for (size_t b = 0; b < BLOCKS; b++) {
        assert_int_equal(ops[b].status, ST_OK);
    }
    assert_int_equal(st_client_lookup(c, chain, BLOCKS, 0, &first), ST_OK);
    assert_int_equal(first.matched_blocks, BLOCKS);
    assert_int_equal(first.nodes_down, 0);
    tc_kill(&cl, 2);
    assert_int_equal(st_client_lookup(c, chain, BLOCKS, 0, &first), ST_OK);
    assert_true(first.nodes_down >= 1);
    assert_int_equal(st_client_lookup(c, chain, BLOCKS, 0, &again), ST_OK);
    assert_true(again.nodes_down >= 1);
    assert_int_equal(first.matched_blocks, again.matched_blocks);
    assert_int_equal(first.resumable_blocks, again.resumable_blocks);
    assert_int_equal(first.matched_blocks, BLOCKS);
    free(chain), free(data), free(ops);
    st_client_close(c);
    tc_stop_all(&cl);
}

static void test_sessions_grow_and_survive_a_node(void **state)
{
    tc_cluster_t cl;
    st_client_t *c;
    st_session_info_t info;
    st_hash_t *chain;
    uint32_t bt;

    assert_int_equal(tc_start(&cl, stratad_path, N_NODES, NULL), 0);
    c = connect_cluster(&cl);
    bt = st_client_block_tokens(c);
    chain = cf_chain(c, 11, 64);
    assert_int_equal(st_session_open(c, "chat-42", 0, &info), ST_OK);
    assert_int_equal(info.length, 0);
    /* Three turns, the prefix growing each time. */
    for (size_t turn = 1; turn <= 3; turn++) {
        size_t nb = turn * 16;

        assert_int_equal(st_session_append(c, "chat-42", &chain[nb - 1], nb * bt), ST_OK);
        assert_int_equal(st_session_get(c, "chat-42", &info), ST_OK);
        assert_int_equal(info.length, nb * bt);
        assert_memory_equal(&info.head, &chain[nb - 1], sizeof(st_hash_t));
    }
    /* Any one node down: the record is still read from a replica. */
    for (int victim = 0; victim < N_NODES; victim++) {
        tc_kill(&cl, victim);
        assert_int_equal(st_session_get(c, "chat-42", &info), ST_OK);
        assert_int_equal(info.length, 48 * bt);
        assert_int_equal(tc_restart(&cl, victim), 0);
        wait_all_up(c, chain);
        /* The restarted node has lost its copy: write the turn again. */
        assert_int_equal(st_session_open(c, "chat-42", 0, &info), ST_OK);
        assert_int_equal(st_session_append(c, "chat-42", &chain[47], 48 * bt), ST_OK);
    }
    assert_int_equal(st_session_close(c, "chat-42"), ST_OK);
    assert_int_equal(st_session_get(c, "chat-42", &info), ST_ERR_NOT_FOUND);
    /* Bad ids. */
    assert_int_equal(st_session_open(c, "", 0, &info), ST_ERR_INVALID);
    assert_non_null(strstr(st_client_last_error(), "1..63"));
    free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

static void test_bad_input(void **state)
{
    tc_cluster_t cl;
    st_client_params_t p = {0};
    st_client_t *c = NULL;
    st_hash_t *chain;
    st_get_op_t g = {0};
    st_handle_t *h = NULL;
    uint8_t buf[16];

    p.field_mask = ST_CLIENT_FIELD_NODES;
    p.nodes = "no-port-here";
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_INVALID);
    assert_non_null(strstr(st_client_last_error(), "no-port-here"));
    p.nodes = "127.0.0.1:1";
    p.field_mask |= ST_CLIENT_FIELD_TIMEOUT;
    p.timeout_ms = 500;
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_UNAVAILABLE);
    p.field_mask = ST_CLIENT_FIELD_CONFIG_FILE;
    p.config_file = "/nonexistent/strata.ini";
    assert_int_equal(st_client_connect(&p, &c), ST_ERR_IO);
    assert_non_null(strstr(st_client_last_error(), "/nonexistent/strata.ini"));

    assert_int_equal(tc_start(&cl, stratad_path, 1, NULL), 0);
    c = connect_cluster(&cl);
    chain = cf_chain(c, 3, 4);
    g.block = 4; /* outside the chain */
    g.kind = ST_KIND_KV;
    g.dst = buf;
    g.dst_len = sizeof(buf);
    assert_int_equal(st_client_get(c, chain, 4, &g, 1, &h), ST_ERR_INVALID);
    g.block = 0;
    g.kind = 9;
    assert_int_equal(st_client_get(c, chain, 4, &g, 1, &h), ST_ERR_INVALID);
    free(chain);
    st_client_close(c);
    tc_stop_all(&cl);
}

TM_STRATAD_MAIN("test_client", "PATH-TO-STRATAD", &stratad_path, cmocka_unit_test(test_cluster),
                cmocka_unit_test(test_lookup_that_finds_a_node_down),
                cmocka_unit_test(test_sessions_grow_and_survive_a_node),
                cmocka_unit_test(test_bad_input))
