/*
 * fuzz_handlers.h - what the three files of test_fuzz_handlers share:
 * fuzz_handlers.c runs the daemons, the mutation loop and the checks between
 * batches; fuzz_requests.c holds the test's data and builds a valid request
 * of every method; fuzz_oracle.c says what docs/protocol.md allows as the
 * answer to a request, and checks OK answers against it.
 */
#ifndef STRATA_FUZZ_HANDLERS_H
#define STRATA_FUZZ_HANDLERS_H

#include <stddef.h>
#include <stdint.h>

#include <grpc/status.h>

#include "cluster.h"
#include "fuzz_util.h"
#include "health.pb-c.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/hash.h"

#define FZ_NODES           2
#define FZ_POOL            64   /* blocks of the fuzzed chain, stored on both nodes */
#define FZ_CANARY          8    /* blocks of the canary chain: pinned, never fuzzed */
#define FZ_OBJ             256  /* bytes of a pool object */
#define FZ_CANARY_OBJ      1024 /* bytes of a canary object */
#define FZ_RING            32   /* reservations, leases, sessions remembered per node */
#define FZ_TIMEOUT_MS      30000
#define FZ_LAYERS_MAX      128         /* layers are < 128 (docs/protocol.md) */
#define FZ_SESSION_TTL_MAX 2592000000u /* 30 days: the longest session ttl_ms */
#define FZ_PIN_TTL_MAX     3600000u    /* 1 hour: max_pin, the longest pin ttl_ms */
#define FZ_BATCH           25          /* iterations of each method between the health checks */
#define FZ_ITERS           800         /* default iterations per method */
#define FZ_SECONDS         240         /* default time bound */
#define FZ_CODES           17
#define FZ_MAX_PACKED      (6u << 20) /* largest mutated request sent (max_message is 4M) */

/* Small limits, so that the fuzzer reaches them cheaply. */
/* Two tenants of a tenants file: "fuzz" (every model) and "other", over UCX:
 * allow_shared_dataplane (docs/security.md). */
#define FZ_TOKEN       "fuzz-token-0123456789"
#define FZ_OTHER_TOKEN "other-tenant-token-9876543210"
#define FZ_ARGS                                                                              \
    "--max-message 4M --max-object 256K --max-batch 1024 --max-hashes 4096 --max-lease 60s " \
    "--reservation-ttl 2s --log-level warn --allow-shared-dataplane --tenants-file "

#define KIND_KV      STRATA__V1__OBJECT_KIND__KV
#define KIND_IDX     STRATA__V1__OBJECT_KIND__IDX
#define KIND_KDA     STRATA__V1__OBJECT_KIND__KDA
#define KIND_SESSION STRATA__V1__OBJECT_KIND__SESSION
#define KIND_VIS     STRATA__V1__OBJECT_KIND__VIS
#define CODE(x)      (1u << GRPC_STATUS_##x)

/* The methods fuzzed: strata.v1.Cache in srpc order, then Health/Check, then
 * paths no daemon serves. */
enum { FZ_M_HEALTH = SRPC_CACHE_N_METHODS, FZ_M_UNKNOWN, FZ_N_METHODS };

typedef struct fz_method {
    const char *name;
    const char *path;
    const ProtobufCMessageDescriptor *req, *resp;
    uint32_t max_bytes; /* the daemon's request limit for the method */
    uint64_t iters, must_fail, unparsable, ok, cut_off;
    uint64_t codes[FZ_CODES];
    double secs; /* time spent on the method's iterations */
} fz_method_t;

typedef struct fz_resv {
    uint64_t id;
    size_t n_keys;
} fz_resv_t;

typedef struct fz_node {
    srpc_channel_t *ch;
    uint64_t known_ns[96]; /* namespaces that exist on this node */
    size_t n_known;
    fz_resv_t resv[FZ_RING];
    size_t n_resv;
    uint64_t leases[FZ_RING];
    size_t n_leases;
    uint8_t sessions[FZ_RING][16];
    uint64_t session_len[FZ_RING]; /* its length after the last OK answer */
    size_t n_sessions;
    uint64_t canary_version;
} fz_node_t;

typedef struct fz_limits {
    uint32_t max_message, max_keys, max_hashes, max_inline, lease_ms, max_lease, reservation_ms;
} fz_limits_t;

/* The run: the daemons, what the test knows of them, counters. */
typedef struct fz_state {
    uint64_t seed;
    tc_cluster_t cl;
    fz_node_t node[FZ_NODES];
    uint64_t ns;
    st_hash_t ns_seed;
    uint32_t block_tokens, segment_blocks;
    fz_limits_t lim;
    st_hash_t pool[FZ_POOL], canary[FZ_CANARY];
    uint8_t canary_sid[16];
    fz_method_t m[FZ_N_METHODS];
    fz_domain_t dom;
    fz_rng_t *r;        /* the stream of the method being fuzzed */
    int trace;          /* STRATA_FUZZ_TRACE: one line per request */
    int short_deadline; /* this request has a 1 ms deadline: it may be cut off */
    fz_rng_t probe_rng;
    /* What a failure report prints. */
    const char *cur_method;
    int cur_node;
    uint64_t cur_iter;
    fz_log_t log;
    const uint8_t *cur_req;
    size_t cur_len;
} fz_state_t;

extern fz_state_t F;

/* What the protocol allows as the answer to one request. */
typedef struct fz_expect {
    int must_fail;       /* the protocol calls the request malformed */
    uint32_t fail_codes; /* the codes it gives for what is wrong */
    uint32_t env_codes;  /* besides OK, codes a valid request may get */
    char why[160];       /* the first thing found wrong */
} fz_expect_t;

/* ---------------------------------------------------- fuzz_handlers.c -- */

/* Prints what failed and where (seed, method, iteration, mutations, the
 * request, the daemons' last log lines), stops the daemons, exits 1. */
void fz_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));

#define FZ_CHECK(cond, ...) FZ_CHECK_OR(fz_fail, cond, __VA_ARGS__)

/* Sends raw bytes to node; returns the gRPC code, the answer in *resp (malloc'd). */
int fz_raw(int node, const char *path, const uint8_t *req, size_t len, void **resp,
           size_t *resp_len, srpc_error_t *err);

/* A well-formed call that must succeed (set-up and checks); the answer. */
void *fz_call_ok(int node, int m, const void *req);

/* ---------------------------------------------------- fuzz_requests.c -- */

/* Object bytes for a key: a function of the key alone. */
void fz_obj_bytes(uint8_t *buf, size_t len, const st_hash_t *h, int kind, uint32_t layer);

/* The chain of n blocks of a token stream, in the fuzzed namespace. */
void fz_chain(uint64_t stream, st_hash_t *out, size_t n);

/* Message parts in arena memory, pointing at h. */
ProtobufCBinaryData fz_hb(const st_hash_t *h);
Strata__V1__ObjectKey *fz_key(const st_hash_t *h, int kind, uint32_t layer);
Strata__V1__InlineObject *fz_obj(const st_hash_t *h, int kind, uint32_t layer, size_t len);
Strata__V1__BlockLink *fz_link(const st_hash_t *chain, size_t i);

/* Puts n blocks of chain on node (KV layers 0-1, IDX layer 0, KDA every 16th);
 * strict: every answer must be KEY_OK or KEY_EXISTS. */
void fz_put_chain(int node, const st_hash_t *chain, size_t n, size_t obj_len, int strict);

/* Hello on node; the first one learns the namespace, seed and limits. */
void fz_hello(int node, const char *tenant, const char *model);

/* The namespaces known to exist on a node. */
void fz_known_add(int node, uint64_t ns);
int fz_known(int node, uint64_t ns);

/* Valid requests, one builder per method (NULL for FZ_M_UNKNOWN). */
typedef ProtobufCMessage *(*fz_builder_fn)(fz_rng_t *r);
extern const fz_builder_fn fz_builders[FZ_N_METHODS];
ProtobufCMessage *fz_b_hello(fz_rng_t *r);
ProtobufCMessage *fz_b_lookup(fz_rng_t *r);
ProtobufCMessage *fz_b_locate(fz_rng_t *r);
ProtobufCMessage *fz_b_get(fz_rng_t *r);
ProtobufCMessage *fz_b_cluster(fz_rng_t *r);

/* The mutator's domain hooks (fz_domain_t): real namespaces, hashes, ids. */
int fz_dom_u64(void *user, fz_rng_t *r, const ProtobufCFieldDescriptor *fd, uint64_t *out);
int fz_dom_bytes(void *user, fz_rng_t *r, const ProtobufCFieldDescriptor *fd,
                 ProtobufCBinaryData *out);

/* ------------------------------------------------------ fuzz_oracle.c -- */

/* Marks the request malformed: it must fail with code (among others found). */
void fz_bad(fz_expect_t *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The expectations for a parsed request of method m on node. */
void fz_expect(int m, int node, const ProtobufCMessage *pm, fz_expect_t *e);

/* Checks an OK answer against the request, and learns ids from it. */
void fz_check_ok(int m, int node, const ProtobufCMessage *pm, const ProtobufCMessage *pa);

/* Forgets a reservation that was committed, aborted or found gone. */
void fz_forget_resv(int node, uint64_t id);

/* ------------------------------------------------------- fuzz_score.c -- */

/* Puts IDX objects of the indexer's layout on the pool of node (strict:
 * every one must be KEY_OK or KEY_EXISTS). */
void fz_put_score_idx(int node, int strict);
ProtobufCMessage *fz_b_score(fz_rng_t *r);
void fz_expect_score(const ProtobufCMessage *pm, fz_expect_t *e);
void fz_ok_score(const ProtobufCMessage *pm, const ProtobufCMessage *pa);

/* Checks a Locations table of n objects. */
void fz_check_locations(const Strata__V1__Locations *l, size_t n, const char *what);

#endif /* STRATA_FUZZ_HANDLERS_H */
