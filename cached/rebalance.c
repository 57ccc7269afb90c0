/*
 * rebalance.c - the rebalancer's catalog (rebalance.h): which durable
 * objects this node holds, and the waits on its passes. The passes are in
 * rebalance_worker.c, the pushes of one chunk in rebalance_push.c.
 */
#include "rebalance_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "clock.h"
#include "log.h"

/* The catalog's key of an object: XXH3-128 of (ns, kind, layer, id). */
static st_hash_t cd_rb_key(uint64_t ns, uint32_t kind, uint32_t layer, const st_hash_t *id)
{
    uint8_t b[8 + 4 + 4 + ST_HASH_BYTES];
    XXH128_hash_t h;
    st_hash_t k;

    memcpy(b, &ns, 8);
    memcpy(b + 8, &kind, 4);
    memcpy(b + 12, &layer, 4);
    memcpy(b + 16, id->b, ST_HASH_BYTES);
    h = XXH3_128bits(b, sizeof(b));
    memcpy(k.b, &h.low64, 8);
    memcpy(k.b + 8, &h.high64, 8);
    return k;
}

uint64_t cd_rb_session_sum(const st_hash_t *id, const st_hash_t *head, uint64_t length,
                           uint64_t version)
{
    uint8_t b[2 * ST_HASH_BYTES + 16];

    memcpy(b, id->b, ST_HASH_BYTES);
    memcpy(b + ST_HASH_BYTES, head->b, ST_HASH_BYTES);
    for (int i = 0; i < 8; i++) {
        b[2 * ST_HASH_BYTES + i] = (uint8_t)(length >> (8 * i));
        b[2 * ST_HASH_BYTES + 8 + i] = (uint8_t)(version >> (8 * i));
    }
    return XXH3_64bits(b, sizeof(b));
}

st_status_t cd_rb_note(cd_rb_t *rb, uint64_t wire_ns, uint32_t kind, const st_hash_t *id,
                       uint32_t layer, const st_hash_t *parent, const st_hash_t *placement)
{
    st_hash_t k;
    cd_rb_obj_t *o;
    st_status_t status = ST_OK;

    if (rb == NULL) {
        return ST_OK;
    }
    k = cd_rb_key(wire_ns, kind, layer, id);
    pthread_mutex_lock(&rb->lock);
    o = cd_htab_find(&rb->tab, &k, 0);
    if (o == NULL) {
        if (rb->n == rb->cap) {
            size_t cap = rb->cap ? 2 * rb->cap : 1024;
            cd_rb_obj_t **v = realloc(rb->objs, sizeof(*v) * cap);

            if (v == NULL) {
                status = ST_ERR_NOMEM;
                goto out;
            }
            rb->objs = v;
            rb->cap = cap;
        }
        if ((o = calloc(1, sizeof(*o))) == NULL ||
            (status = cd_htab_reserve(&rb->tab, 1)) != ST_OK) {
            free(o);
            status = ST_ERR_NOMEM;
            goto out;
        }
        (void)cd_htab_insert(&rb->tab, &k, 0, o);
        o->idx = rb->n;
        rb->objs[rb->n++] = o;
    }
    o->ns = wire_ns;
    o->kind = kind;
    o->layer = layer;
    o->id = *id;
    o->has_parent = parent != NULL;
    if (parent != NULL) {
        o->parent = *parent;
    }
    o->placement = placement != NULL ? *placement : *id;
    o->done_at = 0; /* written again: every pass looks at it */
out:
    pthread_mutex_unlock(&rb->lock);
    if (status != ST_OK) {
        lg_warn_ratelimited("rebalancer: no memory to note a durable object ns=%llu kind=%u: it "
                            "will not be moved when members change",
                            (unsigned long long)wire_ns, kind);
    }
    return status;
}

void cd_rb_forget(cd_rb_t *rb, uint64_t wire_ns, uint32_t kind, const st_hash_t *id, uint32_t layer)
{
    st_hash_t k;
    cd_rb_obj_t *o;

    if (rb == NULL) {
        return;
    }
    k = cd_rb_key(wire_ns, kind, layer, id);
    pthread_mutex_lock(&rb->lock);
    o = cd_htab_remove(&rb->tab, &k, 0);
    if (o != NULL) {
        rb->objs[o->idx] = rb->objs[--rb->n];
        rb->objs[o->idx]->idx = o->idx;
        free(o);
    }
    pthread_mutex_unlock(&rb->lock);
}

void cd_rb_done(cd_rb_t *rb, const cd_rb_obj_t *o, uint64_t epoch)
{
    st_hash_t k = cd_rb_key(o->ns, o->kind, o->layer, &o->id);
    cd_rb_obj_t *c;

    pthread_mutex_lock(&rb->lock);
    if ((c = cd_htab_find(&rb->tab, &k, 0)) != NULL) {
        c->done_at = epoch;
    }
    pthread_mutex_unlock(&rb->lock);
}

void cd_rb_tried(cd_rb_t *rb, const cd_rb_obj_t *o, uint64_t epoch)
{
    st_hash_t k = cd_rb_key(o->ns, o->kind, o->layer, &o->id);
    cd_rb_obj_t *c;

    pthread_mutex_lock(&rb->lock);
    if ((c = cd_htab_find(&rb->tab, &k, 0)) != NULL) {
        c->tries = c->tried_at == epoch ? c->tries + 1 : 1;
        c->tried_at = epoch;
    }
    pthread_mutex_unlock(&rb->lock);
}

void cd_rb_stats(cd_rb_t *rb, cd_rb_stats_t *out)
{
    memset(out, 0, sizeof(*out));
    if (rb == NULL) {
        return;
    }
    pthread_mutex_lock(&rb->lock);
    *out = rb->st;
    out->catalog = rb->n;
    pthread_mutex_unlock(&rb->lock);
}

void cd_rb_wake(cd_rb_t *rb)
{
    if (rb == NULL) {
        return;
    }
    pthread_mutex_lock(&rb->lock);
    rb->woken = 1;
    pthread_cond_broadcast(&rb->cond);
    pthread_mutex_unlock(&rb->lock);
}

st_status_t cd_rb_wait(cd_rb_t *rb, uint64_t epoch, uint64_t timeout_ms)
{
    struct timespec until = cm_deadline_ms(timeout_ms);
    st_status_t status = ST_OK;

    if (rb == NULL) {
        return ST_OK;
    }
    pthread_mutex_lock(&rb->lock);
    while (!(rb->st.epoch >= epoch && rb->st.pending == 0 && !rb->woken)) {
        if (pthread_cond_timedwait(&rb->cond, &rb->lock, &until) == ETIMEDOUT) {
            status = ST_ERR_TIMEOUT;
            break;
        }
    }
    pthread_mutex_unlock(&rb->lock);
    return status;
}

static int cd_rb_obj_cmp(const void *a, const void *b)
{
    const cd_rb_obj_t *x = a, *y = b;

    if (x->ns != y->ns) {
        return x->ns < y->ns ? -1 : 1;
    }
    return (x->kind > y->kind) - (x->kind < y->kind);
}

/* Copies the catalog out, sorted by namespace then kind. NULL: out of memory. */
cd_rb_obj_t *cd_rb_snapshot(cd_rb_t *rb, uint64_t epoch, size_t *n_p)
{
    cd_rb_obj_t *snap;
    size_t n = 0;

    pthread_mutex_lock(&rb->lock);
    snap = malloc(sizeof(*snap) * (rb->n + 1));
    for (size_t i = 0; snap != NULL && i < rb->n; i++) {
        if (rb->objs[i]->done_at != epoch) {
            snap[n++] = *rb->objs[i];
        }
    }
    *n_p = n;
    pthread_mutex_unlock(&rb->lock);
    if (snap != NULL) {
        qsort(snap, *n_p, sizeof(*snap), cd_rb_obj_cmp);
    }
    return snap;
}

void cd_rb_catalog_free(cd_rb_t *rb)
{
    for (size_t i = 0; i < rb->n; i++) {
        free(rb->objs[i]);
    }
    free(rb->objs);
    rb->objs = NULL;
    rb->n = rb->cap = 0;
    cd_htab_destroy(&rb->tab);
}
