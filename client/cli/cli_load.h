/*
 * cli_load.h - `strata load`, the open-loop load generator (issue #19):
 * N simulated engines, each a thread with its own Poisson arrival schedule,
 * its own sessions and one backend connection (libstrata or a real Redis).
 *
 * Layers, bottom up: cli_load_hist.c (the latency histogram, the random
 * draws, the mix parser: no I/O), cli_load_backend.c and cli_load_redis.c
 * (one call interface over libstrata and over hiredis), cli_load_work.c (the
 * sessions and the four call kinds over a backend), cli_load_report.c (text
 * and JSON), cli_load.c (options, engine threads, progress, processes).
 */
#ifndef STRATA_CLI_LOAD_H
#define STRATA_CLI_LOAD_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>

#include "strata/strata.h"

/* The call kinds, in the report's order. */
enum { LK_LOOKUP, LK_GET, LK_ROWS, LK_PUT, LK_BIG_GET, LK_N };
extern const char *const load_kind_names[LK_N];

/* Session kinds of --mix-sessions. */
enum { LS_CHAT, LS_DOC, LS_AGENT, LS_N };
extern const char *const load_session_names[LS_N];

/* --- cli_load_hist.c ----------------------------------------------------- */

/*
 * A latency histogram in nanoseconds: exact below 64 ns, then 64 buckets per
 * power of two (a bucket is at most 1/64 = 1.6% wide) up to 2^42 ns (73
 * minutes); larger values land in the last bucket. Plain data: it may be
 * copied, merged and written to a pipe as it is.
 */
#define LOAD_HIST_SUB     64
#define LOAD_HIST_BUCKETS (LOAD_HIST_SUB + 36 * LOAD_HIST_SUB)

typedef struct load_hist {
    uint64_t n, max_ns;
    uint64_t b[LOAD_HIST_BUCKETS];
} load_hist_t;

void load_hist_add(load_hist_t *h, uint64_t ns);
void load_hist_merge(load_hist_t *into, const load_hist_t *from);
/* The q-quantile (0..1) in ns: the upper edge of its bucket, at most the max; 0 if empty. */
uint64_t load_hist_quantile(const load_hist_t *h, double q);
/* The bucket of ns and the largest value that bucket holds (for the unit test). */
size_t load_hist_bucket(uint64_t ns);
uint64_t load_hist_bucket_high(size_t i);

/* xorshift64*: a per-thread generator; *s must not be 0 (load_rng_seed makes it so). */
uint64_t load_rng_seed(uint64_t a, uint64_t b);
uint64_t load_rng_next(uint64_t *s);
/* Uniform in [lo, hi]. */
uint64_t load_rng_range(uint64_t *s, uint64_t lo, uint64_t hi);
/* An exponential draw of mean mean_ns: the gap to the next Poisson arrival. */
uint64_t load_rng_exp(uint64_t *s, double mean_ns);
/* Index i with probability w[i] / sum(w); w has n entries summing to more than 0. */
int load_rng_pick(uint64_t *s, const uint32_t *w, int n);

/*
 * Parses a mix "name=weight,name=weight" over names[0..n): each name at most
 * once, weights 0..1000000, at least one above 0; names left out weigh 0.
 * Returns 0 with w[0..n) set, or -1 with a message naming what was wrong in
 * err (w untouched).
 */
int load_mix_parse(const char *text, const char *const *names, int n, uint32_t *w, char *err,
                   size_t err_len);

/* --- statistics ---------------------------------------------------------- */

#define LOAD_N_STATUS 64 /* errors counted by -status; larger codes share the last slot */

typedef struct load_kind_stats {
    uint64_t count, ok, bytes;
    load_hist_t lat;
} load_kind_stats_t;

/* What one engine (or, merged, a run) measured after the warm-up. Plain data. */
typedef struct load_stats {
    load_kind_stats_t k[LK_N];
    uint64_t errors[LK_N][LOAD_N_STATUS];
    uint64_t lookup_asked, lookup_hit; /* blocks */
    uint64_t get_asked, get_hit;       /* objects of get and rows calls */
    uint64_t wrong_bytes;
    uint64_t issued;  /* calls planned inside the measured window */
    uint64_t elapsed; /* ns of the measured window (the longest engine's) */
} load_stats_t;

void load_stats_merge(load_stats_t *into, const load_stats_t *from);

/* --- the generator's settings -------------------------------------------- */

typedef struct load_conf {
    int engines, processes, sessions;
    double rate;                     /* ops/s, all engines of all processes together */
    uint64_t duration_ns, warmup_ns; /* measured window, after the warm-up */
    uint32_t mix[4];                 /* LK_LOOKUP..LK_PUT weights */
    uint32_t smix[LS_N];             /* session kinds */
    uint32_t layers;                 /* KV objects per block */
    uint32_t kv_bytes, row_bytes, kda_bytes, get_blocks, rows_blocks, rows_per_block;
    uint64_t big_tokens; /* --big-load: the prefix of the extra engine, 0: none */
    uint64_t seed;
    uint64_t run_id; /* in session ids: a run's sessions are its own */
    int fail_on_error;
    const char *peer_host; /* Redis: host, NULL for strata */
    int peer_port;
} load_conf_t;

/* --- cli_load_backend.c, cli_load_redis.c: the calls --------------------- */

/*
 * One backend connection, used by one engine thread at a time. Each call
 * returns the status of the call as a whole; the per-object statuses and
 * lengths of get and put land in the ops (ST_OK, ST_ERR_NOT_FOUND for a
 * miss, or an error).
 */
typedef struct load_backend load_backend_t;
typedef struct load_backend_ops {
    /* chain[0] of a session whose first block holds tokens[0..n) */
    st_status_t (*first_hash)(load_backend_t *b, const uint32_t *tokens, uint32_t n,
                              st_hash_t *out);
    st_status_t (*lookup)(load_backend_t *b, const st_hash_t *chain, size_t nb,
                          uint64_t *matched_p);
    st_status_t (*get)(load_backend_t *b, const st_hash_t *chain, size_t nb, st_get_op_t *ops,
                       size_t n);
    st_status_t (*put)(load_backend_t *b, const st_hash_t *chain, size_t nb, st_put_op_t *ops,
                       size_t n);
    st_status_t (*session_open)(load_backend_t *b, const char *sid);
    st_status_t (*session_append)(load_backend_t *b, const char *sid, const st_hash_t *head,
                                  uint64_t length);
    void (*close)(load_backend_t *b);
} load_backend_ops_t;

struct load_backend {
    const load_backend_ops_t *ops;
    uint32_t block_tokens;
};

/* A backend over a libstrata client (shared by the engines of a process; not closed here). */
st_status_t load_backend_strata(st_client_t *c, load_backend_t **b_p);
/* A backend over a new hiredis connection to host:port; prints the error. */
st_status_t load_backend_redis(const char *host, int port, load_backend_t **b_p);

/* --- cli_load_work.c: sessions and calls --------------------------------- */

/*
 * A session. Its put lane alone changes it, under the write lock, only to
 * start a new conversation in the slot or to hash new blocks; every call
 * holds the read lock while it uses the chain.
 */
typedef struct load_session {
    pthread_rwlock_t lock;
    char sid[64];
    int kind;
    uint64_t serial;               /* names its tokens */
    uint64_t cap_tokens, n_tokens; /* the length it grows to, the tokens written */
    st_hash_t *chain;              /* room for cap_tokens / block_tokens hashes */
    size_t nb;                     /* hashes of the blocks written so far */
} load_session_t;

/* One engine: its sessions and its counts. */
typedef struct load_engine {
    const load_conf_t *lc;
    load_backend_t *be; /* its first lane's: for block_tokens, which every backend shares */
    int id;
    uint64_t serials; /* sessions started (the put lane's) */
    load_session_t *sess;
    int n_sess;
    pthread_mutex_t mu; /* guards st, done, failed: the progress thread reads them */
    load_stats_t st;
    uint64_t done, failed; /* calls completed, failed (warm-up included) */
} load_engine_t;

/*
 * A lane: one call kind of one engine, a thread with its own Poisson
 * schedule, so that a lookup does not queue behind its engine's 100K-token
 * prefill (an engine serves many requests at once), while calls of one
 * kind do queue behind each other.
 */
typedef struct load_lane {
    load_engine_t *e;
    load_backend_t *be; /* its own: a Redis connection is not shared between threads */
    int kind;
    uint64_t rng;
    uint8_t *want; /* one object of expected bytes */
} load_lane_t;

/* The outcome of one call. */
typedef struct load_result {
    st_status_t status; /* ST_OK or the call's first error */
    uint64_t bytes, asked, hit, wrong;
} load_result_t;

/*
 * Sets the engine up: n_sess sessions, drawn but not written yet. Returns
 * ST_OK or ST_ERR_NOMEM (nothing to free then).
 */
st_status_t load_engine_init(load_engine_t *e, const load_conf_t *lc, load_backend_t *be, int id,
                             int n_sess);
void load_engine_free(load_engine_t *e);
st_status_t load_lane_init(load_lane_t *l, load_engine_t *e, load_backend_t *be, int kind);
void load_lane_free(load_lane_t *l);
/*
 * Setup, by the put lane before the clock starts: every session's first
 * turn. Returns ST_OK with *failed_p the turns that failed (a busy or full
 * cluster: the run measures it), or ST_ERR_NOMEM.
 */
st_status_t load_engine_prefill(load_lane_t *l, int *failed_p);
/* One call of l's kind on a session the lane picks; the kind's outcome into r. */
void load_call(load_lane_t *l, load_result_t *r);
/* --big-load: writes the big prefix into session 0 (setup), then loads it whole (a call). */
st_status_t load_big_setup(load_lane_t *l);
void load_big_get(load_lane_t *l, load_result_t *r);
/* Counts r, a call of kind that took lat_ns, into e->st (the caller holds e->mu). */
void load_record(load_engine_t *e, int kind, const load_result_t *r, uint64_t lat_ns);

/* --- cli_load_report.c --------------------------------------------------- */

/* Prints the text report. */
void load_report_text(FILE *out, const load_conf_t *lc, const load_stats_t *st,
                      const char *backend);
/* Writes the JSON report to path. Returns 0, or -1 with a message on stderr. */
int load_report_json(const char *path, const load_conf_t *lc, const load_stats_t *st,
                     const char *backend);
/* Errors other than ST_ERR_OVERLOADED and ST_ERR_EXHAUSTED (refusals). */
uint64_t load_hard_errors(const load_stats_t *st);

#endif
