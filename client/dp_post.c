/*
 * dp_post.c - posting a get batch's transfers (dp_internal.h): one get per
 * object or per run of rows, direct copies where the region is mapped here
 * (tp_get_now), shared with the copy threads, and objects hashed
 * while they are copied where the node's committed bytes are not read-only.
 */
#include "dp_internal.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack (sc_dp_copy_hashed) */
#include "rowsum.h"
#include "xxh.h"

/* Posts one get of o's into dst (counted in o->pending; o failed if it
 * cannot be posted). dp->lock held. */
static st_status_t sc_dp_get_one(sc_dp_node_t *nd, sc_dp_op_t *o, void *dst, size_t len,
                                 tp_mem_t *mem, uint64_t raddr, tp_rkey_t *rkey)
{
    st_status_t st;

    atomic_fetch_add(o->pending, 1);
    st = tp_get(nd->ep, dst, len, mem, raddr, rkey, sc_dp_done, o);
    if (st != ST_OK) {
        atomic_fetch_sub(o->pending, 1);
        o->failed = 1;
    }
    return st;
}

st_status_t sc_dp_get_fits(const st_get_op_t *op, uint64_t len)
{
    if (op->n_rows == 0) {
        return len > op->dst_len ? ST_ERR_INVALID : ST_OK;
    }
    if ((size_t)op->n_rows * op->row_bytes > op->dst_len) {
        return ST_ERR_INVALID;
    }
    for (uint32_t x = 0; x < op->n_rows; x++) {
        if (((uint64_t)op->rows[x] + 1) * op->row_bytes > len) {
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

void sc_dp_post_get(sc_dp_t *dp, sc_dp_node_t *nd, st_get_op_t *op, sc_dp_op_t *o,
                    const sc_dp_region_t *reg, uint64_t off, uint64_t len)
{
    size_t nx = op->n_rows ? op->n_rows : 1, xlen = op->n_rows ? op->row_bytes : len;
    tp_mem_t *mem;

    pthread_mutex_lock(&dp->lock);
    mem =
        sc_dp_local(dp, o, op->dst, op->n_rows ? (size_t)op->n_rows * op->row_bytes : (size_t)len);
    for (size_t x = 0; mem != NULL && x < nx; x++) {
        uint64_t src = reg->base + off + (op->n_rows ? (uint64_t)op->rows[x] * op->row_bytes : 0);

        if (sc_dp_get_one(nd, o, (uint8_t *)op->dst + x * xlen, xlen, mem, src, reg->rkey) !=
            ST_OK) {
            break;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    o->posted = mem != NULL;
    op->length = op->n_rows ? (size_t)op->n_rows * op->row_bytes : (size_t)len;
}

/*
 * Posts the rows of op from the object at off in reg: one get per run of
 * consecutive row indices (a run is contiguous at both ends, as its rows
 * land one after another in dst). Node lock held.
 */
static void sc_dp_post_rows(sc_dp_t *dp, sc_dp_node_t *nd, st_get_op_t *op, sc_dp_op_t *o,
                            const sc_dp_region_t *reg, uint64_t off)
{
    size_t rb = op->row_bytes;
    tp_mem_t *mem;
    /* Where the transport copies at once (shared memory), each run is
     * checked against its row sums as soon as it is in dst, still in cache. */
    int now = o->has_rsum && !dp->rows_unverified;

    pthread_mutex_lock(&dp->lock);
    mem = sc_dp_local(dp, o, op->dst, (size_t)op->n_rows * rb);
    for (uint32_t x = 0, y; mem != NULL && x < op->n_rows; x = y) {
        uint8_t *dst;
        st_status_t st = ST_ERR_UNSUPPORTED;

        for (y = x + 1; y < op->n_rows && op->rows[y] == op->rows[y - 1] + 1; y++) {
        }
        dst = (uint8_t *)op->dst + (size_t)x * rb;
        if (now) {
            st = tp_get_now(nd->ep, dst, (size_t)(y - x) * rb, mem,
                            reg->base + off + (uint64_t)op->rows[x] * rb, reg->rkey);
        }
        if (st == ST_OK) {
            for (uint32_t r = x; r < y && !o->now_bad; r++, dst += rb) {
                o->now_bad = pr_rowsum(dst, rb) != o->rsum[r];
                o->now_row = op->rows[r];
            }
            continue;
        }
        now = 0; /* the rest posted; all rows are checked when they have landed */
        if (sc_dp_get_one(nd, o, dst, (size_t)(y - x) * rb, mem,
                          reg->base + off + (uint64_t)op->rows[x] * rb, reg->rkey) != ST_OK) {
            break;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    o->posted = mem != NULL;
    o->now_checked = (uint8_t)(now && mem != NULL && !o->failed);
    op->length = (size_t)op->n_rows * rb;
}

/* Bytes of whole-object gets posted under one hold of dp->lock: one hold
 * per get would hand the lock back and forth between batches that post at
 * once (each hand-off a futex wake-up), a hold per batch would stall them. */
#define SC_DP_POST_BYTES (1u << 20)

/*
 * A node whose committed extents are not read-only has every object hashed
 * (o->check). Hashing after the batch reads every byte back from memory (the
 * copy streams it out with non-temporal stores); instead, the copy is cut
 * into pieces below STT_STREAM_MIN (plain stores: the piece stays in L1) and
 * each piece is hashed right after it landed, in the copying thread. What is
 * hashed is the destination: the bytes accepted, not the source.
 */
#define SC_DP_FUSE_PIECE 4032u

/* STRATA_DP_FUSE=0 turns sc_dp_copy_hashed() off (for measurements). */
static int sc_dp_fuse_off(void)
{
    static _Atomic int off = -1;
    int v = atomic_load_explicit(&off, memory_order_relaxed);

    if (v < 0) {
        const char *e = getenv("STRATA_DP_FUSE");

        v = e != NULL && strcmp(e, "0") == 0;
        atomic_store_explicit(&off, v, memory_order_relaxed);
    }
    return v;
}

static st_status_t sc_dp_copy_hashed(sc_dp_node_t *nd, st_get_op_t *op, sc_dp_op_t *o,
                                     const sc_dp_post_t *q)
{
    XXH3_state_t xs;
    size_t len = (size_t)q->len;

    if (XXH3_64bits_reset(&xs) != XXH_OK) {
        return ST_ERR_UNSUPPORTED;
    }
    for (size_t off = 0; off < len; off += SC_DP_FUSE_PIECE) {
        size_t n = len - off < SC_DP_FUSE_PIECE ? len - off : SC_DP_FUSE_PIECE;
        st_status_t st =
            tp_get_now(nd->ep, (uint8_t *)op->dst + off, n, q->mem, q->raddr + off, q->rkey);

        if (st != ST_OK) {
            return st; /* ST_ERR_UNSUPPORTED (not mapped here): the first piece, post a get */
        }
        (void)XXH3_64bits_update(&xs, (const uint8_t *)op->dst + off, n);
    }
    o->prechecked = XXH3_64bits_digest(&xs) == o->checksum ? 2 : 1;
    return ST_OK;
}

/* A run of rows q of op, copied directly and checked against its row sums while still in
 * cache (q->bad: 1 + the first row that did not match). */
static st_status_t sc_dp_copy_run(sc_dp_node_t *nd, const st_handle_t *h, const st_get_op_t *op,
                                  const sc_dp_op_t *o, sc_dp_post_t *q)
{
    size_t rb = op->row_bytes;
    uint8_t *dst = (uint8_t *)op->dst + (size_t)q->x0 * rb;
    st_status_t st = tp_get_now(nd->ep, dst, (size_t)q->len, q->mem, q->raddr, q->rkey);

    if (st == ST_OK && o->has_rsum && !h->client->dp->rows_unverified) {
        for (uint32_t r = q->x0; r < q->x0 + (uint32_t)(q->len / rb); r++, dst += rb) {
            if (pr_rowsum(dst, rb) != o->rsum[r]) {
                q->bad = op->rows[r] + 1;
                break;
            }
        }
    }
    return st;
}

/* Copies p[lo, hi) where the region is mapped here (any thread: a direct
 * copy touches neither the transport's worker nor dp->lock). Returns the
 * bytes copied. */
static uint64_t sc_dp_copy_range(sc_dp_node_t *nd, st_handle_t *h, sc_dp_op_t *ops, sc_dp_post_t *p,
                                 size_t lo, size_t hi)
{
    uint64_t copied = 0;

    for (size_t k = lo; k < hi; k++) {
        st_get_op_t *op = &h->gets[p[k].i];

        if (p[k].mem == NULL) {
            continue;
        }
        if (op->n_rows > 0) {
            p[k].st = sc_dp_copy_run(nd, h, op, &ops[p[k].i], &p[k]);
        } else if (!nd->committed_ro && p[k].len > SC_DP_FUSE_PIECE && !sc_dp_fuse_off()) {
            p[k].st = sc_dp_copy_hashed(nd, op, &ops[p[k].i], &p[k]);
        } else {
            p[k].st =
                tp_get_now(nd->ep, op->dst, (size_t)p[k].len, p[k].mem, p[k].raddr, p[k].rkey);
        }
        if (p[k].st == ST_OK) {
            copied += p[k].len;
        } else if (p[k].st != ST_ERR_UNSUPPORTED) {
            atomic_store(&ops[p[k].i].failed, 1);
        }
    }
    return copied;
}

/* Takes the oldest queued share into *out: 1, or 0 when none waits. */
static int sc_dp_share_pop(sc_dp_t *dp, sc_dp_share_t *out)
{
    int got = 0;

    pthread_mutex_lock(&dp->cp_lock);
    if (dp->cp_qn > 0) {
        *out = dp->cp_q[dp->cp_qh];
        dp->cp_qh = (dp->cp_qh + 1) % SC_DP_SHARES_MAX;
        dp->cp_qn--;
        atomic_store_explicit(&dp->cp_queued, dp->cp_qn, memory_order_relaxed);
        got = 1;
    }
    pthread_mutex_unlock(&dp->cp_lock);
    return got;
}

/* Runs a share taken from the queue; its batch may return once the count drops. */
static void sc_dp_share_run(sc_dp_t *dp, const sc_dp_share_t *sh)
{
    atomic_fetch_add_explicit(&dp->cp_bytes,
                              sc_dp_copy_range(sh->nd, sh->h, sh->ops, sh->p, sh->lo, sh->hi),
                              memory_order_relaxed);
    atomic_fetch_sub_explicit(sh->left, 1, memory_order_release); /* the last use of *sh->left */
}

void *sc_dp_copier_main(void *arg)
{
    sc_dp_t *dp = arg;

    for (;;) {
        uint64_t until = cm_mono_ns() + SC_DP_CP_SPIN_NS;
        sc_dp_share_t sh;

        while (atomic_load_explicit(&dp->cp_queued, memory_order_relaxed) == 0) {
            if (cm_mono_ns() < until) {
                sched_yield();
                continue;
            }
            int stop;

            pthread_mutex_lock(&dp->cp_lock);
            while (!dp->cp_stop && dp->cp_qn == 0) {
                pthread_cond_wait(&dp->cp_work, &dp->cp_lock);
            }
            stop = dp->cp_stop;
            pthread_mutex_unlock(&dp->cp_lock);
            if (stop) {
                return NULL;
            }
            break;
        }
        if (sc_dp_share_pop(dp, &sh)) {
            sc_dp_share_run(dp, &sh);
        }
    }
}

/*
 * The direct copies of p[0, np), bytes in all: cut into equal shares of
 * bytes, one for this thread and one per copy thread (fewer when the queue
 * is nearly full), when there are copy threads and the list is large enough;
 * else all on this thread. The shares go to the queue, which the copy threads
 * serve for every batch copying at once; while its own shares are not done
 * this thread runs queued shares too. Returns when every share of this list
 * is done.
 */
static void sc_dp_copy_shared(sc_dp_t *dp, sc_dp_node_t *nd, st_handle_t *h, sc_dp_op_t *ops,
                              sc_dp_post_t *p, size_t np, uint64_t bytes)
{
    _Atomic int left = 0;
    size_t k = 0, mine;
    uint64_t acc = 0, per;
    int n = dp->n_cp;

    if (n == 0 || bytes < SC_DP_SHARE_MIN) {
        (void)sc_dp_copy_range(nd, h, ops, p, 0, np);
        return;
    }
    pthread_mutex_lock(&dp->cp_lock);
    if ((unsigned)n > SC_DP_SHARES_MAX - dp->cp_qn) {
        n = (int)(SC_DP_SHARES_MAX - dp->cp_qn);
    }
    if (n == 0) {
        pthread_mutex_unlock(&dp->cp_lock);
        (void)sc_dp_copy_range(nd, h, ops, p, 0, np);
        return;
    }
    per = bytes / (uint64_t)(n + 1);
    /* This thread's share first, then n queued (the last takes the rest). */
    while (k < np && acc < per) {
        acc += p[k].mem != NULL ? p[k].len : 0;
        k++;
    }
    mine = k;
    for (int t = 0; t < n; t++) {
        sc_dp_share_t *sh = &dp->cp_q[(dp->cp_qh + dp->cp_qn) % SC_DP_SHARES_MAX];
        uint64_t target = per * (uint64_t)(t + 2);

        *sh = (sc_dp_share_t){nd, h, ops, p, k, k, &left};
        while (k < np && (t == n - 1 || acc < target)) {
            acc += p[k].mem != NULL ? p[k].len : 0;
            k++;
        }
        sh->hi = k;
        dp->cp_qn++;
    }
    atomic_store_explicit(&left, n, memory_order_relaxed);
    atomic_store_explicit(&dp->cp_queued, dp->cp_qn, memory_order_relaxed);
    pthread_cond_broadcast(&dp->cp_work);
    pthread_mutex_unlock(&dp->cp_lock);
    (void)sc_dp_copy_range(nd, h, ops, p, 0, mine);
    while (atomic_load_explicit(&left, memory_order_acquire) > 0) {
        sc_dp_share_t sh;

        if (sc_dp_share_pop(dp, &sh)) {
            sc_dp_share_run(dp, &sh); /* ours or another batch's: either is waited for */
        } else {
            sched_yield();
        }
    }
}

/*
 * The gets of whole objects p[0, np) on one node (node lock held): local
 * registrations under dp->lock, then the direct copies (shared with the copy
 * threads), then gets posted for what the transport cannot copy directly.
 */
void sc_dp_post_objects(sc_dp_t *dp, sc_dp_node_t *nd, st_handle_t *h, sc_dp_op_t *ops,
                        sc_dp_post_t *p, size_t np)
{
    uint64_t direct = 0;

    for (size_t k = 0; k < np;) {
        uint64_t bytes = 0;

        pthread_mutex_lock(&dp->lock);
        for (; k < np && bytes < SC_DP_POST_BYTES; k++) {
            st_get_op_t *op = &h->gets[p[k].i];
            sc_dp_op_t *o = &ops[p[k].i];

            p[k].mem = sc_dp_local(dp, o, op->dst, (size_t)p[k].len);
            p[k].st = ST_ERR_UNSUPPORTED;
            op->length = (size_t)p[k].len;
            o->posted = p[k].mem != NULL;
            bytes += p[k].len;
        }
        pthread_mutex_unlock(&dp->lock);
        direct += bytes;
    }
    sc_dp_copy_shared(dp, nd, h, ops, p, np, direct);
    for (size_t k = 0; k < np;) {
        uint64_t bytes = 0;

        pthread_mutex_lock(&dp->lock);
        for (; k < np && bytes < SC_DP_POST_BYTES; k++) {
            sc_dp_op_t *o = &ops[p[k].i];

            if (p[k].mem == NULL || p[k].st != ST_ERR_UNSUPPORTED) {
                continue; /* failed, or copied */
            }
            bytes += p[k].len;
            (void)sc_dp_get_one(nd, o, h->gets[p[k].i].dst, (size_t)p[k].len, p[k].mem, p[k].raddr,
                                p[k].rkey);
        }
        pthread_mutex_unlock(&dp->lock);
    }
}

/* Whether lease-cache entry e still names a region of node nd that holds it (nd->lock held). */
static int sc_dp_entry_live(const sc_dp_node_t *nd, const sc_lc_ent_t *e)
{
    return nd->gen == e->gen && nd->epoch == e->epoch && nd->ep != NULL && e->region_id < nd->cap &&
           nd->reg[e->region_id].rkey != NULL && e->offset + e->length <= nd->reg[e->region_id].len;
}

void sc_dp_post_cached_rows(st_client_t *c, st_handle_t *h, sc_dp_op_t *ops, uint32_t node,
                            const size_t *ix, size_t n, uint8_t *ok)
{
    sc_dp_t *dp = c->dp;
    sc_dp_node_t *nd = &dp->node[node];
    size_t cap = 0, np = 0;
    uint64_t bytes = 0;
    sc_dp_post_t *p;

    for (size_t j = 0; j < n; j++) {
        cap += h->gets[ix[j]].n_rows;
    }
    p = calloc(cap + 1, sizeof(*p));
    if (p == NULL) {
        for (size_t j = 0; j < n; j++) {
            ok[j] = (uint8_t)sc_dp_post_cached(c, &h->gets[ix[j]], &ops[ix[j]], &ops[ix[j]].ce);
        }
        return;
    }
    pthread_mutex_lock(&nd->lock);
    pthread_mutex_lock(&dp->lock);
    for (size_t j = 0; j < n; j++) {
        st_get_op_t *op = &h->gets[ix[j]];
        sc_dp_op_t *o = &ops[ix[j]];
        const sc_lc_ent_t *e = &o->ce;
        const sc_dp_region_t *reg;
        size_t rb = op->row_bytes;
        tp_mem_t *mem;

        ok[j] = (uint8_t)sc_dp_entry_live(nd, e);
        if (!ok[j]) {
            continue;
        }
        o->node = e->node;
        op->status = sc_dp_get_fits(op, e->length);
        if (op->status != ST_OK) {
            continue;
        }
        o->expiry_ns = e->expiry_ns;
        reg = &nd->reg[e->region_id];
        mem = sc_dp_local(dp, o, op->dst, (size_t)op->n_rows * rb);
        o->posted = mem != NULL;
        op->length = (size_t)op->n_rows * rb;
        for (uint32_t x = 0, y; mem != NULL && x < op->n_rows; x = y) {
            for (y = x + 1; y < op->n_rows && op->rows[y] == op->rows[y - 1] + 1; y++) {
            }
            p[np++] = (sc_dp_post_t){.i = ix[j],
                                     .raddr = reg->base + e->offset + (uint64_t)op->rows[x] * rb,
                                     .len = (uint64_t)(y - x) * rb,
                                     .rkey = reg->rkey,
                                     .mem = mem,
                                     .st = ST_ERR_UNSUPPORTED,
                                     .x0 = x};
            bytes += (uint64_t)(y - x) * rb;
        }
    }
    pthread_mutex_unlock(&dp->lock);
    sc_dp_copy_shared(dp, nd, h, ops, p, np, bytes);
    /* What could not be copied directly is posted; an op is checked at the post when every run
     * of it was copied (and checked) here. */
    pthread_mutex_lock(&dp->lock);
    for (size_t k = 0; k < np;) {
        size_t i = p[k].i;
        sc_dp_op_t *o = &ops[i];
        st_get_op_t *op = &h->gets[i];
        int all = 1;
        uint32_t bad = 0;

        for (; k < np && p[k].i == i; k++) {
            if (p[k].st == ST_ERR_UNSUPPORTED) {
                all = 0;
                (void)sc_dp_get_one(nd, o, (uint8_t *)op->dst + (size_t)p[k].x0 * op->row_bytes,
                                    (size_t)p[k].len, p[k].mem, p[k].raddr, p[k].rkey);
            } else if (p[k].st != ST_OK) {
                all = 0;
            }
            bad = bad != 0 ? bad : p[k].bad;
        }
        o->now_checked = (uint8_t)(all && o->has_rsum && !dp->rows_unverified && !o->failed);
        o->now_bad = (uint8_t)(bad != 0);
        o->now_row = bad != 0 ? bad - 1 : 0;
    }
    pthread_mutex_unlock(&dp->lock);
    pthread_mutex_unlock(&nd->lock);
    free(p);
}

int sc_dp_post_cached(st_client_t *c, st_get_op_t *op, sc_dp_op_t *o, const sc_lc_ent_t *e)
{
    sc_dp_t *dp = c->dp;
    sc_dp_node_t *nd = &dp->node[e->node];
    int ok;

    pthread_mutex_lock(&nd->lock);
    ok = sc_dp_entry_live(nd, e);
    if (ok) {
        o->node = e->node; /* what sc_dp_abort closes if the call's deadline passes */
        op->status = sc_dp_get_fits(op, e->length);
        if (op->n_rows == 0 && op->status != ST_OK) {
            op->length = (size_t)e->length; /* dst too small: the size it needs */
        } else if (op->n_rows == 0) {
            /* A whole object (cache_locations = all): vouched for as located ones are. */
            o->bound_ns = e->expiry_ns;
            sc_dp_post_get(dp, nd, op, o, &nd->reg[e->region_id], e->offset, e->length);
        } else if (op->status == ST_OK) {
            o->expiry_ns = e->expiry_ns;
            sc_dp_post_rows(dp, nd, op, o, &nd->reg[e->region_id], e->offset);
        }
    }
    pthread_mutex_unlock(&nd->lock);
    return ok;
}
