/*
 * rebalance_worker.c - the rebalancer's worker (rebalance.h): a pass over
 * the catalog whenever the ring changes, retried until nothing is pending.
 */
#include "rebalance_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"

/* The chunks of a pass, taken in order by its pushers. */
typedef struct cd_rb_feed {
    cd_rb_run_t run;
    cd_rb_obj_t *snap;
    size_t n;             /* objects in snap */
    pthread_mutex_t lock; /* guards the three below (taken before rb->lock) */
    size_t next;          /* the first object not yet taken */
    size_t finished;      /* objects of the chunks finished */
    uint64_t pending;     /* objects of the finished chunks still pending */
} cd_rb_feed_t;

/* Takes the next chunk: objects [*i_p, *i_p + *n_p) of one namespace and one
 * kind, at most CD_RB_CHUNK. Returns 0 when none is left. */
static int cd_rb_take(cd_rb_feed_t *f, size_t *i_p, size_t *n_p)
{
    size_t i, j;

    pthread_mutex_lock(&f->lock);
    i = j = f->next;
    if (i < f->n) {
        for (j = i + 1; j < f->n && j - i < CD_RB_CHUNK && f->snap[j].ns == f->snap[i].ns &&
                        f->snap[j].kind == f->snap[i].kind;
             j++) {
        }
    }
    f->next = j;
    pthread_mutex_unlock(&f->lock);
    *i_p = i;
    *n_p = j - i;
    return j > i;
}

/* One pusher of a pass: chunks taken and pushed until none is left (or the
 * rebalancer stops); the pass's pending count kept current. */
static void *cd_rb_pusher(void *arg)
{
    cd_rb_feed_t *f = arg;
    cd_rb_t *rb = f->run.rb;
    size_t i, n;

    while (!rb->stop && cd_rb_take(f, &i, &n)) {
        uint64_t pending = cd_rb_push_chunk(&f->run, &f->snap[i], n);

        pthread_mutex_lock(&f->lock);
        f->pending += pending;
        f->finished += n;
        pthread_mutex_lock(&rb->lock);
        rb->st.pending = f->pending + (f->n - f->finished);
        pthread_mutex_unlock(&rb->lock);
        pthread_mutex_unlock(&f->lock);
    }
    return NULL;
}

/*
 * One pass from ring old to ring cur over a snapshot of the catalog: each
 * namespace's objects in chunks, rb->inflight chunks pushed at once (this
 * thread and rb->inflight - 1 helpers, each with its own Replicate calls in
 * flight: rebalance_push.c), so that the reads, the calls and the
 * receivers' commits of different chunks overlap. Returns how many objects
 * are still pending (a failed push or check, or not reached).
 */
static uint64_t cd_rb_pass(cd_rb_t *rb, const cd_view_t *old, const cd_view_t *cur)
{
    cd_rb_feed_t f = {.run = {.rb = rb, .old = old, .cur = cur, .t0_ns = cm_mono_ns()}};
    pthread_t helper[CD_RB_INFLIGHT];
    size_t helpers = 0;
    uint64_t pending;

    if ((f.snap = cd_rb_snapshot(rb, cur->epoch, &f.n)) == NULL) {
        lg_warn_ratelimited("rebalancer: no memory for a pass; retrying");
        return 1;
    }
    pthread_mutex_init(&f.lock, NULL);
    pthread_mutex_lock(&rb->lock);
    rb->st.pending = f.n;
    pthread_mutex_unlock(&rb->lock);
    /* A helper that cannot start leaves its share to the others. */
    while (helpers + 1 < rb->inflight && (helpers + 1) * CD_RB_CHUNK < f.n &&
           pthread_create(&helper[helpers], NULL, cd_rb_pusher, &f) == 0) {
        helpers++;
    }
    (void)cd_rb_pusher(&f);
    for (size_t k = 0; k < helpers; k++) {
        pthread_join(helper[k], NULL);
    }
    pending = f.pending + (f.n - f.finished);
    pthread_mutex_destroy(&f.lock);
    free(f.snap);
    return pending;
}

static void *cd_rb_main(void *arg)
{
    cd_rb_t *rb = arg;
    cd_daemon_t *d = rb->d;

    pthread_mutex_lock(&rb->lock);
    while (!rb->stop) {
        cd_view_t *cur;
        uint64_t pending, t0;

        if (!rb->woken) {
            struct timespec until = cm_deadline_ms(rb->retry_ms);

            (void)pthread_cond_timedwait(&rb->cond, &rb->lock, &until);
            if (!rb->woken && rb->st.pending == 0) {
                continue;
            }
        }
        rb->woken = 0;
        pthread_mutex_unlock(&rb->lock);
        cur = cd_view_get(d);
        t0 = cm_mono_ms();
        pending = cur != rb->base ? cd_rb_pass(rb, rb->base, cur) : 0;
        pthread_mutex_lock(&rb->lock);
        rb->st.pending = pending;
        if (pending == 0) {
            cd_view_t *done = rb->base;

            if (cur != rb->base) {
                rb->st.passes++;
                rb->st.last_pass_ms = cm_mono_ms() - t0;
                lg_info("rebalance pass done epoch=%llu objects=%llu ms=%llu",
                        (unsigned long long)cur->epoch, (unsigned long long)rb->st.objects,
                        (unsigned long long)rb->st.last_pass_ms);
            }
            rb->base = cur;
            rb->st.epoch = cur->epoch;
            cur = done;
        }
        pthread_cond_broadcast(&rb->cond);
        pthread_mutex_unlock(&rb->lock);
        cd_view_put(d, cur); /* the pass's hold, or the old ring once it is done */
        pthread_mutex_lock(&rb->lock);
    }
    pthread_mutex_unlock(&rb->lock);
    return NULL;
}

st_status_t cd_rb_create(cd_daemon_t *d, uint64_t rate, cd_rb_t **rb_p)
{
    cd_rb_t *rb = calloc(1, sizeof(*rb));

    if (rb == NULL) {
        return ST_ERR_NOMEM;
    }
    rb->d = d;
    rb->rate = rate;
    rb->retry_ms = CD_RB_RETRY_MS;
    rb->replicas = d->cfg.replicas > CD_RB_MAX_R ? CD_RB_MAX_R : (size_t)d->cfg.replicas;
    /* A receiver serves each call on one of its gRPC threads until its SSD
     * commit: half of them (the members share a config) keeps the other half
     * free for lookups while one member pushes to it. */
    rb->inflight = d->cfg.threads / 2 < 1 ? 1 : (size_t)d->cfg.threads / 2;
    if (rb->inflight > CD_RB_INFLIGHT) {
        rb->inflight = CD_RB_INFLIGHT;
    }
    cd_htab_init(&rb->tab, NULL);
    pthread_mutex_init(&rb->lock, NULL);
    pthread_cond_init(&rb->cond, NULL);
    rb->base = cd_view_get(d);
    rb->st.epoch = rb->base != NULL ? rb->base->epoch : 0;
    if (pthread_create(&rb->thr, NULL, cd_rb_main, rb) != 0) {
        lg_error("cannot start the rebalancer thread: %s", strerror(errno));
        cd_rb_destroy(rb);
        return ST_ERR_INTERNAL;
    }
    rb->running = 1;
    *rb_p = rb;
    return ST_OK;
}

void cd_rb_destroy(cd_rb_t *rb)
{
    if (rb == NULL) {
        return;
    }
    if (rb->running) {
        pthread_mutex_lock(&rb->lock);
        rb->stop = 1;
        pthread_cond_broadcast(&rb->cond);
        pthread_mutex_unlock(&rb->lock);
        pthread_join(rb->thr, NULL);
    }
    cd_view_put(rb->d, rb->base);
    cd_rb_catalog_free(rb);
    pthread_mutex_destroy(&rb->lock);
    pthread_cond_destroy(&rb->cond);
    free(rb);
}
