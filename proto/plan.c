/*
 * plan.c - the lookup planner (plan.h): placing and grouping a chain's
 * segments, the compact form, taking and merging the owners' answers, and
 * the resolve rounds.
 */
#include "plan.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- answers -- */

st_status_t lp_answer_check(const Strata__V1__LookupResponse *r, int compact, size_t n_req)
{
    size_t n_kda = 0;

    if (r == NULL) {
        return ST_ERR_PROTOCOL;
    }
    if (!compact) {
        return r->n_segments == n_req ? ST_OK : ST_ERR_PROTOCOL;
    }
    if (!r->compact || r->n_compact_matched != n_req || r->n_compact_unresolved != n_req ||
        r->n_compact_kda_counts != n_req) {
        return ST_ERR_PROTOCOL;
    }
    for (size_t j = 0; j < n_req; j++) {
        n_kda += r->compact_kda_counts[j];
    }
    return n_kda == r->n_compact_kda ? ST_OK : ST_ERR_PROTOCOL;
}

void lp_answer_get(const Strata__V1__LookupResponse *r, int compact, size_t j, size_t *kda_at,
                   uint32_t *matched, uint32_t *unresolved, const uint64_t **kda, size_t *n_kda)
{
    if (!compact) {
        *matched = r->segments[j]->matched_blocks;
        *unresolved = 0;
        *kda = r->segments[j]->kda_checkpoints;
        *n_kda = r->segments[j]->n_kda_checkpoints;
        return;
    }
    *matched = r->compact_matched[j];
    *unresolved = r->compact_unresolved[j];
    *kda = r->compact_kda != NULL ? r->compact_kda + *kda_at : NULL;
    *n_kda = r->compact_kda_counts[j];
    *kda_at += *n_kda;
}

/* Spreads a run's match over the chain segments it covers. */
static void lp_spread(lp_plan_t *p, const lp_run_t *run)
{
    uint64_t m = run->matched;

    for (size_t q = 0; q < run->n_segs; q++) {
        compose_seg_answer_t *a = &p->ans[run->seg_first + q];
        uint64_t here = m > a->n_blocks ? a->n_blocks : m;

        a->answered = 1;
        a->matched = (uint32_t)here;
        a->kda = run->kda;
        a->n_kda = run->n_kda;
        m -= here;
    }
}

/* Leaves a run unanswered, and says why. */
static void lp_fail_run(lp_plan_t *p, lp_run_t *run, st_status_t why, const char *msg,
                        uint8_t round)
{
    run->unresolved = 0;
    for (size_t q = 0; q < run->n_segs; q++) {
        p->ans[run->seg_first + q].answered = 0;
        p->fail[run->seg_first + q] = (lp_fail_t){why, msg, round};
    }
}

/* The status of a group's call and answer, before its entries are read. */
static st_status_t lp_group_status(const lp_group_t *g, int compact)
{
    if (g->status != ST_OK) {
        return g->status;
    }
    if (g->resp == NULL) {
        return ST_ERR_UNAVAILABLE;
    }
    return lp_answer_check(g->resp, compact, g->n_runs);
}

st_status_t lp_plan_take(lp_plan_t *p, size_t gi)
{
    const lp_group_t *g = &p->groups[gi];
    st_status_t status = lp_group_status(g, p->compact);
    size_t kda_at = 0;

    if (status != ST_OK) {
        for (size_t j = 0; j < g->n_runs; j++) {
            lp_fail_run(p, &p->runs[g->first_run + j], status, g->status != ST_OK ? g->msg : NULL,
                        1);
        }
        return status;
    }
    for (size_t j = 0; j < g->n_runs; j++) {
        lp_run_t *run = &p->runs[g->first_run + j];
        uint32_t m, u;
        const uint64_t *kda;
        size_t n_kda;

        lp_answer_get(g->resp, p->compact, j, &kda_at, &m, &u, &kda, &n_kda);
        if ((uint64_t)m + u > run->n_blocks) {
            if (p->prm.misfit != NULL) {
                p->prm.misfit(p->prm.misfit_arg, m, u, run->n_blocks);
            }
            lp_fail_run(p, run, ST_ERR_PROTOCOL, NULL, 1);
            continue;
        }
        run->matched = m;
        run->unresolved = u;
        run->kda = kda;
        run->n_kda = n_kda;
        lp_spread(p, run);
    }
    return ST_OK;
}

size_t lp_plan_next_undecided(const lp_plan_t *p)
{
    size_t k = 0;

    while (k < p->n_segs && p->ans[k].answered && p->ans[k].matched == p->ans[k].n_blocks) {
        k++;
    }
    if (k == p->n_segs || !p->ans[k].answered) {
        return SIZE_MAX;
    }
    return p->runs[p->seg_run[k]].unresolved > 0 ? p->seg_run[k] : SIZE_MAX;
}

size_t lp_plan_undecided(const lp_plan_t *p, size_t *runs)
{
    size_t n = 0;

    for (size_t k = 0; k < p->n_segs; k++) {
        size_t r = p->seg_run[k];

        if (r != SIZE_MAX && p->runs[r].seg_first == k && p->runs[r].unresolved > 0) {
            runs[n++] = r;
        }
    }
    return n;
}

void lp_plan_compose(const lp_plan_t *p, compose_prefix_t *out)
{
    compose_prefix(p->ans, p->n_segs, out);
}

/* ------------------------------------------------------------ grouping -- */

/* Starts group g for node: its request from the template (round 1: with
 * its locations and lease; a resolve round asks for matches alone). */
static void lp_group_start(lp_group_t *g, const Strata__V1__LookupRequest *t, int first_round,
                           uint32_t node, Strata__V1__Segment **segs, size_t first_run)
{
    memset(g, 0, sizeof(*g));
    strata__v1__lookup_request__init(&g->req);
    g->req.namespace_id = t->namespace_id;
    g->req.kinds_mask = t->kinds_mask;
    g->req.layers = t->layers;
    g->req.n_layers = t->n_layers;
    if (first_round) {
        g->req.want_locations = t->want_locations;
        g->req.lease = t->lease;
        g->req.lease_ms = t->lease_ms;
    }
    g->req.segments = segs;
    g->node = node;
    g->first_run = first_run;
    g->status = ST_ERR_UNAVAILABLE;
}

/* A new group for node, its request made from the template; NULL: no memory. */
static lp_group_t *lp_group_new(lp_plan_t *p, uint32_t node, size_t *cap)
{
    lp_group_t *g;

    if (p->n_groups == *cap) {
        size_t grown_cap = *cap ? 2 * *cap : p->prm.n_nodes + 4;
        lp_group_t *grown = realloc(p->groups, grown_cap * sizeof(*grown));

        if (grown == NULL) {
            return NULL;
        }
        p->groups = grown;
        *cap = grown_cap;
    }
    g = &p->groups[p->n_groups++];
    lp_group_start(g, p->prm.tmpl, 1, node, &p->seg_ptr[p->n_runs], p->n_runs);
    return g;
}

/* Adds chain segment k to group g: to its last run when that ends at k and
 * runs merge, else as a new request segment. */
static void lp_group_add(lp_plan_t *p, lp_group_t *g, size_t k)
{
    const compose_seg_answer_t *a = &p->ans[k];
    Strata__V1__Segment *sg;
    lp_run_t *run;

    if (p->prm.merge_runs && g->n_runs > 0) {
        run = &p->runs[p->n_runs - 1];
        if (run->seg_first + run->n_segs == k) {
            /* Extend the run: the chain's hashes are contiguous. */
            p->seg_store[p->n_runs - 1].block_hashes.len += a->n_blocks * ST_HASH_BYTES;
            run->n_segs++;
            run->n_blocks += a->n_blocks;
            p->seg_run[k] = p->n_runs - 1;
            return;
        }
    }
    sg = &p->seg_store[p->n_runs];
    strata__v1__segment__init(sg);
    sg->first_block = a->first_block;
    sg->block_hashes.data = (uint8_t *)p->prm.hashes[k * p->prm.segment_blocks].b;
    sg->block_hashes.len = a->n_blocks * ST_HASH_BYTES;
    p->seg_ptr[p->n_runs] = sg;
    p->runs[p->n_runs] = (lp_run_t){.seg_first = k,
                                    .n_segs = 1,
                                    .group = p->n_groups - 1,
                                    .index = g->n_runs,
                                    .n_blocks = a->n_blocks};
    p->seg_run[k] = p->n_runs++;
    g->n_runs++;
    g->req.n_segments = g->n_runs;
}

/*
 * One request per node, split where it would pass the limits. With
 * merge_runs, consecutive segments with the same owner travel as one request
 * segment (the owner's answer for the run is the same prefix), which keeps
 * the messages small when few nodes hold a long chain.
 */
static st_status_t lp_plan_group(lp_plan_t *p, const int *owner, const size_t *per_node)
{
    size_t cap = 0;

    for (uint32_t node = 0; node < p->prm.n_nodes; node++) {
        lp_group_t *cur = NULL;
        size_t hashes = 0, left = per_node[node];

        for (size_t k = 0; k < p->n_segs && left > 0; k++) {
            if (owner[k] != (int)node) {
                continue;
            }
            if (cur == NULL || cur->req.n_segments == p->prm.max_segments ||
                hashes + p->ans[k].n_blocks > p->prm.max_hashes) {
                cur = lp_group_new(p, node, &cap);
                if (cur == NULL) {
                    return ST_ERR_NOMEM;
                }
                hashes = 0;
            }
            left--;
            lp_group_add(p, cur, k);
            hashes += p->ans[k].n_blocks;
        }
    }
    return ST_OK;
}

/* Places every segment: owner[k], and per_node[] the segments of each node. */
static void lp_plan_place(lp_plan_t *p, int *owner, size_t *per_node)
{
    uint32_t S = p->prm.segment_blocks;

    for (size_t k = 0; k < p->n_segs; k++) {
        size_t left = p->prm.n_blocks - k * S;

        owner[k] = p->prm.place(p->prm.place_arg, &p->prm.hashes[k * S]);
        if (owner[k] >= (int)p->prm.n_nodes) {
            owner[k] = -1;
        }
        p->ans[k] = (compose_seg_answer_t){
            p->prm.first_block + k * S, (uint32_t)(left < S ? left : S), 0, 0, NULL, 0};
        p->seg_run[k] = SIZE_MAX;
        p->fail[k] = (lp_fail_t){ST_OK, NULL, 0};
        if (owner[k] >= 0) {
            per_node[owner[k]]++;
        }
    }
}

st_status_t lp_plan_init(lp_plan_t *p, const lp_params_t *prm)
{
    size_t n;
    int *owner;
    size_t *per_node;
    st_status_t status = ST_ERR_NOMEM;

    memset(p, 0, sizeof(*p));
    if (prm->n_blocks == 0 || prm->segment_blocks == 0 || prm->n_nodes == 0 || prm->place == NULL ||
        prm->tmpl == NULL || prm->hashes == NULL) {
        return ST_ERR_INVALID;
    }
    p->prm = *prm;
    n = p->n_segs = (prm->n_blocks + prm->segment_blocks - 1) / prm->segment_blocks;
    /* Sized to what this lookup needs: large zeroed blocks come from mmap,
     * and every lookup would pay their page faults. */
    owner = malloc(n * sizeof(*owner));
    per_node = calloc(prm->n_nodes, sizeof(*per_node));
    p->ans = malloc(n * sizeof(*p->ans));
    p->seg_run = malloc(n * sizeof(*p->seg_run));
    p->fail = malloc(n * sizeof(*p->fail));
    p->runs = malloc(n * sizeof(*p->runs));
    p->seg_store = malloc(n * sizeof(*p->seg_store));
    p->seg_ptr = malloc(n * sizeof(*p->seg_ptr));
    if (owner && per_node && p->ans && p->seg_run && p->fail && p->runs && p->seg_store &&
        p->seg_ptr) {
        lp_plan_place(p, owner, per_node);
        status = lp_plan_group(p, owner, per_node);
    }
    free(owner);
    free(per_node);
    if (status != ST_OK) {
        lp_plan_free(p);
    }
    return status;
}

/* ------------------------------------------------------------- compact -- */

/* The room lp_compact_group() takes from the pools of one plan. */
typedef struct lp_pools {
    uint64_t *first;
    uint32_t *blocks, *probes, *offsets;
    st_hash_t *hashes;
} lp_pools_t;

/* Moves the request segments of g to the compact fields of its request
 * (in the same order), taking their room from *pl. */
static void lp_compact_group(lp_group_t *g, lp_pools_t *pl)
{
    Strata__V1__LookupRequest *q = &g->req;
    size_t n = q->n_segments, at = 0;

    q->compact_first = pl->first;
    q->compact_blocks = pl->blocks;
    q->compact_probes = pl->probes;
    q->compact_offsets = pl->offsets;
    q->compact_hashes.data = (uint8_t *)pl->hashes->b;
    for (size_t j = 0; j < n; j++) {
        const Strata__V1__Segment *sg = q->segments[j];
        uint32_t len = (uint32_t)(sg->block_hashes.len / ST_HASH_BYTES), np = 0;
        const st_hash_t *h = (const st_hash_t *)sg->block_hashes.data;

        for (uint32_t o = 0; o < len; o += LP_PROBE_EVERY) {
            pl->offsets[at + np] = o;
            pl->hashes[at + np++] = h[o];
        }
        if (pl->offsets[at + np - 1] != len - 1) {
            pl->offsets[at + np] = len - 1;
            pl->hashes[at + np++] = h[len - 1];
        }
        pl->first[j] = sg->first_block;
        pl->blocks[j] = len;
        pl->probes[j] = np;
        at += np;
    }
    q->n_compact_first = q->n_compact_blocks = q->n_compact_probes = n;
    q->n_compact_offsets = at;
    q->compact_hashes.len = at * ST_HASH_BYTES;
    q->n_segments = 0;
    pl->first += n;
    pl->blocks += n;
    pl->probes += n;
    pl->offsets += at;
    pl->hashes += at;
}

st_status_t lp_plan_compact(lp_plan_t *p)
{
    size_t n = p->n_runs;
    /* At most one probe per LP_PROBE_EVERY blocks plus two per request segment. */
    size_t room = p->prm.n_blocks / LP_PROBE_EVERY + 2 * n + 1;
    lp_pools_t pl;

    p->pool_first = malloc((n + 1) * sizeof(*p->pool_first));
    p->pool_u32 = malloc((3 * n + room) * sizeof(*p->pool_u32));
    p->pool_hashes = malloc(room * sizeof(*p->pool_hashes));
    if (p->pool_first == NULL || p->pool_u32 == NULL || p->pool_hashes == NULL) {
        return ST_ERR_NOMEM;
    }
    pl = (lp_pools_t){p->pool_first, p->pool_u32, p->pool_u32 + n, p->pool_u32 + 2 * n,
                      p->pool_hashes};
    for (size_t g = 0; g < p->n_groups; g++) {
        lp_compact_group(&p->groups[g], &pl);
    }
    p->compact = 1;
    return ST_OK;
}

/* --------------------------------------------------------------- rounds -- */

/* Builds the round's group for the runs of one node, r->runs[first..first+n). */
static void lp_round_group(const lp_plan_t *p, lp_round_t *r, uint32_t node, size_t first, size_t n)
{
    lp_group_t *g = &r->groups[r->n_groups++];

    lp_group_start(g, p->prm.tmpl, 0, node, &r->seg_ptr[first], first);
    g->req.n_segments = n;
    g->n_runs = n;
    for (size_t i = first; i < first + n; i++) {
        const lp_run_t *run = &p->runs[r->runs[i]];
        Strata__V1__Segment *sg = &r->seg_store[i];

        strata__v1__segment__init(sg);
        sg->first_block = p->ans[run->seg_first].first_block + run->matched;
        sg->block_hashes.data =
            (uint8_t *)p->prm.hashes[run->seg_first * p->prm.segment_blocks + run->matched].b;
        sg->block_hashes.len = (size_t)run->unresolved * ST_HASH_BYTES;
        r->seg_ptr[i] = sg;
    }
}

st_status_t lp_round_init(const lp_plan_t *p, lp_round_t *r, const size_t *runs, size_t n)
{
    uint32_t n_nodes = p->prm.n_nodes;
    size_t *start = calloc((size_t)n_nodes + 1, sizeof(*start));
    size_t *fill = calloc((size_t)n_nodes + 1, sizeof(*fill));

    memset(r, 0, sizeof(*r));
    r->groups = malloc((n + 1) * sizeof(*r->groups));
    r->runs = malloc((n + 1) * sizeof(*r->runs));
    r->seg_store = malloc((n + 1) * sizeof(*r->seg_store));
    r->seg_ptr = malloc((n + 1) * sizeof(*r->seg_ptr));
    if (!start || !fill || !r->groups || !r->runs || !r->seg_store || !r->seg_ptr) {
        free(start);
        free(fill);
        lp_round_free(r);
        return ST_ERR_NOMEM;
    }
    /* One request per node, in node order; its runs in the order given. */
    for (size_t i = 0; i < n; i++) {
        start[p->groups[p->runs[runs[i]].group].node + 1]++;
    }
    for (uint32_t o = 0; o < n_nodes; o++) {
        start[o + 1] += start[o];
        fill[o] = start[o];
    }
    for (size_t i = 0; i < n; i++) {
        r->runs[fill[p->groups[p->runs[runs[i]].group].node]++] = runs[i];
    }
    for (uint32_t o = 0; o < n_nodes; o++) {
        if (start[o + 1] > start[o]) {
            lp_round_group(p, r, o, start[o], start[o + 1] - start[o]);
        }
    }
    free(start);
    free(fill);
    return ST_OK;
}

/* Adds a resolve answer to a run's match: its checkpoints after the run's. */
static st_status_t lp_run_merge(lp_plan_t *p, lp_run_t *run, const Strata__V1__SegmentMatch *m2)
{
    uint64_t *kda = malloc(sizeof(*kda) * (run->n_kda + m2->n_kda_checkpoints + 1));

    if (kda == NULL) {
        return ST_ERR_NOMEM;
    }
    if (run->n_kda > 0) {
        memcpy(kda, run->kda, sizeof(*kda) * run->n_kda);
    }
    if (m2->n_kda_checkpoints > 0) {
        memcpy(kda + run->n_kda, m2->kda_checkpoints, sizeof(*kda) * m2->n_kda_checkpoints);
    }
    free(run->merged);
    run->merged = kda;
    run->kda = kda;
    run->n_kda += m2->n_kda_checkpoints;
    run->matched += m2->matched_blocks;
    run->unresolved = 0;
    lp_spread(p, run);
    return ST_OK;
}

st_status_t lp_round_take(lp_plan_t *p, const lp_round_t *r, size_t gi)
{
    const lp_group_t *g = &r->groups[gi];
    st_status_t status = lp_group_status(g, 0), first = ST_OK;

    for (size_t j = 0; j < g->n_runs; j++) {
        lp_run_t *run = &p->runs[r->runs[g->first_run + j]];

        if (status != ST_OK) {
            lp_fail_run(p, run, status, g->status != ST_OK ? g->msg : NULL, 2);
            continue;
        }
        if (g->resp->segments[j]->matched_blocks > run->unresolved) {
            lp_fail_run(p, run, ST_ERR_PROTOCOL, NULL, 2);
            first = ST_ERR_PROTOCOL;
            continue;
        }
        if (lp_run_merge(p, run, g->resp->segments[j]) != ST_OK) {
            return ST_ERR_NOMEM;
        }
    }
    return status != ST_OK ? status : first;
}

void lp_round_free(lp_round_t *r)
{
    free(r->groups), free(r->runs), free(r->seg_store), free(r->seg_ptr);
    memset(r, 0, sizeof(*r));
}

void lp_plan_free(lp_plan_t *p)
{
    for (size_t i = 0; p->runs != NULL && i < p->n_runs; i++) {
        free(p->runs[i].merged);
    }
    free(p->ans), free(p->seg_run), free(p->fail), free(p->runs), free(p->groups);
    free(p->seg_store), free(p->seg_ptr);
    free(p->pool_first), free(p->pool_u32), free(p->pool_hashes);
    memset(p, 0, sizeof(*p));
}
