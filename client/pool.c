/*
 * pool.c - the worker threads that run asynchronous batches, and handles.
 *
 * st_client_get/put queue one job per batch; a worker runs it (grouping the
 * ops by node and calling the nodes in parallel) and completes the handle.
 * The caller overlaps its own work with the batch and meets it with
 * st_handle_test / st_handle_wait / st_client_poll. A caller that waits
 * (without a deadline) for a batch no worker has taken yet runs it itself:
 * two thread hand-offs less for a caller that submits and waits at once.
 */
#include "clock.h"
#include "client_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <time.h>

void sc_jobs_serve(pthread_mutex_t *lock, pthread_cond_t *cond, sc_job_t **head, sc_job_t **tail,
                   const int *stop, void (*done)(sc_job_t *job, void *arg), void *arg)
{
    pthread_mutex_lock(lock);
    for (;;) {
        sc_job_t *job;

        while (*head == NULL && !*stop) {
            pthread_cond_wait(cond, lock);
        }
        if (*head == NULL) {
            break; /* stopping, and the queue is drained */
        }
        job = *head;
        *head = job->next;
        if (*head == NULL) {
            *tail = NULL;
        }
        pthread_mutex_unlock(lock);
        job->run(job);
        pthread_mutex_lock(lock);
        if (done != NULL) {
            done(job, arg);
        }
    }
    pthread_mutex_unlock(lock);
}

void sc_threads_stop(pthread_mutex_t *lock, pthread_cond_t *cond, int *stop, pthread_t *th, int *n)
{
    pthread_mutex_lock(lock);
    *stop = 1;
    pthread_cond_broadcast(cond);
    pthread_mutex_unlock(lock);
    for (int i = 0; i < *n; i++) {
        pthread_join(th[i], NULL);
    }
    *n = 0;
}

static void *sc_worker_main(void *arg)
{
    st_client_t *c = arg;

    sc_jobs_serve(&c->pool_lock, &c->pool_cond, &c->queue_head, &c->queue_tail, &c->stopping, NULL,
                  NULL);
    return NULL;
}

st_status_t sc_pool_start(st_client_t *c)
{
    pthread_mutex_init(&c->pool_lock, NULL);
    pthread_cond_init(&c->pool_cond, NULL);
    for (int i = 0; i < SC_WORKERS; i++) {
        if (pthread_create(&c->workers[i], NULL, sc_worker_main, c) != 0) {
            return ST_ERR_INTERNAL;
        }
        c->n_workers++;
    }
    return ST_OK;
}

void sc_pool_stop(st_client_t *c)
{
    if (c->n_workers == 0) {
        return;
    }
    sc_threads_stop(&c->pool_lock, &c->pool_cond, &c->stopping, c->workers, &c->n_workers);
    pthread_mutex_destroy(&c->pool_lock);
    pthread_cond_destroy(&c->pool_cond);
}

void sc_pool_submit(st_client_t *c, sc_job_t *job)
{
    job->next = NULL;
    pthread_mutex_lock(&c->pool_lock);
    if (c->queue_tail != NULL) {
        c->queue_tail->next = job;
    } else {
        c->queue_head = job;
    }
    c->queue_tail = job;
    pthread_cond_signal(&c->pool_cond);
    pthread_mutex_unlock(&c->pool_lock);
}

void sc_handle_complete(st_handle_t *h)
{
    /* Count it first: once done is set, the owner may free h. */
    __atomic_add_fetch(&h->client->completed, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&h->lock);
    h->done = 1;
    pthread_cond_broadcast(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

int st_handle_test(st_handle_t *h)
{
    int done;

    pthread_mutex_lock(&h->lock);
    done = h->done;
    pthread_mutex_unlock(&h->lock);
    return done;
}

/* Takes h's job off the queue if no worker has taken it yet; 1 if taken. */
static int sc_pool_take(st_client_t *c, st_handle_t *h)
{
    int taken = 0;

    pthread_mutex_lock(&c->pool_lock);
    for (sc_job_t **p = &c->queue_head, *prev = NULL; *p != NULL; prev = *p, p = &(*p)->next) {
        if (*p == &h->job) {
            *p = h->job.next;
            if (c->queue_tail == &h->job) {
                c->queue_tail = prev;
            }
            taken = 1;
            break;
        }
    }
    pthread_mutex_unlock(&c->pool_lock);
    return taken;
}

st_status_t st_handle_wait(st_handle_t *h, int timeout_ms)
{
    struct timespec ts;
    st_status_t status = ST_OK;

    if (timeout_ms < 0 && !st_handle_test(h) && sc_pool_take(h->client, h)) {
        h->job.run(&h->job); /* completes h */
    }

    ts = cm_deadline_ms(timeout_ms >= 0 ? (uint64_t)timeout_ms : 0); /* unused when < 0 */
    pthread_mutex_lock(&h->lock);
    while (!h->done) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&h->cond, &h->lock);
        } else if (pthread_cond_timedwait(&h->cond, &h->lock, &ts) == ETIMEDOUT) {
            status = h->done ? ST_OK : ST_ERR_TIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&h->lock);
    return status;
}

void st_handle_release(st_handle_t *h)
{
    if (h == NULL) {
        return;
    }
    st_handle_wait(h, -1);
    pthread_mutex_destroy(&h->lock);
    pthread_cond_destroy(&h->cond);
    free(h->written);
    free(h);
}

uint32_t st_handle_replicas_written(st_handle_t *h, size_t i)
{
    uint32_t w = 0;

    if (h == NULL || h->written == NULL || i >= h->n) {
        return 0;
    }
    pthread_mutex_lock(&h->lock);
    if (h->done) {
        w = h->written[i];
    }
    pthread_mutex_unlock(&h->lock);
    return w;
}

int st_client_poll(st_client_t *c)
{
    uint64_t done = __atomic_load_n(&c->completed, __ATOMIC_ACQUIRE);
    uint64_t seen = __atomic_exchange_n(&c->polled, done, __ATOMIC_ACQ_REL);

    return done > seen ? (int)(done - seen) : 0;
}
