/*
 * rebalance_push.c - the pushes of one chunk of the catalog (rebalance.h):
 * each object's bytes or record read once, one Replicate call per target
 * member and mode (copies, or check_only questions), and the local copies
 * dropped once every new replica acknowledged them.
 */
#include "rebalance_internal.h"

#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "clock.h"
#include "fault.h"
#include "log.h"
#include "srpc.h"
#include "strata.pb-c.h"
#include "tier.h"

/* One object of a chunk with what the pass does with it. */
typedef struct cd_rb_item {
    const cd_rb_obj_t *o;
    cd_rb_plan_t plan;
    int gone;          /* no longer held here: forgotten */
    void *data;        /* KDA: its bytes (pushes only) */
    uint64_t len, sum; /* KDA: length and checksum */
    cd_session_t rec;  /* SESSION: the record */
    size_t acked;      /* targets that acknowledged */
    uint32_t missing;  /* bit k: target k answered a check without a copy */
} cd_rb_item_t;

/* Reads a KDA object's bytes, promoting it from the SSD tier if it is only there. */
static st_status_t cd_rb_read_kda(cd_daemon_t *d, uint32_t local, const cd_key_t *key,
                                  cd_rb_item_t *it)
{
    cd_err_t err = {""};
    st_status_t status = ST_ERR_NOT_FOUND;

    for (int round = 0; round < 3; round++) {
        uint64_t len = 0;

        status = cd_store_get(d->store, local, key, NULL, 0, &len, NULL, &err);
        if (status == ST_ERR_INVALID) {
            cd_location_t where;

            free(it->data);
            if ((it->data = malloc(len ? len : 1)) == NULL) {
                return ST_ERR_NOMEM;
            }
            status = cd_store_get(d->store, local, key, it->data, len, &it->len, &where, &err);
            if (status == ST_OK) {
                it->sum = where.checksum;
                return ST_OK;
            }
        }
        if (status != ST_ERR_NOT_FOUND || d->tier == NULL ||
            cd_tier_promote(d->tier, local, &key->hash) == 0) {
            break;
        }
    }
    return status;
}

/* Reads a KDA item's bytes for a push (on failure it stays pending). */
static void cd_rb_load_bytes(cd_daemon_t *d, const cd_ns_entry_t *e, cd_rb_item_t *it)
{
    cd_key_t key = {it->o->id, CD_KIND_KDA, it->o->layer};
    st_status_t status = cd_rb_read_kda(d, e->local_id, &key, it);

    if (status == ST_ERR_NOT_FOUND) {
        it->gone = 1;
    } else if (status != ST_OK) {
        it->acked = SIZE_MAX;
    }
}

/* Reads what the pass needs of each item: a push needs the bytes or the record. */
static void cd_rb_load(cd_daemon_t *d, const cd_ns_entry_t *e, cd_rb_item_t *it)
{
    int push = 0;
    st_status_t status;

    for (size_t t = 0; t < it->plan.n_target; t++) {
        push |= !it->plan.check[t];
    }
    if (it->o->kind == CD_KIND_SESSION) {
        status = cd_store_session_get(d->store, e->local_id, &it->o->id, &it->rec);
    } else {
        cd_key_t key = {it->o->id, CD_KIND_KDA, it->o->layer};

        status = push ? cd_rb_read_kda(d, e->local_id, &key, it) : ST_OK;
    }
    if (status == ST_ERR_NOT_FOUND) {
        it->gone = 1;
    } else if (status != ST_OK) {
        it->plan.n_target = 0; /* not this pass: it stays pending */
        it->acked = SIZE_MAX;
    }
}

/* Store (monotonic) ms to wall-clock ms. */
static uint64_t cd_rb_unix_ms(cd_daemon_t *d, uint64_t store_ms)
{
    uint64_t now_unix = cm_real_ms(), now_store = cd_store_now(d->store);

    return now_unix - (now_store > store_ms ? now_store - store_ms : 0);
}

/* The request's entry of item it (KDA: object and link; SESSION: record and sum). */
static void cd_rb_fill(cd_daemon_t *d, const cd_rb_item_t *it, int check,
                       Strata__V1__ReplicateRequest *req, Strata__V1__InlineObject *obj,
                       Strata__V1__ObjectKey *key, Strata__V1__BlockLink *link,
                       Strata__V1__SessionInfo *si)
{
    const cd_rb_obj_t *o = it->o;

    if (o->kind == CD_KIND_SESSION) {
        strata__v1__session_info__init(si);
        si->session_id.data = (uint8_t *)o->id.b;
        si->session_id.len = ST_HASH_BYTES;
        si->head_hash.data = (uint8_t *)it->rec.head.b;
        si->head_hash.len = ST_HASH_BYTES;
        si->length = it->rec.length;
        si->version = it->rec.version;
        si->created_unix_ms = cd_rb_unix_ms(d, it->rec.created_ms);
        si->updated_unix_ms = cd_rb_unix_ms(d, it->rec.updated_ms);
        si->ttl_ms = (uint32_t)(it->rec.ttl_ms > UINT32_MAX ? UINT32_MAX : it->rec.ttl_ms);
        req->session_checksum[req->n_sessions] =
            cd_rb_session_sum(&o->id, &it->rec.head, it->rec.length, it->rec.version);
        req->sessions[req->n_sessions++] = si;
        return;
    }
    strata__v1__inline_object__init(obj);
    strata__v1__object_key__init(key);
    strata__v1__block_link__init(link);
    key->block_hash.data = (uint8_t *)o->id.b;
    key->block_hash.len = ST_HASH_BYTES;
    key->kind = STRATA__V1__OBJECT_KIND__KDA;
    key->layer = o->layer;
    obj->key = key;
    if (!check) {
        obj->data.data = it->data;
        obj->data.len = it->len;
        obj->checksum = it->sum;
    }
    link->hash = key->block_hash;
    if (o->has_parent) {
        link->parent_hash.data = (uint8_t *)o->parent.b;
        link->parent_hash.len = ST_HASH_BYTES;
    }
    link->placement.data = (uint8_t *)o->placement.b;
    link->placement.len = ST_HASH_BYTES;
    req->links[req->n_links++] = link;
    req->objects[req->n_objects++] = obj;
}

/* The entries for one call: every item whose plan names member t in mode check. */
typedef struct cd_rb_call {
    Strata__V1__ReplicateRequest req;
    Strata__V1__InlineObject *objp[CD_RB_CHUNK], obj[CD_RB_CHUNK];
    Strata__V1__ObjectKey key[CD_RB_CHUNK];
    Strata__V1__BlockLink *linkp[CD_RB_CHUNK], link[CD_RB_CHUNK];
    Strata__V1__SessionInfo *sip[CD_RB_CHUNK], si[CD_RB_CHUNK];
    uint64_t sums[CD_RB_CHUNK];
    size_t which[CD_RB_CHUNK]; /* item index of entry k */
    size_t n;
    uint64_t bytes;
} cd_rb_call_t;

/* Sends one Replicate to member t; counts each acknowledged entry. */
static void cd_rb_send(cd_rb_run_t *run, cd_rb_call_t *c, uint32_t t, int check,
                       cd_rb_item_t *items)
{
    cd_rb_t *rb = run->rb;
    const char *addr = run->cur->members[t].grpc;
    srpc_channel_t *ch = cd_daemon_peer_ch(rb->d, addr);
    Strata__V1__ReplicateResponse *resp = NULL;
    srpc_error_t err = {0};
    st_status_t status = ST_ERR_UNAVAILABLE;
    size_t ok = 0;

    if (ch != NULL) {
        status = srpc_call(ch, &srpc_cache_methods[SRPC_CACHE_REPLICATE], &c->req.base,
                           CD_RB_CALL_MS, (ProtobufCMessage **)&resp, &err);
    }
    for (size_t k = 0; k < c->n; k++) {
        const Strata__V1__KeyStatus *st = NULL;
        size_t n_st = 0;

        if (status == ST_OK) {
            st =
                items[c->which[k]].o->kind == CD_KIND_SESSION ? resp->session_status : resp->status;
            n_st = items[c->which[k]].o->kind == CD_KIND_SESSION ? resp->n_session_status
                                                                 : resp->n_status;
        }
        if (st != NULL && k < n_st && st[k] == STRATA__V1__KEY_STATUS__KEY_OK) {
            items[c->which[k]].acked++;
            ok++;
        } else if (check && st != NULL && k < n_st) {
            cd_rb_item_t *it = &items[c->which[k]];

            for (size_t x = 0; x < it->plan.n_target; x++) {
                if (it->plan.target[x] == t && it->plan.check[x] == 1) {
                    it->missing |= 1u << x;
                }
            }
        }
    }
    pthread_mutex_lock(&rb->lock);
    if (!check) {
        rb->st.objects += ok;
        rb->st.bytes += ok == c->n ? c->bytes : 0;
    }
    rb->st.failed += c->n - ok;
    pthread_mutex_unlock(&rb->lock);
    if (ok != c->n) {
        lg_warn_ratelimited("rebalance %s to %s: %zu of %zu not acknowledged (%s%s%s); retrying",
                            check ? "check" : "push", addr, c->n - ok, c->n, st_strerror(status),
                            err.message[0] ? ": " : "", err.message);
    }
    if (resp != NULL) {
        protobuf_c_message_free_unpacked(&resp->base, NULL);
    }
    if (!check) {
        cd_rb_pace(rb, run->t0_ns, atomic_fetch_add(&run->bytes, c->bytes) + c->bytes);
    }
}

/* Builds and sends the call of member t in mode (a plan's check value: 0
 * push, 1 check, 2 push after a check) over the chunk's items. */
static void cd_rb_call_member(cd_rb_run_t *run, const cd_ns_info_t *info, cd_rb_item_t *items,
                              size_t n, uint32_t t, int mode, cd_rb_call_t *c)
{
    int check = mode == 1;

    memset(c, 0, sizeof(*c));
    strata__v1__replicate_request__init(&c->req);
    c->req.tenant = (char *)info->tenant;
    c->req.model = (char *)info->model;
    c->req.block_tokens = info->block_tokens;
    c->req.check_only = check != 0;
    c->req.objects = c->objp;
    c->req.links = c->linkp;
    c->req.sessions = c->sip;
    c->req.session_checksum = c->sums;
    c->req.n_session_checksum = 0;
    for (size_t i = 0; i < n; i++) {
        int skip = items[i].gone || items[i].acked == SIZE_MAX; /* gone, or unreadable now */

        for (size_t k = 0; !skip && k < items[i].plan.n_target; k++) {
            if (items[i].plan.target[k] == t && items[i].plan.check[k] == (uint8_t)mode) {
                cd_rb_fill(run->rb->d, &items[i], check, &c->req, &c->obj[c->n], &c->key[c->n],
                           &c->link[c->n], &c->si[c->n]);
                c->bytes += check ? 0 : items[i].len;
                c->which[c->n++] = i;
            }
        }
    }
    c->req.n_session_checksum = c->req.n_sessions;
    if (c->n > 0) {
        cd_rb_send(run, c, t, check, items);
    }
}

/* Drops this node's copy of it (it is not in its new replica set, and every
 * new replica acknowledged it). Returns 1 when it was dropped. */
static int cd_rb_drop(cd_rb_t *rb, const cd_ns_entry_t *e, const cd_rb_item_t *it)
{
    cd_daemon_t *d = rb->d;
    cd_err_t err = {""};
    st_status_t status;

    if (it->o->kind == CD_KIND_SESSION) {
        status = cd_store_session_close(d->store, e->local_id, &it->o->id);
        if (d->tier != NULL && (status == ST_OK || status == ST_ERR_NOT_FOUND)) {
            cd_tier_session_delete(d->tier, e->wire_id, &it->o->id);
        }
    } else {
        cd_key_t key = {it->o->id, CD_KIND_KDA, it->o->layer};

        status = cd_store_delete(d->store, e->local_id, &key, &err);
        if (d->tier != NULL && (status == ST_OK || status == ST_ERR_NOT_FOUND)) {
            cd_tier_forget(d->tier, e->wire_id, &key);
        }
    }
    if (status != ST_OK && status != ST_ERR_NOT_FOUND) {
        return 0; /* leased or pinned: dropped on a later pass */
    }
    pthread_mutex_lock(&rb->lock);
    rb->st.dropped++;
    pthread_mutex_unlock(&rb->lock);
    return 1;
}

/* The address of this node in view v, or its listen address when it is not a member. */
static const char *cd_rb_self(const cd_rb_t *rb, const cd_view_t *v)
{
    return v != NULL && v->self >= 0 ? v->members[v->self].grpc : rb->d->cfg.listen;
}

/* 1 when addr is one of set[0..n) of view v. */
static int cd_rb_in(const cd_view_t *v, const uint32_t *set, size_t n, const char *addr)
{
    for (size_t i = 0; i < n; i++) {
        if (strcmp(v->members[set[i]].grpc, addr) == 0) {
            return 1;
        }
    }
    return 0;
}

void cd_rb_plan(cd_rb_t *rb, const cd_view_t *old, const cd_view_t *cur, const cd_rb_obj_t *o,
                cd_rb_plan_t *p)
{
    uint32_t oset[CD_RB_MAX_R], nset[CD_RB_MAX_R];
    size_t r = rb->replicas, no = 0, nn;
    const char *self = cd_rb_self(rb, cur), *pusher = NULL;
    int is_pusher;

    memset(p, 0, sizeof(*p));
    if (cur->n == 0) {
        return; /* a node alone: nowhere to move to */
    }
    nn = ring_place(&cur->ring, &o->placement, nset, r);
    if (old != NULL && old->n > 0) {
        no = ring_place(&old->ring, &o->placement, oset, r);
    }
    p->in_new = cd_rb_in(cur, nset, nn, self);
    /* The pusher: this node when it left the ring; else the first old
     * replica that is still a member; else (no old ring) this node. */
    if (cur->self < 0) {
        pusher = self;
    }
    for (size_t i = 0; pusher == NULL && i < no; i++) {
        if (cd_view_find(cur, old->members[oset[i]].grpc) >= 0) {
            pusher = old->members[oset[i]].grpc;
        }
    }
    is_pusher = pusher == NULL || strcmp(pusher, self) == 0;
    p->is_pusher = is_pusher;
    for (size_t i = 0; i < nn; i++) {
        const char *t = cur->members[nset[i]].grpc;
        int was_old = old != NULL && no > 0 && cd_rb_in(old, oset, no, t);

        if (strcmp(t, self) == 0) {
            continue;
        }
        if (is_pusher && !was_old) {
            p->target[p->n_target] = nset[i];
            p->check[p->n_target++] = 0;
        } else if (!p->in_new) {
            /* Leaving the set: every new replica must say it holds a copy
             * (a pusher's that does not gets one: cd_rb_push_chunk). */
            p->target[p->n_target] = nset[i];
            p->check[p->n_target++] = 1;
        }
    }
}

/* Sleeps, if the pushes ran ahead of the rate, until they are back on it. */
void cd_rb_pace(cd_rb_t *rb, uint64_t t0_ns, uint64_t bytes)
{
    uint64_t due_ns, now = cm_mono_ns();

    if (rb->rate == 0) {
        return;
    }
    due_ns = t0_ns + (uint64_t)((double)bytes * 1e9 / (double)rb->rate);
    if (due_ns > now) {
        struct timespec ts = {(time_t)((due_ns - now) / 1000000000ull),
                              (long)((due_ns - now) % 1000000000ull)};

        nanosleep(&ts, NULL);
    }
}

/* Checks that found no copy (a replica that missed the write, or the push
 * not there yet) become pushes: returns 1 when there are any. */
static int cd_rb_repush(cd_daemon_t *d, const cd_ns_entry_t *e, cd_rb_item_t *items, size_t n,
                        uint64_t epoch)
{
    int any = 0;

    for (size_t i = 0; i < n; i++) {
        cd_rb_item_t *it = &items[i];

        /* The pusher at once; another holder once an earlier attempt of this
         * pass failed (the pusher may lack the object or the newest record,
         * or be gone): duplicates are harmless, receivers keep the newest. */
        if (it->missing == 0 || it->gone ||
            !(it->plan.is_pusher || (it->o->tried_at == epoch && it->o->tries > 0))) {
            continue;
        }
        for (size_t x = 0; x < it->plan.n_target; x++) {
            if (it->missing & (1u << x)) {
                it->plan.check[x] = 2;
            }
        }
        if (it->o->kind == CD_KIND_KDA && it->data == NULL) {
            cd_rb_load_bytes(d, e, it);
        }
        any = 1;
    }
    return any;
}

uint64_t cd_rb_push_chunk(cd_rb_run_t *run, const cd_rb_obj_t *objs, size_t n)
{
    cd_rb_t *rb = run->rb;
    cd_daemon_t *d = rb->d;
    cd_ns_entry_t *e = cd_daemon_ns_find(d, objs[0].ns);
    cd_rb_item_t *items = calloc(n, sizeof(*items));
    cd_rb_call_t *call = malloc(sizeof(*call));
    cd_ns_info_t info;
    uint64_t pending = 0;

    if (cd_fault_armed("rebalance-stall")) {
        free(items), free(call);
        return n; /* planted: nothing moves (fault.h) */
    }
    if (items == NULL || call == NULL || e == NULL ||
        cd_store_ns_info(d->store, e->local_id, &info) != ST_OK) {
        free(items), free(call);
        return e == NULL ? 0 : n; /* no namespace: nothing of it is held any more */
    }
    for (size_t i = 0; i < n; i++) {
        items[i].o = &objs[i];
        cd_rb_plan(rb, run->old, run->cur, &objs[i], &items[i].plan);
        if (items[i].plan.n_target > 0) {
            cd_rb_load(d, e, &items[i]);
        }
    }
    for (uint32_t t = 0; t < run->cur->n && !rb->stop; t++) {
        cd_rb_call_member(run, &info, items, n, t, 0, call);
        cd_rb_call_member(run, &info, items, n, t, 1, call);
    }
    if (cd_rb_repush(d, e, items, n, run->cur->epoch)) {
        for (uint32_t t = 0; t < run->cur->n && !rb->stop; t++) {
            cd_rb_call_member(run, &info, items, n, t, 2, call);
        }
    }
    for (size_t i = 0; i < n; i++) {
        cd_rb_item_t *it = &items[i];

        if (it->gone) {
            cd_rb_forget(rb, it->o->ns, it->o->kind, &it->o->id, it->o->layer);
        } else if (it->acked != it->plan.n_target) {
            pending++;
            cd_rb_tried(rb, it->o, run->cur->epoch);
        } else if (!it->plan.in_new && it->plan.n_target > 0) {
            if (cd_rb_drop(rb, e, it)) {
                cd_rb_forget(rb, it->o->ns, it->o->kind, &it->o->id, it->o->layer);
            } else {
                pending++;
            }
        } else {
            cd_rb_done(rb, it->o, run->cur->epoch); /* a retry of this pass skips it */
        }
        free(it->data);
    }
    free(items), free(call);
    return pending;
}
