/*
 * fuzz_replicate.c - the Replicate handler (docs/protocol.md "Replicate,
 * Drain") against a reference of its checks, over gRPC with the cluster
 * credential, on a real stratad with an SSD tier: valid requests of KDA
 * copies and session records, then mutated (structure-aware and byte-level).
 * Each answer is checked: a malformed request is INVALID_ARGUMENT, never
 * OK; an entry whose checksum does not match is KEY_CORRUPT and stores
 * nothing (a check_only of its fresh hash then says KEY_NOT_FOUND); a bad
 * key or link is KEY_INVALID; the daemon stays up.
 * STRATA_FUZZ_ITERS (default 1500), STRATA_TEST_SEED replays a run.
 */
#include <grpc/status.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cluster.h"
#include "fuzz_util.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "utf8.h"

#define FR_ITERS     1500
#define FR_MAX_BATCH 64
#define FR_MAX_OBJ   (64u << 10)

static uint64_t g_seed, g_iter;
static fz_log_t g_log;
static const uint8_t *g_buf;
static size_t g_len;
static tc_cluster_t g_cl;

static void fr_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
static void fr_fail(const char *fmt, ...)
{
    va_list ap;

    fz_file_tail(g_cl.node[0].log, 10);
    va_start(ap, fmt);
    fz_fail_one(g_seed, g_iter, &g_log, "request", g_buf, g_len, fmt, ap);
}

static void peer_token(char out[65])
{
    static const char secret[] = "integration-test-cluster-secret";
    unsigned char mac[32];
    unsigned int len = 0;

    HMAC(EVP_sha256(), secret, (int)strlen(secret), (const unsigned char *)"strata-peer-v1", 14,
         mac, &len);
    for (unsigned i = 0; i < 32; i++) {
        snprintf(out + 2 * i, 3, "%02x", mac[i]);
    }
}

static uint64_t fr_session_sum(const Strata__V1__SessionInfo *si)
{
    uint8_t b[48];

    memcpy(b, si->session_id.data, 16);
    memcpy(b + 16, si->head_hash.data, 16);
    for (int i = 0; i < 8; i++) {
        b[32 + i] = (uint8_t)(si->length >> (8 * i));
        b[40 + i] = (uint8_t)(si->version >> (8 * i));
    }
    return XXH3_64bits(b, sizeof(b));
}

static ProtobufCBinaryData fr_hash(fz_rng_t *r)
{
    ProtobufCBinaryData b = {16, fz_alloc(16)};

    fz_fill(r, b.data, 16);
    return b;
}

/* A valid request: n KDA objects (fresh hashes) and ns session records. */
static Strata__V1__ReplicateRequest *fr_valid(fz_rng_t *r)
{
    Strata__V1__ReplicateRequest *q = fz_alloc(sizeof(*q));
    size_t n = fz_below(r, 5), ns = fz_below(r, 4);

    strata__v1__replicate_request__init(q);
    q->tenant = "fz";
    q->model = "m";
    q->block_tokens = 64;
    q->check_only = fz_chance(r, 15);
    q->objects = fz_alloc(sizeof(*q->objects) * (n + 1));
    q->links = fz_alloc(sizeof(*q->links) * (n + 1));
    for (size_t i = 0; i < n; i++) {
        Strata__V1__InlineObject *o = fz_alloc(sizeof(*o));
        Strata__V1__ObjectKey *k = fz_alloc(sizeof(*k));
        Strata__V1__BlockLink *l = fz_alloc(sizeof(*l));
        size_t len = 1 + fz_below(r, 4096);

        strata__v1__inline_object__init(o);
        strata__v1__object_key__init(k);
        strata__v1__block_link__init(l);
        k->block_hash = fr_hash(r);
        k->kind = STRATA__V1__OBJECT_KIND__KDA;
        o->key = k;
        o->data.len = len;
        o->data.data = fz_alloc(len);
        fz_fill(r, o->data.data, len);
        o->checksum = XXH3_64bits(o->data.data, len);
        l->hash = k->block_hash;
        l->parent_hash = fr_hash(r);
        l->placement = fr_hash(r);
        q->objects[i] = o;
        q->links[i] = l;
    }
    q->n_objects = q->n_links = n;
    q->sessions = fz_alloc(sizeof(*q->sessions) * (ns + 1));
    q->session_checksum = fz_alloc(sizeof(*q->session_checksum) * (ns + 1));
    for (size_t i = 0; i < ns; i++) {
        Strata__V1__SessionInfo *si = fz_alloc(sizeof(*si));

        strata__v1__session_info__init(si);
        si->session_id = fr_hash(r);
        si->head_hash = fr_hash(r);
        si->length = 64 * (1 + fz_below(r, 100));
        si->version = fz_below(r, 10);
        si->ttl_ms = (uint32_t)(1000 + fz_below(r, 100000));
        q->sessions[i] = si;
        q->session_checksum[i] = fr_session_sum(si);
    }
    q->n_sessions = q->n_session_checksum = ns;
    return q;
}

static int fr_name_ok(const char *s)
{
    return s == NULL || (strlen(s) <= 128 && utf8_bad_byte(s, 1) < 0);
}

/* 1 when the request names the fuzzed namespace (fz, m, 64-token blocks). */
static int fr_our_ns(const Strata__V1__ReplicateRequest *q)
{
    return q->tenant != NULL && strcmp(q->tenant, "fz") == 0 && q->model != NULL &&
           strcmp(q->model, "m") == 0 && (q->block_tokens == 0 || q->block_tokens == 64);
}

/* Whether the request as a whole must fail with INVALID_ARGUMENT. */
static int fr_bad_request(const Strata__V1__ReplicateRequest *q)
{
    return !fr_name_ok(q->tenant) || !fr_name_ok(q->model) || q->block_tokens % 16 != 0 ||
           q->block_tokens > 4096 || q->n_objects > FR_MAX_BATCH || q->n_sessions > FR_MAX_BATCH ||
           q->n_links != q->n_objects || q->n_session_checksum != q->n_sessions;
}

/* The reference of one object's status: -1 any of the valid ones. */
static int fr_object_want(const Strata__V1__ReplicateRequest *q, size_t i)
{
    const Strata__V1__InlineObject *o = q->objects[i];
    const Strata__V1__BlockLink *l = q->links[i];

    if (o->key == NULL || o->key->block_hash.len != 16 ||
        o->key->kind != STRATA__V1__OBJECT_KIND__KDA || o->key->layer >= 128 || l->hash.len != 16 ||
        memcmp(l->hash.data, o->key->block_hash.data, 16) != 0 ||
        (l->parent_hash.len != 0 && l->parent_hash.len != 16) || l->placement.len != 16) {
        return STRATA__V1__KEY_STATUS__KEY_INVALID;
    }
    if (q->check_only) {
        return -1;
    }
    if (o->data.len == 0 || o->data.len > FR_MAX_OBJ) {
        return STRATA__V1__KEY_STATUS__KEY_INVALID;
    }
    if (XXH3_64bits(o->data.data, o->data.len) != o->checksum) {
        return STRATA__V1__KEY_STATUS__KEY_CORRUPT;
    }
    return -1;
}

static int fr_session_want(const Strata__V1__ReplicateRequest *q, size_t i)
{
    const Strata__V1__SessionInfo *si = q->sessions[i];

    if (si->session_id.len != 16 || si->head_hash.len != 16) {
        return STRATA__V1__KEY_STATUS__KEY_INVALID;
    }
    if (fr_session_sum(si) != q->session_checksum[i]) {
        return STRATA__V1__KEY_STATUS__KEY_CORRUPT;
    }
    return -1;
}

/* Checks one answer against the reference. */
static void fr_check(const Strata__V1__ReplicateRequest *q, st_status_t st, const srpc_error_t *err,
                     const uint8_t *resp, size_t resp_len)
{
    Strata__V1__ReplicateResponse *a;

    if (q == NULL || fr_bad_request(q)) {
        FZ_CHECK_OR(fr_fail, st != ST_OK && err->grpc_code == GRPC_STATUS_INVALID_ARGUMENT,
                    "a malformed request answered %s (%s), want INVALID_ARGUMENT", st_strerror(st),
                    err->message);
        return;
    }
    if (!fr_our_ns(q) && st != ST_OK) {
        /* Another namespace: made (up to the node's 64), or one with other blocks. */
        FZ_CHECK_OR(fr_fail,
                    err->grpc_code == GRPC_STATUS_RESOURCE_EXHAUSTED ||
                        err->grpc_code == GRPC_STATUS_ALREADY_EXISTS,
                    "a request of another namespace answered %s (%s)", st_strerror(st),
                    err->message);
        return;
    }
    FZ_CHECK_OR(fr_fail, st == ST_OK, "a well-formed request answered %s (%s)", st_strerror(st),
                err->message);
    a = strata__v1__replicate_response__unpack(NULL, resp_len, resp);
    FZ_CHECK_OR(fr_fail,
                a != NULL && a->n_status == q->n_objects && a->n_session_status == q->n_sessions,
                "an answer that does not fit the request");
    for (size_t i = 0; i < q->n_objects; i++) {
        int want = fr_object_want(q, i);

        FZ_CHECK_OR(fr_fail,
                    want < 0 ? a->status[i] != STRATA__V1__KEY_STATUS__KEY_CORRUPT &&
                                   a->status[i] != STRATA__V1__KEY_STATUS__KEY_INVALID
                             : (int)a->status[i] == want,
                    "objects[%zu] answered %d, want %d", i, a->status[i], want);
    }
    for (size_t i = 0; i < q->n_sessions; i++) {
        int want = fr_session_want(q, i);

        FZ_CHECK_OR(fr_fail,
                    want < 0 ? a->session_status[i] != STRATA__V1__KEY_STATUS__KEY_CORRUPT
                             : (int)a->session_status[i] == want,
                    "sessions[%zu] answered %d, want %d", i, a->session_status[i], want);
    }
    strata__v1__replicate_response__free_unpacked(a, NULL);
}

/* A copy that fails its checksum stores nothing: asked afterwards, its fresh
 * hash is not held. */
static void fr_corrupt_stores_nothing(srpc_channel_t *ch, fz_rng_t *r)
{
    Strata__V1__ReplicateRequest *q = fr_valid(r);
    Strata__V1__ReplicateResponse *a = NULL;
    srpc_error_t err;

    while (q->n_objects == 0) {
        q = fr_valid(r);
    }
    q->check_only = 0;
    q->objects[0]->checksum ^= 1;
    g_buf = fz_pb_pack(&q->base, &g_len);
    FZ_CHECK_OR(fr_fail,
                srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_REPLICATE], &q->base, 10000,
                          (ProtobufCMessage **)&a, &err) == ST_OK &&
                    a->status[0] == STRATA__V1__KEY_STATUS__KEY_CORRUPT,
                "a corrupt copy was not refused as corrupt");
    strata__v1__replicate_response__free_unpacked(a, NULL);
    q->check_only = 1;
    FZ_CHECK_OR(fr_fail,
                srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_REPLICATE], &q->base, 10000,
                          (ProtobufCMessage **)&a, &err) == ST_OK &&
                    a->status[0] == STRATA__V1__KEY_STATUS__KEY_NOT_FOUND,
                "a corrupt copy was stored: a check of its hash answered %d", a->status[0]);
    strata__v1__replicate_response__free_unpacked(a, NULL);
}

int main(int argc, char **argv)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FR_ITERS), failed_ok = 0;
    const fz_domain_t dom = {.max_bytes = 8192, .max_repeat = 80, .limits = {FR_MAX_BATCH, 16, 64}};
    char dir[64], args[256], peer[65];
    srpc_channel_config_t cc = {0};
    srpc_channel_t *ch = NULL;
    fz_rng_t r;

    g_seed = fz_seed("fuzz_replicate");
    fz_rng_init(&r, g_seed, 1);
    snprintf(dir, sizeof(dir), "/tmp/strata-fuzz-repl-XXXXXX");
    if (mkdtemp(dir) == NULL) {
        return 1;
    }
    snprintf(args, sizeof(args),
             "--transport none --max-batch %d --max-object %u --ssd-map-size 256M --ssd-sync "
             "none --log-level error --data-dir %s",
             FR_MAX_BATCH, FR_MAX_OBJ, dir);
    if (tc_start(&g_cl, argc > 1 ? argv[1] : "stratad", 1, args) != 0) {
        return 1;
    }
    peer_token(peer);
    cc.token = peer;
    if (srpc_channel_open(g_cl.node[0].addr, &cc, &ch) != ST_OK) {
        return 1;
    }
    for (g_iter = 0; g_iter < iters; g_iter++) {
        Strata__V1__ReplicateRequest *q = fr_valid(&r), *parsed;
        srpc_error_t err = {0};
        void *resp = NULL;
        size_t resp_len = 0;
        st_status_t st;

        fz_log_clear(&g_log);
        if (fz_chance(&r, 70)) {
            fz_pb_mutate(&r, &q->base, &dom, 1 + (unsigned)fz_below(&r, 3), &g_log);
        }
        g_buf = fz_pb_pack(&q->base, &g_len);
        if (fz_chance(&r, 15)) {
            g_buf = fz_mutate_bytes(&r, g_buf, g_len, &g_len, &g_log);
        }
        parsed = strata__v1__replicate_request__unpack(NULL, g_len, g_buf);
        st = srpc_call_raw(ch, srpc_cache_methods[SRPC_CACHE_REPLICATE].path, g_buf, g_len, 10000,
                           &resp, &resp_len, &err);
        fr_check(parsed, st, &err, resp, resp_len);
        failed_ok += st == ST_OK;
        if (parsed != NULL) {
            strata__v1__replicate_request__free_unpacked(parsed, NULL);
        }
        free(resp);
        if (g_iter % 100 == 0) {
            fr_corrupt_stores_nothing(ch, &r);
        }
        fz_arena_reset();
    }
    FZ_CHECK_OR(fr_fail, tc_wait_exit(&g_cl, 0, 0) == -1, "the daemon died");
    printf("fuzz_replicate: %llu requests, %llu answered OK, seed=0x%llx\n",
           (unsigned long long)iters, (unsigned long long)failed_ok, (unsigned long long)g_seed);
    srpc_channel_close(ch);
    tc_stop_all(&g_cl);
    {
        char cmd[128];

        snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
        if (system(cmd) != 0) {
            return 1;
        }
    }
    return 0;
}
