/*
 * dp_release.c - the leases of a get batch that no lease-cache entry keeps
 * are released after the batch completed, in the background: one message
 * over the transport, not waited for, where the node takes calls there,
 * else a Release fan-out on a pool worker (dp_internal.h).
 */
#include "dp_internal.h"

#include <stdlib.h>

#include "tcall.h"

/* Leases released in the background, after the batch that took them completed. */
typedef struct sc_dp_release_job {
    sc_job_t job; /* first: the pool hands this pointer back */
    st_client_t *c;
    size_t n;
    uint64_t *lease;
    uint32_t *node;
} sc_dp_release_job_t;

/* Releases j's leases: one request per node (leases are grouped by node)
 * of at most max_batch leases. */
static void sc_dp_release_run(sc_job_t *job)
{
    sc_dp_release_job_t *j = (sc_dp_release_job_t *)job;
    Strata__V1__ReleaseRequest *rel = calloc(j->n, sizeof(*rel));
    srpc_fanout_item_t *items = calloc(j->n, sizeof(*items));
    size_t nr = 0;

    if (rel != NULL && items != NULL) {
        for (size_t k = 0; k < j->n; k++) {
            if (nr > 0 && j->node[k] == j->node[k - 1] &&
                rel[nr - 1].n_lease_ids < j->c->max_batch) {
                rel[nr - 1].n_lease_ids++;
                continue;
            }
            strata__v1__release_request__init(&rel[nr]);
            rel[nr].namespace_id = j->c->ns;
            rel[nr].lease_ids = &j->lease[k];
            rel[nr].n_lease_ids = 1;
            items[nr].ch = j->c->nodes[j->node[k]].ch;
            items[nr].req = &rel[nr].base;
            nr++;
        }
        /* A lease that cannot be released ends by time: nothing to do on error. */
        (void)sc_fanout(j->c, &srpc_cache_methods[SRPC_CACHE_RELEASE], TCALL_RELEASE, items, nr,
                        (int)j->c->timeout_ms);
        srpc_fanout_free(items, nr);
    }
    free(rel);
    free(items);
    free(j);
}

/* Releases node's leases ids[0..n) with one message over the transport
 * whose answer nobody waits for. Returns 1 when it was sent (0: the node
 * takes no calls over the transport, or the batch is over max_batch). */
static int sc_dp_release_now(st_client_t *c, uint32_t node, uint64_t *ids, size_t n)
{
    Strata__V1__ReleaseRequest rel = STRATA__V1__RELEASE_REQUEST__INIT;
    srpc_fanout_item_t item = {0};

    if (!c->tcalls || n > c->max_batch || !c->dp->node[node].tcalls) {
        return 0;
    }
    rel.namespace_id = c->ns;
    rel.lease_ids = ids;
    rel.n_lease_ids = n;
    item.req = &rel.base;
    return sc_tc_send(c, node, TCALL_RELEASE, &item, NULL);
}

void sc_dp_release(st_client_t *c, const sc_dp_req_t *req, size_t n_req)
{
    sc_dp_release_job_t *j;
    size_t nr = 0;

    for (size_t b = 0; b < n_req; b++) {
        nr += req[b].lease != 0 && !req[b].keep;
    }
    if (nr == 0) {
        return;
    }
    j = calloc(1, sizeof(*j) + nr * (sizeof(uint64_t) + sizeof(uint32_t)));
    if (j == NULL) {
        return; /* the leases end by time */
    }
    j->c = c;
    j->lease = (uint64_t *)(j + 1);
    j->node = (uint32_t *)(j->lease + nr);
    for (uint32_t x = 0; x < c->n_nodes && j->n < nr; x++) {
        size_t first = j->n;

        for (size_t b = 0; b < n_req; b++) {
            if (req[b].node == x && req[b].lease != 0 && !req[b].keep) {
                j->lease[j->n] = req[b].lease;
                j->node[j->n++] = x;
            }
        }
        /* Over the transport it is one message, sent from here and not
         * waited for; the other nodes' go to a worker. */
        if (j->n > first && sc_dp_release_now(c, x, j->lease + first, j->n - first)) {
            j->n = first;
        }
    }
    if (j->n > 0) {
        j->job.run = sc_dp_release_run;
        sc_pool_submit(c, &j->job);
    } else {
        free(j);
    }
}
