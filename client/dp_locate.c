/*
 * dp_locate.c - how a batch is cut into requests (one node's ops, at most
 * max_batch each) and, for gets of whole objects, into waves whose Locates
 * run on the locator threads while the batch posts the gets of the waves
 * already located (dp_internal.h).
 */
#include "dp_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "tcall.h"

/* A wave's Locate is done: its waiter wakes (dp->loc_lock held). */
static void sc_dp_loc_done(sc_job_t *job, void *arg)
{
    sc_dp_t *dp = arg;

    atomic_store_explicit(&((sc_dp_loc_t *)job)->done, 1, memory_order_release);
    pthread_cond_broadcast(&dp->loc_done);
}

static void sc_dp_loc_job(sc_job_t *job)
{
    sc_dp_loc_run((sc_dp_loc_t *)job);
}

/* A locator thread: runs queued Locate fan-outs, one at a time. */
void *sc_dp_locator_main(void *arg)
{
    sc_dp_t *dp = arg;

    sc_jobs_serve(&dp->loc_lock, &dp->loc_work, &dp->loc_head, &dp->loc_tail, &dp->loc_stop,
                  sc_dp_loc_done, dp);
    return NULL;
}

void sc_dp_locators_stop(sc_dp_t *dp)
{
    sc_threads_stop(&dp->loc_lock, &dp->loc_work, &dp->loc_stop, dp->loc_th, &dp->n_loc);
}

size_t sc_dp_batches(st_client_t *c, const sc_dp_op_t *ops, size_t n, size_t *perm,
                     sc_dp_req_t *req)
{
    size_t k = 0, nb = 0;

    for (uint32_t x = 0; x < c->n_nodes; x++) {
        size_t start = k;

        for (size_t i = 0; i < n; i++) {
            if (ops[i].owner == (int)x) {
                perm[k++] = i;
            }
        }
        for (size_t s = start; s < k; s += c->max_batch) {
            req[nb++] = (sc_dp_req_t){
                .node = x, .first = s, .count = k - s < c->max_batch ? k - s : c->max_batch};
        }
    }
    return nb;
}

uint64_t sc_dp_get_bytes(const st_get_op_t *op)
{
    return op->n_rows ? (uint64_t)op->n_rows * op->row_bytes : op->dst_len;
}

/* Cuts node x's ops perm[s, k) into requests of at most max_batch ops whose
 * bytes grow four-fold from SC_DP_WAVE0 to SC_DP_WAVE_MAX (at least one op
 * each), the w-th in wave w, appended at req[*nb]; returns the waves. */
static uint32_t sc_dp_node_waves(st_client_t *c, const st_handle_t *h, uint32_t x,
                                 const size_t *perm, size_t s, size_t k, sc_dp_req_t *req,
                                 size_t *nb)
{
    uint32_t w = 0;

    while (s < k) {
        uint64_t target = w < 8 ? (uint64_t)SC_DP_WAVE0 << (2 * w) : SC_DP_WAVE_MAX, bytes = 0;
        size_t e = s;

        target = target < SC_DP_WAVE_MAX ? target : SC_DP_WAVE_MAX;
        while (e < k && e - s < c->max_batch && (e == s || bytes < target)) {
            bytes += sc_dp_get_bytes(&h->gets[perm[e]]);
            e++;
        }
        req[(*nb)++] = (sc_dp_req_t){.node = x, .wave = w++, .first = s, .count = e - s};
        s = e;
    }
    return w;
}

size_t sc_dp_waves(st_client_t *c, const st_handle_t *h, const sc_dp_op_t *ops, size_t n,
                   size_t *perm, sc_dp_req_t *req, int *nomem)
{
    size_t k = 0, nb = 0;
    uint32_t nw = 0;
    sc_dp_req_t *tmp;
    size_t *per_wave;

    for (uint32_t x = 0; x < c->n_nodes; x++) {
        size_t s = k;
        uint32_t w;

        for (size_t i = 0; i < n; i++) {
            if (ops[i].owner == (int)x) {
                perm[k++] = i;
            }
        }
        w = sc_dp_node_waves(c, h, x, perm, s, k, req, &nb);
        nw = w > nw ? w : nw;
    }
    if (nw <= 1) {
        return nb; /* one wave: already in order */
    }
    /* Stable counting sort of the requests by wave. */
    tmp = calloc(nb, sizeof(*tmp));
    per_wave = calloc(nw + 1, sizeof(*per_wave));
    if (tmp == NULL || per_wave == NULL) {
        free(tmp), free(per_wave);
        *nomem = 1;
        return 0;
    }
    for (size_t b = 0; b < nb; b++) {
        per_wave[req[b].wave + 1]++;
    }
    for (uint32_t w = 0; w < nw; w++) {
        per_wave[w + 1] += per_wave[w];
    }
    for (size_t b = 0; b < nb; b++) {
        tmp[per_wave[req[b].wave]++] = req[b];
    }
    memcpy(req, tmp, nb * sizeof(*req));
    free(tmp), free(per_wave);
    return nb;
}

void sc_dp_loc_run(sc_dp_loc_t *j)
{
    j->t_sent = cm_mono_ns();
    j->ok = sc_fanout(j->c, &srpc_cache_methods[SRPC_CACHE_LOCATE], TCALL_LOCATE, j->items, j->n,
                      j->timeout_ms) == ST_OK;
}

void sc_dp_loc_submit(sc_dp_t *dp, sc_dp_loc_t *loc, size_t nw)
{
    if (nw == 0) {
        return;
    }
    for (size_t w = 0; w < nw; w++) {
        loc[w].job.run = sc_dp_loc_job;
        loc[w].job.next = w + 1 < nw ? &loc[w + 1].job : NULL;
    }
    pthread_mutex_lock(&dp->loc_lock);
    if (dp->loc_tail != NULL) {
        dp->loc_tail->next = &loc[0].job;
    } else {
        dp->loc_head = &loc[0].job;
    }
    dp->loc_tail = &loc[nw - 1].job;
    if (nw == 1) {
        pthread_cond_signal(&dp->loc_work);
    } else {
        pthread_cond_broadcast(&dp->loc_work);
    }
    pthread_mutex_unlock(&dp->loc_lock);
}

void sc_dp_loc_wait(sc_dp_t *dp, sc_dp_loc_t *j, _Atomic size_t *pending)
{
    if (j->fan != NULL && !atomic_load_explicit(&j->done, memory_order_acquire)) {
        sc_fan_wait(j->fan, j->lo, j->hi); /* one wave of the batch's own fan-out */
        atomic_store_explicit(&j->done, 1, memory_order_release);
        return;
    }
    while (!atomic_load_explicit(&j->done, memory_order_acquire)) {
        if (atomic_load(pending) > 0) {
            int n;

            n = sc_dp_poll(dp);
            if (n <= 0) {
                sched_yield();
            }
            continue;
        }
        pthread_mutex_lock(&dp->loc_lock);
        while (!atomic_load_explicit(&j->done, memory_order_acquire)) {
            pthread_cond_wait(&dp->loc_done, &dp->loc_lock);
        }
        pthread_mutex_unlock(&dp->loc_lock);
    }
}
