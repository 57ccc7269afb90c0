/*
 * rebalance_internal.h - between rebalance.c (the catalog and the passes)
 * and rebalance_push.c (the pushes of one chunk). Not for other files.
 */
#ifndef STRATA_CACHED_REBALANCE_INTERNAL_H
#define STRATA_CACHED_REBALANCE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>

#include "daemon.h"
#include "htab.h"
#include "rebalance.h"

#define CD_RB_MAX_R    16    /* replicas the rebalancer places (the config's bound) */
#define CD_RB_CHUNK    64    /* objects per Replicate call */
#define CD_RB_RETRY_MS 250   /* a pass with failures is retried after this */
#define CD_RB_CALL_MS  30000 /* deadline of one Replicate call */
#define CD_RB_INFLIGHT 8     /* at most this many chunks pushed at once (cd_rb_t.inflight) */

/* One durable object of the catalog. */
typedef struct cd_rb_obj {
    uint64_t ns; /* wire namespace id */
    uint32_t kind, layer;
    st_hash_t id;        /* block hash (KDA) or session id */
    st_hash_t parent;    /* KDA: the parent block's hash, when has_parent */
    st_hash_t placement; /* what the ring places it by */
    int has_parent;
    size_t idx;        /* in cd_rb_t.objs */
    uint64_t done_at;  /* the ring epoch whose pass finished it (a retry skips it) */
    uint64_t tried_at; /* the ring epoch of its last unfinished attempt */
    uint32_t tries;    /* unfinished attempts at tried_at */
} cd_rb_obj_t;

struct cd_rb {
    cd_daemon_t *d;
    pthread_mutex_t lock; /* guards everything below but d, rate, replicas */
    pthread_cond_t cond;  /* the worker's wake-up, and a pass's end */
    cd_htab_t tab;        /* cd_rb_key() -> cd_rb_obj_t */
    cd_rb_obj_t **objs;
    size_t n, cap;
    cd_view_t *base; /* the ring of the last completed pass (held); worker only */
    cd_rb_stats_t st;
    int woken, stop, running;
    uint64_t rate, retry_ms;
    size_t replicas;
    size_t inflight; /* chunks a pass pushes at once: half the gRPC threads, 1..CD_RB_INFLIGHT */
    pthread_t thr;
};

/* What one object needs in a pass: the members of the current view to push
 * it to (check 0) or to ask whether they hold it (check 1; a pusher's check
 * that finds no copy becomes a push, check 2). */
typedef struct cd_rb_plan {
    uint32_t target[CD_RB_MAX_R];
    uint8_t check[CD_RB_MAX_R];
    size_t n_target;
    int in_new;    /* this node is in the object's new replica set */
    int is_pusher; /* this node sends the copies */
} cd_rb_plan_t;

/* One pass's rings and pacing, shared by the pass's pushers (cd_rb_t.inflight). */
typedef struct cd_rb_run {
    cd_rb_t *rb;
    const cd_view_t *old, *cur;
    uint64_t t0_ns;         /* start of the pass */
    _Atomic uint64_t bytes; /* payload bytes pushed in the pass, by every pusher */
} cd_rb_run_t;

/* The catalog copied out, sorted by namespace then kind, without the objects
 * a pass over ring epoch already finished (NULL: no memory); an object
 * marked finished by a pass over epoch (a retry of the pass skips it); the
 * catalog freed (rebalance.c). */
cd_rb_obj_t *cd_rb_snapshot(cd_rb_t *rb, uint64_t epoch, size_t *n_p);
void cd_rb_done(cd_rb_t *rb, const cd_rb_obj_t *o, uint64_t epoch);
/* Counts an attempt of a pass over epoch that left o pending. */
void cd_rb_tried(cd_rb_t *rb, const cd_rb_obj_t *o, uint64_t epoch);
void cd_rb_catalog_free(cd_rb_t *rb);

/* The plan of o from ring old (NULL: none) to ring cur (rebalance_push.c). */
void cd_rb_plan(cd_rb_t *rb, const cd_view_t *old, const cd_view_t *cur, const cd_rb_obj_t *o,
                cd_rb_plan_t *p);

/* Sleeps until bytes pushed since t0_ns are within the rate. */
void cd_rb_pace(cd_rb_t *rb, uint64_t t0_ns, uint64_t bytes);

/* Pushes, checks and drops for objs[0..n) (one namespace, one kind);
 * returns how many are still pending (rebalance_push.c). */
uint64_t cd_rb_push_chunk(cd_rb_run_t *run, const cd_rb_obj_t *objs, size_t n);

/* XXH3-64 of a session record as Replicate carries it. */
uint64_t cd_rb_session_sum(const st_hash_t *id, const st_hash_t *head, uint64_t length,
                           uint64_t version);

#endif /* STRATA_CACHED_REBALANCE_INTERNAL_H */
