/*
 * tier_wb.c - the SSD tier's write-behind (docs/tiers.md, "Write-behind").
 *
 * Evictions take the coldest objects of a namespace; the ones the tier holds
 * no copy of are copied and queued for the writer on the evicting thread (a
 * put, or a promote making room). The write-behind thread writes the
 * coldest ssd_writeback bytes of each namespace's objects out ahead of
 * that, straight from DRAM (their blocks held meanwhile, the hold no
 * access), and marks them tiered, so that their eviction finds the copy
 * (ssd_contains) and writes nothing. It runs when evictions kick it.
 */
#include "tier_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "log.h"

#define T_WB_MAX_BYTES (16ull << 20) /* object bytes per batch (their blocks are held) */
#define T_WB_RETRY_MS  1000          /* pause after a batch that failed (map full, say) */

/* One write of a write-behind batch. */
typedef struct cd_tier_wb_job {
    cd_tier_t *t;
    cd_clean_t *c;
} cd_tier_wb_job_t;

/* Writer thread: one write of the batch finished. */
static void t_wb_done(void *arg, const ssd_key_t *key, st_status_t status)
{
    cd_tier_wb_job_t *j = arg;
    cd_tier_t *t = j->t;

    (void)key;
    pthread_mutex_lock(&t->wb_lock);
    j->c->status = status;
    if (--t->wb_pending == 0) {
        pthread_cond_signal(&t->wb_done_cond);
    }
    pthread_mutex_unlock(&t->wb_lock);
}

void cd_tier_wb_kick(cd_tier_t *t, uint32_t ns_id, uint64_t len, int clean)
{
    if (!atomic_load_explicit(&t->wb_running, memory_order_relaxed)) {
        return;
    }
    if (clean && atomic_fetch_sub(&t->wb_clean[ns_id], (int64_t)len) - (int64_t)len >
                     (int64_t)(atomic_load(&t->wb_window[ns_id]) / 2)) {
        return;
    }
    if (atomic_load_explicit(&t->wb_want[ns_id], memory_order_relaxed)) {
        return;
    }
    atomic_store(&t->wb_want[ns_id], 1);
    pthread_mutex_lock(&t->wb_lock);
    pthread_cond_signal(&t->wb_cond);
    pthread_mutex_unlock(&t->wb_lock);
}

/* Queues the n writes of a batch taken from namespace ns_id (wire id wire)
 * and waits until every one finished; c->status of each says how. */
static void t_wb_write(cd_tier_t *t, uint32_t ns_id, uint64_t wire, size_t n)
{
    uint64_t token;

    pthread_mutex_lock(&t->wb_lock);
    t->wb_pending = (uint32_t)n;
    pthread_mutex_unlock(&t->wb_lock);
    token = cd_tier_token(t); /* before the writes: a removal after them changes it */
    for (size_t i = 0; i < n; i++) {
        cd_clean_t *c = &t->wb_items[i];
        uint8_t prefix[CD_TIER_PREFIX];
        ssd_key_t k = cd_tier_key(wire, &c->key.hash, cd_tier_ssd_kind[c->key.kind], c->key.layer);
        st_status_t st;

        cd_tier_prefix_put(prefix, c->has_parent ? &c->parent : NULL, c->row_bytes);
        c->token = token;
        t->wb_jobs[i].t = t;
        t->wb_jobs[i].c = c;
        /* A tenant at its ssd quota is not written ahead (its eviction
         * then finds no copy and its spill is dropped). */
        st = cd_store_tenant_ssd_check(t->store, ns_id, CD_TIER_PREFIX + c->len, NULL);
        /* Waits when the writer's queue is full: this thread may. */
        if (st == ST_OK) {
            st = ssd_spill_parts(t->ssd, &k, prefix, CD_TIER_PREFIX, c->data, c->len, 0, t_wb_done,
                                 &t->wb_jobs[i]);
        }
        if (st != ST_OK) {
            pthread_mutex_lock(&t->wb_lock);
            c->status = st;
            t->wb_pending--;
            pthread_mutex_unlock(&t->wb_lock);
        }
    }
    pthread_mutex_lock(&t->wb_lock);
    while (t->wb_pending > 0) {
        pthread_cond_wait(&t->wb_done_cond, &t->wb_lock);
    }
    pthread_mutex_unlock(&t->wb_lock);
}

/*
 * Writes batches of namespace ns_id's coldest objects until none is left to
 * write in its window. Returns 0, or -1 after a batch with failed writes
 * (the thread then pauses: a full map would fail the next one too).
 */
static int t_wb_clean(cd_tier_t *t, uint32_t ns_id)
{
    cd_store_t *store = t->store;
    uint64_t wire = atomic_load(&t->wire[ns_id]);
    /* Held blocks are not evictable: a batch is a small part of the window. */
    uint64_t max_bytes =
        t->wb_ahead / 4 + 1 < T_WB_MAX_BYTES ? t->wb_ahead / 4 + 1 : T_WB_MAX_BYTES;
    size_t n;

    if (wire == 0 || store == NULL) {
        return 0;
    }
    for (;;) {
        uint64_t bytes = 0, failed = 0, window = 0;

        if (cd_store_clean_take(store, ns_id, 1u << CD_KIND_KV | 1u << CD_KIND_IDX, t->wb_ahead,
                                max_bytes, t->wb_items, CD_TIER_WB_CAP, &n, &window) != ST_OK) {
            return 0;
        }
        if (n == 0) {
            atomic_store(&t->wb_window[ns_id], window);
            atomic_store(&t->wb_clean[ns_id], (int64_t)window);
            return 0;
        }
        t_wb_write(t, ns_id, wire, n);
        for (size_t i = 0; i < n; i++) {
            if (t->wb_items[i].status == ST_OK) {
                bytes += t->wb_items[i].len;
                atomic_fetch_add(&t->flow_spills[ns_id][t->wb_items[i].key.kind], 1);
            } else {
                failed++;
            }
        }
        cd_store_clean_finish(store, ns_id, t->wb_items, n);
        atomic_fetch_add(&t->wb_objects, n - failed);
        atomic_fetch_add(&t->wb_bytes, bytes);
        if (failed > 0) {
            atomic_fetch_add(&t->wb_failed, failed);
            lg_warn_ratelimited("ssd write-behind: %llu of %zu writes failed ns=%u; pausing",
                                (unsigned long long)failed, n, ns_id);
            return -1;
        }
        pthread_mutex_lock(&t->wb_lock);
        if (t->wb_stop) {
            pthread_mutex_unlock(&t->wb_lock);
            return 0;
        }
        pthread_mutex_unlock(&t->wb_lock);
    }
}

static void *t_wb_main(void *arg)
{
    cd_tier_t *t = arg;

    pthread_mutex_lock(&t->wb_lock);
    while (!t->wb_stop) {
        int any = 0, paused = 0;

        for (uint32_t id = 1; id <= CD_TIER_NS_MAX && !t->wb_stop; id++) {
            if (!atomic_exchange(&t->wb_want[id], 0)) {
                continue;
            }
            any = 1;
            pthread_mutex_unlock(&t->wb_lock);
            paused |= t_wb_clean(t, id) != 0;
            pthread_mutex_lock(&t->wb_lock);
        }
        if (paused) {
            /* Kicks wake the thread, but only the stop ends the pause. */
            struct timespec ts = cm_deadline_ms(T_WB_RETRY_MS);

            while (!t->wb_stop &&
                   pthread_cond_timedwait(&t->wb_cond, &t->wb_lock, &ts) != ETIMEDOUT) {
            }
        } else if (!any && !t->wb_stop) {
            pthread_cond_wait(&t->wb_cond, &t->wb_lock);
        }
    }
    pthread_mutex_unlock(&t->wb_lock);
    return NULL;
}

void cd_tier_wb_init(cd_tier_t *t)
{
    pthread_mutex_init(&t->wb_lock, NULL);
    pthread_cond_init(&t->wb_cond, NULL);
    pthread_cond_init(&t->wb_done_cond, NULL);
}

void cd_tier_wb_destroy(cd_tier_t *t)
{
    free(t->wb_items);
    free(t->wb_jobs);
    pthread_mutex_destroy(&t->wb_lock);
    pthread_cond_destroy(&t->wb_cond);
    pthread_cond_destroy(&t->wb_done_cond);
}

st_status_t cd_tier_wb_start(cd_tier_t *t)
{
    if (t->wb_ahead == 0) {
        return ST_OK;
    }
    t->wb_items = calloc(CD_TIER_WB_CAP, sizeof(*t->wb_items));
    t->wb_jobs = calloc(CD_TIER_WB_CAP, sizeof(*t->wb_jobs));
    if (t->wb_items == NULL || t->wb_jobs == NULL ||
        pthread_create(&t->wb_thread, NULL, t_wb_main, t) != 0) {
        lg_error("cannot start the SSD tier's write-behind thread");
        return ST_ERR_NOMEM;
    }
    t->wb_running = 1;
    return ST_OK;
}

void cd_tier_wb_stop(cd_tier_t *t)
{
    if (!atomic_load(&t->wb_running)) {
        return;
    }
    /* Its batch in flight finishes first: the writer still runs. */
    pthread_mutex_lock(&t->wb_lock);
    t->wb_stop = 1;
    pthread_cond_broadcast(&t->wb_cond);
    pthread_mutex_unlock(&t->wb_lock);
    pthread_join(t->wb_thread, NULL);
    t->wb_running = 0;
}
