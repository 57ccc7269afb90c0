/*
 * en_engine.h - the engine's state (struct st_engine) and what its files share:
 * engine.c (create, run, free), put.c (background writes), pool.c (the local
 * pool, row reads from the cluster and the lease-cache warm-up) and resume.c
 * (the resumable prefix).
 */
#ifndef STRATA_EN_ENGINE_H
#define STRATA_EN_ENGINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "clock.h"
#include "en_internal.h"
#include "strata/strata.h"

#define EN_WAIT_MS  120000
#define EN_ATTEMPTS 4
#define EN_WARM_US  1000000 /* lease-cache warm-up period (en_warm) */

/* One block's objects on their way to the cluster. */
typedef struct en_put {
    size_t block;
    st_handle_t *h;
    st_put_op_t *ops;
    size_t n;
    uint8_t *buf;
} en_put_t;

/*
 * Near-data scoring (engine/score.c): the Score call of one DSA layer in
 * flight on the engine's scoring thread while the engine's thread scores the
 * keys window. One job at a time: posted by en_score_start, answered by the
 * thread, collected by en_score_finish; mu guards job, done and quit.
 */
typedef struct en_score {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int running; /* the thread was started */
    int quit, job, done;
    int serial; /* serial_rows: the call runs on the caller's thread (no overlap) */
    st_score_query_t q;
    float *qw; /* the query's copy: heads x dim, then heads weights */
    size_t n_blocks;
    uint64_t *pos; /* topk candidates */
    float *sc;
    size_t n_out;
    st_status_t st;
    char why[160]; /* st_client_last_error() of a failed call (it is per thread) */
    st_score_stats_t ss;
    uint64_t t0;
} en_score_t;

/* A buffer registered with the client (NULL p: none). */
typedef struct en_reg {
    void *p;
    size_t len;
} en_reg_t;

struct st_engine {
    const st_model_t *m;
    st_client_t *client;
    uint32_t interval;
    void (*on_lookup)(void *arg, const st_lookup_result_t *result);
    void *on_lookup_arg;
    void (*on_progress)(void *arg, size_t done, size_t total);
    void *on_progress_arg;
    st_seq_t *seq;
    en_put_t *puts;
    size_t n_puts, cap_puts;
    size_t ring;     /* local pool in blocks, the open one included (0: unbounded) */
    int serial;      /* serial_rows */
    uint32_t device; /* st_engine_device_t asked for */
    int durable;     /* KDA checkpoints and the session record are durable writes */
    uint32_t chunk;  /* prefill_chunk: tokens per prefill span (1: token by token) */
    /* The run in progress: its chain, which blocks the cluster holds, the
     * blocks kept aside because it does not, and the row reads in flight. */
    st_engine_stats_t *stats;
    st_hash_t *chain;
    size_t n_chain;   /* valid entries */
    uint8_t *stored;  /* per block: 1 when every KV object is in the cluster */
    size_t n_stored;  /* blocks that stored covers */
    size_t *orphan_b; /* blocks outside the pool kept locally, and their rows */
    float **orphan;
    size_t n_orphans, cap_orphans;
    st_handle_t *rh;
    st_get_op_t *rops;
    uint32_t *ridx;
    size_t n_rops;
    uint64_t rt0;
    /* The lease-cache warm-up in flight (en_warm). */
    st_handle_t *wh;
    st_get_op_t *wops;
    float *wbuf;
    size_t n_wops, cap_wops;
    uint64_t wt0;   /* when the last one was issued (0: this run has none yet) */
    uint32_t wzero; /* the row it reads of each object */
    int remote;     /* remote_scoring */
    int keys_lost;  /* a scoring fallback could not fetch the history's keys */
    en_score_t score;
    /* Images (vis.c): VIS objects on or off, and the run's items (the chain
     * of blocks completed by the reply needs them). */
    int vis_cache;
    const st_engine_image_t *images;
    const st_hash_item_t *items;
    size_t n_items;
    /* What a resume reads into, registered with the client's transport once
     * (resume.c): per DSA layer its rows and keys stores (slot 2l, 2l + 1, as
     * the sequence holds them now; seq->on_store_free drops a registration
     * before its store goes), and the stage of the IDX and KDA objects. */
    en_reg_t *reg; /* 2 x n_dsa */
    uint8_t *fstage;
    size_t fstage_len;
};

/* put.c. Waits for write p and counts how it went; frees it. */
void en_put_finish(st_engine_t *e, en_put_t *p, st_engine_stats_t *stats);
/* Releases the writes that completed (all of them when wait is set). */
void en_put_reap(st_engine_t *e, int wait, st_engine_stats_t *stats);
/* Starts writing block b (KV and IDX of every DSA layer, KDA when kda is set). */
void en_put_block(st_engine_t *e, const st_hash_t *chain, size_t n_chain, size_t b, int kda,
                  st_engine_stats_t *stats);

/* pool.c. The sequence's row source for blocks outside the local pool (seq->rowsrc). */
const float *en_orphan(void *arg, int l, size_t b);
st_status_t en_rows_start(void *arg, int l, const int32_t *tok, size_t n, float *dst);
st_status_t en_rows_finish(void *arg);
/* Releases a completed (or, with wait, any) warm-up and counts its bytes. */
void en_warm_reap(st_engine_t *e, int wait, st_engine_stats_t *stats);
/* Keeps the locations of the blocks outside the local pool in the lease cache. */
void en_warm(st_engine_t *e, size_t open, st_engine_stats_t *stats);
/* Block b leaves the local pool: in the cluster first, or kept aside. */
void en_pool_release(st_engine_t *e, size_t b);
/* Frees the blocks kept aside. */
void en_pool_clear(st_engine_t *e);

/* score.c. Sets up near-data scoring (the thread, seq->score); ST_OK or ST_ERR_NOMEM. */
st_status_t en_score_init(st_engine_t *e);
/* Stops the thread and frees what en_score_init made (safe on a zeroed en_score_t). */
void en_score_fini(st_engine_t *e);
/* Leaves the keys window for the rest of the run: the IDX objects of the
 * blocks before it are fetched and kept (why: logged). Counted in
 * score_fallbacks. ST_OK, ST_ERR_NOMEM, or ST_ERR_UNAVAILABLE (not every
 * object loaded: the caller recomputes). */
st_status_t en_score_localize(st_engine_t *e, const char *why);

/* resume.c. Restores the longest resumable prefix of chain[0..n_look) that loads;
 * returns the blocks restored (0: compute from the start). */
size_t en_resume(st_engine_t *e, const uint32_t *tokens, const st_hash_t *chain, size_t n_chain,
                 size_t n_look, st_engine_stats_t *stats);
/* Sets up the resume's registrations (the table, the sequence's hook); ST_OK or ST_ERR_NOMEM. */
st_status_t en_reg_init(st_engine_t *e);
/* Drops every registration and frees the stage (before the sequence is freed). */
void en_reg_fini(st_engine_t *e);

/* vis.c. Checks a run's images against its tokens and names each: items[k]
 * gets image k's st_hash_image(), start and token count. ST_OK, or
 * ST_ERR_INVALID / ST_ERR_UNSUPPORTED after logging what is wrong. */
st_status_t en_images_check(const st_engine_t *e, const uint32_t *tokens, size_t n,
                            const st_engine_image_t *images, size_t n_images,
                            st_hash_item_t *items);
/* Runs the image's tokens [from, its end) through the model: embeddings from
 * a VIS object or the encoder (then written as a VIS object), then the span.
 * logits: the last token's (may be NULL). */
st_status_t en_image_run(st_engine_t *e, const st_engine_image_t *img, const st_hash_item_t *it,
                         size_t from, float *logits, st_engine_stats_t *stats);
/* Starts one put batch in the background (e->puts); block SIZE_MAX for a
 * VIS object, which marks no block stored. 0 when it started. */
int en_put_start(st_engine_t *e, en_put_t *p, const st_hash_t *chain, size_t n_chain,
                 unsigned flags, st_engine_stats_t *stats);

#endif /* STRATA_EN_ENGINE_H */
