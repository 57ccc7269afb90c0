/*
 * fuzz_handlers.c - every method of strata.v1.Cache and grpc.health.v1.Health
 * of two real stratad daemons on loopback, fed mutated requests.
 *
 * For each method a valid request is built with protobuf-c (the namespace of
 * a real Hello, real block hashes of a chain stored on both nodes, live
 * reservation, lease and session ids), then mutated: field by field through
 * the message descriptors (fuzz_util.c: huge, zero and negative numbers,
 * out-of-range kinds and layers, bytes of wrong and oversize lengths,
 * repeated fields emptied or grown to thousands of entries, parallel arrays
 * of different lengths), and byte by byte after packing (bit flips,
 * truncation, appends, fields longer than the message). Each request goes
 * out with srpc_call_raw().
 *
 * Oracle. The test unpacks the exact bytes it sent with the same protobuf-c,
 * then checks the answer against docs/protocol.md:
 *   - bytes over the limit: RESOURCE_EXHAUSTED; bytes that do not parse:
 *     INVALID_ARGUMENT;
 *   - a request the protocol calls malformed (an unknown namespace, packed
 *     hashes not a multiple of 16, kind 0, arrays of different lengths,
 *     lease_ms over max_lease_ms, a count over a limit, ...) must fail with
 *     the code the protocol gives (INVALID_ARGUMENT, NOT_FOUND, ...), never OK;
 *   - any other request gets OK or one of the codes the call documents for
 *     the state of the daemon (NOT_FOUND of an expired reservation, ...);
 *     INTERNAL, UNKNOWN, a deadline or a dropped connection fail the test;
 *   - an OK answer must unpack as the response type and agree with the
 *     request: one status per key, Locations columns of equal length,
 *     per-key KEY_INVALID / KEY_CORRUPT where the protocol says so, Get
 *     data that matches its checksum.
 * After every batch both daemons must be alive and serving (health, Hello,
 * tokens right and wrong, Lookup and ClusterLookup of a pinned canary chain,
 * Get of its objects byte for byte, its session record unchanged); at the end
 * both must exit 0 on SIGTERM. Requests that once got a wrong answer run
 * first, as fixed regression cases.
 *
 * This file runs the test; fuzz_requests.c builds the requests, fuzz_oracle.c
 * judges the answers (fuzz_handlers.h).
 *
 * Bounds: STRATA_FUZZ_ITERS iterations per method (FZ_ITERS), stopped
 * early (with a note, not a failure) after STRATA_FUZZ_SECONDS. The seed is
 * printed; STRATA_TEST_SEED replays a run, and each method draws from its own
 * stream, so STRATA_FUZZ_METHOD=Lookup replays that method's inputs alone.
 */
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fuzz_handlers.h"
#include "ns_probe.h"

fz_state_t F;

static void fz_check_alive(void);

/* ------------------------------------------------------------ failures -- */

void __attribute__((noreturn, format(printf, 1, 2))) fz_fail(const char *fmt, ...)
{
    va_list ap;
    char path[256];

    va_start(ap, fmt);
    fz_fail_head(fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  seed=0x%016llx method=%s node=%d iteration=%llu\n",
            (unsigned long long)F.seed, F.cur_method ? F.cur_method : "-", F.cur_node,
            (unsigned long long)F.cur_iter);
    fprintf(stderr, "  mutations: %s\n", F.log.len ? F.log.text : "(none)");
    if (F.cur_req != NULL) {
        snprintf(path, sizeof(path), "/tmp/fuzz_handlers-%016llx-%s-%llu.bin",
                 (unsigned long long)F.seed, F.cur_method ? F.cur_method : "x",
                 (unsigned long long)F.cur_iter);
        fz_fail_input("request", F.cur_req, F.cur_len, 256, path);
    }
    fprintf(stderr, "  replay: STRATA_TEST_SEED=0x%016llx STRATA_FUZZ_METHOD=%s\n",
            (unsigned long long)F.seed, F.cur_method ? F.cur_method : "");
    for (int i = 0; i < F.cl.n; i++) {
        fprintf(stderr, "  node %d log (%s), last lines:\n", i, F.cl.node[i].log);
        fz_file_tail(F.cl.node[i].log, 40);
    }
    for (int i = 0; i < FZ_NODES; i++) {
        srpc_channel_close(F.node[i].ch); /* or each daemon's stop waits for it */
        F.node[i].ch = NULL;
    }
    tc_stop_all(&F.cl);
    exit(1);
}

/* ---------------------------------------------------------------- calls -- */

/* Sends raw bytes; returns the gRPC code, the answer in *resp (malloc'd). */
int fz_raw(int node, const char *path, const uint8_t *req, size_t len, void **resp,
           size_t *resp_len, srpc_error_t *err)
{
    st_status_t st;

    *resp = NULL;
    *resp_len = 0;
    memset(err, 0, sizeof(*err));
    st = srpc_call_raw(F.node[node].ch, path, req, len, F.short_deadline ? 1 : FZ_TIMEOUT_MS, resp,
                       resp_len, err);
    if (st == ST_OK) {
        return GRPC_STATUS_OK;
    }
    return err->grpc_code;
}

/* A well-formed call that must succeed (set-up and checks). */
void *fz_call_ok(int node, int m, const void *req)
{
    ProtobufCMessage *resp = NULL;
    srpc_error_t err;
    st_status_t st;

    st = srpc_call(F.node[node].ch, &srpc_cache_methods[m], req, FZ_TIMEOUT_MS, &resp, &err);
    FZ_CHECK(st == ST_OK, "node %d: %s failed: %s (code %d: %s)", node, srpc_cache_methods[m].path,
             st_strerror(st), err.grpc_code, err.message);
    return resp;
}

/* ------------------------------------------------------------ one input -- */

static const char *fz_code_name(int code)
{
    static const char *const names[FZ_CODES] = {"OK",
                                                "CANCELLED",
                                                "UNKNOWN",
                                                "INVALID_ARGUMENT",
                                                "DEADLINE",
                                                "NOT_FOUND",
                                                "ALREADY_EXISTS",
                                                "PERMISSION_DENIED",
                                                "EXHAUSTED",
                                                "FAILED_PRECONDITION",
                                                "ABORTED",
                                                "OUT_OF_RANGE",
                                                "UNIMPLEMENTED",
                                                "INTERNAL",
                                                "UNAVAILABLE",
                                                "DATA_LOSS",
                                                "UNAUTHENTICATED"};

    return code >= 0 && code < FZ_CODES ? names[code] : "?";
}

static void fz_codes_text(uint32_t mask, char *buf, size_t len)
{
    size_t o = 0;

    buf[0] = '\0';
    for (int c = 0; c < FZ_CODES && o < len; c++) {
        if (mask & (1u << c)) {
            o += (size_t)snprintf(buf + o, len - o, "%s%s", o ? "|" : "", fz_code_name(c));
        }
    }
}

/* Sends one request of method m to node, checks the answer. */
static void fz_one(int m, int node, const uint8_t *req, size_t len)
{
    fz_method_t *fm = &F.m[m];
    ProtobufCMessage *pm = NULL, *pa = NULL;
    void *resp = NULL;
    size_t resp_len = 0;
    srpc_error_t err;
    fz_expect_t e;
    char codes[160];
    int code;

    F.cur_req = req;
    F.cur_len = len;
    memset(&e, 0, sizeof(e));
    if (m == FZ_M_UNKNOWN) {
        static const char *const paths[] = {"/strata.v1.Cache/Nope", "/grpc.health.v1.Health/Watch",
                                            "/strata.v1.Cache/", "/strata.v1.Cachex/Hello",
                                            "/nope"};

        code = fz_raw(node, paths[fz_below(F.r, 5)], req, len, &resp, &resp_len, &err);
        fm->iters++;
        fm->codes[code < FZ_CODES ? code : GRPC_STATUS_UNKNOWN]++;
        FZ_CHECK(code == GRPC_STATUS_UNIMPLEMENTED ||
                     (F.short_deadline && code == GRPC_STATUS_DEADLINE_EXCEEDED),
                 "unknown method answered %s (%s)", fz_code_name(code), err.message);
        free(resp);
        return;
    }
    if (len > fm->max_bytes) {
        fz_bad(&e, GRPC_STATUS_RESOURCE_EXHAUSTED, "%zu bytes > %u", len, fm->max_bytes);
    } else {
        pm = protobuf_c_message_unpack(fm->req, NULL, len, req);
        if (pm == NULL) {
            fz_bad(&e, GRPC_STATUS_INVALID_ARGUMENT, "the bytes do not parse");
            fm->unparsable++;
        } else {
            fz_expect(m, node, pm, &e);
        }
    }
    code = fz_raw(node, fm->path, req, len, &resp, &resp_len, &err);
    if (F.trace) {
        printf("%s #%llu node %d: %zu bytes, %s (%s); %s\n", fm->name,
               (unsigned long long)F.cur_iter, node, len, fz_code_name(code), err.message,
               F.log.len ? F.log.text : "valid");
    }
    fm->iters++;
    fm->codes[code >= 0 && code < FZ_CODES ? code : GRPC_STATUS_UNKNOWN]++;
    fm->must_fail += e.must_fail;
    if (F.short_deadline && code == GRPC_STATUS_DEADLINE_EXCEEDED) {
        fm->cut_off++; /* nothing to judge; the checks between batches still run */
        if (pm != NULL) {
            protobuf_c_message_free_unpacked(pm, NULL);
        }
        free(resp);
        return;
    }

    if (code == GRPC_STATUS_UNAVAILABLE || code == GRPC_STATUS_CANCELLED) {
        /* Most likely the daemon died: say so, with its signal. */
        nanosleep(&(struct timespec){0, 300 * 1000 * 1000}, NULL);
        fz_check_alive();
    }
    FZ_CHECK(code != GRPC_STATUS_INTERNAL && code != GRPC_STATUS_UNKNOWN &&
                 code != GRPC_STATUS_DEADLINE_EXCEEDED && code != GRPC_STATUS_UNAVAILABLE &&
                 code != GRPC_STATUS_CANCELLED,
             "%s answered %s: %s", fm->name, fz_code_name(code), err.message);
    if (e.must_fail) {
        fz_codes_text(e.fail_codes, codes, sizeof(codes));
        FZ_CHECK(code != GRPC_STATUS_OK && (e.fail_codes & (1u << code)),
                 "%s: malformed request (%s) answered %s (%s), expected %s", fm->name, e.why,
                 fz_code_name(code), err.message, codes);
    } else {
        fz_codes_text(e.env_codes, codes, sizeof(codes));
        FZ_CHECK(code == GRPC_STATUS_OK || (e.env_codes & (1u << code)),
                 "%s: well-formed request answered %s (%s); allowed: OK|%s", fm->name,
                 fz_code_name(code), err.message, codes);
    }
    if (code != GRPC_STATUS_OK) {
        FZ_CHECK(err.message[0] != '\0', "%s: %s without a message", fm->name, fz_code_name(code));
        if (m == SRPC_CACHE_COMMIT && pm != NULL &&
            (code == GRPC_STATUS_UNIMPLEMENTED || code == GRPC_STATUS_NOT_FOUND)) {
            fz_forget_resv(node,
                           ((const Strata__V1__CommitRequest *)(const void *)pm)->reservation_id);
        }
    } else {
        fm->ok++;
        pa = protobuf_c_message_unpack(fm->resp, NULL, resp_len, resp);
        FZ_CHECK(pa != NULL, "%s: OK with %zu bytes that do not parse as %s", fm->name, resp_len,
                 fm->resp->name);
        fz_check_ok(m, node, pm, pa);
        protobuf_c_message_free_unpacked(pa, NULL);
    }
    if (pm != NULL) {
        protobuf_c_message_free_unpacked(pm, NULL);
    }
    free(resp);
}

/* One iteration of method m: build, mutate, send, check. */
static void fz_iteration(int m, fz_rng_t *r)
{
    ProtobufCMessage *q;
    uint8_t *buf;
    size_t len;
    unsigned mode = (unsigned)fz_below(r, 100);

    F.r = r;
    F.cur_node = (int)fz_below(r, FZ_NODES);
    /* 2%: the client gives up after 1 ms, so that calls are cut off while
     * the daemon reads, handles or answers them. */
    F.short_deadline = fz_chance(r, 2);
    fz_log_clear(&F.log);
    if (m == FZ_M_UNKNOWN) {
        len = fz_below(r, 64);
        buf = fz_alloc(len + 1);
        fz_fill(r, buf, len);
        fz_one(m, F.cur_node, buf, len);
        fz_arena_reset();
        return;
    }
    /* A mutated message of more than FZ_MAX_PACKED bytes is made again (its
     * size alone is tested by the ones just over max_message). */
    for (int attempt = 0;; attempt++) {
        q = fz_builders[m](r);
        fz_log_clear(&F.log);
        if (mode >= 15 && attempt < 8) { /* 85%: structure-aware mutations */
            fz_pb_mutate(r, q, &F.dom,
                         mode < 70 ? 1 + (unsigned)fz_below(r, 4) : (unsigned)fz_below(r, 3),
                         &F.log);
        }
        if (protobuf_c_message_get_packed_size(q) <= FZ_MAX_PACKED) {
            break;
        }
    }
    buf = fz_pb_pack(q, &len);
    if (mode >= 70) { /* 30%: then bytes */
        buf = fz_mutate_bytes(r, buf, len, &len, &F.log);
    }
    fz_one(m, F.cur_node, buf, len);
    fz_arena_reset();
}

/* ------------------------------------------------------- health checks -- */

static void fz_check_alive(void)
{
    for (int i = 0; i < F.cl.n; i++) {
        int st = 0;
        pid_t p = waitpid(F.cl.node[i].pid, &st, WNOHANG);

        if (p == F.cl.node[i].pid) {
            F.cl.node[i].pid = 0;
            fz_fail("node %d died: %s %d", i, WIFSIGNALED(st) ? "signal" : "exit status",
                    WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
        }
    }
}

/* The canary: a chain of FZ_CANARY blocks in the fuzzed namespace whose
 * hashes the fuzzer never uses, pinned on both nodes, with KV layer 0
 * objects, one KDA object at its last block and a session record. */
static void fz_canary_setup(void)
{
    fz_chain(0xca9a41, F.canary, FZ_CANARY);
    memset(F.canary_sid, 0xc5, sizeof(F.canary_sid));
    for (int node = 0; node < FZ_NODES; node++) {
        Strata__V1__PutRequest q = STRATA__V1__PUT_REQUEST__INIT;
        Strata__V1__PinRequest pq = STRATA__V1__PIN_REQUEST__INIT;
        Strata__V1__OpenSessionRequest oq = STRATA__V1__OPEN_SESSION_REQUEST__INIT;
        Strata__V1__AppendSessionRequest aq = STRATA__V1__APPEND_SESSION_REQUEST__INIT;
        Strata__V1__PutResponse *pa;
        Strata__V1__PinResponse *pina;
        Strata__V1__SessionResponse *sa;

        q.namespace_id = F.ns;
        q.objects = fz_alloc(sizeof(*q.objects) * (FZ_CANARY + 1));
        q.links = fz_alloc(sizeof(*q.links) * FZ_CANARY);
        for (size_t i = 0; i < FZ_CANARY; i++) {
            q.objects[i] = fz_obj(&F.canary[i], KIND_KV, 0, FZ_CANARY_OBJ);
            q.links[i] = fz_link(F.canary, i);
        }
        q.objects[FZ_CANARY] = fz_obj(&F.canary[FZ_CANARY - 1], KIND_KDA, 0, FZ_CANARY_OBJ);
        q.n_objects = FZ_CANARY + 1;
        q.n_links = FZ_CANARY;
        pa = fz_call_ok(node, SRPC_CACHE_PUT, &q);
        for (size_t i = 0; i < pa->n_status; i++) {
            FZ_CHECK(pa->status[i] == STRATA__V1__KEY_STATUS__KEY_OK, "canary put: status %d",
                     (int)pa->status[i]);
        }
        protobuf_c_message_free_unpacked(&pa->base, NULL);

        pq.namespace_id = F.ns;
        pq.block_hashes.data = F.canary[FZ_CANARY - 1].b; /* and its ancestors */
        pq.block_hashes.len = 16;
        pina = fz_call_ok(node, SRPC_CACHE_PIN, &pq);
        FZ_CHECK(pina->n_status == 1 && pina->status[0] == STRATA__V1__KEY_STATUS__KEY_OK,
                 "canary pin failed");
        protobuf_c_message_free_unpacked(&pina->base, NULL);

        oq.namespace_id = F.ns;
        oq.session_id.data = F.canary_sid;
        oq.session_id.len = 16;
        sa = fz_call_ok(node, SRPC_CACHE_OPEN_SESSION, &oq);
        protobuf_c_message_free_unpacked(&sa->base, NULL);
        aq.namespace_id = F.ns;
        aq.session_id = oq.session_id;
        aq.head_hash = fz_hb(&F.canary[FZ_CANARY - 1]);
        aq.length = (uint64_t)FZ_CANARY * F.block_tokens;
        sa = fz_call_ok(node, SRPC_CACHE_APPEND_SESSION, &aq);
        F.node[node].canary_version = sa->session->version;
        protobuf_c_message_free_unpacked(&sa->base, NULL);
    }
    fz_arena_reset();
}

static void fz_canary_check(int node)
{
    Strata__V1__LookupRequest lq = STRATA__V1__LOOKUP_REQUEST__INIT;
    Strata__V1__Segment seg = STRATA__V1__SEGMENT__INIT, *sp = &seg;
    Strata__V1__LookupResponse *la;
    Strata__V1__GetRequest gq = STRATA__V1__GET_REQUEST__INIT;
    Strata__V1__GetResponse *ga;
    Strata__V1__GetSessionRequest sq = STRATA__V1__GET_SESSION_REQUEST__INIT;
    Strata__V1__SessionResponse *sa;
    Strata__V1__ClusterLookupRequest cq = STRATA__V1__CLUSTER_LOOKUP_REQUEST__INIT;
    Strata__V1__ClusterLookupResponse *ca;
    uint32_t layer = 0;
    uint8_t want[FZ_CANARY_OBJ];

    seg.block_hashes.data = F.canary[0].b;
    seg.block_hashes.len = sizeof(F.canary);
    lq.namespace_id = F.ns;
    lq.segments = &sp;
    lq.n_segments = 1;
    lq.kinds_mask = 1u << KIND_KV;
    lq.layers = &layer;
    lq.n_layers = 1;
    lq.want_locations = 1;
    la = fz_call_ok(node, SRPC_CACHE_LOOKUP, &lq);
    FZ_CHECK(la->n_segments == 1 && la->segments[0]->matched_blocks == FZ_CANARY &&
                 la->segments[0]->n_kda_checkpoints == 1 &&
                 la->segments[0]->kda_checkpoints[0] == FZ_CANARY - 1,
             "node %d: the canary chain no longer matches in full (matched %u)", node,
             la->n_segments ? la->segments[0]->matched_blocks : 0);
    fz_check_locations(la->segments[0]->locations, FZ_CANARY, "canary locations");
    for (size_t i = 0; i < FZ_CANARY; i++) {
        FZ_CHECK(la->segments[0]->locations->state[i] == STRATA__V1__OBJECT_STATE__OBJECT_PRESENT &&
                     la->segments[0]->locations->length[i] == FZ_CANARY_OBJ,
                 "node %d: canary object %zu not present at its length", node, i);
    }
    protobuf_c_message_free_unpacked(&la->base, NULL);

    gq.namespace_id = F.ns;
    gq.keys = fz_alloc(sizeof(*gq.keys) * (FZ_CANARY + 1));
    for (size_t i = 0; i < FZ_CANARY; i++) {
        gq.keys[i] = fz_key(&F.canary[i], KIND_KV, 0);
    }
    gq.keys[FZ_CANARY] = fz_key(&F.canary[FZ_CANARY - 1], KIND_KDA, 0);
    gq.n_keys = FZ_CANARY + 1;
    ga = fz_call_ok(node, SRPC_CACHE_GET, &gq);
    for (size_t i = 0; i < gq.n_keys; i++) {
        fz_obj_bytes(want, sizeof(want), &F.canary[i < FZ_CANARY ? i : FZ_CANARY - 1],
                     i < FZ_CANARY ? KIND_KV : KIND_KDA, 0);
        FZ_CHECK(ga->status[i] == STRATA__V1__KEY_STATUS__KEY_OK &&
                     ga->objects[i]->data.len == sizeof(want) &&
                     memcmp(ga->objects[i]->data.data, want, sizeof(want)) == 0,
                 "node %d: canary object %zu reads back wrong (status %d, %zu bytes)", node, i,
                 (int)ga->status[i], ga->objects[i]->data.len);
    }
    protobuf_c_message_free_unpacked(&ga->base, NULL);

    sq.namespace_id = F.ns;
    sq.session_id.data = F.canary_sid;
    sq.session_id.len = 16;
    sa = fz_call_ok(node, SRPC_CACHE_GET_SESSION, &sq);
    FZ_CHECK(memcmp(sa->session->head_hash.data, F.canary[FZ_CANARY - 1].b, 16) == 0 &&
                 sa->session->length == (uint64_t)FZ_CANARY * F.block_tokens &&
                 sa->session->version == F.node[node].canary_version,
             "node %d: the canary session record changed", node);
    protobuf_c_message_free_unpacked(&sa->base, NULL);

    cq.namespace_id = F.ns;
    cq.block_hashes = seg.block_hashes;
    cq.kinds_mask = 1u << KIND_KV;
    cq.layers = &layer;
    cq.n_layers = 1;
    ca = fz_call_ok(node, SRPC_CACHE_CLUSTER_LOOKUP, &cq);
    FZ_CHECK(ca->matched_blocks == FZ_CANARY && ca->resumable_blocks == FZ_CANARY,
             "node %d: cluster lookup of the canary matched %llu, resumable %llu", node,
             (unsigned long long)ca->matched_blocks, (unsigned long long)ca->resumable_blocks);
    protobuf_c_message_free_unpacked(&ca->base, NULL);
    fz_arena_reset();
}

/* A Hello over a channel with another token (or none), or with the token in
 * auth_token: refused unless it is the node's. Lengths around the 1024-byte
 * limit of the metadata parser (rpc/server.c). */
static void fz_token_probe(int node, fz_rng_t *r)
{
    static const size_t lens[] = {0, 1, 20, 1023, 1024, 1025, 4000};
    srpc_channel_config_t cc = {.token = NULL};
    Strata__V1__HelloRequest q = STRATA__V1__HELLO_REQUEST__INIT;
    ProtobufCMessage *a = NULL;
    srpc_channel_t *ch;
    srpc_error_t err;
    size_t len = lens[fz_below(r, sizeof(lens) / sizeof(lens[0]))];
    char *tok = fz_alloc(len + 1);
    int in_field = fz_chance(r, 50), right = fz_chance(r, 25);
    st_status_t st;

    for (size_t i = 0; i < len; i++) {
        tok[i] = (char)(0x21 + fz_below(r, 94)); /* printable, as metadata must be */
    }
    if (right) {
        tok = FZ_TOKEN;
    }
    if (!in_field) {
        cc.token = len > 0 || right ? tok : NULL;
    }
    FZ_CHECK(srpc_channel_open(F.cl.node[node].addr, &cc, &ch) == ST_OK, "channel");
    q.protocol_version = 1;
    q.tenant = "fuzz";
    q.model = "m";
    q.auth_token = in_field ? tok : "";
    memset(&err, 0, sizeof(err));
    st = srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &q.base, FZ_TIMEOUT_MS, &a, &err);
    FZ_CHECK(right ? st == ST_OK : err.grpc_code == GRPC_STATUS_UNAUTHENTICATED,
             "node %d: Hello with %s token of %zu bytes in %s answered %d (%s)", node,
             right ? "the right" : "a wrong", right ? strlen(FZ_TOKEN) : len,
             in_field ? "auth_token" : "the metadata", err.grpc_code, err.message);
    if (a != NULL) {
        protobuf_c_message_free_unpacked(a, NULL);
    }
    srpc_channel_close(ch);
}

/*
 * Every method with a missing, a wrong and the other tenant's credential on
 * the fuzz tenant's namespace: no token and a wrong token are UNAUTHENTICATED
 * (a garbage body too: it is not parsed), the other tenant gets exactly what
 * an unknown namespace gets, and its Hello for "fuzz" is PERMISSION_DENIED.
 */
static void fz_cred_probe(int node)
{
    static const char *const toks[3] = {NULL, "no-such-tenant-token", FZ_OTHER_TOKEN};
    uint8_t req[16], garbage[64];
    size_t n;

    memset(garbage, 0xff, sizeof(garbage));
    for (int t = 0; t < 3; t++) {
        srpc_channel_config_t cc = {.token = toks[t], .client_id = NULL};
        srpc_channel_t *ch;
        srpc_error_t err, err2;

        FZ_CHECK(srpc_channel_open(F.cl.node[node].addr, &cc, &ch) == ST_OK, "channel");
        for (int m = SRPC_CACHE_LOOKUP; m < SRPC_CACHE_N_METHODS; m++) {
            const char *path = srpc_cache_methods[m].path;
            void *resp = NULL;
            size_t resp_len;
            uint64_t bogus = F.ns ^ 0x5a5a5a5a5a5aull;

            memset(&err, 0, sizeof(err));
            memset(&err2, 0, sizeof(err2));
            n = np_ns_only(F.ns, req);
            (void)srpc_call_raw(ch, path, req, n, FZ_TIMEOUT_MS, &resp, &resp_len, &err);
            free(resp);
            resp = NULL;
            if (t < 2) {
                FZ_CHECK(err.grpc_code == GRPC_STATUS_UNAUTHENTICATED,
                         "node %d: %s with %s answered %d (%s)", node, path,
                         t == 0 ? "no token" : "a wrong token", err.grpc_code, err.message);
                (void)srpc_call_raw(ch, path, garbage, sizeof(garbage), FZ_TIMEOUT_MS, &resp,
                                    &resp_len, &err);
                free(resp);
                FZ_CHECK(err.grpc_code == GRPC_STATUS_UNAUTHENTICATED,
                         "node %d: %s with garbage and %s answered %d (%s)", node, path,
                         t == 0 ? "no token" : "a wrong token", err.grpc_code, err.message);
                continue;
            }
            n = np_ns_only(bogus, req);
            (void)srpc_call_raw(ch, path, req, n, FZ_TIMEOUT_MS, &resp, &resp_len, &err2);
            free(resp);
            np_shape(err.message, F.ns);
            np_shape(err2.message, bogus);
            FZ_CHECK(err.grpc_code != GRPC_STATUS_OK && err.grpc_code == err2.grpc_code &&
                         strcmp(err.message, err2.message) == 0,
                     "node %d: %s of the fuzz tenant's namespace with the other tenant's token "
                     "answered %d (%s), an unknown one %d (%s)",
                     node, path, err.grpc_code, err.message, err2.grpc_code, err2.message);
        }
        if (t == 2) {
            Strata__V1__HelloRequest q = STRATA__V1__HELLO_REQUEST__INIT;
            ProtobufCMessage *a = NULL;

            q.protocol_version = 1;
            q.tenant = "fuzz";
            q.model = "m";
            memset(&err, 0, sizeof(err));
            (void)srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_HELLO], &q.base, FZ_TIMEOUT_MS, &a,
                            &err);
            FZ_CHECK(a == NULL && err.grpc_code == GRPC_STATUS_PERMISSION_DENIED,
                     "node %d: Hello for fuzz with the other tenant's token answered %d (%s)", node,
                     err.grpc_code, err.message);
        }
        srpc_channel_close(ch);
    }
}

/* After a batch: alive, serving, the canary intact, the pool refilled. */
static void fz_check_nodes(void)
{
    F.cur_method = "check";
    F.cur_req = NULL;
    F.short_deadline = 0;
    fz_log_clear(&F.log);
    fz_check_alive();
    for (int node = 0; node < FZ_NODES; node++) {
        int hs = -1;
        srpc_error_t err;

        F.cur_node = node;
        FZ_CHECK(srpc_health_check(F.node[node].ch, "", FZ_TIMEOUT_MS, &hs, &err) == ST_OK &&
                     hs == SRPC_HEALTH_SERVING,
                 "node %d: health check failed or not SERVING (%s)", node, err.message);
        fz_hello(node, "fuzz", "m");
        fz_token_probe(node, &F.probe_rng);
        fz_cred_probe(node);
        fz_canary_check(node);
        fz_put_chain(node, F.pool, FZ_POOL, FZ_OBJ, 0);
        fz_put_score_idx(node, 0);
        fz_arena_reset();
    }
}

/* ---------------------------------------------------------- regressions -- */

/* Sends q (method m) to node 0; the answer must be `code` with a message
 * holding `msg`. Then the usual checks of fz_one() run on it. */
static void fz_expect_code(int m, const ProtobufCMessage *q, int code, const char *msg)
{
    size_t len;
    uint8_t *buf = fz_pb_pack(q, &len);
    void *resp = NULL;
    size_t resp_len = 0;
    srpc_error_t err;
    int got;

    F.cur_method = F.m[m].name;
    F.cur_node = 0;
    F.cur_req = buf;
    F.cur_len = len;
    F.short_deadline = 0;
    got = fz_raw(0, F.m[m].path, buf, len, &resp, &resp_len, &err);
    free(resp);
    FZ_CHECK(got == code && strstr(err.message, msg) != NULL,
             "regression: %s answered %s (%s), expected %s with \"%s\"", F.m[m].name,
             fz_code_name(got), err.message, fz_code_name(code), msg);
    fz_one(m, 0, buf, len);
}

/* Requests that once got a wrong answer (docs/protocol.md, "Fuzzing"), and
 * one corner the random inputs reach only rarely. */
static void fz_regressions(void)
{
    uint32_t layers[200];
    fz_rng_t r;

    fz_rng_init(&r, 1, 1);
    F.cur_node = 0;
    fz_log_clear(&F.log);
    for (size_t i = 0; i < 200; i++) {
        layers[i] = i < 2 ? (uint32_t)i : 0;
    }
    { /* Lookup: layers given twice multiplied the locations answered (200
       * copies of layer 0 over 64 blocks: 12,800 locations per kind). */
        Strata__V1__LookupRequest *q = (void *)fz_b_lookup(&r);

        q->layers = layers;
        q->n_layers = 200;
        q->want_locations = 1;
        fz_expect_code(SRPC_CACHE_LOOKUP, &q->base, GRPC_STATUS_INVALID_ARGUMENT, "given twice");
    }
    { /* Lookup: a segment whose chain indices pass 2^64 answered KDA
       * checkpoints that wrap around (..., 2^64 - 1, 0). */
        Strata__V1__LookupRequest *q = (void *)fz_b_lookup(&r);

        q->segments[0]->first_block = UINT64_MAX - 1;
        fz_expect_code(SRPC_CACHE_LOOKUP, &q->base, GRPC_STATUS_INVALID_ARGUMENT,
                       "largest chain index");
    }
    { /* ClusterLookup: a layer no owner accepts answered OK, every segment
       * "peer unreachable"; now the request fails as a whole. */
        Strata__V1__ClusterLookupRequest *q = (void *)fz_b_cluster(&r);

        layers[0] = 200;
        q->layers = layers;
        q->n_layers = 1;
        fz_expect_code(SRPC_CACHE_CLUSTER_LOOKUP, &q->base, GRPC_STATUS_INVALID_ARGUMENT,
                       "layers[0]=200");
        layers[0] = 0;
    }
    { /* Locate: lease_ms over max_lease_ms without lease was accepted (Lookup
       * refuses it; with lease the store refused it already). */
        Strata__V1__LocateRequest *q = (void *)fz_b_locate(&r);

        q->lease = 0;
        q->lease_ms = F.lim.max_lease + 1;
        fz_expect_code(SRPC_CACHE_LOCATE, &q->base, GRPC_STATUS_INVALID_ARGUMENT, "max_lease");
    }
    { /* Get: row selections were ignored, whole objects answered (now rows
       * are served, checked by their row sums: test_dataplane_rows); two
       * selections for one key are refused. */
        Strata__V1__GetRequest *q = (void *)fz_b_get(&r);
        Strata__V1__RowSelection sel = STRATA__V1__ROW_SELECTION__INIT, *sp[2] = {&sel, &sel};
        uint32_t rows[2] = {0, 1};

        sel.rows = rows;
        sel.n_rows = 2;
        q->rows = sp;
        q->n_rows = 2;
        fz_expect_code(SRPC_CACHE_GET, &q->base, GRPC_STATUS_INVALID_ARGUMENT, "second selection");
    }
    { /* Hello: a model that is not UTF-8 created the namespace in the store,
       * then failed on its metric labels ("no memory"), half made; a newline
       * in a name went to the logs as is. */
        Strata__V1__HelloRequest *q = (void *)fz_b_hello(&r);

        q->model = "\xff\xfe-not-utf-8";
        fz_expect_code(SRPC_CACHE_HELLO, &q->base, GRPC_STATUS_INVALID_ARGUMENT, "model: byte 0");
        q->model = "m";
        q->tenant = "two\nlines";
        fz_expect_code(SRPC_CACHE_HELLO, &q->base, GRPC_STATUS_INVALID_ARGUMENT, "tenant: byte 3");
        q->tenant = "caf\xc3\xa9"; /* UTF-8, but not the token's tenant */
        fz_expect_code(SRPC_CACHE_HELLO, &q->base, GRPC_STATUS_PERMISSION_DENIED, "tenant fuzz");
        q->tenant = "fuzz";
        q->model = "caf\xc3\xa9"; /* UTF-8 is fine */
        fz_expect_code(SRPC_CACHE_HELLO, &q->base, GRPC_STATUS_OK, "");
        q->model = "m";
        /* auth_token was ignored: one that differs from the metadata's was
         * accepted (docs/protocol.md: "they must match"). */
        q->tenant = "fuzz";
        q->auth_token = "not-the-token";
        fz_expect_code(SRPC_CACHE_HELLO, &q->base, GRPC_STATUS_PERMISSION_DENIED, "differs");
    }
    { /* Documented: a Commit whose checksum does not match the bytes is
       * KEY_CORRUPT, and nothing of the object becomes visible. */
        Strata__V1__ReserveRequest rq = STRATA__V1__RESERVE_REQUEST__INIT;
        Strata__V1__CommitRequest cq = STRATA__V1__COMMIT_REQUEST__INIT;
        Strata__V1__GetRequest gq = STRATA__V1__GET_REQUEST__INIT;
        Strata__V1__ReserveResponse *ra;
        Strata__V1__CommitResponse *ca;
        Strata__V1__GetResponse *ga;
        st_hash_t *h = fz_alloc(sizeof(*h));
        Strata__V1__ObjectKey *k;
        uint64_t len = 64, sum = 0x1234;

        fz_fill(&r, h->b, sizeof(h->b));
        k = fz_key(h, KIND_KV, 0);
        rq.namespace_id = F.ns;
        rq.keys = &k;
        rq.n_keys = 1;
        rq.lengths = &len;
        rq.n_lengths = 1;
        ra = fz_call_ok(0, SRPC_CACHE_RESERVE, &rq);
        FZ_CHECK(ra->n_status == 1 && ra->status[0] == STRATA__V1__KEY_STATUS__KEY_OK,
                 "corrupt-object probe: reserve failed");
        cq.namespace_id = F.ns;
        cq.reservation_id = ra->reservation_id;
        cq.checksums = &sum;
        cq.n_checksums = 1;
        protobuf_c_message_free_unpacked(&ra->base, NULL);
        ca = fz_call_ok(0, SRPC_CACHE_COMMIT, &cq);
        FZ_CHECK(ca->n_status == 1 && ca->status[0] == STRATA__V1__KEY_STATUS__KEY_CORRUPT,
                 "commit with a wrong checksum: status %d, not KEY_CORRUPT",
                 ca->n_status ? (int)ca->status[0] : -1);
        protobuf_c_message_free_unpacked(&ca->base, NULL);
        gq.namespace_id = F.ns;
        gq.keys = &k;
        gq.n_keys = 1;
        ga = fz_call_ok(0, SRPC_CACHE_GET, &gq);
        FZ_CHECK(ga->n_status == 1 && ga->status[0] == STRATA__V1__KEY_STATUS__KEY_NOT_FOUND &&
                     ga->objects[0]->data.len == 0,
                 "commit with a wrong checksum: Get answered status %d with %zu bytes, not "
                 "KEY_NOT_FOUND",
                 ga->n_status ? (int)ga->status[0] : -1,
                 ga->n_objects ? ga->objects[0]->data.len : 0);
        protobuf_c_message_free_unpacked(&ga->base, NULL);
    }
    fz_arena_reset();
}

/* Sends the bytes of a saved request (a failure's .bin file) to node 0 as
 * method `name`, with the same checks. */
static void fz_replay(const char *path, const char *name)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = fz_alloc(F.lim.max_message + 1);
    size_t len;
    int m;

    FZ_CHECK(f != NULL, "STRATA_FUZZ_REPLAY=%s: %s", path, strerror(errno));
    len = fread(buf, 1, F.lim.max_message + 1, f);
    fclose(f);
    for (m = 0; m < FZ_N_METHODS; m++) {
        if (name != NULL && strcmp(name, F.m[m].name) == 0) {
            break;
        }
    }
    FZ_CHECK(m < FZ_N_METHODS, "STRATA_FUZZ_REPLAY needs STRATA_FUZZ_METHOD=<a method name>");
    F.cur_method = F.m[m].name;
    F.trace = 1;
    fz_one(m, 0, buf, len);
    fz_arena_reset();
    fz_check_nodes();
}

/* --------------------------------------------------------------- main -- */

static void fz_methods_init(void)
{
    for (int i = 0; i < SRPC_CACHE_N_METHODS; i++) {
        F.m[i].path = srpc_cache_methods[i].path;
        F.m[i].name = strrchr(F.m[i].path, '/') + 1;
        F.m[i].req = srpc_cache_methods[i].req_desc;
        F.m[i].resp = srpc_cache_methods[i].resp_desc;
        F.m[i].max_bytes = F.lim.max_message;
    }
    /* Hello is parsed before it is authenticated (its body may hold the token):
     * cached/handlers_common.c bounds it to 64 KiB. */
    F.m[SRPC_CACHE_HELLO].max_bytes = 64u << 10;
    F.m[FZ_M_HEALTH].path = srpc_health_check_method.path;
    F.m[FZ_M_HEALTH].name = "HealthCheck";
    F.m[FZ_M_HEALTH].req = srpc_health_check_method.req_desc;
    F.m[FZ_M_HEALTH].resp = srpc_health_check_method.resp_desc;
    F.m[FZ_M_HEALTH].max_bytes = 4096; /* rpc/server.c */
    F.m[FZ_M_UNKNOWN].name = "UnknownMethod";
    F.m[FZ_M_UNKNOWN].path = "";
}

static void fz_report(double secs, int stopped_early)
{
    uint64_t total = 0;

    printf("\n%-16s %7s %6s %6s %6s %4s %6s  codes\n", "method", "iters", "ok", "bad", "unpars",
           "cut", "secs");
    for (int m = 0; m < FZ_N_METHODS; m++) {
        fz_method_t *fm = &F.m[m];
        char codes[512];
        size_t o = 0;

        codes[0] = '\0';
        for (int c = 0; c < FZ_CODES; c++) {
            if (fm->codes[c] != 0) {
                o += (size_t)snprintf(codes + o, sizeof(codes) - o, "%s%s=%llu", o ? " " : "",
                                      fz_code_name(c), (unsigned long long)fm->codes[c]);
            }
        }
        printf("%-16s %7llu %6llu %6llu %6llu %4llu %6.2f  %s\n", fm->name,
               (unsigned long long)fm->iters, (unsigned long long)fm->ok,
               (unsigned long long)fm->must_fail, (unsigned long long)fm->unparsable,
               (unsigned long long)fm->cut_off, fm->secs, codes);
        total += fm->iters;
    }
    printf("\n%llu requests in %.1f s (%.0f/s)%s; 'bad': requests the protocol calls malformed, "
           "all refused with its code; 'cut': cut off by a 1 ms deadline\n",
           (unsigned long long)total, secs, secs > 0 ? (double)total / secs : 0.0,
           stopped_early ? ", stopped early by STRATA_FUZZ_SECONDS" : "");
}

int main(int argc, char **argv)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FZ_ITERS);
    double limit = (double)fz_env_u64("STRATA_FUZZ_SECONDS", FZ_SECONDS), t0, t;
    const char *only = getenv("STRATA_FUZZ_METHOD");
    fz_rng_t rng[FZ_N_METHODS];
    int stopped_early = 0;
    char tenants[64], args[512];

    if (argc < 2) {
        fprintf(stderr, "usage: fuzz_handlers PATH-TO-STRATAD\n");
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    F.trace = fz_env_u64("STRATA_FUZZ_TRACE", 0) != 0;
    F.seed = fz_seed("fuzz_handlers");
    printf("fuzz_handlers: %llu iterations per method, at most %.0f s "
           "(STRATA_FUZZ_ITERS, STRATA_FUZZ_SECONDS)\n",
           (unsigned long long)iters, limit);
    {
        static const char *const toks[2] = {FZ_TOKEN, FZ_OTHER_TOKEN};
        static const char *const lines[2] = {"fuzz %s namespaces=64\n", "other %s models=m\n"};
        FILE *f;

        snprintf(tenants, sizeof(tenants), "/tmp/strata-fuzz-tenants-%d", (int)getpid());
        f = fopen(tenants, "w");
        if (f == NULL) {
            fprintf(stderr, "fuzz_handlers: cannot write %s\n", tenants);
            return 1;
        }
        for (int k = 0; k < 2; k++) {
            unsigned char h[32];
            unsigned int hn = 0;
            char hex[80] = "sha256:";

            EVP_Digest(toks[k], strlen(toks[k]), h, &hn, EVP_sha256(), NULL);
            for (int i = 0; i < 32; i++) {
                snprintf(hex + 7 + 2 * i, 3, "%02x", h[i]);
            }
            fprintf(f, lines[k], hex);
        }
        fclose(f);
        snprintf(args, sizeof(args), "%s%s", FZ_ARGS, tenants);
    }
    if (tc_start(&F.cl, argv[1], FZ_NODES, args) != 0) {
        fprintf(stderr, "fuzz_handlers: the daemons did not start\n");
        return 1;
    }
    F.cur_method = "setup";
    for (int i = 0; i < FZ_NODES; i++) {
        srpc_channel_config_t cc = {.token = FZ_TOKEN};

        FZ_CHECK(srpc_channel_open(F.cl.node[i].addr, &cc, &F.node[i].ch) == ST_OK,
                 "channel to node %d", i);
        fz_hello(i, "fuzz", "m");
        fz_known_add(i, F.ns);
    }
    fz_methods_init();
    fz_rng_init(&F.probe_rng, F.seed, 0x70c3);
    F.dom.u64 = fz_dom_u64;
    F.dom.bytes = fz_dom_bytes;
    F.dom.max_bytes = F.lim.max_inline + 4096; /* over max_object */
    F.dom.max_repeat = 20000;
    F.dom.limits[0] = F.lim.max_keys;
    F.dom.limits[1] = F.lim.max_hashes;
    F.dom.limits[2] = F.lim.max_lease;
    F.dom.limits[3] = F.lim.reservation_ms;
    F.dom.limits[4] = F.lim.max_inline;
    F.dom.limits[5] = FZ_LAYERS_MAX;
    F.dom.limits[6] = F.segment_blocks;
    F.dom.limits[7] = F.block_tokens;
    fz_chain(0x900d, F.pool, FZ_POOL);
    for (int i = 0; i < FZ_NODES; i++) {
        fz_put_chain(i, F.pool, FZ_POOL, FZ_OBJ, 1);
        fz_put_score_idx(i, 1);
    }
    fz_arena_reset();
    fz_canary_setup();
    fz_check_nodes();
    for (int m = 0; m < FZ_N_METHODS; m++) {
        fz_rng_init(&rng[m], F.seed, (uint64_t)m + 1);
    }

    fz_regressions();
    if (getenv("STRATA_FUZZ_REPLAY") != NULL) {
        fz_replay(getenv("STRATA_FUZZ_REPLAY"), only);
        iters = 0;
    }
    t0 = fz_now();
    for (uint64_t done = 0; done < iters && !stopped_early; done += FZ_BATCH) {
        for (int m = 0; m < FZ_N_METHODS; m++) {
            if (only != NULL && only[0] != '\0' && strcmp(only, F.m[m].name) != 0) {
                continue;
            }
            F.cur_method = F.m[m].name;
            t = fz_now();
            for (uint64_t k = done; k < done + FZ_BATCH && k < iters; k++) {
                F.cur_iter = k;
                fz_iteration(m, &rng[m]);
            }
            F.m[m].secs += fz_now() - t;
        }
        t = fz_now();
        fz_check_nodes();
        t = fz_now();
        if (t - t0 > limit && done + FZ_BATCH < iters) {
            stopped_early = 1;
        }
    }
    fz_report(fz_now() - t0, stopped_early);
    for (int i = 0; i < FZ_NODES; i++) {
        srpc_channel_close(F.node[i].ch);
        F.node[i].ch = NULL;
    }
    fz_check_alive();
    /* A clean exit: under the sanitizers, also no leak left by an error path. */
    F.cur_method = "stop";
    for (int i = 0; i < FZ_NODES; i++) {
        int rc = tc_stop(&F.cl, i, 60000);

        FZ_CHECK(rc == 0, "node %d exited with status %d after SIGTERM", i, rc);
    }
    tc_stop_all(&F.cl);
    unlink(tenants);
    printf("fuzz_handlers: passed (seed=0x%016llx)\n", (unsigned long long)F.seed);
    return 0;
}
