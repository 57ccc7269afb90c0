/*
 * plan.h - the lookup planner: what libstrata's st_client_lookup and the
 * daemon's ClusterLookup both do to ask the owners of a chain about it
 * (docs/protocol.md "Lookup", "Compact segments").
 *
 * A plan cuts the chain into segments of segment_blocks blocks, places each
 * on a node (the caller's placer: the ring, with or without health), groups
 * the segments of each node into Lookup requests (consecutive segments of one
 * owner as one request segment, a run, when merge_runs is set; a new request
 * where one would pass max_segments or max_hashes), and may move the request
 * segments to the compact form (the hashes of every LP_PROBE_EVERY-th block
 * and of the last). The caller sends the groups as it likes (gRPC, the
 * transport, its own handler) and hands each answer back; the plan checks it
 * against its request, spreads it over the chain segments, and names the
 * runs that the owner left undecided. A resolve round asks their owners for
 * those blocks again with their hashes (full form), one request per node,
 * and adds the answers to the runs' matches. The composed prefix is
 * proto/compose.h's over the segments' answers.
 *
 * The phases, in order: lp_plan_init(), lp_plan_compact() (optional), send
 * the groups, lp_plan_take() for each, then any number of resolve rounds
 * (lp_round_init(), send, lp_round_take(), lp_round_free()), then
 * lp_plan_compose(), lp_plan_free(). The plan points into the caller's
 * hashes and, once taken, into the answers: both must outlive it.
 *
 * Thread safety: a plan is used by one thread at a time.
 */
#ifndef STRATA_PROTO_PLAN_H
#define STRATA_PROTO_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "compose.h"
#include "strata.pb-c.h"
#include "strata/hash.h"
#include "strata/status.h"

/* Compact segments name every LP_PROBE_EVERY-th block and the last (a wire rule). */
#define LP_PROBE_EVERY 64

/* No limit, for lp_params_t's max_segments and max_hashes. */
#define LP_UNLIMITED SIZE_MAX

/* The node that owns a segment whose first block hash is first, or -1 when
 * none can take it (every node down): its segments stay unanswered. */
typedef int (*lp_place_fn)(void *arg, const st_hash_t *first);

/* A request segment that an owner's answer did not fit (more matched and
 * undecided blocks than it covers); the run stays unanswered. */
typedef void (*lp_misfit_fn)(void *arg, uint32_t matched, uint32_t unresolved, uint64_t blocks);

typedef struct lp_params {
    const st_hash_t *hashes; /* the blocks asked about, from chain index first_block */
    size_t n_blocks;
    uint64_t first_block; /* at a segment start */
    uint32_t segment_blocks;
    uint32_t n_nodes; /* nodes the placer answers, 0..n_nodes-1 */
    lp_place_fn place;
    void *place_arg;
    size_t max_segments; /* request segments per request, or LP_UNLIMITED */
    size_t max_hashes;   /* blocks per request, or LP_UNLIMITED */
    int merge_runs;      /* consecutive segments of one owner as one request segment */
    /* Copied into every request: namespace_id, kinds_mask, layers, want_locations,
     * lease, lease_ms (layers must outlive the plan). */
    const Strata__V1__LookupRequest *tmpl;
    lp_misfit_fn misfit; /* or NULL */
    void *misfit_arg;
} lp_params_t;

/* One Lookup to one node. The caller that sends req sets resp, status and msg. */
typedef struct lp_group {
    Strata__V1__LookupRequest req;
    uint32_t node;
    size_t first_run, n_runs;               /* its request segments: runs first_run.. (plan) or the
                                 round's entries first_run.. (round) */
    const Strata__V1__LookupResponse *resp; /* the answer, or NULL */
    st_status_t status;                     /* the call's status */
    const char *msg;                        /* the call's error message, or NULL */
} lp_group_t;

/* A request segment: a run of chain segments of one owner. */
typedef struct lp_run {
    size_t seg_first, n_segs; /* chain segments */
    size_t group, index;      /* its round-1 group and position in that request */
    uint64_t n_blocks;
    uint32_t matched;    /* leading blocks proven to match */
    uint32_t unresolved; /* blocks after them left undecided (0: decided) */
    const uint64_t *kda; /* checkpoints of the matched part */
    size_t n_kda;
    uint64_t *merged; /* kda when a resolve round merged it (owned) */
} lp_run_t;

/* Why a chain segment has no answer. */
typedef struct lp_fail {
    st_status_t why; /* ST_OK: answered (or never asked: no owner) */
    const char *msg; /* the call's message; NULL: the answer did not fit */
    uint8_t round;   /* 1: the first answer; 2: a resolve round's */
} lp_fail_t;

typedef struct lp_plan {
    lp_params_t prm;
    size_t n_segs;
    compose_seg_answer_t *ans; /* per chain segment, in chain order */
    size_t *seg_run;           /* per chain segment: its run, or SIZE_MAX (no owner) */
    lp_fail_t *fail;           /* per chain segment */
    lp_run_t *runs;
    size_t n_runs;
    lp_group_t *groups;
    size_t n_groups;
    int compact;
    /* Storage of the requests. */
    Strata__V1__Segment *seg_store, **seg_ptr;
    uint64_t *pool_first;
    uint32_t *pool_u32;
    st_hash_t *pool_hashes;
} lp_plan_t;

/*
 * Places, groups and builds the round-1 requests (full form). Returns ST_OK
 * (p->n_groups may be 0: no segment has an owner), ST_ERR_INVALID (no
 * blocks, segment_blocks 0, no placer or template) or ST_ERR_NOMEM; on an
 * error p needs no lp_plan_free().
 */
st_status_t lp_plan_init(lp_plan_t *p, const lp_params_t *prm);

/* Moves every request's segments to the compact fields, in the same order.
 * Returns ST_OK or ST_ERR_NOMEM (the requests are then as they were). */
st_status_t lp_plan_compact(lp_plan_t *p);

/*
 * Takes group g's answer (g->resp, g->status, g->msg set by the caller).
 * Returns ST_OK when it fits the request; otherwise g->status when the call
 * failed (ST_ERR_UNAVAILABLE when it has no answer), or ST_ERR_PROTOCOL when
 * the answer does not have one entry per request segment (or, compact, no
 * compact flag or checkpoint counts that do not add up): then every segment
 * of the group stays unanswered. A run whose matched and undecided blocks pass
 * its length is left unanswered too (lp_params_t's misfit is told) without
 * failing the group.
 */
st_status_t lp_plan_take(lp_plan_t *p, size_t g);

/* The run at which the prefix would end on undecided blocks, or SIZE_MAX
 * when it ends on decided ones. */
size_t lp_plan_next_undecided(const lp_plan_t *p);

/* Writes the runs that have undecided blocks, in chain order, to runs[]
 * (room for p->n_runs); returns how many. */
size_t lp_plan_undecided(const lp_plan_t *p, size_t *runs);

/* A resolve round over some runs with undecided blocks: one full-form
 * request per node, the runs' undecided blocks with their hashes. */
typedef struct lp_round {
    lp_group_t *groups;
    size_t n_groups;
    size_t *runs; /* the round's runs, grouped: groups[g] has runs[first_run..] */
    Strata__V1__Segment *seg_store, **seg_ptr;
} lp_round_t;

/* Builds the round's requests for runs[0..n-1] (runs with undecided blocks).
 * Returns ST_OK, or ST_ERR_NOMEM (r needs no lp_round_free() then). */
st_status_t lp_round_init(const lp_plan_t *p, lp_round_t *r, const size_t *runs, size_t n);

/*
 * Takes the round's group g (resp, status, msg set by the caller): each run
 * whose answer fits (no more blocks than were undecided) adds it to its match
 * and is decided; the others are left unanswered. Returns ST_OK when every
 * run's answer fitted; the call's status when it failed; ST_ERR_PROTOCOL when
 * the answer does not have one entry per request segment or an entry did not
 * fit; ST_ERR_NOMEM (no room for a merged checkpoint list).
 */
st_status_t lp_round_take(lp_plan_t *p, const lp_round_t *r, size_t g);

void lp_round_free(lp_round_t *r);

/* The longest and the resumable prefix over the segments' answers. */
void lp_plan_compose(const lp_plan_t *p, compose_prefix_t *out);

void lp_plan_free(lp_plan_t *p);

/*
 * Decodes request segment j of an answer: matched, undecided blocks and
 * checkpoints, from the compact fields when compact (*kda_at runs over
 * compact_kda: start it at 0 and take the segments in order). The answer
 * must have passed lp_answer_check().
 */
void lp_answer_get(const Strata__V1__LookupResponse *r, int compact, size_t j, size_t *kda_at,
                   uint32_t *matched, uint32_t *unresolved, const uint64_t **kda, size_t *n_kda);

/* Whether an answer has one entry per request segment (n_req): ST_OK or
 * ST_ERR_PROTOCOL. */
st_status_t lp_answer_check(const Strata__V1__LookupResponse *r, int compact, size_t n_req);

#endif /* STRATA_PROTO_PLAN_H */
