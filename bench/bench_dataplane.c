/*
 * bench_dataplane.c - streaming objects of 64 KiB, 256 KiB and 1 MiB from
 * one stratad into one registered client buffer through libstrata's
 * one-sided data plane (transport ucx), against, in the same run:
 *
 *   strata2   the same objects through libstrata with two batches of half
 *             the size in flight (two handles into the two halves of the
 *             same buffer: the next batch's Locate overlaps this one's
 *             gets, as an engine that pipelines its reads does);
 *   bare      the same gets over UCX with no control plane, no leases and no
 *             checksum: this process's own UCX worker reads the very extents
 *             the daemon holds the objects in (its arena chunks, allocated and
 *             registered by the transport; addresses from one Locate and keys
 *             from Hello, taken before timing) into the same client buffer,
 *             batch by batch with the same batch shape as libstrata;
 *   bare+xxh  the bare loop plus XXH3-64 of every landed object, checked
 *             against Locate's checksum: what libstrata's verification costs;
 *   target    bench_tp_stream_gets() against a spawned target process that
 *             allocated one region with tp_mem_alloc() (the
 *             transport's limit, as in docs/performance.md "Transport");
 *   redis     pipelined GET of the same bytes from a redis-server through
 *             hiredis, each reply copied into place in the same buffer;
 *   memcpy    the same bytes copied from one process-local buffer: the floor.
 *
 * Each round streams the whole working set of one size once per path; the
 * paths take turns in a rotating order, round by round (the machine is
 * shared). Prints GB/s (1e9 bytes/s): median, min, max and MAD over rounds,
 * and the ratios against the goals of issue 4 (strata >= 85% of bare, >= 3x
 * redis at 256 KiB and above).
 *
 * usage: bench_dataplane STRATAD [--rounds N] [--ws-mib M] [--batch-mib B] [--only P]
 *                        [--verify-reads lease|always] [--cache-locations rows|all]
 *                        [--transport-calls on|off]
 * (--only P runs path P alone, 0..6 in the order above, for profiling;
 * --verify-reads, --cache-locations and --transport-calls are libstrata's
 * settings, defaults lease, rows and on)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The same XXH3 as libstrata's check (client/dataplane.c): runtime dispatch
 * where libxxhash offers it. */
#if defined(__x86_64__) && defined(__has_include)
#if __has_include(<xxh_x86dispatch.h>)
#include <xxh_x86dispatch.h>
#define BD_XXH3 XXH3_64bits_dispatch
#endif
#endif
#ifndef BD_XXH3
#define XXH_INLINE_ALL
#include <xxhash.h>
#define BD_XXH3 XXH3_64bits
#endif

#include "bench_transport_loop.h"
#include "bench_util.h"
#include "cluster.h"
#include "peer_redis.h"
#include "srpc.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"

#define N_SIZES   3
#define MAX_REG   256
#define LOCATE_AT 1024 /* keys per Locate while taking the extents */

enum { P_STRATA, P_STRATA2, P_BARE, P_BARE_XXH, P_TARGET, P_REDIS, P_MEMCPY, N_PATHS };

static const char *const path_name[N_PATHS] = {
    "strata (libstrata, ucx)", "strata, 2 half batches in flight", "bare loop (daemon's extents)",
    "bare loop + XXH3 check",  "bare loop (spawned target)",       "redis GET (hiredis, pipelined)",
    "memcpy (floor)"};

/* One object size: its objects are KV objects of blocks 0..n_obj-1 at one
 * layer, object i holding src[i * bytes, (i + 1) * bytes). */
typedef struct size_case {
    size_t bytes;
    uint16_t layer;
    size_t n_obj;
    size_t per_batch;
    uint64_t *raddr; /* extents in the daemon, for the bare loop */
    tp_rkey_t **rkey;
    uint64_t *sum;
    double gbps[N_PATHS][1024];
} size_case_t;

typedef struct bench {
    st_client_t *c;
    st_hash_t *chain;
    size_t n_chain;
    uint8_t *src, *dst;
    size_t dst_len;
    /* the bare loop: this process's own transport */
    tp_transport_t *tp;
    tp_ep_t *ep;
    tp_mem_t *mem;
    tp_rkey_t *reg_rkey[MAX_REG];
    uint64_t reg_base[MAX_REG];
    bench_tp_loop_t target;
    redisContext *rc;
    st_get_op_t *ops;                /* per_batch ops; strata2 uses two halves */
    size_t last_first[2], last_k[2]; /* strata2: the last batch of each half */
} bench_t;

/* What a failure must stop: the processes this bench started. */
static tc_cluster_t g_cl;
static bench_redis_t g_rd;
static bench_tp_peer_t g_peer;
static int g_have_cl, g_have_rd, g_have_peer;

static void stop_peers(void)
{
    if (g_have_cl) {
        tc_stop_all(&g_cl);
        g_have_cl = 0;
    }
    if (g_have_rd) {
        bench_redis_stop(&g_rd);
        g_have_rd = 0;
    }
    if (g_have_peer) {
        bench_tp_stop_target(&g_peer);
        g_have_peer = 0;
    }
}

static void die(const char *what)
{
    fprintf(stderr, "bench_dataplane: %s\n", what);
    stop_peers();
    exit(1);
}

static void on_get(void *user, st_status_t st)
{
    size_t *pending = user;

    if (st != ST_OK) {
        die("a bare get failed");
    }
    (*pending)--;
}

/* Every object of sc through libstrata, batch by batch. */
static void run_strata(bench_t *b, size_case_t *sc)
{
    for (size_t first = 0; first < sc->n_obj; first += sc->per_batch) {
        size_t k = sc->n_obj - first < sc->per_batch ? sc->n_obj - first : sc->per_batch;
        st_handle_t *h;

        for (size_t j = 0; j < k; j++) {
            b->ops[j] = (st_get_op_t){first + j,   ST_KIND_KV, sc->layer, b->dst + j * sc->bytes,
                                      sc->bytes,   0,          NULL,      0,
                                      ST_ERR_BUSY, 0};
        }
        if (st_client_get(b->c, b->chain, b->n_chain, b->ops, k, &h) != ST_OK) {
            die(st_client_last_error());
        }
        st_handle_wait(h, -1);
        st_handle_release(h);
        for (size_t j = 0; j < k; j++) {
            if (b->ops[j].status != ST_OK || b->ops[j].length != sc->bytes) {
                fprintf(stderr, "bench_dataplane: get of object %zu (%zu B): %s\n", first + j,
                        sc->bytes, st_strerror(b->ops[j].status));
                exit(1);
            }
        }
    }
}

/* Waits for one strata2 batch (ops at b->ops + slot * half) and checks it. */
static void finish_half(bench_t *b, const size_case_t *sc, st_handle_t *h, size_t slot, size_t half)
{
    st_get_op_t *ops = b->ops + slot * half;

    st_handle_wait(h, -1);
    st_handle_release(h);
    for (size_t j = 0; j < b->last_k[slot]; j++) {
        if (ops[j].status != ST_OK || ops[j].length != sc->bytes) {
            fprintf(stderr, "bench_dataplane: get of object %zu (%zu B): %s\n",
                    b->last_first[slot] + j, sc->bytes, st_strerror(ops[j].status));
            exit(1);
        }
    }
}

/* Every object of sc through libstrata, two batches of half the size in
 * flight: batch k goes to half k % 2 of the buffer, and is posted as soon
 * as the batch that used that half before it has completed. */
static void run_strata2(bench_t *b, size_case_t *sc)
{
    size_t half = sc->per_batch / 2 ? sc->per_batch / 2 : 1, first = 0, slot = 0;
    st_handle_t *h[2] = {NULL, NULL};

    for (;;) {
        if (h[slot] != NULL) {
            finish_half(b, sc, h[slot], slot, half);
            h[slot] = NULL;
        }
        if (first >= sc->n_obj) {
            if (h[slot ^ 1] != NULL) {
                finish_half(b, sc, h[slot ^ 1], slot ^ 1, half);
            }
            break;
        }
        {
            size_t k = sc->n_obj - first < half ? sc->n_obj - first : half;
            st_get_op_t *ops = b->ops + slot * half;
            uint8_t *dst = b->dst + slot * half * sc->bytes;

            for (size_t j = 0; j < k; j++) {
                ops[j] =
                    (st_get_op_t){first + j, ST_KIND_KV, sc->layer, dst + j * sc->bytes, sc->bytes,
                                  0,         NULL,       0,         ST_ERR_BUSY,         0};
            }
            b->last_first[slot] = first;
            b->last_k[slot] = k;
            if (st_client_get(b->c, b->chain, b->n_chain, ops, k, &h[slot]) != ST_OK) {
                die(st_client_last_error());
            }
            first += k;
        }
        slot ^= 1;
    }
}

/* strata2's last batch in each half must hold the source bytes. */
static void check_halves(const bench_t *b, const size_case_t *sc)
{
    size_t half = sc->per_batch / 2 ? sc->per_batch / 2 : 1;

    for (size_t slot = 0; slot < 2; slot++) {
        if (memcmp(b->dst + slot * half * sc->bytes, b->src + b->last_first[slot] * sc->bytes,
                   b->last_k[slot] * sc->bytes) != 0) {
            fprintf(stderr, "bench_dataplane: %s delivered wrong bytes\n", path_name[P_STRATA2]);
            exit(1);
        }
    }
}

/* The same gets, straight at the daemon's extents; check: verify every
 * landed object against Locate's checksum, as libstrata does. */
static void run_bare(bench_t *b, size_case_t *sc, int check)
{
    for (size_t first = 0; first < sc->n_obj; first += sc->per_batch) {
        size_t k = sc->n_obj - first < sc->per_batch ? sc->n_obj - first : sc->per_batch;
        size_t pending = k;

        for (size_t j = 0; j < k; j++) {
            if (tp_get(b->ep, b->dst + j * sc->bytes, sc->bytes, b->mem, sc->raddr[first + j],
                       sc->rkey[first + j], on_get, &pending) != ST_OK) {
                die("bare get refused");
            }
        }
        while (pending > 0) {
            tp_progress(b->tp);
        }
        for (size_t j = 0; check && j < k; j++) {
            if (BD_XXH3(b->dst + j * sc->bytes, sc->bytes) != sc->sum[first + j]) {
                die("bare loop: landed bytes do not match Locate's checksum");
            }
        }
    }
}

static void run_redis(bench_t *b, size_case_t *sc)
{
    for (size_t first = 0; first < sc->n_obj; first += sc->per_batch) {
        size_t k = sc->n_obj - first < sc->per_batch ? sc->n_obj - first : sc->per_batch;

        for (size_t j = 0; j < k; j++) {
            char key[48];

            snprintf(key, sizeof(key), "o:%zu:%zu", sc->bytes, first + j);
            redisAppendCommand(b->rc, "GET %s", key);
        }
        for (size_t j = 0; j < k; j++) {
            redisReply *r = NULL;

            if (redisGetReply(b->rc, (void **)&r) != REDIS_OK || r == NULL ||
                r->type != REDIS_REPLY_STRING || r->len != sc->bytes) {
                die("redis GET failed");
            }
            memcpy(b->dst + j * sc->bytes, r->str, sc->bytes);
            freeReplyObject(r);
        }
    }
}

static void run_memcpy(bench_t *b, size_case_t *sc)
{
    for (size_t first = 0; first < sc->n_obj; first += sc->per_batch) {
        size_t k = sc->n_obj - first < sc->per_batch ? sc->n_obj - first : sc->per_batch;

        for (size_t j = 0; j < k; j++) {
            memcpy(b->dst + j * sc->bytes, b->src + (first + j) * sc->bytes, sc->bytes);
        }
    }
    __asm__ volatile("" : : "r"(b->dst) : "memory");
}

/* The last batch in dst must hold the source bytes (outside the timing). */
static void check_last(const bench_t *b, const size_case_t *sc, const char *who)
{
    size_t first = (sc->n_obj - 1) / sc->per_batch * sc->per_batch;
    size_t k = sc->n_obj - first;

    if (memcmp(b->dst, b->src + first * sc->bytes, k * sc->bytes) != 0) {
        fprintf(stderr, "bench_dataplane: %s delivered wrong bytes\n", who);
        exit(1);
    }
}

/* Stores every object of sc in the daemon (through libstrata's puts) and in
 * Redis. */
static void store(bench_t *b, size_case_t *sc)
{
    st_put_op_t *ops = calloc(sc->per_batch, sizeof(*ops));

    if (ops == NULL) {
        die("out of memory");
    }
    for (size_t first = 0; first < sc->n_obj; first += sc->per_batch) {
        size_t k = sc->n_obj - first < sc->per_batch ? sc->n_obj - first : sc->per_batch;
        st_handle_t *h;

        for (size_t j = 0; j < k; j++) {
            char key[48];

            snprintf(key, sizeof(key), "o:%zu:%zu", sc->bytes, first + j);
            ops[j] =
                (st_put_op_t){first + j, ST_KIND_KV, sc->layer, b->src + (first + j) * sc->bytes,
                              sc->bytes, 0,          0};
            redisAppendCommand(b->rc, "SET %s %b", key, b->src + (first + j) * sc->bytes,
                               sc->bytes);
        }
        if (st_client_put(b->c, b->chain, b->n_chain, ops, k, 0, &h) != ST_OK) {
            die(st_client_last_error());
        }
        st_handle_wait(h, -1);
        st_handle_release(h);
        for (size_t j = 0; j < k; j++) {
            redisReply *r = NULL;

            if (ops[j].status != ST_OK) {
                fprintf(stderr, "bench_dataplane: put of object %zu: %s\n", first + j,
                        st_strerror(ops[j].status));
                exit(1);
            }
            if (redisGetReply(b->rc, (void **)&r) != REDIS_OK || r == NULL ||
                r->type == REDIS_REPLY_ERROR) {
                die("redis SET failed");
            }
            freeReplyObject(r);
        }
    }
    free(ops);
}

/* Says Hello on ch and unpacks every region's key on the bare endpoint. */
static void bare_hello(bench_t *b, srpc_channel_t *ch, uint64_t *ns_p)
{
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    Strata__V1__HelloResponse *resp = NULL;
    srpc_error_t err;

    req.protocol_version = 1;
    req.transport = STRATA__V1__TRANSPORT_KIND__TRANSPORT_UCX;
    req.client_name = "bench_dataplane";
    if (srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base, 10000,
                  (ProtobufCMessage **)&resp, &err) != ST_OK) {
        die("Hello failed");
    }
    if (resp->transport != STRATA__V1__TRANSPORT_KIND__TRANSPORT_UCX) {
        die("the daemon serves no UCX data plane");
    }
    *ns_p = resp->namespace_id;
    if (b->ep == NULL && tp_connect(b->tp, resp->transport_address.data,
                                    resp->transport_address.len, &b->ep) != ST_OK) {
        die("cannot connect to the daemon's worker");
    }
    for (size_t i = 0; i < resp->n_regions; i++) {
        const Strata__V1__Region *g = resp->regions[i];

        if (g->id >= MAX_REG) {
            die("region id out of the bench's table");
        }
        if (b->reg_rkey[g->id] == NULL &&
            tp_rkey_unpack(b->ep, g->rkey.data, g->rkey.len, &b->reg_rkey[g->id]) != ST_OK) {
            die("cannot unpack a region key");
        }
        b->reg_base[g->id] = g->remote_addr;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* Locates every object of sc once (no lease: nothing is evicted in this
 * run) and records address, key and checksum for the bare loop. */
static void take_extents(bench_t *b, srpc_channel_t *ch, uint64_t ns, size_case_t *sc)
{
    Strata__V1__ObjectKey keys[LOCATE_AT], *kp[LOCATE_AT];

    sc->raddr = calloc(sc->n_obj, sizeof(*sc->raddr));
    sc->rkey = calloc(sc->n_obj, sizeof(*sc->rkey));
    sc->sum = calloc(sc->n_obj, sizeof(*sc->sum));
    if (!sc->raddr || !sc->rkey || !sc->sum) {
        die("out of memory");
    }
    for (size_t first = 0; first < sc->n_obj; first += LOCATE_AT) {
        size_t k = sc->n_obj - first < LOCATE_AT ? sc->n_obj - first : LOCATE_AT;
        Strata__V1__LocateRequest req = STRATA__V1__LOCATE_REQUEST__INIT;
        Strata__V1__LocateResponse *resp = NULL;
        const Strata__V1__Locations *l;
        srpc_error_t err;

        for (size_t j = 0; j < k; j++) {
            strata__v1__object_key__init(&keys[j]);
            keys[j].block_hash.data = b->chain[first + j].b;
            keys[j].block_hash.len = ST_HASH_BYTES;
            keys[j].kind = STRATA__V1__OBJECT_KIND__KV;
            keys[j].layer = sc->layer;
            kp[j] = &keys[j];
        }
        req.namespace_id = ns;
        req.keys = kp;
        req.n_keys = k;
        if (srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_LOCATE], &req.base, 10000,
                      (ProtobufCMessage **)&resp, &err) != ST_OK) {
            die("Locate failed");
        }
        l = resp->locations;
        if (l == NULL || l->n_state != k || l->n_region_id != k || l->n_offset != k ||
            l->n_length != k || l->n_checksum != k) {
            die("Locate: short answer");
        }
        for (size_t j = 0; j < k; j++) {
            uint32_t id = l->region_id[j];

            if (l->state[j] != STRATA__V1__OBJECT_STATE__OBJECT_PRESENT ||
                l->length[j] != sc->bytes || id >= MAX_REG || b->reg_rkey[id] == NULL) {
                die("Locate: an object is not present in a known region");
            }
            sc->raddr[first + j] = b->reg_base[id] + l->offset[j];
            sc->rkey[first + j] = b->reg_rkey[id];
            sc->sum[first + j] = l->checksum[j];
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
}

static double run_path(bench_t *b, size_case_t *sc, int p)
{
    uint64_t t0 = bench_now_ns();
    double s;

    switch (p) {
    case P_STRATA: run_strata(b, sc); break;
    case P_STRATA2: run_strata2(b, sc); break;
    case P_BARE: run_bare(b, sc, 0); break;
    case P_BARE_XXH: run_bare(b, sc, 1); break;
    case P_TARGET:
        if (bench_tp_stream_gets(&b->target, sc->bytes, (unsigned)sc->per_batch,
                                 sc->n_obj * sc->bytes, &s) != ST_OK) {
            die("bare loop against the target failed");
        }
        return (double)(sc->n_obj * sc->bytes) / s / 1e9;
    case P_REDIS: run_redis(b, sc); break;
    default: run_memcpy(b, sc); break;
    }
    s = (double)(bench_now_ns() - t0) * 1e-9;
    if (p == P_STRATA || p == P_BARE || p == P_REDIS) {
        check_last(b, sc, path_name[p]);
    } else if (p == P_STRATA2) {
        check_halves(b, sc);
    }
    return (double)(sc->n_obj * sc->bytes) / s / 1e9;
}

/* The flags of one run. */
typedef struct opts {
    size_t rounds, ws_mib, batch_mib;
    int only; /* --only P: run path P alone (for profiling) */
    const char *verify, *cache, *tcalls;
} opts_t;

/* Reads the flags after STRATAD into o; returns 0, or 2 after the reason. */
static int parse_args(opts_t *o, int argc, char **argv)
{
    const bench_opt_t opts[] = {{"--rounds", BENCH_OPT_SIZE, &o->rounds},
                                {"--ws-mib", BENCH_OPT_SIZE, &o->ws_mib},
                                {"--only", BENCH_OPT_INT, &o->only},
                                {"--batch-mib", BENCH_OPT_SIZE, &o->batch_mib},
                                {"--verify-reads", BENCH_OPT_STR, &o->verify},
                                {"--cache-locations", BENCH_OPT_STR, &o->cache},
                                {"--transport-calls", BENCH_OPT_STR, &o->tcalls}};
    int bad = bench_opt_pairs(argc, argv, 2, opts, sizeof(opts) / sizeof(opts[0]));

    if (bad != 0) {
        fprintf(stderr, "bench_dataplane: unknown option %s\n", argv[bad]);
        return 2;
    }
    if (o->rounds == 0 || o->rounds > 1024 || o->ws_mib < 1 || o->batch_mib < 1 ||
        o->batch_mib > o->ws_mib || o->ws_mib > 4096) {
        fprintf(stderr, "bench_dataplane: rounds 1..1024, 1 <= batch-mib <= ws-mib <= 4096\n");
        return 2;
    }
    return 0;
}

/* libstrata's client of the daemon with o's settings, its buffers, the
 * source bytes (ws of them) and the chain. */
static void setup_client(bench_t *b, const opts_t *o, size_t ws, size_t obj_min)
{
    st_client_params_t p = {0};
    uint32_t *tok;
    uint64_t x = 0x9e3779b97f4a7c15ULL;
    size_t nb = 0;

    p.field_mask = ST_CLIENT_FIELD_NODES | ST_CLIENT_FIELD_TRANSPORT | ST_CLIENT_FIELD_TIMEOUT |
                   ST_CLIENT_FIELD_VERIFY_READS | ST_CLIENT_FIELD_CACHE_LOCATIONS |
                   ST_CLIENT_FIELD_TRANSPORT_CALLS;
    p.verify_reads = o->verify;
    p.cache_locations = o->cache;
    p.transport_calls = strcmp(o->tcalls, "off") != 0;
    p.nodes = g_cl.node[0].addr;
    p.transport = "ucx";
    p.timeout_ms = 30000;
    if (st_client_connect(&p, &b->c) != ST_OK) {
        die(st_client_last_error());
    }
    b->src = malloc(ws);
    b->dst = aligned_alloc(4096, b->dst_len);
    b->ops = calloc(b->dst_len / obj_min, sizeof(*b->ops));
    b->n_chain = ws / obj_min;
    b->chain = calloc(b->n_chain, sizeof(*b->chain));
    tok = calloc(b->n_chain * st_client_block_tokens(b->c), sizeof(*tok));
    if (!b->src || !b->dst || !b->ops || !b->chain || !tok) {
        die("out of memory");
    }
    for (size_t i = 0; i < ws / 8; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        memcpy(b->src + 8 * i, &x, 8);
    }
    for (size_t i = 0; i < b->n_chain * st_client_block_tokens(b->c); i++) {
        tok[i] = (uint32_t)(BD_XXH3(&i, sizeof(i)) % 150000);
    }
    if (st_client_hash(b->c, tok, b->n_chain * st_client_block_tokens(b->c), NULL, 0, b->chain,
                       b->n_chain, &nb) != ST_OK ||
        nb != b->n_chain) {
        die("hashing the chain failed");
    }
    free(tok);
    memset(b->dst, 0, b->dst_len);
    if (st_client_register(b->c, b->dst, b->dst_len) != ST_OK) {
        die(st_client_last_error());
    }
}

/* The bare loop's own transport, with the same buffer registered. */
static void setup_bare(bench_t *b, const tp_config_t *tcfg, const bench_tp_peer_t *pp)
{
    if (tp_create(tcfg, &b->tp) != ST_OK ||
        tp_mem_register(b->tp, b->dst, b->dst_len, &b->mem) != ST_OK ||
        tp_connect(b->tp, pp->addr, pp->addr_len, &b->target.ep) != ST_OK ||
        tp_rkey_unpack(b->target.ep, pp->rkey, pp->rkey_len, &b->target.rkey) != ST_OK) {
        die("cannot set up the bare loop's transport");
    }
    b->target.tp = b->tp;
    b->target.local_mem = b->mem;
    b->target.local = b->dst;
    b->target.local_len = b->dst_len;
    b->target.remote_base = pp->base;
    b->target.remote_len = pp->len;
}

/* Each size's rates per path over the rounds, and the ratios. */
static void print_report(size_case_t *sc, size_t rounds)
{
    for (int s = 0; s < N_SIZES; s++) {
        bench_stats_t st[N_PATHS];

        printf("\n%zu KiB objects: %zu per round, %zu per batch\n", sc[s].bytes >> 10, sc[s].n_obj,
               sc[s].per_batch);
        printf("  %-32s %9s %9s %9s %9s\n", "GB/s", "median", "min", "max", "MAD");
        for (int q = 0; q < N_PATHS; q++) {
            bench_stats(sc[s].gbps[q], rounds, &st[q]);
            printf("  %-32s %9.2f %9.2f %9.2f %9.2f\n", path_name[q], st[q].median, st[q].min,
                   st[q].max, st[q].mad);
        }
        printf("  strata / bare loop      %5.2f  (goal >= 0.85)\n",
               st[P_STRATA].median / st[P_BARE].median);
        printf("  strata2 / bare loop     %5.2f  (goal >= 0.85)\n",
               st[P_STRATA2].median / st[P_BARE].median);
        printf("  strata / bare loop+XXH3 %5.2f\n", st[P_STRATA].median / st[P_BARE_XXH].median);
        printf("  strata / target loop    %5.2f\n", st[P_STRATA].median / st[P_TARGET].median);
        printf("  strata / redis          %5.2f  (goal >= 3%s)\n",
               st[P_STRATA].median / st[P_REDIS].median, sc[s].bytes >= (256 << 10) ? "" : ", n/a");
        printf("  strata / memcpy         %5.2f\n", st[P_STRATA].median / st[P_MEMCPY].median);
    }
}

int main(int argc, char **argv)
{
    static const size_t sizes[N_SIZES] = {64 << 10, 256 << 10, 1 << 20};
    opts_t o = {.rounds = 15,
                .ws_mib = 256,
                .batch_mib = 16,
                .only = -1,
                .verify = "lease",
                .cache = "rows",
                .tcalls = "on"};
    size_case_t *sc = calloc(N_SIZES, sizeof(*sc));
    bench_t b = {0};
    tc_cluster_t *clp = &g_cl;
    bench_redis_t *rdp = &g_rd;
    bench_tp_peer_t *pp = &g_peer;
    tp_config_t tcfg = {0};
    srpc_channel_config_t cc = {.token = NULL};
    srpc_channel_t *ch;
    uint64_t ns = 0;
    size_t ws;
    char args[256];

    if (argc < 2 || sc == NULL) {
        fprintf(stderr, "usage: bench_dataplane STRATAD [--rounds N] [--ws-mib M] "
                        "[--batch-mib B] [--only P] [--verify-reads lease|always] "
                        "[--cache-locations rows|all] [--transport-calls on|off]\n");
        return 2;
    }
    if (parse_args(&o, argc, argv) != 0) {
        return 2;
    }
    ws = o.ws_mib << 20;
    b.dst_len = o.batch_mib << 20;

    /* The target first: it must fork before this process has a transport. */
    tcfg.backend = TP_UCX;
    if (bench_tp_spawn_target(&tcfg, ws, false, pp) != ST_OK) {
        die("cannot spawn the bare target");
    }
    g_have_peer = 1;
    /* Every size's objects stay in the daemon at once: 3 x ws plus slack. */
    snprintf(args, sizeof(args), "--transport ucx --memory-limit %zuM --max-object 4M",
             3 * o.ws_mib + 512);
    if (tc_start(clp, argv[1], 1, args) != 0) {
        die("cannot start stratad");
    }
    g_have_cl = 1;
    if (bench_redis_start(rdp, 0) != 0) {
        die("no Redis peer (install redis-server)");
    }
    g_have_rd = 1;
    if ((b.rc = bench_redis_connect(rdp)) == NULL) {
        die("cannot connect to redis-server");
    }
    setup_client(&b, &o, ws, sizes[0]);
    setup_bare(&b, &tcfg, pp);

    for (int s = 0; s < N_SIZES; s++) {
        sc[s].bytes = sizes[s];
        sc[s].layer = (uint16_t)s;
        sc[s].n_obj = ws / sizes[s];
        sc[s].per_batch = b.dst_len / sizes[s];
        store(&b, &sc[s]);
    }
    if (srpc_channel_open(clp->node[0].addr, &cc, &ch) != ST_OK) {
        die("cannot open a channel to the daemon");
    }
    bare_hello(&b, ch, &ns);
    for (int s = 0; s < N_SIZES; s++) {
        take_extents(&b, ch, ns, &sc[s]);
    }

    printf("bench_dataplane: one stratad (transport ucx) and one redis-server on loopback\n");
    printf("working set %zu MiB per size (%zu MiB in the daemon), batches of %zu MiB into one "
           "registered buffer, %zu rounds, UCX_TLS=%s, verify_reads=%s, cache_locations=%s, "
           "transport_calls=%s\n",
           o.ws_mib, 3 * o.ws_mib, o.batch_mib, o.rounds,
           getenv("UCX_TLS") ? getenv("UCX_TLS") : "(default)", o.verify, o.cache, o.tcalls);
    /* A warm-up round, then the measured ones; paths take turns. */
    for (size_t r = 0; r <= o.rounds; r++) {
        for (int s = 0; s < N_SIZES; s++) {
            for (int q = 0; q < N_PATHS; q++) {
                int path = (int)((q + r) % N_PATHS);
                double g = o.only < 0 || o.only == path ? run_path(&b, &sc[s], path) : 0;

                if (r > 0) {
                    sc[s].gbps[path][r - 1] = g;
                }
            }
        }
    }
    print_report(sc, o.rounds);

    srpc_channel_close(ch);
    st_client_close(b.c);
    tp_destroy(b.tp);
    redisFree(b.rc);
    stop_peers();
    for (int s = 0; s < N_SIZES; s++) {
        free(sc[s].raddr), free(sc[s].rkey), free(sc[s].sum);
    }
    free(sc), free(b.src), free(b.dst), free(b.ops), free(b.chain);
    return 0;
}
