/* radix.c - the path-compressed block tree, its LRU of leaves and lookups. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "dlist.h"
#include "radix.h"

#define TAG_BLOCK  0u
#define TAG_ORPHAN 1u

enum { LRU_KEEP, LRU_HOT, LRU_COLD };

void cd_radix_init(cd_radix_t *r, struct cd_budget *budget)
{
    memset(r, 0, sizeof(*r));
    cd_htab_init(&r->rx_table, budget);
    r->rx_budget = budget;
}

static void rx_node_free(cd_radix_t *r, cd_rnode_t *n)
{
    cd_budget_release_meta(r->rx_budget, sizeof(*n) + (uint64_t)n->rn_cap * sizeof(cd_block_t *) +
                                             (uint64_t)n->rn_sum_kda_cap * sizeof(uint32_t));
    free(n->rn_sum_kda);
    free(n->rn_run);
    free(n);
}

static void rx_block_free(cd_radix_t *r, cd_block_t *b)
{
    cd_budget_release_meta(r->rx_budget, sizeof(*b));
    free(b);
}

void cd_radix_destroy(cd_radix_t *r)
{
    cd_htab_t *t = &r->rx_table;

    for (size_t i = 0; i < t->ht_cap; i++) {
        cd_block_t *b;

        if (!t->ht_slots[i].used || t->ht_slots[i].tag != TAG_BLOCK) {
            continue;
        }
        b = t->ht_slots[i].value;
        if (b->bk_off == 0) {
            rx_node_free(r, b->bk_node);
        }
        rx_block_free(r, b);
    }
    for (int i = 0; i < 2; i++) {
        if (r->rx_spare[i] != NULL) {
            rx_node_free(r, r->rx_spare[i]);
        }
    }
    if (r->rx_spare_block != NULL) {
        rx_block_free(r, r->rx_spare_block);
    }
    cd_htab_destroy(t);
    memset(r, 0, sizeof(*r));
}

/* --- the LRU of evictable leaves ------------------------------------------ */

static void lru_unlink(cd_radix_t *r, cd_rnode_t *n)
{
    CD_QUEUE_REMOVE(r->rx_lru_cold, r->rx_lru_hot, n, rn_lru_prev, rn_lru_next);
    n->rn_lru_prev = n->rn_lru_next = NULL;
    n->rn_in_lru = 0;
}

static void lru_push(cd_radix_t *r, cd_rnode_t *n, int hot)
{
    n->rn_in_lru = 1;
    if (hot) {
        CD_QUEUE_PUSH_TAIL(r->rx_lru_cold, r->rx_lru_hot, n, rn_lru_prev, rn_lru_next);
    } else {
        CD_QUEUE_PUSH_HEAD(r->rx_lru_cold, r->rx_lru_hot, n, rn_lru_prev, rn_lru_next);
    }
}

static int rx_evictable_leaf(const cd_rnode_t *n)
{
    const cd_block_t *tail;

    if (n->rn_nchildren != 0 || n->rn_len == 0) {
        return 0;
    }
    tail = n->rn_run[n->rn_len - 1];
    return tail->bk_leases == 0 && tail->bk_pins == 0;
}

/* Puts n in the LRU list or takes it out, as its state says. */
static void lru_sync(cd_radix_t *r, cd_rnode_t *n, int where)
{
    int should = rx_evictable_leaf(n);

    if (!should) {
        if (n->rn_in_lru) {
            lru_unlink(r, n);
        }
    } else if (!n->rn_in_lru) {
        lru_push(r, n, where != LRU_COLD);
    } else if (where == LRU_HOT && r->rx_lru_hot != n) {
        lru_unlink(r, n);
        lru_push(r, n, 1);
    }
}

/* --- nodes ------------------------------------------------------------------ */

static st_status_t rx_run_grow(cd_radix_t *r, cd_rnode_t *n, uint32_t cap)
{
    cd_block_t **run;
    st_status_t st;

    if (cap <= n->rn_cap) {
        return ST_OK;
    }
    if (cap < n->rn_cap * 2) {
        cap = n->rn_cap * 2;
    }
    st = cd_budget_charge_meta(r->rx_budget, (uint64_t)(cap - n->rn_cap) * sizeof(*run));
    if (st != ST_OK) {
        return st;
    }
    run = realloc(n->rn_run, (size_t)cap * sizeof(*run));
    if (run == NULL) {
        cd_budget_release_meta(r->rx_budget, (uint64_t)(cap - n->rn_cap) * sizeof(*run));
        return ST_ERR_NOMEM;
    }
    n->rn_run = run;
    n->rn_cap = cap;
    return ST_OK;
}

static st_status_t rx_spare_ensure(cd_radix_t *r, int i, uint32_t cap)
{
    cd_rnode_t *n = r->rx_spare[i];
    st_status_t st;

    if (n == NULL) {
        st = cd_budget_charge_meta(r->rx_budget, sizeof(*n));
        if (st != ST_OK) {
            return st;
        }
        n = calloc(1, sizeof(*n));
        if (n == NULL) {
            cd_budget_release_meta(r->rx_budget, sizeof(*n));
            return ST_ERR_NOMEM;
        }
        r->rx_spare[i] = n;
    }
    return rx_run_grow(r, n, cap < 4 ? 4 : cap);
}

static cd_rnode_t *rx_take_spare(cd_radix_t *r, int i, uint64_t now)
{
    cd_rnode_t *n = r->rx_spare[i];
    cd_block_t **run = n->rn_run;
    uint32_t cap = n->rn_cap;

    r->rx_spare[i] = NULL;
    memset(n, 0, sizeof(*n));
    n->rn_run = run;
    n->rn_cap = cap;
    n->rn_last_access = now;
    r->rx_nodes++;
    return n;
}

static void rx_add_child(cd_radix_t *r, cd_rnode_t *parent, cd_rnode_t *child)
{
    child->rn_parent = parent;
    child->rn_prev = NULL;
    child->rn_next = parent->rn_child;
    if (parent->rn_child != NULL) {
        parent->rn_child->rn_prev = child;
    }
    parent->rn_child = child;
    parent->rn_nchildren++;
    lru_sync(r, parent, LRU_KEEP);
}

static void rx_remove_child(cd_radix_t *r, cd_rnode_t *parent, cd_rnode_t *child)
{
    if (child->rn_prev != NULL) {
        child->rn_prev->rn_next = child->rn_next;
    } else {
        parent->rn_child = child->rn_next;
    }
    if (child->rn_next != NULL) {
        child->rn_next->rn_prev = child->rn_prev;
    }
    child->rn_parent = child->rn_next = child->rn_prev = NULL;
    parent->rn_nchildren--;
    lru_sync(r, parent, LRU_COLD);
}

static void rx_append(cd_rnode_t *n, cd_block_t *b)
{
    b->bk_node = n;
    b->bk_off = n->rn_len;
    n->rn_run[n->rn_len++] = b;
    n->rn_sum_valid = 0;
}

/* --- roots waiting for a parent --------------------------------------------- */

static void orphan_add(cd_radix_t *r, cd_rnode_t *n)
{
    cd_rnode_t *head = cd_htab_remove(&r->rx_table, &n->rn_remote_parent, TAG_ORPHAN);

    n->rn_orph_prev = NULL;
    n->rn_orph_next = head;
    if (head != NULL) {
        head->rn_orph_prev = n;
    }
    /* Cannot fail: prepare reserved the slot, or one was just freed. */
    (void)cd_htab_insert(&r->rx_table, &n->rn_remote_parent, TAG_ORPHAN, n);
}

static void orphan_del(cd_radix_t *r, cd_rnode_t *n)
{
    if (n->rn_orph_prev != NULL) {
        n->rn_orph_prev->rn_orph_next = n->rn_orph_next;
    } else {
        cd_htab_remove(&r->rx_table, &n->rn_remote_parent, TAG_ORPHAN);
        if (n->rn_orph_next != NULL) {
            (void)cd_htab_insert(&r->rx_table, &n->rn_remote_parent, TAG_ORPHAN, n->rn_orph_next);
        }
    }
    if (n->rn_orph_next != NULL) {
        n->rn_orph_next->rn_orph_prev = n->rn_orph_prev;
    }
    n->rn_orph_next = n->rn_orph_prev = NULL;
}

/* --- insert ----------------------------------------------------------------- */

st_status_t cd_radix_prepare(cd_radix_t *r, const st_hash_t *parent)
{
    cd_block_t *p = parent != NULL ? cd_radix_find(r, parent) : NULL;
    st_status_t st;

    st = cd_htab_reserve(&r->rx_table, 2);
    if (st != ST_OK) {
        return st;
    }
    if (r->rx_spare_block == NULL) {
        st = cd_budget_charge_meta(r->rx_budget, sizeof(cd_block_t));
        if (st != ST_OK) {
            return st;
        }
        r->rx_spare_block = malloc(sizeof(cd_block_t));
        if (r->rx_spare_block == NULL) {
            cd_budget_release_meta(r->rx_budget, sizeof(cd_block_t));
            return ST_ERR_NOMEM;
        }
    }
    /* Set aside enough for any shape the insert may take, even after
     * evictions between this call and the insert: two spare nodes (one big
     * enough for the suffix of a split) and room to extend p's run. */
    cd_rnode_t *n = p != NULL ? p->bk_node : NULL;
    uint32_t suffix = n != NULL ? n->rn_len - p->bk_off - 1 : 0;

    st = rx_spare_ensure(r, 0, suffix);
    if (st == ST_OK) {
        st = rx_spare_ensure(r, 1, 4);
    }
    if (st == ST_OK && n != NULL && suffix == 0) {
        st = rx_run_grow(r, n, n->rn_len + 1);
    }
    return st;
}

/* Splits n after offset off: the blocks after it move to a new node that
 * takes n's children and n's place in the LRU. */
static void rx_split(cd_radix_t *r, cd_rnode_t *n, uint32_t off, uint64_t now)
{
    cd_rnode_t *m = rx_take_spare(r, 0, now);

    for (uint32_t i = off + 1; i < n->rn_len; i++) {
        rx_append(m, n->rn_run[i]);
    }
    n->rn_len = off + 1;
    n->rn_sum_valid = 0;
    m->rn_child = n->rn_child;
    m->rn_nchildren = n->rn_nchildren;
    for (cd_rnode_t *c = m->rn_child; c != NULL; c = c->rn_next) {
        c->rn_parent = m;
    }
    m->rn_last_access = n->rn_last_access;
    n->rn_child = NULL;
    n->rn_nchildren = 0;
    if (n->rn_in_lru) {
        /* m takes n's place in the list. */
        m->rn_lru_prev = n->rn_lru_prev;
        m->rn_lru_next = n->rn_lru_next;
        if (m->rn_lru_prev != NULL) {
            m->rn_lru_prev->rn_lru_next = m;
        } else {
            r->rx_lru_cold = m;
        }
        if (m->rn_lru_next != NULL) {
            m->rn_lru_next->rn_lru_prev = m;
        } else {
            r->rx_lru_hot = m;
        }
        m->rn_in_lru = 1;
        n->rn_in_lru = 0;
        n->rn_lru_prev = n->rn_lru_next = NULL;
    }
    rx_add_child(r, n, m);
    r->rx_splits++;
}

st_status_t cd_radix_insert(cd_radix_t *r, const st_hash_t *h, const st_hash_t *parent,
                            uint64_t now, cd_block_t **block_p, int *created_p)
{
    cd_block_t *b = cd_radix_find(r, h), *p;
    cd_rnode_t *node, *waiting;
    st_status_t st;

    if (b != NULL) {
        *block_p = b;
        if (created_p != NULL) {
            *created_p = 0;
        }
        return ST_OK;
    }
    st = cd_radix_prepare(r, parent);
    if (st != ST_OK) {
        return st;
    }
    b = r->rx_spare_block;
    r->rx_spare_block = NULL;
    memset(b, 0, sizeof(*b));
    b->bk_hash = *h;
    b->bk_last_access = now;
    p = parent != NULL ? cd_radix_find(r, parent) : NULL;
    if (p == NULL) {
        node = rx_take_spare(r, 0, now);
        if (parent != NULL) {
            node->rn_has_remote = 1;
            node->rn_remote_parent = *parent;
            orphan_add(r, node);
        }
    } else if (p->bk_off + 1 == p->bk_node->rn_len) {
        if (p->bk_node->rn_nchildren == 0) {
            node = p->bk_node;
        } else {
            node = rx_take_spare(r, 0, now);
            rx_add_child(r, p->bk_node, node);
        }
    } else {
        rx_split(r, p->bk_node, p->bk_off, now);
        node = rx_take_spare(r, 1, now);
        rx_add_child(r, p->bk_node, node);
    }
    rx_append(node, b);
    node->rn_last_access = now;
    (void)cd_htab_insert(&r->rx_table, h, TAG_BLOCK, b); /* reserved by prepare */
    r->rx_blocks++;

    /* Adopt the roots that named this block as their remote parent. */
    waiting = cd_htab_remove(&r->rx_table, h, TAG_ORPHAN);
    while (waiting != NULL) {
        cd_rnode_t *next = waiting->rn_orph_next;

        waiting->rn_orph_next = waiting->rn_orph_prev = NULL;
        waiting->rn_has_remote = 0;
        rx_add_child(r, node, waiting);
        r->rx_adoptions++;
        waiting = next;
    }
    lru_sync(r, node, LRU_HOT);
    *block_p = b;
    if (created_p != NULL) {
        *created_p = 1;
    }
    return ST_OK;
}

/* --- eviction, holds, access ------------------------------------------------- */

cd_block_t *cd_radix_victim(const cd_radix_t *r)
{
    const cd_rnode_t *n = r->rx_lru_cold;

    return n != NULL ? n->rn_run[n->rn_len - 1] : NULL;
}

cd_block_t *cd_radix_victim_after(const cd_radix_t *r, const cd_block_t *b)
{
    const cd_rnode_t *n = b->bk_node->rn_in_lru ? b->bk_node->rn_lru_next : NULL;

    (void)r;
    return n != NULL ? n->rn_run[n->rn_len - 1] : NULL;
}

int cd_radix_removable(const cd_block_t *b)
{
    const cd_rnode_t *n = b->bk_node;

    return b->bk_off + 1 == n->rn_len && n->rn_nchildren == 0 && b->bk_leases == 0 &&
           b->bk_pins == 0 && b->bk_wb == 0;
}

void cd_radix_remove(cd_radix_t *r, cd_block_t *b)
{
    cd_rnode_t *n = b->bk_node;

    cd_htab_remove(&r->rx_table, &b->bk_hash, TAG_BLOCK);
    n->rn_len--;
    n->rn_sum_valid = 0;
    r->rx_blocks--;
    r->rx_bytes -= b->bk_bytes;
    rx_block_free(r, b);
    if (n->rn_len > 0) {
        lru_sync(r, n, LRU_KEEP);
        return;
    }
    if (n->rn_in_lru) {
        lru_unlink(r, n);
    }
    if (n->rn_parent != NULL) {
        rx_remove_child(r, n->rn_parent, n);
    } else if (n->rn_has_remote) {
        orphan_del(r, n);
    }
    r->rx_nodes--;
    rx_node_free(r, n);
}

void cd_radix_add_bytes(cd_radix_t *r, cd_block_t *b, int64_t delta)
{
    b->bk_bytes += (uint64_t)delta;
    r->rx_bytes += (uint64_t)delta;
    if (b->bk_leases + b->bk_pins > 0) {
        r->rx_held_bytes += (uint64_t)delta;
    }
}

void cd_radix_hold(cd_radix_t *r, cd_block_t *b, int pin)
{
    if (b->bk_leases + b->bk_pins == 0) {
        r->rx_held_bytes += b->bk_bytes;
    }
    if (pin) {
        b->bk_pins++;
    } else {
        b->bk_leases++;
    }
    lru_sync(r, b->bk_node, LRU_KEEP);
}

void cd_radix_unhold(cd_radix_t *r, cd_block_t *b, int pin)
{
    if (pin) {
        b->bk_pins--;
    } else {
        b->bk_leases--;
    }
    if (b->bk_leases + b->bk_pins == 0) {
        r->rx_held_bytes -= b->bk_bytes;
    }
    lru_sync(r, b->bk_node, LRU_HOT);
}

void cd_radix_touch(cd_radix_t *r, cd_block_t *b, uint64_t now)
{
    cd_rnode_t *n = b->bk_node;

    b->bk_last_access = now;
    n->rn_last_access = now;
    if (n->rn_in_lru && r->rx_lru_hot != n) {
        lru_unlink(r, n);
        lru_push(r, n, 1);
    }
}

int cd_radix_satisfies(const cd_block_t *b, const cd_require_t *req)
{
    if (req->kinds == 0) {
        /* Nothing in particular required: the block must hold something (a
         * block whose objects were deleted stays as an empty link of its
         * chain while it has children, and must not count as a hit). */
        for (int k = 0; k < CD_KIND_COUNT; k++) {
            if ((b->bk_present[k][0] | b->bk_present[k][1]) != 0) {
                return 1;
            }
        }
        return 0;
    }
    for (int k = 0; k < CD_KIND_COUNT; k++) {
        const uint64_t *m = b->bk_present[k];

        if (!(req->kinds & (1u << k))) {
            continue;
        }
        if (req->layers[0] == 0 && req->layers[1] == 0) {
            if (m[0] == 0 && m[1] == 0) {
                return 0;
            }
        } else if ((m[0] & req->layers[0]) != req->layers[0] ||
                   (m[1] & req->layers[1]) != req->layers[1]) {
            return 0;
        }
    }
    return 1;
}

#define CD_RADIX_PREFETCH 6

/* The ancestor of b d blocks up its parent links, or NULL when the tree ends
 * first. One step per node: a run is indexed, its parent hangs off the end
 * of the parent node's run. */
static cd_block_t *rx_ancestor(cd_block_t *b, uint64_t d)
{
    const cd_rnode_t *n = b->bk_node;
    uint64_t off = b->bk_off;

    while (d > off) {
        d -= off + 1;
        n = n->rn_parent;
        if (n == NULL) {
            return NULL;
        }
        off = n->rn_len - 1;
    }
    return n->rn_run[off - d];
}

static int rx_has_kda(const cd_block_t *b)
{
    return (b->bk_present[CD_KIND_KDA][0] | b->bk_present[CD_KIND_KDA][1]) != 0;
}

/*
 * Rebuilds n's summary (radix.h) if it is stale: one pass over its run.
 * Returns whether it is valid (not when the budget refuses the checkpoint
 * list: then the caller checks block by block).
 */
static int rx_sum_ensure(cd_radix_t *r, cd_rnode_t *n)
{
    uint32_t nkda = 0, any = (1u << (CD_KIND_COUNT + 1)) - 1;
    uint64_t all[CD_KIND_COUNT][2];

    if (n->rn_sum_valid) {
        return 1;
    }
    memset(all, 0xff, sizeof(all));
    for (uint32_t o = 0; o < n->rn_len; o++) {
        const cd_block_t *b = n->rn_run[o];
        uint32_t some = 0;

        if (o + CD_RADIX_PREFETCH < n->rn_len) {
            const cd_block_t *ahead = n->rn_run[o + CD_RADIX_PREFETCH];

            __builtin_prefetch((const char *)ahead + offsetof(cd_block_t, bk_present));
            __builtin_prefetch((const char *)(ahead->bk_present + CD_KIND_KDA + 1) - 1);
        }
        for (int k = 0; k < CD_KIND_COUNT; k++) {
            all[k][0] &= b->bk_present[k][0];
            all[k][1] &= b->bk_present[k][1];
            if ((b->bk_present[k][0] | b->bk_present[k][1]) != 0) {
                some |= 1u << k;
            }
        }
        any &= some | (some != 0 ? 1u << CD_KIND_COUNT : 0);
        nkda += rx_has_kda(b);
    }
    if (nkda > n->rn_sum_kda_cap) {
        uint32_t cap = nkda + nkda / 4;
        uint32_t *a;

        if (cd_budget_charge_meta(r->rx_budget, (uint64_t)(cap - n->rn_sum_kda_cap) * sizeof(*a)) !=
            ST_OK) {
            return 0;
        }
        a = realloc(n->rn_sum_kda, (size_t)cap * sizeof(*a));
        if (a == NULL) {
            cd_budget_release_meta(r->rx_budget, (uint64_t)(cap - n->rn_sum_kda_cap) * sizeof(*a));
            return 0;
        }
        n->rn_sum_kda = a;
        n->rn_sum_kda_cap = cap;
    }
    n->rn_sum_nkda = 0;
    for (uint32_t o = 0; nkda > 0 && o < n->rn_len; o++) {
        if (rx_has_kda(n->rn_run[o])) {
            n->rn_sum_kda[n->rn_sum_nkda++] = o;
        }
    }
    memcpy(n->rn_sum_all, all, sizeof(all));
    n->rn_sum_any = any;
    n->rn_sum_valid = 1;
    return 1;
}

/* Whether every block of n's run satisfies req, by its valid summary: the
 * same test as cd_radix_satisfies() on each block. */
static int rx_sum_satisfies(const cd_rnode_t *n, const cd_require_t *req)
{
    if (req->kinds == 0) {
        return (n->rn_sum_any >> CD_KIND_COUNT) & 1;
    }
    for (int k = 0; k < CD_KIND_COUNT; k++) {
        const uint64_t *m = n->rn_sum_all[k];

        if (!(req->kinds & (1u << k))) {
            continue;
        }
        if (req->layers[0] == 0 && req->layers[1] == 0) {
            if (!(n->rn_sum_any & (1u << k))) {
                return 0;
            }
        } else if ((m[0] & req->layers[0]) != req->layers[0] ||
                   (m[1] & req->layers[1]) != req->layers[1]) {
            return 0;
        }
    }
    return 1;
}

/*
 * The blocks from last (segment offset end) back to the segment's first
 * block, along the parent links, node by node (the caller proved that the
 * walk reaches offset 0), in one pass: returns the offset of the first block
 * that does not satisfy req (end + 1 if all do). The chain indices of the
 * checkpoints before it go to kda[] in descending order while room lasts;
 * *n_kda gets their count (which may exceed room: then none are kept).
 */
static uint32_t rx_walk_check(cd_radix_t *r, const cd_block_t *last, uint32_t end,
                              const cd_require_t *req, uint64_t first_block, uint64_t *kda,
                              size_t room, size_t *n_kda)
{
    cd_rnode_t *n = last->bk_node;
    int64_t off = last->bk_off, i = end;
    uint32_t fail = end + 1;
    size_t below = 0;

    for (;;) {
        int64_t stop = off - i > 0 ? off - i : 0, from = off;

        if (rx_sum_ensure(r, n) && rx_sum_satisfies(n, req)) {
            /* Every block of the run matches: only its checkpoints. */
            for (uint32_t k = n->rn_sum_nkda; k-- > 0;) {
                int64_t o = n->rn_sum_kda[k];

                if (o > off) {
                    continue;
                }
                if (o < stop) {
                    break;
                }
                if (below < room) {
                    kda[below] = first_block + (uint64_t)(i - (off - o));
                }
                below++;
            }
            i -= off - stop + 1;
            from = stop - 1;
        }
        for (int64_t o = from; o >= stop; o--, i--) {
            const cd_block_t *b = n->rn_run[o];

            /* Blocks are separate allocations: fetch one a few behind. */
            if (o >= stop + CD_RADIX_PREFETCH) {
                const cd_block_t *ahead = n->rn_run[o - CD_RADIX_PREFETCH];

                __builtin_prefetch((const char *)ahead + offsetof(cd_block_t, bk_present));
                __builtin_prefetch((const char *)(ahead->bk_present + CD_KIND_KDA + 1) - 1);
            }
            if (!cd_radix_satisfies(b, req)) {
                fail = (uint32_t)i;
                below = 0; /* only the checkpoints before the first failure count */
            } else if (rx_has_kda(b)) {
                if (below < room) {
                    kda[below] = first_block + (uint64_t)i;
                }
                below++;
            }
        }
        if (i < 0) {
            break;
        }
        n = n->rn_parent;
        off = n->rn_len - 1;
    }
    *n_kda = below;
    return fail;
}

/* Pass 2 when the checkpoints did not fit: the matched blocks from top
 * (segment offset top_off) back to offset 0, writing the chain indices of the
 * first room of the count checkpoints to kda[], ascending. */
static void rx_walk_fill(const cd_block_t *top, uint32_t top_off, uint64_t first_block,
                         uint64_t *kda, size_t count, size_t room)
{
    const cd_rnode_t *n = top->bk_node;
    int64_t off = top->bk_off, i = top_off;
    size_t w = count;

    for (;;) {
        int64_t stop = off - i > 0 ? off - i : 0;

        for (int64_t o = off; o >= stop; o--, i--) {
            if (rx_has_kda(n->rn_run[o]) && --w < room) {
                kda[w] = first_block + (uint64_t)i;
            }
        }
        if (i < 0) {
            break;
        }
        n = n->rn_parent;
        off = n->rn_len - 1;
    }
}

/* Touches each node of the matched blocks once, at its first matched block
 * (what the full form touches): from top (segment offset top_off) back. */
static void rx_walk_touch(cd_radix_t *r, cd_block_t *top, uint32_t top_off, uint64_t now)
{
    cd_rnode_t *n = top->bk_node;
    int64_t off = top->bk_off, i = top_off;

    for (;;) {
        int64_t stop = off - i > 0 ? off - i : 0;

        i -= off - stop + 1;
        cd_radix_touch(r, n->rn_run[stop], now);
        if (i < 0) {
            break;
        }
        n = n->rn_parent;
        off = n->rn_len - 1;
    }
}

void cd_radix_lookup_compact(cd_radix_t *r, const cd_segment_t *seg, const cd_probes_t *pr,
                             const cd_require_t *req, uint64_t now, cd_seg_answer_t *ans,
                             uint64_t *kda, size_t kda_cap, size_t *kda_n)
{
    cd_block_t *first = NULL, *last = NULL, *top;
    uint32_t p = 0, end, fail, q;
    size_t n_kda = 0, room = kda_cap - *kda_n;

    ans->matched = 0;
    ans->kda_first = (uint32_t)*kda_n;
    ans->kda_count = 0;
    ans->unresolved = 0;

    /* Usually the last probe's block reaches block 0: then block 0 is that
     * ancestor (one table probe instead of two). */
    if (pr->n_offsets > 1 && (last = cd_radix_find(r, &seg->hashes[pr->n_offsets - 1])) != NULL) {
        first = rx_ancestor(last, pr->offsets[pr->n_offsets - 1]);
        if (first != NULL && memcmp(first->bk_hash.b, seg->hashes[0].b, ST_HASH_BYTES) == 0) {
            p = pr->n_offsets - 1;
        }
    }
    if (p == 0) {
        first = cd_radix_find(r, &seg->hashes[0]);
        last = first;
        if (first == NULL || !cd_radix_satisfies(first, req)) {
            return; /* block 0 does not match: 0, decided */
        }
        /* The furthest probe whose block reaches the first block by exactly
         * its offset in parent links: the blocks between are the segment's
         * own. (The last probe did not.) */
        for (uint32_t j = pr->n_offsets - 1; j-- > 1;) {
            cd_block_t *b = cd_radix_find(r, &seg->hashes[j]);

            if (b != NULL && rx_ancestor(b, pr->offsets[j]) == first) {
                p = j;
                last = b;
                break;
            }
        }
    }
    end = pr->offsets[p];
    fail = rx_walk_check(r, last, end, req, seg->first_block, kda + *kda_n, room, &n_kda);
    ans->matched = fail;
    if (fail == 0) {
        return; /* block 0 does not match: 0, decided */
    }
    top = fail == end + 1 ? last : rx_ancestor(last, end - (fail - 1));
    if (n_kda <= room) {
        /* Written backwards: reverse them. */
        for (size_t a = 0, z = n_kda; a + 1 < z; a++, z--) {
            uint64_t t = kda[*kda_n + a];

            kda[*kda_n + a] = kda[*kda_n + z - 1];
            kda[*kda_n + z - 1] = t;
        }
    } else {
        rx_walk_fill(top, fail - 1, seg->first_block, kda + *kda_n, n_kda, room);
    }
    rx_walk_touch(r, top, fail - 1, now);
    ans->kda_count = (uint32_t)(n_kda < room ? n_kda : room);
    *kda_n += ans->kda_count;
    if (fail <= end || end + 1 == seg->n) {
        return; /* a block that does not match, or the whole segment: decided */
    }
    /* Every block up to end matched. The next probe that does not match
     * bounds the undecided blocks; a present one that cannot be proven (a
     * root still waiting for its parent) bounds nothing. */
    q = seg->n;
    for (uint32_t j = p + 1; j < pr->n_offsets; j++) {
        const cd_block_t *b = cd_radix_find(r, &seg->hashes[j]);

        if (b == NULL || !cd_radix_satisfies(b, req)) {
            q = pr->offsets[j];
            break;
        }
    }
    ans->unresolved = q - (end + 1);
}

void cd_radix_lookup(cd_radix_t *r, const cd_segment_t *seg, const cd_require_t *req, uint64_t now,
                     cd_seg_answer_t *ans, uint64_t *kda, size_t kda_cap, size_t *kda_n,
                     cd_block_t **blocks, size_t *n_blocks)
{
    cd_block_t *prev = NULL;

    ans->matched = 0;
    ans->kda_first = (uint32_t)*kda_n;
    ans->kda_count = 0;
    ans->unresolved = 0;
    for (uint32_t i = 0; i < seg->n; i++) {
        const st_hash_t *h = &seg->hashes[i];
        cd_block_t *b = NULL;

        /* Along a run the next block is usually the next in the array. */
        if (prev != NULL && prev->bk_off + 1 < prev->bk_node->rn_len) {
            cd_block_t *cand = prev->bk_node->rn_run[prev->bk_off + 1];

            /* Blocks are separate allocations: fetch one a few ahead, both
             * of its cache lines (hash, then the presence masks). */
            if (prev->bk_off + CD_RADIX_PREFETCH < prev->bk_node->rn_len) {
                const cd_block_t *ahead = prev->bk_node->rn_run[prev->bk_off + CD_RADIX_PREFETCH];

                __builtin_prefetch(ahead);
                __builtin_prefetch((const char *)ahead + 64);
            }

            if (memcmp(cand->bk_hash.b, h->b, ST_HASH_BYTES) == 0) {
                b = cand;
            }
        }
        if (b == NULL) {
            b = cd_radix_find(r, h);
        }
        if (b == NULL || !cd_radix_satisfies(b, req)) {
            break;
        }
        ans->matched++;
        /* Recency is kept per node (eviction reads only the node's): touching
         * the node once per run saves a store to every block's cache line. */
        if (prev == NULL || prev->bk_node != b->bk_node) {
            cd_radix_touch(r, b, now);
        }
        if ((b->bk_present[CD_KIND_KDA][0] | b->bk_present[CD_KIND_KDA][1]) != 0 &&
            *kda_n < kda_cap) {
            kda[(*kda_n)++] = seg->first_block + i;
            ans->kda_count++;
        }
        if (blocks != NULL) {
            blocks[(*n_blocks)++] = b;
        }
        prev = b;
    }
}

/* --- invariants (tests) ------------------------------------------------------- */

#define CHECK(cond, ...)                     \
    do {                                     \
        if (!(cond)) {                       \
            snprintf(msg, 256, __VA_ARGS__); \
            return ST_ERR_INTERNAL;          \
        }                                    \
    } while (0)

st_status_t cd_radix_check(const cd_radix_t *r, char *msg)
{
    const cd_htab_t *t = &r->rx_table;
    uint64_t blocks = 0, nodes = 0, in_lru = 0, bytes = 0, held = 0;

    for (size_t i = 0; i < t->ht_cap; i++) {
        const cd_block_t *b;
        const cd_rnode_t *n;

        if (!t->ht_slots[i].used) {
            continue;
        }
        if (t->ht_slots[i].tag == TAG_ORPHAN) {
            n = t->ht_slots[i].value;
            CHECK(n->rn_has_remote && n->rn_orph_prev == NULL, "bad orphan list head");
            CHECK(cd_radix_find(r, &n->rn_remote_parent) == NULL,
                  "a root waits for a parent that is present");
            continue;
        }
        b = t->ht_slots[i].value;
        n = b->bk_node;
        blocks++;
        bytes += b->bk_bytes;
        held += b->bk_leases + b->bk_pins > 0 ? b->bk_bytes : 0;
        CHECK(b->bk_off < n->rn_len && n->rn_run[b->bk_off] == b, "block not in its run");
        CHECK(memcmp(&t->ht_slots[i].key, &b->bk_hash, sizeof(st_hash_t)) == 0,
              "table key differs from block hash");
        if (b->bk_off != 0) {
            continue;
        }
        nodes++;
        in_lru += n->rn_in_lru;
        CHECK(n->rn_in_lru == rx_evictable_leaf(n), "LRU membership wrong");
        uint32_t nc = 0;
        for (const cd_rnode_t *c = n->rn_child; c != NULL; c = c->rn_next) {
            nc++;
            CHECK(c->rn_parent == n, "child with a wrong parent");
            CHECK(c->rn_len > 0, "empty child node");
            CHECK(cd_radix_find(r, &c->rn_run[0]->bk_hash) == c->rn_run[0],
                  "child not in the table");
        }
        CHECK(nc == n->rn_nchildren, "child count wrong");
        if (n->rn_parent != NULL) {
            const cd_rnode_t *p = n->rn_parent;

            CHECK(p->rn_len > 0 && cd_radix_find(r, &p->rn_run[p->rn_len - 1]->bk_hash) != NULL,
                  "a node's parent is gone");
            CHECK(!n->rn_has_remote, "a child node that names a remote parent");
        }
        if (n->rn_has_remote) {
            const cd_rnode_t *w = cd_htab_find(t, &n->rn_remote_parent, TAG_ORPHAN);

            while (w != NULL && w != n) {
                w = w->rn_orph_next;
            }
            CHECK(w == n, "a root with a remote parent is not in the waiting list");
        }
    }
    CHECK(blocks == r->rx_blocks, "block count %llu, counted %llu",
          (unsigned long long)r->rx_blocks, (unsigned long long)blocks);
    CHECK(nodes == r->rx_nodes, "node count %llu, counted %llu", (unsigned long long)r->rx_nodes,
          (unsigned long long)nodes);
    CHECK(bytes == r->rx_bytes, "byte count wrong");
    CHECK(held == r->rx_held_bytes, "held byte count wrong");
    uint64_t listed = 0;
    for (const cd_rnode_t *n = r->rx_lru_cold; n != NULL; n = n->rn_lru_next) {
        listed++;
        CHECK(n->rn_in_lru, "listed node not flagged");
        CHECK(n->rn_lru_next != NULL || n == r->rx_lru_hot, "LRU tail wrong");
    }
    CHECK(listed == in_lru, "LRU list has %llu nodes, %llu flagged", (unsigned long long)listed,
          (unsigned long long)in_lru);
    return ST_OK;
}
