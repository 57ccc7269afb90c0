/*
 * fuzz_tcall.h - what the two files of test_fuzz_tcall share (fuzz_tcall.c:
 * the reference, the frames, main; fuzz_tcall_daemon.c: the daemon side):
 * the run's state, the frame record and the functions each calls in the
 * other.
 */
#ifndef STRATA_TEST_FUZZ_TCALL_H
#define STRATA_TEST_FUZZ_TCALL_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "fuzz_util.h"
#include "health.pb-c.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/strata.h"
#include "tcall_raw.h"
#include "tenants.h"

#define FT_TOKEN_A "fuzz-tcall-acme-token-0123456789"
#define FT_TOKEN_B "fuzz-tcall-beta-token-9876543210"
#define FT_MAX_MSG (1u << 20)                                          /* --max-message 1M */
#define FT_ARGS    "--max-message 1M --max-lease 10s --log-level warn" /* and the tenants' flags */
#define FT_CHAIN   48    /* blocks of the stored chain */
#define FT_OBJ     1024  /* bytes of its objects (KV layers 0 and 1) */
#define FT_BATCH   40    /* frames per batch */
#define FT_ITERS   10000 /* default frames in all */
#define FT_SECONDS 120   /* default time bound */
#define FT_WAIT_MS 20000
#define FT_LEASES  64
#define FT_HDR     24
#define FT_KEY_MAX 1024
#define FT_MSG_MAX 1024
#define FT_CODE(c) (1u << (c))

enum {
    GC_OK = 0,
    GC_CANCELLED = 1,
    GC_UNKNOWN = 2,
    GC_INVALID = 3,
    GC_DEADLINE = 4,
    GC_NOT_FOUND = 5,
    GC_EXISTS = 6,
    GC_DENIED = 7,
    GC_EXHAUSTED = 8,
    GC_PRECONDITION = 9,
    GC_UNAUTHENTICATED = 16,
};

/* What a frame is, as the test built it (for the report and the counters). */
enum {
    FC_VALID,
    FC_BAD_KEY,
    FC_MUTATED_BODY,
    FC_RANDOM_BODY,
    FC_UNKNOWN_METHOD,
    FC_FRAME_BYTES,
    FC_FRAME_HEADER,
    FC_OVERSIZE,
    FC_SHORT,
    FC_OTHER_KEY,
    FC_N
};
extern const char *const fc_names[FC_N];

/* What the documented layout says about a frame. */
enum { FE_DROP, FE_INVALID, FE_DENIED, FE_SERVED };
extern const char *const fe_names[];

/* Valid calls whose answers the test checks in full. */
enum { FV_NONE, FV_LOOKUP, FV_LOCATE, FV_LOCATE_LEASE, FV_RELEASE, FV_SCORE };

typedef struct ft_frame {
    int cls;
    int expect; /* FE_* */
    int valid;  /* FV_*: the content of an OK answer is checked too */
    uint32_t method;
    uint64_t id;
    uint64_t lease; /* FV_RELEASE: the lease released */
    size_t len;
    uint8_t *bytes; /* the frame (arena memory) */
    fz_log_t log;
} ft_frame_t;

typedef struct ft_state {
    uint64_t seed;
    tc_cluster_t cl;
    tr_client_t a;    /* tenant acme: the fuzzed client */
    tr_client_t b;    /* tenant beta: valid calls of its own, and its key */
    tt_set_t tenants; /* acme's and beta's tokens, and the daemon's flags */
    fz_rng_t r;
    st_hash_t chain[FT_CHAIN];
    st_client_t *lib;                   /* libstrata, which stored the chain */
    uint8_t data[2 * FT_CHAIN][FT_OBJ]; /* its objects: KV layers 0 and 1 */
    uint64_t leases[FT_LEASES];
    size_t n_leases;
    uint64_t next_id;
    uint64_t batch;
    ft_frame_t *cur;
    fz_domain_t dom;
    uint64_t sent[FC_N], codes[17];
} ft_state_t;

extern ft_state_t T;

/* Reports a failure (the frame at hand, the daemon's log, how to replay)
 * and exits 1. */
void ft_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
#define FT_CHECK(cond, ...) FZ_CHECK_OR(ft_fail, cond, __VA_ARGS__)

int ft_reference(const uint8_t *p, size_t len, const uint8_t *key, size_t key_len, uint64_t *id,
                 uint32_t *method, size_t *body_len);
Strata__V1__LookupRequest *ft_lookup_req(size_t n);
Strata__V1__LocateRequest *ft_locate_req(size_t first, size_t n_keys, int lease);
void ft_build(ft_frame_t *f, int cls);
int ft_pick_class(void);
void ft_judge(ft_frame_t *f, const tr_answer_t *a);
void ft_check_alive(void);
void ft_beta_calls(void);
void ft_vanish(void);
void ft_noreply(void);
void ft_store_chain(void);
void ft_check_lib(void);
int ft_replay(const char *path);
int ft_stop_under_load(void);

#endif
