/*
 * test_stratad.c - a real stratad on loopback, driven over gRPC: a 1M-token
 * chain stored and looked up (whole, prefix, diverging), eviction under a
 * small memory limit (the index never holds a child without its parent, RSS
 * stays bounded), a lease that blocks eviction, malformed and oversize
 * requests, authentication, SIGTERM under load, and Stats' process_*
 * counters against /proc.
 */
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include <grpc/status.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cluster.h"
#include "compose.h"
#include "grpc_conn.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/hash.h"
#include "stratad_arg.h"

#define BT       64
#define S        16
#define N_BLOCKS 16384 /* 1M tokens */

static const char *stratad_path;

/* Opens a connection as ("acme", "k3") and checks Hello's geometry. */
static void conn_open(gc_conn_t *c, const char *addr, const char *token)
{
    Strata__V1__HelloResponse *resp = gc_hello(c, addr, "acme", "k3", token);

    assert_int_equal(resp->block_tokens, BT);
    assert_int_equal(resp->segment_blocks, S);
    assert_int_equal(resp->namespace_seed.len, 16);
    protobuf_c_message_free_unpacked(&resp->base, NULL);
}

/* A chain of n blocks from a token stream seeded by `stream`; token `flip`
 * (if < n * BT) is changed, so the chain diverges there. */
static st_hash_t *make_chain(const gc_conn_t *c, uint64_t stream, size_t n, size_t flip)
{
    uint32_t *tok = malloc(sizeof(uint32_t) * n * BT);
    st_hash_t *h = malloc(sizeof(st_hash_t) * n);
    size_t nb;

    assert_non_null(tok);
    assert_non_null(h);
    for (size_t i = 0; i < n * BT; i++) {
        tok[i] = (uint32_t)(XXH3_64bits_withSeed(&i, sizeof(i), stream) % 150000);
    }
    if (flip < n * BT) {
        tok[flip] ^= 0x40000;
    }
    assert_int_equal(st_hash_chain(&c->seed, tok, n * BT, BT, NULL, 0, h, n, &nb), ST_OK);
    assert_int_equal(nb, n);
    free(tok);
    return h;
}

/* Puts KV objects for layers 0..n_layers-1 of blocks [from, to) of chain.
 * Returns the number of KEY_OK answers. */
static size_t put_chain(gc_conn_t *c, const st_hash_t *chain, size_t from, size_t to,
                        uint32_t n_layers, size_t obj_len)
{
    size_t per_call = 4096 / n_layers, ok = 0;

    for (size_t b0 = from; b0 < to; b0 += per_call) {
        size_t nb = to - b0 < per_call ? to - b0 : per_call, no = nb * n_layers;
        Strata__V1__PutResponse *resp = NULL;
        srpc_error_t err;
        gc_put_t put;

        gc_put_build(&put, c->ns, &chain[b0], b0 == 0 ? &c->seed : &chain[b0 - 1], nb, n_layers,
                     STRATA__V1__OBJECT_KIND__KV, obj_len, (int64_t)b0);
        assert_int_equal(gc_call(c, SRPC_CACHE_PUT, &put.req, (void **)&resp, &err), ST_OK);
        assert_int_equal(resp->n_status, no);
        for (size_t k = 0; k < no; k++) {
            ok += resp->status[k] == STRATA__V1__KEY_STATUS__KEY_OK;
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
        gc_put_free(&put);
    }
    return ok;
}

/* Looks up n blocks of chain in segments of S; returns the composed prefix. */
static compose_prefix_t lookup_chain(gc_conn_t *c, const st_hash_t *chain, size_t n, int lease,
                                     uint64_t *lease_id)
{
    size_t nseg = (n + S - 1) / S;
    Strata__V1__LookupRequest req = STRATA__V1__LOOKUP_REQUEST__INIT;
    Strata__V1__Segment *segs = calloc(nseg, sizeof(*segs)), **sp = calloc(nseg, sizeof(*sp));
    Strata__V1__LookupResponse *resp = NULL;
    compose_seg_answer_t *ans = calloc(nseg, sizeof(*ans));
    uint32_t layers[2] = {0, 1};
    srpc_error_t err;
    compose_prefix_t p;

    assert_true(segs && sp && ans);
    for (size_t k = 0; k < nseg; k++) {
        size_t nb = n - k * S < S ? n - k * S : S;

        strata__v1__segment__init(&segs[k]);
        segs[k].first_block = k * S;
        segs[k].block_hashes.data = (uint8_t *)chain[k * S].b;
        segs[k].block_hashes.len = nb * 16;
        sp[k] = &segs[k];
    }
    req.namespace_id = c->ns;
    req.segments = sp;
    req.n_segments = nseg;
    req.kinds_mask = 1u << STRATA__V1__OBJECT_KIND__KV;
    req.layers = layers;
    req.n_layers = 2;
    req.lease = lease;
    req.lease_ms = lease ? 60000 : 0;
    assert_int_equal(gc_call(c, SRPC_CACHE_LOOKUP, &req, (void **)&resp, &err), ST_OK);
    assert_int_equal(resp->n_segments, nseg);
    for (size_t k = 0; k < nseg; k++) {
        ans[k].first_block = k * S;
        ans[k].n_blocks = (uint32_t)(n - k * S < S ? n - k * S : S);
        ans[k].matched = resp->segments[k]->matched_blocks;
        ans[k].answered = 1;
    }
    compose_prefix(ans, nseg, &p);
    if (lease_id != NULL) {
        *lease_id = resp->lease_id;
    }
    protobuf_c_message_free_unpacked(&resp->base, NULL);
    free(segs), free(sp), free(ans);
    return p;
}

/* Which KV layer-0 objects of chain[0..n) are present (Locate). */
static void present_blocks(gc_conn_t *c, const st_hash_t *chain, size_t n, int *present)
{
    for (size_t b0 = 0; b0 < n; b0 += 4096) {
        size_t nb = n - b0 < 4096 ? n - b0 : 4096;
        Strata__V1__LocateRequest req = STRATA__V1__LOCATE_REQUEST__INIT;
        Strata__V1__KeyGrid grid = STRATA__V1__KEY_GRID__INIT;
        Strata__V1__ObjectKind kind = STRATA__V1__OBJECT_KIND__KV;
        uint32_t layer = 0;
        Strata__V1__LocateResponse *resp = NULL;
        srpc_error_t err;

        grid.block_hashes.data = (uint8_t *)chain[b0].b;
        grid.block_hashes.len = nb * 16;
        grid.kinds = &kind;
        grid.n_kinds = 1;
        grid.layers = &layer;
        grid.n_layers = 1;
        req.namespace_id = c->ns;
        req.grid = &grid;
        assert_int_equal(gc_call(c, SRPC_CACHE_LOCATE, &req, (void **)&resp, &err), ST_OK);
        assert_int_equal(resp->locations->n_state, nb);
        for (size_t i = 0; i < nb; i++) {
            present[b0 + i] = resp->locations->state[i] == STRATA__V1__OBJECT_STATE__OBJECT_PRESENT;
        }
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
}

/* ------------------------------------------------------------------ tests -- */

static void test_million_token_chain(void **state)
{
    tc_cluster_t cl;
    gc_conn_t c;
    st_hash_t *chain, *other;
    compose_prefix_t p;

    assert_int_equal(tc_start(&cl, stratad_path, 1, "--memory-limit 2G"), 0);
    conn_open(&c, cl.node[0].addr, NULL);
    chain = make_chain(&c, 1, N_BLOCKS, SIZE_MAX);
    assert_int_equal(put_chain(&c, chain, 0, N_BLOCKS, 2, 64), N_BLOCKS * 2);

    p = lookup_chain(&c, chain, N_BLOCKS, 0, NULL);
    assert_int_equal(p.matched_blocks, N_BLOCKS);
    p = lookup_chain(&c, chain, 1000, 0, NULL);
    assert_int_equal(p.matched_blocks, 1000);

    /* The same tokens with one changed in block 5000: it diverges there. */
    other = make_chain(&c, 1, N_BLOCKS, 5000 * BT + 17);
    assert_memory_equal(other, chain, sizeof(st_hash_t) * 5000);
    p = lookup_chain(&c, other, N_BLOCKS, 0, NULL);
    assert_int_equal(p.matched_blocks, 5000);

    /* A chain never stored. */
    free(other);
    other = make_chain(&c, 2, 64, SIZE_MAX);
    p = lookup_chain(&c, other, 64, 0, NULL);
    assert_int_equal(p.matched_blocks, 0);

    assert_int_equal(gc_stat(c.ch, "objects_kv"), N_BLOCKS * 2);
    assert_true(gc_stat(c.ch, "matched_tokens") >= (uint64_t)(N_BLOCKS + 1000 + 5000) * BT);
    free(chain), free(other);
    gc_close(&c);
    assert_int_equal(tc_stop(&cl, 0, 15000), 0);
    tc_stop_all(&cl);
}

#define EV_CHAINS   40
#define EV_BLOCKS   256
#define EV_OBJ      8192
#define EV_LIMIT    (64ull << 20)
/* What a stratad process uses beyond memory_limit: code, gRPC's threads and
 * buffers, the allocator's slack. docs/daemon.md documents the number. */
#define EV_OVERHEAD (96ull << 20)

static void test_eviction_keeps_prefixes_and_rss_bounded(void **state)
{
    tc_cluster_t cl;
    gc_conn_t c;
    st_hash_t *chains[EV_CHAINS];
    int present[EV_BLOCKS];
    size_t kept = 0;
    uint64_t lease_id = 0;
    compose_prefix_t p;

    assert_int_equal(
        tc_start(&cl, stratad_path, 1, "--memory-limit 64M --chunk-bytes 4M --max-object 1M"), 0);
    conn_open(&c, cl.node[0].addr, NULL);
    /* Chain 0 first, then lease it. */
    chains[0] = make_chain(&c, 100, EV_BLOCKS, SIZE_MAX);
    assert_int_equal(put_chain(&c, chains[0], 0, EV_BLOCKS, 2, EV_OBJ), EV_BLOCKS * 2);
    p = lookup_chain(&c, chains[0], EV_BLOCKS, 1, &lease_id);
    assert_int_equal(p.matched_blocks, EV_BLOCKS);
    assert_true(lease_id != 0);

    /* 40 chains x 256 blocks x 2 x 8 KiB = 160 MiB into 64 MiB. */
    for (int k = 1; k < EV_CHAINS; k++) {
        chains[k] = make_chain(&c, 100 + (uint64_t)k, EV_BLOCKS, SIZE_MAX);
        put_chain(&c, chains[k], 0, EV_BLOCKS, 2, EV_OBJ);
    }
    assert_true(gc_stat(c.ch, "evicted_blocks") > 0);
    assert_true(tc_rss(&cl, 0) > 0);
    print_message("rss after 160 MiB into a 64 MiB limit: %.1f MiB\n",
                  (double)tc_rss(&cl, 0) / (1 << 20));
#if defined(__SANITIZE_ADDRESS__)
    print_message("sanitizer build: ASan's shadow memory and quarantine make RSS meaningless, "
                  "the RSS bound is checked in the release build\n");
#else
    assert_true(tc_rss(&cl, 0) <= EV_LIMIT + EV_OVERHEAD);
#endif

    /* No chain has a block whose parent is gone: the present blocks of
     * every chain form a prefix. */
    for (int k = 0; k < EV_CHAINS; k++) {
        int seen_gap = 0;

        present_blocks(&c, chains[k], EV_BLOCKS, present);
        for (int i = 0; i < EV_BLOCKS; i++) {
            if (!present[i]) {
                seen_gap = 1;
            } else {
                assert_false(seen_gap);
                kept++;
            }
        }
    }
    assert_true(kept > 0);
    /* The leased chain is whole. */
    present_blocks(&c, chains[0], EV_BLOCKS, present);
    for (int i = 0; i < EV_BLOCKS; i++) {
        assert_true(present[i]);
    }
    /* Released, it is the coldest and goes first. */
    {
        Strata__V1__ReleaseRequest req = STRATA__V1__RELEASE_REQUEST__INIT;
        Strata__V1__ReleaseResponse *resp = NULL;
        srpc_error_t err;

        req.namespace_id = c.ns;
        req.lease_ids = &lease_id;
        req.n_lease_ids = 1;
        assert_int_equal(gc_call(&c, SRPC_CACHE_RELEASE, &req, (void **)&resp, &err), ST_OK);
        assert_int_equal(resp->status[0], STRATA__V1__KEY_STATUS__KEY_OK);
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    for (int k = 1; k < EV_CHAINS; k++) {
        st_hash_t *fresh = make_chain(&c, 500 + (uint64_t)k, EV_BLOCKS, SIZE_MAX);

        put_chain(&c, fresh, 0, EV_BLOCKS, 2, EV_OBJ);
        free(fresh);
    }
    present_blocks(&c, chains[0], EV_BLOCKS, present);
    assert_false(present[EV_BLOCKS - 1]);
    for (int k = 0; k < EV_CHAINS; k++) {
        free(chains[k]);
    }
    gc_close(&c);
    tc_stop_all(&cl);
}

static void test_bad_requests_keep_daemon_serving(void **state)
{
    tc_cluster_t cl;
    gc_conn_t c;
    srpc_error_t err;
    void *resp = NULL;
    size_t resp_len = 0;
    static const uint8_t garbage[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x12, 0x34};

    assert_int_equal(tc_start(&cl, stratad_path, 1, "--max-message 1M --max-hashes 1024"), 0);
    conn_open(&c, cl.node[0].addr, NULL);

    /* Bytes that are not a LookupRequest. */
    assert_int_equal(srpc_call_raw(c.ch, srpc_cache_methods[SRPC_CACHE_LOOKUP].path, garbage,
                                   sizeof(garbage), 5000, &resp, &resp_len, &err),
                     ST_ERR_INVALID);
    assert_int_equal(err.grpc_code, GRPC_STATUS_INVALID_ARGUMENT);

    /* A message over max_message. */
    {
        Strata__V1__PutRequest req = STRATA__V1__PUT_REQUEST__INIT;
        Strata__V1__InlineObject o = STRATA__V1__INLINE_OBJECT__INIT, *op = &o;
        Strata__V1__ObjectKey k = STRATA__V1__OBJECT_KEY__INIT;
        static uint8_t big[2 << 20];

        k.block_hash.data = c.seed.b;
        k.block_hash.len = 16;
        k.kind = STRATA__V1__OBJECT_KIND__KV;
        o.key = &k;
        o.data.data = big;
        o.data.len = sizeof(big);
        req.namespace_id = c.ns;
        req.objects = &op;
        req.n_objects = 1;
        assert_int_equal(gc_call(&c, SRPC_CACHE_PUT, &req, &resp, &err), ST_ERR_EXHAUSTED);
        assert_int_equal(err.grpc_code, GRPC_STATUS_RESOURCE_EXHAUSTED);
    }

    /* More hashes than max_hashes, and a hash of the wrong length. */
    {
        st_hash_t *chain = make_chain(&c, 5, 2048, SIZE_MAX);
        Strata__V1__LookupRequest req = STRATA__V1__LOOKUP_REQUEST__INIT;
        Strata__V1__Segment seg = STRATA__V1__SEGMENT__INIT, *sp = &seg;

        seg.block_hashes.data = chain[0].b;
        seg.block_hashes.len = 2048 * 16;
        req.namespace_id = c.ns;
        req.segments = &sp;
        req.n_segments = 1;
        assert_int_equal(gc_call(&c, SRPC_CACHE_LOOKUP, &req, &resp, &err), ST_ERR_INVALID);
        assert_non_null(strstr(err.message, "max_hashes=1024"));
        seg.block_hashes.len = 17;
        assert_int_equal(gc_call(&c, SRPC_CACHE_LOOKUP, &req, &resp, &err), ST_ERR_INVALID);
        assert_non_null(strstr(err.message, "multiple of 16"));
        /* An unknown namespace. */
        seg.block_hashes.len = 16;
        req.namespace_id = 12345;
        assert_int_equal(gc_call(&c, SRPC_CACHE_LOOKUP, &req, &resp, &err), ST_ERR_NOT_FOUND);
        assert_non_null(strstr(err.message, "namespace_id=12345"));
        free(chain);
    }

    /* A put whose checksum does not match its bytes is refused per key. */
    {
        Strata__V1__PutRequest req = STRATA__V1__PUT_REQUEST__INIT;
        Strata__V1__InlineObject o = STRATA__V1__INLINE_OBJECT__INIT, *op = &o;
        Strata__V1__ObjectKey k = STRATA__V1__OBJECT_KEY__INIT;
        Strata__V1__PutResponse *pr = NULL;
        uint8_t data[100] = {1, 2, 3};

        k.block_hash.data = c.seed.b;
        k.block_hash.len = 16;
        k.kind = STRATA__V1__OBJECT_KIND__KV;
        o.key = &k;
        o.data.data = data;
        o.data.len = sizeof(data);
        o.checksum = 42;
        req.namespace_id = c.ns;
        req.objects = &op;
        req.n_objects = 1;
        assert_int_equal(gc_call(&c, SRPC_CACHE_PUT, &req, (void **)&pr, &err), ST_OK);
        assert_int_equal(pr->status[0], STRATA__V1__KEY_STATUS__KEY_CORRUPT);
        protobuf_c_message_free_unpacked(&pr->base, NULL);
    }

    /* Still serving. */
    gc_close(&c);
    conn_open(&c, cl.node[0].addr, NULL);
    gc_close(&c);
    tc_stop_all(&cl);
}

static void test_auth_token(void **state)
{
    tc_cluster_t cl;
    srpc_channel_t *ch;
    Strata__V1__HelloRequest req = STRATA__V1__HELLO_REQUEST__INIT;
    void *resp = NULL;
    srpc_error_t err;
    gc_conn_t c;

    assert_int_equal(tc_start(&cl, stratad_path, 1, "--auth-token s3cret-t0ken"), 0);
    assert_int_equal(srpc_channel_open(cl.node[0].addr, NULL, &ch), ST_OK);
    assert_int_equal(srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &req.base, 5000,
                               (ProtobufCMessage **)&resp, &err),
                     ST_ERR_UNAUTHENTICATED);
    assert_int_equal(err.grpc_code, GRPC_STATUS_UNAUTHENTICATED);
    srpc_channel_close(ch);
    conn_open(&c, cl.node[0].addr, "s3cret-t0ken");
    gc_close(&c);
    tc_stop_all(&cl);
}

typedef struct writer {
    const char *addr;
    int id;
    size_t ok, unavailable, other;
} writer_t;

static void *writer_main(void *arg)
{
    writer_t *w = arg;
    gc_conn_t c;
    st_hash_t *chain;

    conn_open(&c, w->addr, NULL);
    chain = make_chain(&c, 1000 + (uint64_t)w->id, 4096, SIZE_MAX);
    for (size_t b = 0; b < 4096; b += 64) {
        Strata__V1__PutRequest req = STRATA__V1__PUT_REQUEST__INIT;
        Strata__V1__InlineObject objs[64], *op[64];
        Strata__V1__ObjectKey keys[64];
        Strata__V1__PutResponse *resp = NULL;
        uint8_t data[64][256];
        srpc_error_t err;
        st_status_t st;

        for (int i = 0; i < 64; i++) {
            gc_fill(data[i], sizeof(data[i]), &chain[b + i], 0);
            strata__v1__object_key__init(&keys[i]);
            keys[i].block_hash.data = chain[b + i].b;
            keys[i].block_hash.len = 16;
            keys[i].kind = STRATA__V1__OBJECT_KIND__VIS;
            strata__v1__inline_object__init(&objs[i]);
            objs[i].key = &keys[i];
            objs[i].data.data = data[i];
            objs[i].data.len = sizeof(data[i]);
            objs[i].checksum = XXH3_64bits(data[i], sizeof(data[i]));
            op[i] = &objs[i];
        }
        req.namespace_id = c.ns;
        req.objects = op;
        req.n_objects = 64;
        st = gc_call(&c, SRPC_CACHE_PUT, &req, (void **)&resp, &err);
        if (st == ST_OK) {
            w->ok++;
            protobuf_c_message_free_unpacked(&resp->base, NULL);
        } else if (st == ST_ERR_UNAVAILABLE || st == ST_ERR_CANCELLED) {
            w->unavailable++;
            break;
        } else {
            w->other++;
            break;
        }
    }
    free(chain);
    gc_close(&c);
    return NULL;
}

static void test_sigterm_under_load(void **state)
{
    tc_cluster_t cl;
    pthread_t th[4];
    writer_t w[4];
    size_t ok = 0;

    assert_int_equal(tc_start(&cl, stratad_path, 1, NULL), 0);
    for (int i = 0; i < 4; i++) {
        memset(&w[i], 0, sizeof(w[i]));
        w[i].addr = cl.node[0].addr;
        w[i].id = i;
        assert_int_equal(pthread_create(&th[i], NULL, writer_main, &w[i]), 0);
    }
    nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
    /* A graceful stop: calls in flight finish, the rest are refused. */
    assert_int_equal(tc_stop(&cl, 0, 20000), 0);
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].other, 0);
        ok += w[i].ok;
    }
    assert_true(ok > 0);
    tc_stop_all(&cl);
}

/* Entries of /proc/<pid>/<sub> but "." and "..". */
static uint64_t proc_entries(pid_t pid, const char *sub)
{
    char path[64];
    DIR *dir;
    struct dirent *de;
    uint64_t n = 0;

    snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, sub);
    dir = opendir(path);
    assert_non_null(dir);
    while ((de = readdir(dir)) != NULL) {
        n += de->d_name[0] != '.';
    }
    closedir(dir);
    return n;
}

static uint64_t abs_diff(uint64_t a, uint64_t b)
{
    return a > b ? a - b : b - a;
}

#define PG_CONNS 6

/* A TCP connection to the daemon's gRPC port that says nothing. */
static int tcp_connect(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    assert_true(fd >= 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    return fd;
}

/* Polls Stats' process_open_fds until it is at least (above) or at most
 * (!above) want; 1 when it got there within 10 s. */
static int fds_reach(gc_conn_t *c, uint64_t want, int above)
{
    for (int tries = 0; tries < 100; tries++) {
        uint64_t now = gc_stat(c->ch, "process_open_fds");

        if (above ? now >= want : now <= want) {
            return 1;
        }
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
    }
    return 0;
}

/* Stats' process_* counters agree with what /proc says of the daemon, and
 * follow connections opened and closed (the soak's gauges, docs/testing.md). */
static void test_stats_process_gauges(void **state)
{
    tc_cluster_t cl;
    gc_conn_t c;
    uint64_t fds, rss, threads;
    int sock[PG_CONNS];

    assert_int_equal(tc_start(&cl, stratad_path, 1, NULL), 0);
    conn_open(&c, cl.node[0].addr, NULL);
    fds = gc_stat(c.ch, "process_open_fds");
    /* The Stats call is served between the two reads: at most the call's
     * own transient descriptors apart. */
    assert_true(abs_diff(fds, proc_entries(cl.node[0].pid, "fd")) <= 2);
    threads = gc_stat(c.ch, "process_threads");
    assert_true(abs_diff(threads, proc_entries(cl.node[0].pid, "task")) <= 1);
    rss = gc_stat(c.ch, "process_rss_bytes");
    assert_true(rss > 0);
    assert_true(abs_diff(rss, tc_rss(&cl, 0)) <= tc_rss(&cl, 0) / 4);

    /* Each TCP connection the daemon accepts is one more descriptor, and
     * gone again once the client closes it. */
    for (int i = 0; i < PG_CONNS; i++) {
        sock[i] = tcp_connect(cl.node[0].port);
    }
    assert_true(fds_reach(&c, fds + PG_CONNS, 1));
    for (int i = 0; i < PG_CONNS; i++) {
        close(sock[i]);
    }
    assert_true(fds_reach(&c, fds, 0));
    gc_close(&c);
    assert_int_equal(tc_stop(&cl, 0, 15000), 0);
    tc_stop_all(&cl);
}

TM_STRATAD_MAIN("test_stratad", "PATH-TO-STRATAD", &stratad_path,
                cmocka_unit_test(test_million_token_chain),
                cmocka_unit_test(test_eviction_keeps_prefixes_and_rss_bounded),
                cmocka_unit_test(test_bad_requests_keep_daemon_serving),
                cmocka_unit_test(test_auth_token), cmocka_unit_test(test_sigterm_under_load),
                cmocka_unit_test(test_stats_process_gauges))
