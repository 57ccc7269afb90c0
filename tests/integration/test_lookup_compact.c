/*
 * test_lookup_compact.c - compact lookup segments (docs/protocol.md "Compact
 * segments") give exactly the answers of the full form, against real
 * daemons on loopback:
 *
 *   - one daemon, driven with raw Lookup calls: chains with partial
 *     segments, a gap (blocks stored after a missing stretch wait as roots
 *     for their parent), blocks with a missing layer, deleted middles (empty
 *     links), KDA checkpoints at random blocks and a branch; random ranges,
 *     random probe offsets, random requirements; every compact answer, with
 *     its undecided blocks asked again with their hashes, equals the full
 *     form's answer (matched blocks and checkpoints), and malformed compact
 *     segments get INVALID_ARGUMENT;
 *   - four daemons through libstrata: st_client_lookup with compact segments
 *     and with every hash (STRATA_LOOKUP_COMPACT=0) agree on random prefixes
 *     of stored, partial and diverging chains, also after a node is killed;
 *     ClusterLookup (compact at the owners) equals its full form segment by
 *     segment;
 *   - a daemon with an SSD tier whose chains spilled: the compact form's
 *     second call promotes, and both forms answer the whole chain.
 *
 * STRATA_TEST_SEED fixes the random sequence (the seed is printed).
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

#include "data_dirs.h"
#include "client_fixture.h"
#include "cluster.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "stratad_arg.h"

#define OBJ 64

static const char *stratad_path;
static uint64_t rng_state;
static unsigned n_decided_full, n_decided_part, n_undecided, n_zero; /* what was covered */

static uint64_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return rng_state >> 17;
}

static uint32_t rnd_below(uint32_t n)
{
    return n == 0 ? 0 : (uint32_t)(rnd() % n);
}

static void seed_rng(void)
{
    const char *s = getenv("STRATA_TEST_SEED");
    uint64_t seed = s != NULL ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);

    printf("test_lookup_compact: seed %llu (STRATA_TEST_SEED)\n", (unsigned long long)seed);
    rng_state = seed * 2654435761u + 1;
}

static st_client_t *connect_nodes(const char *nodes)
{
    st_client_params_t p;

    cf_params_session(&p, nodes, "k3", 30000);
    return cf_connect(&p);
}

/* A chain of n blocks whose tokens follow stream a up to block diverge and
 * stream b after it. */
static st_hash_t *make_chain(st_client_t *c, uint64_t a, uint64_t b, size_t diverge, size_t n)
{
    size_t bt = st_client_block_tokens(c), cut = (diverge < n ? diverge : n) * bt;
    uint32_t *tok = cf_token_buf(c, n);

    cf_tokens(tok, 0, cut, a);
    cf_tokens(tok, cut, n * bt, b);
    return cf_hash(c, tok, n);
}

/*
 * Puts blocks [from, to) of the chain: KV and IDX of layer 0, of layer 1
 * unless no_layer1(b), and a KDA checkpoint where kda(b).
 */
static void put_range(st_client_t *c, const st_hash_t *chain, size_t n_chain, size_t from,
                      size_t to, const uint8_t *no_layer1, const uint8_t *kda)
{
    size_t cap = (to - from) * 5, k = 0;
    st_put_op_t *ops = calloc(cap, sizeof(*ops));
    static uint8_t data[OBJ];
    st_handle_t *h;

    assert_non_null(ops);
    memset(data, 0x5a, sizeof(data));
    for (size_t b = from; b < to; b++) {
        for (uint16_t l = 0; l < 2; l++) {
            if (l == 1 && no_layer1 != NULL && no_layer1[b]) {
                continue;
            }
            ops[k++] = (st_put_op_t){b, ST_KIND_KV, l, data, OBJ, 0, 0};
            ops[k++] = (st_put_op_t){b, ST_KIND_IDX, l, data, OBJ, 0, 0};
        }
        if (kda != NULL && kda[b]) {
            ops[k++] = (st_put_op_t){b, ST_KIND_KDA, 0, data, OBJ, 0, 0};
        }
    }
    assert_int_equal(st_client_put(c, chain, n_chain, ops, k, 0, &h), ST_OK);
    assert_int_equal(st_handle_wait(h, 60000), ST_OK);
    st_handle_release(h);
    for (size_t i = 0; i < k; i++) {
        assert_int_equal(ops[i].status, ST_OK);
    }
    free(ops);
}

/* ------------------------------------------------------ raw Lookup calls -- */

typedef struct raw {
    srpc_channel_t *ch;
    uint64_t ns;
} raw_t;

static void raw_open(raw_t *r, const char *addr)
{
    Strata__V1__HelloRequest hello = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *hr = NULL;
    srpc_error_t err;

    assert_int_equal(srpc_channel_open(addr, NULL, &r->ch), ST_OK);
    hello.tenant = "acme";
    hello.model = "k3";
    assert_int_equal(srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &hello.base, 30000,
                               (ProtobufCMessage **)&hr, &err),
                     ST_OK);
    r->ns = hr->namespace_id;
    protobuf_c_message_free_unpacked(&hr->base, NULL);
}

typedef struct answer {
    uint32_t matched, unresolved;
    size_t n_kda;
    uint64_t kda[4096];
} answer_t;

/*
 * One Lookup of the n blocks of h from chain index first: full form when
 * probes is NULL, else compact with those np offsets. Returns the call's
 * status; the answer in *a.
 */
static st_status_t raw_lookup(const raw_t *r, const st_hash_t *h, uint64_t first, uint32_t n,
                              uint32_t kinds_mask, const uint32_t *layers, size_t n_layers,
                              const uint32_t *probes, uint32_t np, answer_t *a)
{
    Strata__V1__LookupRequest req = STRATA__V1__LOOKUP_REQUEST__INIT;
    Strata__V1__Segment sg = STRATA__V1__SEGMENT__INIT, *sgp = &sg;
    Strata__V1__LookupResponse *resp = NULL;
    st_hash_t *ph = NULL;
    srpc_error_t err;
    st_status_t st;

    req.namespace_id = r->ns;
    req.segments = &sgp;
    req.n_segments = 1;
    req.kinds_mask = kinds_mask;
    req.layers = (uint32_t *)layers;
    req.n_layers = n_layers;
    if (probes == NULL) {
        sg.first_block = first;
        sg.block_hashes.data = (uint8_t *)h[0].b;
        sg.block_hashes.len = (size_t)n * ST_HASH_BYTES;
    } else {
        ph = malloc(sizeof(*ph) * (np + 1));
        assert_non_null(ph);
        for (uint32_t j = 0; j < np; j++) {
            ph[j] = h[probes[j] < n ? probes[j] : 0];
        }
        req.n_segments = 0;
        req.compact_first = &first;
        req.compact_blocks = &n;
        req.compact_probes = &np;
        req.n_compact_first = req.n_compact_blocks = req.n_compact_probes = 1;
        req.compact_offsets = (uint32_t *)probes;
        req.n_compact_offsets = np;
        req.compact_hashes.data = (uint8_t *)ph[0].b;
        req.compact_hashes.len = (size_t)np * ST_HASH_BYTES;
    }
    st = srpc_call(r->ch, &srpc_cache_methods[SRPC_CACHE_LOOKUP], &req.base, 30000,
                   (ProtobufCMessage **)&resp, &err);
    free(ph);
    if (st != ST_OK) {
        return st;
    }
    assert_int_equal(resp->compact, probes != NULL);
    if (probes != NULL) {
        assert_int_equal(resp->n_segments, 0);
        assert_int_equal(resp->n_compact_matched, 1);
        assert_int_equal(resp->n_compact_unresolved, 1);
        assert_int_equal(resp->n_compact_kda_counts, 1);
        assert_int_equal(resp->n_compact_kda, resp->compact_kda_counts[0]);
        a->matched = resp->compact_matched[0];
        a->unresolved = resp->compact_unresolved[0];
        a->n_kda = resp->n_compact_kda;
        assert_true(a->n_kda <= 4096);
        if (a->n_kda > 0) {
            memcpy(a->kda, resp->compact_kda, sizeof(uint64_t) * a->n_kda);
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        return ST_OK;
    }
    assert_int_equal(resp->n_segments, 1);
    a->matched = resp->segments[0]->matched_blocks;
    a->unresolved = 0;
    a->n_kda = resp->segments[0]->n_kda_checkpoints;
    assert_true(a->n_kda <= 4096);
    if (a->n_kda > 0) {
        memcpy(a->kda, resp->segments[0]->kda_checkpoints, sizeof(uint64_t) * a->n_kda);
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    return ST_OK;
}

/* Random probe offsets over n blocks: 0, n - 1 and a few between. */
static uint32_t random_probes(uint32_t n, uint32_t *probes)
{
    uint32_t np = 0, want = rnd_below(6) == 0 ? 0 : 1 + rnd_below(12);
    uint32_t step = want > 0 ? (n / (want + 1) > 0 ? n / (want + 1) : 1) : n;

    probes[np++] = 0;
    for (uint32_t o = 1 + rnd_below(step); o < n - 1 && want > 0; o += 1 + rnd_below(2 * step)) {
        probes[np++] = o;
    }
    if (n > 1) {
        probes[np++] = n - 1;
    }
    return np;
}

/* The compact answer, completed as a client completes it, must equal the
 * full form's answer. */
static void compare_one(const raw_t *r, const st_hash_t *chain, size_t n_chain)
{
    static const uint32_t l01[2] = {0, 1}, l0[1] = {0}, l1[1] = {1};
    static answer_t full, comp, rest;
    static uint32_t probes[8192];
    uint32_t kv_idx = (1u << STRATA__V1__OBJECT_KIND__KV) | (1u << STRATA__V1__OBJECT_KIND__IDX);
    uint64_t first = rnd_below(4) == 0 ? 0 : rnd_below((uint32_t)n_chain);
    uint32_t n = 1 + rnd_below((uint32_t)(n_chain - first)), np, pick = rnd_below(5);
    uint32_t mask = pick == 0 ? 0 : kv_idx;
    const uint32_t *layers = pick == 1 ? l0 : pick == 2 ? l1 : pick >= 3 ? l01 : NULL;
    size_t n_layers = pick == 1 || pick == 2 ? 1 : pick >= 3 ? 2 : 0;

    if (pick == 4) {
        mask = 1u << STRATA__V1__OBJECT_KIND__KV; /* KV alone, any layer */
        layers = NULL;
        n_layers = 0;
    }
    np = random_probes(n, probes);
    assert_int_equal(raw_lookup(r, chain + first, first, n, mask, layers, n_layers, NULL, 0, &full),
                     ST_OK);
    assert_int_equal(
        raw_lookup(r, chain + first, first, n, mask, layers, n_layers, probes, np, &comp), ST_OK);
    assert_int_equal(full.unresolved, 0);
    assert_true(comp.matched + comp.unresolved <= n);
    n_zero += full.matched == 0;
    n_undecided += comp.unresolved > 0;
    n_decided_full += comp.unresolved == 0 && comp.matched == n;
    n_decided_part += comp.unresolved == 0 && comp.matched > 0 && comp.matched < n;
    if (comp.unresolved > 0) {
        /* Every block before the undecided ones matched; the block after
         * them (if any) did not. */
        assert_true(full.matched >= comp.matched);
        assert_true(full.matched <= comp.matched + comp.unresolved);
        assert_int_equal(raw_lookup(r, chain + first + comp.matched, first + comp.matched,
                                    comp.unresolved, mask, layers, n_layers, NULL, 0, &rest),
                         ST_OK);
        memcpy(comp.kda + comp.n_kda, rest.kda, sizeof(uint64_t) * rest.n_kda);
        comp.n_kda += rest.n_kda;
        comp.matched += rest.matched;
    }
    if (comp.matched != full.matched || comp.n_kda != full.n_kda ||
        memcmp(comp.kda, full.kda, sizeof(uint64_t) * full.n_kda) != 0) {
        fail_msg("first %llu n %u probes %u mask %x layers %zu: compact %u (%zu kda), full %u "
                 "(%zu kda)",
                 (unsigned long long)first, n, np, mask, n_layers, comp.matched, comp.n_kda,
                 full.matched, full.n_kda);
    }
}

static void test_one_daemon_random(void **state)
{
    enum { N = 3000, N_BR = 1500 };
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *a, *b;
    uint8_t *no_l1 = calloc(N, 1), *kda = calloc(N, 1);
    raw_t r;
    answer_t *ans = malloc(sizeof(*ans));

    (void)state;
    assert_true(no_l1 && kda && ans);
    assert_int_equal(tc_start(&cl, stratad_path, 1, NULL), 0);
    c = connect_nodes(cl.peers);
    a = make_chain(c, 1, 1, N, N);
    b = make_chain(c, 1, 2, 900, N_BR); /* shares blocks 0..899 with a */
    for (size_t i = 0; i < N; i++) {
        kda[i] = rnd_below(9) == 0;
        no_l1[i] = (i >= 1200 && i < 1210) || rnd_below(400) == 0;
    }
    /* a: stored up to 2000, a gap of 2000..2100, then 2100..2800 (roots that
     * wait for their parent); b: its own blocks 900..1400. */
    put_range(c, a, N, 0, 2000, no_l1, kda);
    put_range(c, a, N, 2100, 2800, no_l1, kda);
    put_range(c, b, N_BR, 900, 1400, NULL, NULL);
    /* Deleted middles: blocks 500, 501 and 1700 keep their place in the
     * chain as empty links; block 1000 loses its layer 1 only. */
    assert_int_equal(st_client_delete(c, a + 500, 2, 0x1f, 2), ST_OK);
    assert_int_equal(st_client_delete(c, a + 1700, 1, 0x1f, 2), ST_OK);
    assert_int_equal(st_client_delete(c, a + 1000, 1, (1u << ST_KIND_KV), 2), ST_OK);
    raw_open(&r, cl.node[0].addr);

    for (int i = 0; i < 600; i++) {
        compare_one(&r, i % 3 == 2 ? b : a, i % 3 == 2 ? N_BR : N);
    }

    printf("test_lookup_compact: 600 lookups: %u decided in full, %u decided partly, %u with "
           "undecided blocks, %u matching nothing\n",
           n_decided_full, n_decided_part, n_undecided, n_zero);
    assert_true(n_decided_full > 0 && n_decided_part > 0 && n_undecided > 0 && n_zero > 0);
    /* The bench's shape: the whole stored prefix, first and last only. */
    {
        uint32_t pr[2] = {0, 499};
        uint32_t l[1] = {0}; /* layer 1 is missing from a few blocks */

        assert_int_equal(raw_lookup(&r, a, 0, 500, 6, l, 1, pr, 2, ans), ST_OK);
        assert_int_equal(ans->matched, 500);
        assert_int_equal(ans->unresolved, 0);
    }
    /* Malformed compact segments: INVALID_ARGUMENT, before the index. */
    {
        uint32_t bad1[2] = {1, 99}, bad2[3] = {0, 50, 50}, bad3[2] = {0, 98}, ok[2] = {0, 99};
        uint64_t firsts[2] = {0, 0};
        uint32_t blocks[2] = {100, 100}, nprobes[2] = {2, 2};
        Strata__V1__LookupRequest req = STRATA__V1__LOOKUP_REQUEST__INIT;
        Strata__V1__LookupResponse *resp = NULL;
        st_hash_t ph[4] = {a[0], a[99], a[0], a[99]};
        uint32_t offs[4] = {0, 99, 0, 99};
        srpc_error_t err;

        assert_int_equal(raw_lookup(&r, a, 0, 100, 0, NULL, 0, bad1, 2, ans), ST_ERR_INVALID);
        assert_int_equal(raw_lookup(&r, a, 0, 100, 0, NULL, 0, bad2, 3, ans), ST_ERR_INVALID);
        assert_int_equal(raw_lookup(&r, a, 0, 100, 0, NULL, 0, bad3, 2, ans), ST_ERR_INVALID);
        (void)ok;
        /* Arrays of different lengths; probes naming more offsets than
         * there are; hashes and offsets of different counts; a lease. */
        req.namespace_id = r.ns;
        req.compact_first = firsts;
        req.compact_blocks = blocks;
        req.compact_probes = nprobes;
        req.compact_offsets = offs;
        req.compact_hashes.data = (uint8_t *)ph[0].b;
        req.n_compact_first = 2;
        req.n_compact_blocks = 1;
        req.n_compact_probes = 2;
        req.n_compact_offsets = 4;
        req.compact_hashes.len = 4 * ST_HASH_BYTES;
#define CALL()                                                                \
    srpc_call(r.ch, &srpc_cache_methods[SRPC_CACHE_LOOKUP], &req.base, 30000, \
              (ProtobufCMessage **)&resp, &err)
        assert_int_equal(CALL(), ST_ERR_INVALID);
        req.n_compact_blocks = 2;
        assert_int_equal(CALL(), ST_OK); /* the well-formed one */
        assert_int_equal(resp->n_compact_matched, 2);
        assert_int_equal(resp->compact_matched[0], resp->compact_matched[1]);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        nprobes[1] = 3;
        assert_int_equal(CALL(), ST_ERR_INVALID);
        nprobes[1] = 2;
        req.compact_hashes.len = 3 * ST_HASH_BYTES;
        assert_int_equal(CALL(), ST_ERR_INVALID);
        req.compact_hashes.len = 4 * ST_HASH_BYTES;
        req.lease = 1;
        assert_int_equal(CALL(), ST_ERR_INVALID);
        req.lease = 0;
        req.want_locations = 1;
        assert_int_equal(CALL(), ST_ERR_INVALID);
        req.want_locations = 0;
        /* Covered blocks count toward max_hashes (65536). */
        blocks[0] = blocks[1] = 40000;
        offs[1] = offs[3] = 39999;
        assert_int_equal(CALL(), ST_ERR_INVALID);
        /* A first block whose chain would pass index 2^64 - 1. */
        blocks[0] = blocks[1] = 100;
        offs[1] = offs[3] = 99;
        firsts[1] = UINT64_MAX - 50;
        assert_int_equal(CALL(), ST_ERR_INVALID);
#undef CALL
    }
    /* The daemon still answers. */
    assert_int_equal(raw_lookup(&r, a, 0, 16, 0, NULL, 0, NULL, 0, ans), ST_OK);
    assert_int_equal(ans->matched, 16);

    srpc_channel_close(r.ch);
    st_client_close(c);
    tc_stop_all(&cl);
    free(a), free(b), free(no_l1), free(kda), free(ans);
}

/* ------------------------------------------------- libstrata, four nodes -- */

static void client_both(st_client_t *c, const st_hash_t *chain, size_t n, uint32_t layers,
                        st_lookup_result_t *comp, st_lookup_result_t *full)
{
    setenv("STRATA_LOOKUP_COMPACT", "1", 1);
    assert_int_equal(st_client_lookup(c, chain, n, layers, comp), ST_OK);
    setenv("STRATA_LOOKUP_COMPACT", "0", 1);
    assert_int_equal(st_client_lookup(c, chain, n, layers, full), ST_OK);
    unsetenv("STRATA_LOOKUP_COMPACT");
    if (comp->matched_blocks != full->matched_blocks ||
        comp->resumable_blocks != full->resumable_blocks) {
        fail_msg(
            "n %zu layers %u: compact %llu/%llu, full %llu/%llu", n, layers,
            (unsigned long long)comp->matched_blocks, (unsigned long long)comp->resumable_blocks,
            (unsigned long long)full->matched_blocks, (unsigned long long)full->resumable_blocks);
    }
}

/* ClusterLookup via node `via` of the first n blocks; want_loc makes the
 * owners answer in the full form (compact segments take no locations). */
static Strata__V1__ClusterLookupResponse *cluster_lookup(const tc_cluster_t *cl, int via,
                                                         const st_hash_t *chain, size_t n,
                                                         uint32_t n_layers, int want_loc)
{
    static const uint32_t layers[2] = {0, 1};
    Strata__V1__ClusterLookupRequest req = STRATA__V1__CLUSTER_LOOKUP_REQUEST__INIT;
    Strata__V1__ClusterLookupResponse *resp = NULL;
    srpc_error_t err;
    raw_t r;

    raw_open(&r, cl->node[via].addr);
    req.namespace_id = r.ns;
    req.block_hashes.data = (uint8_t *)chain[0].b;
    req.block_hashes.len = n * ST_HASH_BYTES;
    req.kinds_mask =
        n_layers > 0 ? (1u << STRATA__V1__OBJECT_KIND__KV) | (1u << STRATA__V1__OBJECT_KIND__IDX)
                     : 0;
    req.layers = (uint32_t *)layers;
    req.n_layers = n_layers;
    req.want_locations = want_loc;
    if (srpc_call(r.ch, &srpc_cache_methods[SRPC_CACHE_CLUSTER_LOOKUP], &req.base, 30000,
                  (ProtobufCMessage **)&resp, &err) != ST_OK) {
        fail_msg("ClusterLookup via node %d: %s", via, err.message);
    }
    srpc_channel_close(r.ch);
    return resp;
}

/* A ClusterLookup whose owners answer compact segments equals, segment by
 * segment, one whose owners answer every hash. */
static void cluster_both(const tc_cluster_t *cl, int via, const st_hash_t *chain, size_t n,
                         uint32_t n_layers, int live)
{
    Strata__V1__ClusterLookupResponse *c = cluster_lookup(cl, via, chain, n, n_layers, 0);
    Strata__V1__ClusterLookupResponse *f = cluster_lookup(cl, via, chain, n, n_layers, 1);

    assert_int_equal(c->n_segments, f->n_segments);
    for (size_t k = 0; k < c->n_segments; k++) {
        const Strata__V1__SegmentAnswer *a = c->segments[k], *b = f->segments[k];

        assert_int_equal(a->grpc_status != 0, b->grpc_status != 0);
        assert_int_equal(a->grpc_status != 0, !live && a->match == NULL);
        if (a->match == NULL || b->match == NULL) {
            assert_true(a->match == NULL && b->match == NULL);
            continue;
        }
        if (a->match->matched_blocks != b->match->matched_blocks ||
            a->match->n_kda_checkpoints != b->match->n_kda_checkpoints ||
            (a->match->n_kda_checkpoints > 0 &&
             memcmp(a->match->kda_checkpoints, b->match->kda_checkpoints,
                    sizeof(uint64_t) * a->match->n_kda_checkpoints) != 0)) {
            fail_msg("ClusterLookup segment %zu of %zu blocks (layers %u): compact %u (%zu kda), "
                     "full %u (%zu kda)",
                     k, n, n_layers, a->match->matched_blocks, a->match->n_kda_checkpoints,
                     b->match->matched_blocks, b->match->n_kda_checkpoints);
        }
    }
    assert_int_equal(c->matched_blocks, f->matched_blocks);
    assert_int_equal(c->resumable_blocks, f->resumable_blocks);
    protobuf_c_message_free_unpacked(&c->base, NULL);
    protobuf_c_message_free_unpacked(&f->base, NULL);
}

static void test_four_nodes_client(void **state)
{
    enum { N = 4096 };
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *a, *b;
    uint8_t *no_l1 = calloc(N, 1), *kda = calloc(N, 1);
    st_lookup_result_t comp, full;

    (void)state;
    assert_true(no_l1 && kda);
    assert_int_equal(tc_start(&cl, stratad_path, 4, NULL), 0);
    c = connect_nodes(cl.peers);
    a = make_chain(c, 7, 7, N, N);
    b = make_chain(c, 7, 8, 2000, N);
    for (size_t i = 0; i < N; i++) {
        kda[i] = rnd_below(16) == 0;
        no_l1[i] = rnd_below(300) == 0;
    }
    put_range(c, a, N, 0, 3000, no_l1, kda);
    put_range(c, a, N, 3100, 3600, no_l1, kda);
    put_range(c, b, N, 2000, 2600, NULL, kda);

    /* The whole stored prefix, with every layer present. */
    client_both(c, a, 3000, 1, &comp, &full);
    for (int i = 0; i < 150; i++) {
        size_t n = 1 + rnd_below(N);

        client_both(c, i % 4 == 3 ? b : a, n, rnd_below(3), &comp, &full);
    }
    /* Thin clients: ClusterLookup through any node. */
    for (int i = 0; i < 40; i++) {
        size_t n = 1 + rnd_below(N);

        cluster_both(&cl, i % 4, i % 4 == 3 ? b : a, n, rnd_below(3), 1);
    }
    /* A node killed: the prefix ends before its first segment, in both. */
    tc_kill(&cl, 2);
    for (int i = 0; i < 20; i++) {
        size_t n = 1 + rnd_below(N);

        cluster_both(&cl, i % 2 == 0 ? 0 : 3, i % 4 == 3 ? b : a, n, rnd_below(3), 0);
    }
    /* The client learns of the death here (the call that finds the node down
     * asks again, its segments routed to the next node, which may hold KDA
     * replicas; test_client checks that answer): both forms then see the
     * same ring. */
    assert_int_equal(st_client_lookup(c, a, N, 0, &comp), ST_OK);
    assert_true(comp.nodes_down >= 1);
    for (int i = 0; i < 60; i++) {
        size_t n = 1 + rnd_below(N);

        client_both(c, i % 4 == 3 ? b : a, n, rnd_below(3), &comp, &full);
        assert_true(comp.nodes_down >= 1);
    }
    st_client_close(c);
    tc_stop_all(&cl);
    free(a), free(b), free(no_l1), free(kda);
}

/* ------------------------------------------------------- with an SSD tier -- */

/*
 * A daemon with an SSD tier and a memory limit the chains do not fit in: the
 * first chains spill to disk. A compact lookup leaves what its index does not
 * match undecided, and libstrata's second call (every hash) promotes it, so
 * both forms answer the whole chain.
 */
static void test_tier(void **state)
{
    enum { CHAINS = 6, LEN = 120, OBJB = 32 * 1024 };
    tc_cluster_t cl;
    st_client_t *c;
    st_hash_t *ch[CHAINS];
    static uint8_t data[OBJB];
    char dir[64], args[256];
    st_lookup_result_t comp, full;

    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/strata-lkc-XXXXXX");
    assert_non_null(mkdtemp(dir));
    snprintf(args, sizeof(args),
             "--memory-limit 64M --chunk-bytes 4M --max-object 1M --transport none --data-dir %s "
             "--ssd-map-size 1G --ssd-sync none",
             dir);
    assert_int_equal(tc_start(&cl, stratad_path, 1, args), 0);
    c = connect_nodes(cl.peers);
    memset(data, 0x33, sizeof(data));
    for (int k = 0; k < CHAINS; k++) {
        st_put_op_t *ops = calloc(LEN * 4, sizeof(*ops));
        size_t n = 0;
        st_handle_t *h;

        ch[k] = make_chain(c, 100 + (uint64_t)k, 100 + (uint64_t)k, LEN, LEN);
        for (size_t b = 0; b < LEN; b++) {
            for (uint16_t l = 0; l < 2; l++) {
                ops[n++] = (st_put_op_t){b, ST_KIND_KV, l, data, OBJB, 0, 0};
                ops[n++] = (st_put_op_t){b, ST_KIND_IDX, l, data, OBJB, 0, 0};
            }
        }
        assert_int_equal(st_client_put(c, ch[k], LEN, ops, n, 0, &h), ST_OK);
        assert_int_equal(st_handle_wait(h, 60000), ST_OK);
        st_handle_release(h);
        for (size_t i = 0; i < n; i++) {
            assert_int_equal(ops[i].status, ST_OK);
        }
        free(ops);
    }
    /* The oldest chains spilled first: compact first (it must promote
     * through its second call), then every hash. */
    for (int k = 0; k < CHAINS; k++) {
        client_both(c, ch[k], LEN, 2, &comp, &full);
        assert_int_equal(comp.matched_blocks, LEN);
    }
    st_client_close(c);
    tc_stop_all(&cl);
    dd_rm_dir(dir);
    for (int k = 0; k < CHAINS; k++) {
        free(ch[k]);
    }
}

int main(int argc, char **argv)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_daemon_random),
        cmocka_unit_test(test_four_nodes_client),
        cmocka_unit_test(test_tier),
    };

    if (tm_stratad_arg(argc, argv, 2, "test_lookup_compact", "PATH-TO-STRATAD", &stratad_path) !=
        0) {
        return 2;
    }
    seed_rng();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
