/*
 * fuzz_tcall.c - frames of calls over the transport (docs/protocol.md "Calls
 * over the transport") sent to a real stratad over UCX, from this process's
 * own transport (tests/support/tcall_raw.c).
 *
 * Each batch mixes valid calls (Lookup, Locate and Score of a stored chain,
 * leases taken and Released), which must be answered OK with the right content,
 * with frames that must not be served: no key, a key with a bit flipped,
 * cut, lengthened or random, of 0 to 1024 bytes; unknown method numbers;
 * request bodies mutated through the protobuf descriptors (fuzz_util.c) or
 * byte by byte, random bodies, bodies over max_message; whole frames
 * mutated (bit flips, truncation, key length past the end or huge, reserved
 * bytes, the response magic), shorter than a header, or empty.
 *
 * Oracle: the test parses every frame it sends with its own parser of the
 * documented layout (not proto/tcall.c) and expects:
 *   - shorter than the 24-byte header: no answer;
 *   - not a well-formed request frame: INVALID_ARGUMENT, no body;
 *   - well-formed without the key Hello gave: PERMISSION_DENIED (or
 *     UNAUTHENTICATED), no body; a frame with a wrong key is never served;
 *   - with the key, a body over max_message: RESOURCE_EXHAUSTED; any other
 *     body: OK or a code the call documents (never UNKNOWN, INTERNAL,
 *     UNIMPLEMENTED, UNAVAILABLE, DATA_LOSS, a deadline); an OK answer
 *     unpacks as the method's response.
 * Every answerable frame is answered within FT_WAIT_MS (a hang fails), with
 * its call id and nothing else; answers parse as response frames. A second
 * tenant's client (beta) asks for acme's chain in its own namespace after
 * every batch and finds none of it; acme's frames that present beta's key
 * are served while Hello gives one key per daemon, and must be refused once
 * keys are per Hello (they differ). Every 16 batches libstrata (which
 * stored the chain) must still find all of it and read it byte for byte;
 * every 8 another client sends a burst and vanishes before its answers
 * come. After every batch the daemon must be alive and healthy. Two fixed
 * cases run first: such a vanishing client, and a peer speaking UCX itself
 * that sends frames without a reply endpoint (no log line per frame). At the
 * end, signalled with SIGTERM while frames keep coming, the daemon must exit
 * 0 (in the sanitizer build: no leak, no error report).
 *
 * Bounds: STRATA_FUZZ_ITERS frames (FT_ITERS), stopped early, with a note,
 * after STRATA_FUZZ_SECONDS (FT_SECONDS). The seed is printed and
 * STRATA_TEST_SEED replays it; a failure prints the seed, the batch, the
 * frame's class, its mutations and first bytes, saves it to
 * /tmp/fuzz_tcall-<seed>-<frame>.bin, and shows the daemon's last log lines;
 * STRATA_FUZZ_REPLAY=<that file> sends it alone to a fresh daemon.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <ucp/api/ucp.h>

#include "cluster.h"
#include "fuzz_util.h"
#include "health.pb-c.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "tcall_raw.h"
#include "tenants.h"

#include "fuzz_tcall.h"

const char *const fe_names[] = {"no answer", "INVALID_ARGUMENT", "refused", "served"};

const char *const fc_names[FC_N] = {"valid",          "bad-key",     "mutated-body", "random-body",
                                    "unknown-method", "frame-bytes", "frame-header", "oversize",
                                    "short",          "other-key"};

ft_state_t T;

/* ------------------------------------------------------------ failures -- */

void ft_fail(const char *fmt, ...)
{
    va_list ap;
    char path[256];

    va_start(ap, fmt);
    fz_fail_head(fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  seed=0x%016llx batch=%llu\n", (unsigned long long)T.seed,
            (unsigned long long)T.batch);
    if (T.cur != NULL) {
        fprintf(stderr, "  frame: id=%llu class=%s expected=%s method=%u\n",
                (unsigned long long)T.cur->id, fc_names[T.cur->cls], fe_names[T.cur->expect],
                T.cur->method);
        fprintf(stderr, "  mutations: %s\n", T.cur->log.len ? T.cur->log.text : "(none)");
        snprintf(path, sizeof(path), "/tmp/fuzz_tcall-%016llx-%llu.bin", (unsigned long long)T.seed,
                 (unsigned long long)T.cur->id);
        fz_fail_input("frame", T.cur->bytes, T.cur->len, 200, path);
    }
    fprintf(stderr, "  replay: STRATA_TEST_SEED=0x%016llx\n", (unsigned long long)T.seed);
    for (int i = 0; i < T.cl.n; i++) {
        fprintf(stderr, "  daemon log (%s), last lines:\n", T.cl.node[i].log);
        fz_file_tail(T.cl.node[i].log, 30);
    }
    tc_stop_all(&T.cl);
    tt_cleanup(&T.tenants);
    exit(1);
}

/* ------------------------------------------------------- the reference -- */

/*
 * What docs/protocol.md says the daemon does with a request frame, read
 * from its table alone: the call id, and the key and body it carries.
 */
int ft_reference(const uint8_t *p, size_t len, const uint8_t *key, size_t key_len, uint64_t *id,
                 uint32_t *method, size_t *body_len)
{
    uint32_t klen;

    if (len < FT_HDR) {
        return FE_DROP;
    }
    *id = (uint64_t)fz_get32(p + 8) | (uint64_t)fz_get32(p + 12) << 32;
    *method = fz_get32(p + 4);
    klen = fz_get32(p + 16);
    if (fz_get32(p) != 0x31514353u || fz_get32(p + 20) != 0 || klen > FT_KEY_MAX ||
        klen > len - FT_HDR || *method < 1 || *method > 4) {
        return FE_INVALID;
    }
    *body_len = len - FT_HDR - klen;
    if (klen != key_len || memcmp(p + FT_HDR, key, key_len) != 0) {
        return FE_DENIED;
    }
    return FE_SERVED;
}

/* --------------------------------------------------------- valid calls -- */

Strata__V1__LookupRequest *ft_lookup_req(size_t n)
{
    Strata__V1__LookupRequest *q = fz_alloc(sizeof(*q));
    Strata__V1__Segment *sg = fz_alloc(sizeof(*sg)), **sgp = fz_alloc(sizeof(*sgp));
    uint32_t *layers = fz_alloc(2 * sizeof(uint32_t));

    strata__v1__lookup_request__init(q);
    strata__v1__segment__init(sg);
    q->namespace_id = T.a.ns;
    sg->first_block = 0;
    sg->block_hashes.data = (uint8_t *)T.chain[0].b;
    sg->block_hashes.len = n * ST_HASH_BYTES;
    *sgp = sg;
    q->segments = sgp;
    q->n_segments = 1;
    q->kinds_mask = 1u << STRATA__V1__OBJECT_KIND__KV;
    layers[0] = 0;
    layers[1] = 1;
    q->layers = layers;
    q->n_layers = 2;
    return q;
}

Strata__V1__LocateRequest *ft_locate_req(size_t first, size_t n_keys, int lease)
{
    Strata__V1__LocateRequest *q = fz_alloc(sizeof(*q));
    Strata__V1__ObjectKey **kp = fz_alloc(n_keys * sizeof(*kp));

    strata__v1__locate_request__init(q);
    q->namespace_id = T.a.ns;
    q->lease = lease;
    for (size_t i = 0; i < n_keys; i++) {
        Strata__V1__ObjectKey *k = fz_alloc(sizeof(*k));

        strata__v1__object_key__init(k);
        k->block_hash.data = (uint8_t *)T.chain[(first + i / 2) % FT_CHAIN].b;
        k->block_hash.len = ST_HASH_BYTES;
        k->kind = STRATA__V1__OBJECT_KIND__KV;
        k->layer = (uint32_t)(i % 2);
        kp[i] = k;
    }
    q->keys = kp;
    q->n_keys = n_keys;
    return q;
}

static Strata__V1__ReleaseRequest *ft_release_req(const uint64_t *ids, size_t n)
{
    Strata__V1__ReleaseRequest *q = fz_alloc(sizeof(*q));

    strata__v1__release_request__init(q);
    q->namespace_id = T.a.ns;
    q->lease_ids = fz_dup(ids, n * sizeof(*ids));
    q->n_lease_ids = n;
    return q;
}

/* A Score of n blocks of the chain from first, layer 0 (no IDX object is
 * stored: every block is answered missing). */
static Strata__V1__ScoreRequest *ft_score_req(size_t first, size_t n)
{
    Strata__V1__ScoreRequest *q = fz_alloc(sizeof(*q));

    strata__v1__score_request__init(q);
    q->namespace_id = T.a.ns;
    q->heads = 2;
    q->dim = 16;
    q->n_q = 32;
    q->q = fz_alloc(sizeof(float) * 32);
    q->n_w = 2;
    q->w = fz_alloc(sizeof(float) * 2);
    for (size_t i = 0; i < 32; i++) {
        q->q[i] = (float)fz_below(&T.r, 100) / 50.0f - 1.0f;
    }
    q->w[0] = 1.0f;
    q->w[1] = 0.5f;
    q->k = 1 + (uint32_t)fz_below(&T.r, 2048);
    q->block_hashes.data = (uint8_t *)T.chain[first].b;
    q->block_hashes.len = n * ST_HASH_BYTES;
    q->blocks = fz_alloc(sizeof(uint64_t) * n);
    for (size_t i = 0; i < n; i++) {
        q->blocks[i] = first + i;
    }
    q->n_blocks = n;
    return q;
}

/* A valid request of method m (random shape), for the valid and mutated classes. */
static ProtobufCMessage *ft_valid_req(uint32_t m, int *valid, uint64_t *lease)
{
    *valid = FV_NONE;
    *lease = 0;
    switch (m) {
    case TCALL_LOOKUP:
        *valid = FV_LOOKUP;
        return &ft_lookup_req(1 + fz_below(&T.r, FT_CHAIN))->base;
    case TCALL_SCORE: {
        size_t first = fz_below(&T.r, FT_CHAIN);

        *valid = FV_SCORE;
        return &ft_score_req(first, 1 + fz_below(&T.r, FT_CHAIN - first))->base;
    }
    case TCALL_LOCATE: {
        int with_lease = fz_chance(&T.r, 40);

        *valid = with_lease ? FV_LOCATE_LEASE : FV_LOCATE;
        return &ft_locate_req(fz_below(&T.r, FT_CHAIN), 1 + fz_below(&T.r, 2 * FT_CHAIN),
                              with_lease)
                    ->base;
    }
    default:
        if (T.n_leases > 0) {
            size_t i = fz_below(&T.r, T.n_leases);

            *lease = T.leases[i];
            T.leases[i] = T.leases[--T.n_leases];
            *valid = FV_RELEASE;
            return &ft_release_req(lease, 1)->base;
        }
        {
            uint64_t none = 1 + fz_below(&T.r, 1000);

            return &ft_release_req(&none, 1)->base; /* no such lease: KEY_NOT_FOUND */
        }
    }
}

/* Checks the content of an OK answer to a valid call. */
static void ft_check_valid(const ft_frame_t *f, const tr_answer_t *a)
{
    switch (f->valid) {
    case FV_LOOKUP: {
        Strata__V1__LookupResponse *lr =
            strata__v1__lookup_response__unpack(NULL, a->body_len, a->body);
        Strata__V1__LookupRequest *lq = strata__v1__lookup_request__unpack(
            NULL, f->len - FT_HDR - T.a.key_len, f->bytes + FT_HDR + T.a.key_len);

        FT_CHECK(lr != NULL && lq != NULL, "a valid Lookup's answer does not unpack");
        FT_CHECK(lr->n_segments == 1 &&
                     lr->segments[0]->matched_blocks == lq->segments[0]->block_hashes.len / 16,
                 "a valid Lookup of %zu stored blocks matched %llu",
                 lq->segments[0]->block_hashes.len / 16,
                 lr->n_segments ? (unsigned long long)lr->segments[0]->matched_blocks : 0ull);
        strata__v1__lookup_response__free_unpacked(lr, NULL);
        strata__v1__lookup_request__free_unpacked(lq, NULL);
        break;
    }
    case FV_LOCATE:
    case FV_LOCATE_LEASE: {
        Strata__V1__LocateResponse *lr =
            strata__v1__locate_response__unpack(NULL, a->body_len, a->body);
        Strata__V1__LocateRequest *lq = strata__v1__locate_request__unpack(
            NULL, f->len - FT_HDR - T.a.key_len, f->bytes + FT_HDR + T.a.key_len);

        FT_CHECK(lr != NULL && lq != NULL && lr->locations != NULL,
                 "a valid Locate's answer does not unpack");
        FT_CHECK(lr->locations->n_state == lq->n_keys, "Locate of %zu keys answered %zu states",
                 lq->n_keys, lr->locations->n_state);
        for (size_t i = 0; i < lr->locations->n_state; i++) {
            FT_CHECK(lr->locations->state[i] == STRATA__V1__OBJECT_STATE__OBJECT_PRESENT &&
                         lr->locations->length[i] == FT_OBJ,
                     "Locate: stored object %zu is state %d length %llu", i,
                     (int)lr->locations->state[i], (unsigned long long)lr->locations->length[i]);
        }
        if (f->valid == FV_LOCATE_LEASE) {
            FT_CHECK(lr->lease_id != 0, "a Locate with lease answered no lease");
            if (T.n_leases < FT_LEASES) {
                T.leases[T.n_leases++] = lr->lease_id;
            }
        }
        strata__v1__locate_response__free_unpacked(lr, NULL);
        strata__v1__locate_request__free_unpacked(lq, NULL);
        break;
    }
    case FV_SCORE: {
        Strata__V1__ScoreResponse *sr =
            strata__v1__score_response__unpack(NULL, a->body_len, a->body);
        Strata__V1__ScoreRequest *sq = strata__v1__score_request__unpack(
            NULL, f->len - FT_HDR - T.a.key_len, f->bytes + FT_HDR + T.a.key_len);

        FT_CHECK(sr != NULL && sq != NULL, "a valid Score's answer does not unpack");
        FT_CHECK(sr->n_missing == sq->n_blocks && sr->n_positions == 0 && sr->blocks_scored == 0,
                 "a Score of %zu blocks without IDX objects answered %zu missing, %zu positions",
                 sq->n_blocks, sr->n_missing, sr->n_positions);
        strata__v1__score_response__free_unpacked(sr, NULL);
        strata__v1__score_request__free_unpacked(sq, NULL);
        break;
    }
    case FV_RELEASE: {
        Strata__V1__ReleaseResponse *rr =
            strata__v1__release_response__unpack(NULL, a->body_len, a->body);

        FT_CHECK(rr != NULL && rr->n_status == 1, "a valid Release's answer does not unpack");
        /* A mutated Release may have ended the lease first. */
        FT_CHECK(rr->status[0] == STRATA__V1__KEY_STATUS__KEY_OK ||
                     rr->status[0] == STRATA__V1__KEY_STATUS__KEY_NOT_FOUND,
                 "Release of lease %llu: status %d", (unsigned long long)f->lease,
                 (int)rr->status[0]);
        strata__v1__release_response__free_unpacked(rr, NULL);
        break;
    }
    default: break;
    }
}

/* --------------------------------------------------------------- frames -- */

static int ft_name_is(const ProtobufCFieldDescriptor *fd, const char *name)
{
    return strcmp(fd->name, name) == 0;
}

static int ft_dom_u64(void *user, fz_rng_t *r, const ProtobufCFieldDescriptor *fd, uint64_t *out)
{
    (void)user;
    if (ft_name_is(fd, "namespace_id") && fz_chance(r, 60)) {
        *out = fz_chance(r, 80) ? T.a.ns : T.a.ns + 1;
        return 1;
    }
    if (ft_name_is(fd, "lease_ids") && T.n_leases > 0 && fz_chance(r, 50)) {
        *out = T.leases[fz_below(r, T.n_leases)];
        return 1;
    }
    return 0;
}

static int ft_dom_bytes(void *user, fz_rng_t *r, const ProtobufCFieldDescriptor *fd,
                        ProtobufCBinaryData *out)
{
    (void)user;
    if (ft_name_is(fd, "block_hash") && fz_chance(r, 70)) {
        out->data = (uint8_t *)T.chain[fz_below(r, FT_CHAIN)].b;
        out->len = ST_HASH_BYTES;
        return 1;
    }
    if (ft_name_is(fd, "block_hashes") && fz_chance(r, 70)) {
        size_t first = fz_below(r, FT_CHAIN);

        out->data = (uint8_t *)T.chain[first].b;
        out->len = (1 + fz_below(r, FT_CHAIN - first)) * ST_HASH_BYTES;
        return 1;
    }
    return 0;
}

/* A frame: header with key[0..key_len), then body. Arena memory. */
static uint8_t *ft_frame_bytes(uint32_t method, uint64_t id, const uint8_t *key, size_t key_len,
                               const uint8_t *body, size_t body_len, size_t *len_p)
{
    uint8_t *p = fz_alloc(FT_HDR + key_len + body_len + 1);

    fz_put32(p, 0x31514353u);
    fz_put32(p + 4, method);
    fz_put64(p + 8, id);
    fz_put32(p + 16, (uint32_t)key_len);
    fz_put32(p + 20, 0);
    memcpy(p + FT_HDR, key, key_len);
    if (body_len > 0) {
        memcpy(p + FT_HDR + key_len, body, body_len);
    }
    *len_p = FT_HDR + key_len + body_len;
    return p;
}

/* A key that is not Hello's: none, flipped, cut, longer, random. */
static uint8_t *ft_bad_key(size_t *len_p, fz_log_t *log)
{
    size_t kl = T.a.key_len, n;
    uint8_t *k = fz_alloc(FT_KEY_MAX + 1);

    switch (fz_below(&T.r, 6)) {
    case 0:
        *len_p = 0;
        fz_logf(log, "no key");
        return k;
    case 1:
        memcpy(k, T.a.key, kl);
        n = fz_below(&T.r, kl * 8);
        k[n / 8] ^= (uint8_t)(1u << (n % 8));
        *len_p = kl;
        fz_logf(log, "key: bit %zu flipped", n);
        return k;
    case 2:
        n = fz_below(&T.r, kl);
        memcpy(k, T.a.key, n);
        *len_p = n;
        fz_logf(log, "key: cut to %zu bytes", n);
        return k;
    case 3:
        n = kl + 1 + fz_below(&T.r, 64);
        memcpy(k, T.a.key, kl);
        fz_fill(&T.r, k + kl, n - kl);
        *len_p = n;
        fz_logf(log, "key: lengthened to %zu bytes", n);
        return k;
    case 4:
        fz_fill(&T.r, k, kl);
        *len_p = kl;
        fz_logf(log, "key: random %zu bytes", kl);
        return k;
    default:
        n = fz_chance(&T.r, 50) ? FT_KEY_MAX : fz_below(&T.r, FT_KEY_MAX + 1);
        fz_fill(&T.r, k, n);
        *len_p = n;
        fz_logf(log, "key: random %zu bytes", n);
        return k;
    }
}

/* A mutated frame header: fields the parser checks, one at a time. */
static void ft_mutate_header(uint8_t *p, size_t len, fz_log_t *log)
{
    static const uint32_t odd[] = {0,    1,     15,    16,          17,          1023,       1024,
                                   1025, 65535, 65536, 0x7fffffffu, 0x80000000u, 0xffffffffu};
    uint32_t v = odd[fz_below(&T.r, sizeof(odd) / sizeof(odd[0]))];

    switch (fz_below(&T.r, 5)) {
    case 0:
        fz_put32(p, fz_chance(&T.r, 50) ? 0x31504353u : (uint32_t)fz_next(&T.r));
        fz_logf(log, "header: magic 0x%08x", fz_get32(p));
        break;
    case 1:
        fz_put32(p + 16, fz_chance(&T.r, 50) ? v : (uint32_t)(len - FT_HDR + fz_below(&T.r, 3)));
        fz_logf(log, "header: key length %u (frame %zu)", fz_get32(p + 16), len);
        break;
    case 2:
        p[20 + fz_below(&T.r, 4)] |= (uint8_t)(1u << fz_below(&T.r, 8));
        fz_logf(log, "header: reserved 0x%08x", fz_get32(p + 20));
        break;
    case 3:
        fz_put32(p + 4, v);
        fz_logf(log, "header: method %u", v);
        break;
    default:
        p[18 + fz_below(&T.r, 2)] = (uint8_t)fz_next(&T.r);
        fz_logf(log, "header: key length high bytes 0x%08x", fz_get32(p + 16));
        break;
    }
}

/* Whether Hello gave both tenants one key (one key per daemon). */
static int ft_same_keys(void)
{
    return T.a.key_len == T.b.key_len && memcmp(T.a.key, T.b.key, T.a.key_len) == 0;
}

/* Builds one frame of class cls (the id is fresh). */
void ft_build(ft_frame_t *f, int cls)
{
    uint32_t m = 1 + (uint32_t)fz_below(&T.r, 4);
    ProtobufCMessage *req;
    uint8_t *body, *key = T.a.key;
    size_t body_len, key_len = T.a.key_len;

    memset(f, 0, sizeof(*f));
    fz_log_clear(&f->log);
    f->cls = cls;
    f->id = ++T.next_id;
    req = ft_valid_req(m, &f->valid, &f->lease);
    body = fz_pb_pack(req, &body_len);
    switch (cls) {
    case FC_VALID: break;
    case FC_OTHER_KEY:
        /* Another tenant's key on this client's call. One key per daemon
         * today: the same key, served; keys per Hello: refused. */
        key = T.b.key;
        key_len = T.b.key_len;
        fz_logf(&f->log, "tenant beta's key%s", ft_same_keys() ? " (the same key)" : "");
        if (!ft_same_keys()) {
            f->valid = FV_NONE;
            if (f->lease != 0 && T.n_leases < FT_LEASES) {
                T.leases[T.n_leases++] = f->lease;
            }
            f->lease = 0;
        }
        break;
    case FC_BAD_KEY:
        key = ft_bad_key(&key_len, &f->log);
        f->valid = FV_NONE;
        if (f->lease != 0 && T.n_leases < FT_LEASES) {
            T.leases[T.n_leases++] = f->lease; /* not released: a refused call */
        }
        break;
    case FC_MUTATED_BODY:
        if (fz_chance(&T.r, 60)) {
            fz_pb_mutate(&T.r, req, &T.dom, 1 + (unsigned)fz_below(&T.r, 3), &f->log);
            body = fz_pb_pack(req, &body_len);
        } else {
            body = fz_mutate_bytes(&T.r, body, body_len, &body_len, &f->log);
        }
        f->valid = FV_NONE;
        break;
    case FC_RANDOM_BODY:
        body_len = fz_below(&T.r, 2048);
        body = fz_alloc(body_len + 1);
        fz_fill(&T.r, body, body_len);
        fz_logf(&f->log, "body: %zu random bytes", body_len);
        f->valid = FV_NONE;
        break;
    case FC_UNKNOWN_METHOD: {
        static const uint32_t odd[] = {0, 5, 6, 9, 255, 256, 0x10001, 0x7fffffffu, 0xffffffffu};

        m = fz_chance(&T.r, 50) ? odd[fz_below(&T.r, sizeof(odd) / sizeof(odd[0]))]
                                : (uint32_t)fz_next(&T.r) | 8u;
        fz_logf(&f->log, "method %u", m);
        f->valid = FV_NONE;
        break;
    }
    case FC_OVERSIZE:
        body_len = FT_MAX_MSG + 1 + fz_below(&T.r, 4096);
        body = fz_alloc(body_len);
        if (fz_chance(&T.r, 50)) {
            fz_fill(&T.r, body, body_len);
        } /* else zeros: field 0, which does not parse either */
        if (fz_chance(&T.r, 40)) {
            key = ft_bad_key(&key_len, &f->log);
        }
        fz_logf(&f->log, "body: %zu bytes", body_len);
        f->valid = FV_NONE;
        break;
    default: break;
    }
    if (f->valid == FV_NONE && f->lease != 0 && cls != FC_BAD_KEY && T.n_leases < FT_LEASES) {
        T.leases[T.n_leases++] = f->lease; /* maybe not released: keep trying it */
    }
    f->method = m;
    f->bytes = ft_frame_bytes(m, f->id, key, key_len, body, body_len, &f->len);
    switch (cls) {
    case FC_FRAME_BYTES:
        f->bytes = fz_mutate_bytes(&T.r, f->bytes, f->len, &f->len, &f->log);
        f->valid = FV_NONE;
        if (f->len >= 16) {
            fz_put64(f->bytes + 8, f->id); /* ids stay unique; the rest is mutated */
        }
        break;
    case FC_FRAME_HEADER:
        ft_mutate_header(f->bytes, f->len, &f->log);
        f->valid = FV_NONE;
        break;
    case FC_SHORT:
        f->len = fz_below(&T.r, FT_HDR);
        fz_logf(&f->log, "cut to %zu bytes", f->len);
        f->valid = FV_NONE;
        break;
    default: break;
    }
    {
        uint64_t id = 0;
        uint32_t method = 0;
        size_t blen = 0;

        f->expect = ft_reference(f->bytes, f->len, T.a.key, T.a.key_len, &id, &method, &blen);
        FT_CHECK(f->expect == FE_DROP || id == f->id, "the test lost a frame's id");
        if (f->expect == FE_SERVED) {
            f->method = method; /* a mutation may have changed it */
        }
    }
}

int ft_pick_class(void)
{
    static const struct {
        int cls;
        unsigned weight;
    } w[] = {{FC_VALID, 20},        {FC_BAD_KEY, 18},       {FC_MUTATED_BODY, 22},
             {FC_RANDOM_BODY, 8},   {FC_UNKNOWN_METHOD, 5}, {FC_FRAME_BYTES, 12},
             {FC_FRAME_HEADER, 10}, {FC_OVERSIZE, 1},       {FC_SHORT, 4},
             {FC_OTHER_KEY, 5}};
    unsigned total = 0, x;

    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        total += w[i].weight;
    }
    x = (unsigned)fz_below(&T.r, total);
    for (size_t i = 0; i < sizeof(w) / sizeof(w[0]); i++) {
        if (x < w[i].weight) {
            return w[i].cls;
        }
        x -= w[i].weight;
    }
    return FC_VALID;
}

/* Judges the answer a to frame f. */
void ft_judge(ft_frame_t *f, const tr_answer_t *a)
{
    const uint32_t served_ok = FT_CODE(GC_OK) | FT_CODE(GC_INVALID) | FT_CODE(GC_NOT_FOUND) |
                               FT_CODE(GC_DENIED) | FT_CODE(GC_EXHAUSTED) |
                               FT_CODE(GC_PRECONDITION) | FT_CODE(GC_EXISTS) |
                               FT_CODE(GC_UNAUTHENTICATED);
    uint32_t body_len = 0;

    T.cur = f;
    T.codes[a->code < 17 ? a->code : 0]++;
    if (f->cls == FC_OTHER_KEY && !ft_same_keys()) {
        FT_CHECK(a->code != GC_OK && a->body_len == 0,
                 "a call with another tenant's key got code %u with %zu bytes", a->code,
                 a->body_len);
        T.cur = NULL;
        return;
    }
    switch (f->expect) {
    case FE_DROP: ft_fail("a frame of %zu bytes (no call id) was answered", f->len);
    case FE_INVALID:
        FT_CHECK(a->code == GC_INVALID, "a frame that does not parse got code %u (%s)", a->code,
                 a->msg);
        break;
    case FE_DENIED:
        FT_CHECK(a->code == GC_DENIED || a->code == GC_UNAUTHENTICATED,
                 "a frame without Hello's key got code %u (%s), not a refusal", a->code, a->msg);
        break;
    default:
        body_len = (uint32_t)(f->len - FT_HDR - T.a.key_len);
        if (body_len > FT_MAX_MSG) {
            FT_CHECK(a->code == GC_EXHAUSTED,
                     "a body of %u bytes over max_message got code %u (%s)", body_len, a->code,
                     a->msg);
        }
        FT_CHECK(a->code < 32 && (served_ok & FT_CODE(a->code)),
                 "a served call got code %u (%s), which the call does not document", a->code,
                 a->msg);
        if (f->valid != FV_NONE) {
            FT_CHECK(a->code == GC_OK, "a valid call got code %u (%s)", a->code, a->msg);
            ft_check_valid(f, a);
        } else if (a->code == GC_OK) {
            const ProtobufCMessageDescriptor *d =
                f->method == TCALL_LOCATE    ? &strata__v1__locate_response__descriptor
                : f->method == TCALL_RELEASE ? &strata__v1__release_response__descriptor
                : f->method == TCALL_SCORE   ? &strata__v1__score_response__descriptor
                                             : &strata__v1__lookup_response__descriptor;
            ProtobufCMessage *pm = protobuf_c_message_unpack(d, NULL, a->body_len, a->body);

            FT_CHECK(pm != NULL || a->body_len == 0, "an OK answer does not unpack as %s", d->name);
            if (pm != NULL) {
                if (f->method == TCALL_LOCATE) {
                    uint64_t lease = ((Strata__V1__LocateResponse *)pm)->lease_id;

                    if (lease != 0 && T.n_leases < FT_LEASES) {
                        T.leases[T.n_leases++] = lease;
                    }
                }
                protobuf_c_message_free_unpacked(pm, NULL);
            }
        }
        break;
    }
    if (f->expect != FE_SERVED || a->code != GC_OK) {
        FT_CHECK(a->body_len == 0, "a refused frame's answer carries %zu bytes", a->body_len);
    }
    T.cur = NULL;
}

/* ---------------------------------------------------------------- main -- */

int main(int argc, char **argv)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FT_ITERS), done = 0;
    double secs = (double)fz_env_u64("STRATA_FUZZ_SECONDS", FT_SECONDS), start;
    ft_frame_t *batch = calloc(FT_BATCH, sizeof(*batch));
    int rc;

    if (argc < 2) {
        fprintf(stderr, "usage: %s <stratad>\n", argv[0]);
        return 2;
    }
    FT_CHECK(batch != NULL, "out of memory");
    T.seed = fz_seed("test_fuzz_tcall");
    fz_rng_init(&T.r, T.seed, 1);
    T.dom.u64 = ft_dom_u64;
    T.dom.bytes = ft_dom_bytes;
    T.dom.max_bytes = 8 << 10;
    T.dom.max_repeat = 5000;
    T.dom.limits[0] = 16;
    T.dom.limits[1] = 128;
    T.dom.limits[2] = 1024;
    T.dom.limits[3] = 4096;
    T.dom.limits[4] = 10000;
    T.dom.limits[5] = FT_CHAIN;
    T.dom.limits[6] = 65536;
    T.dom.limits[7] = 1u << 20;
    {
        static const char *const names[2] = {"acme", "beta"};
        static const char *const tokens[2] = {FT_TOKEN_A, FT_TOKEN_B};
        char args[512];

        FT_CHECK(tt_prepare(&T.tenants, argv[1], names, tokens, 2, "fz") == 0,
                 "cannot prepare the tenants");
        /* Transport calls are UCX's: two tenants need the opt-in. */
        snprintf(args, sizeof(args), "%s %s %s", FT_ARGS, T.tenants.flags, T.tenants.shared);
        FT_CHECK(tc_start(&T.cl, argv[1], 1, args) == 0, "cannot start stratad");
    }
    ft_store_chain();
    fz_arena_reset();
    FT_CHECK(tr_open(&T.a, T.cl.node[0].addr, T.tenants.t[0].token, "acme", "fz") == ST_OK,
             "the raw client cannot connect");
    if (!T.a.serves) {
        printf("test_fuzz_tcall: the daemon does not serve calls over its transport: skipped\n");
        tr_close(&T.a);
        tc_stop_all(&T.cl);
        tt_cleanup(&T.tenants);
        return 77;
    }
    FT_CHECK(T.a.key_len > 0, "Hello gave no transport call key");
    FT_CHECK(tr_open(&T.b, T.cl.node[0].addr, T.tenants.t[1].token, "beta", "fz") == ST_OK &&
                 T.b.serves,
             "tenant beta's raw client cannot connect");
    FT_CHECK(T.b.ns != T.a.ns, "two tenants got one namespace");
    if (getenv("STRATA_FUZZ_REPLAY") != NULL) {
        return ft_replay(getenv("STRATA_FUZZ_REPLAY"));
    }

    /* Fixed case first: a client that closes before its answer came
     * (over tcp,self this crashed the daemon inside UCX). */
    ft_vanish();
    tr_idle(&T.a, 300); /* the daemon answers the vanished client meanwhile */
    ft_check_alive();
    fz_arena_reset();
    ft_noreply();
    fz_arena_reset();

    start = fz_now();
    while (done < iters) {
        size_t n = iters - done < FT_BATCH ? (size_t)(iters - done) : FT_BATCH, want = 0, got;

        if (fz_now() - start > secs) {
            printf("test_fuzz_tcall: stopped after %.0f s (STRATA_FUZZ_SECONDS) at %llu of %llu "
                   "frames\n",
                   secs, (unsigned long long)done, (unsigned long long)iters);
            break;
        }
        T.batch++;
        tr_forget(&T.a);
        for (size_t i = 0; i < n; i++) {
            ft_frame_t *f = &batch[i];
            st_status_t st;

            ft_build(f, ft_pick_class());
            T.sent[f->cls]++;
            T.cur = f;
            if (f->len == 0) {
                continue; /* the transport sends no empty message */
            }
            st = tr_send(&T.a, f->bytes, f->len);
            FT_CHECK(st == ST_OK, "sending a frame of %zu bytes failed: %s", f->len,
                     st_strerror(st));
            want += f->expect != FE_DROP;
            /* Answers of earlier frames come in meanwhile. */
            (void)tp_progress(T.a.tp);
        }
        T.cur = NULL;
        got = tr_wait(&T.a, want, FT_WAIT_MS);
        FT_CHECK(T.a.n_bad == 0, "an answer is not a response frame: %s", T.a.bad_why);
        for (size_t i = 0; i < n; i++) {
            tr_answer_t *a = tr_find(&T.a, batch[i].id);

            T.cur = &batch[i];
            if (batch[i].expect == FE_DROP) {
                FT_CHECK(a == NULL, "a frame of %zu bytes (no call id) was answered", batch[i].len);
                continue;
            }
            FT_CHECK(a != NULL, "no answer within %d ms (%zu of %zu answers came)", FT_WAIT_MS, got,
                     want);
            ft_judge(&batch[i], a);
        }
        T.cur = NULL;
        /* Nothing else: the frames without an id stay unanswered. */
        tr_idle(&T.a, 2);
        FT_CHECK(T.a.n_ans == want, "%zu answers to %zu answerable frames", T.a.n_ans, want);
        done += n;
        ft_beta_calls();
        if (T.batch % 8 == 0) {
            ft_vanish();
        }
        if (T.batch % 16 == 0) {
            ft_check_lib();
        }
        ft_check_alive();
        fz_arena_reset();
    }
    printf("test_fuzz_tcall: %llu frames in %.1f s:", (unsigned long long)done, fz_now() - start);
    for (int c = 0; c < FC_N; c++) {
        printf(" %s=%llu", fc_names[c], (unsigned long long)T.sent[c]);
    }
    printf("\n  answers:");
    for (int c = 0; c < 17; c++) {
        if (T.codes[c] != 0) {
            printf(" code%d=%llu", c, (unsigned long long)T.codes[c]);
        }
    }
    printf("\n");
    ft_check_lib();
    st_client_close(T.lib);
    tr_close(&T.b);
    rc = ft_stop_under_load();
    tr_close(&T.a);
    FT_CHECK(rc == 0, "the daemon exited with status %d on SIGTERM under calls", rc);
    tc_stop_all(&T.cl);
    tt_cleanup(&T.tenants);
    free(batch);
    fz_arena_reset();
    return 0;
}
