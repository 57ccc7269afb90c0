/*
 * tier_index.c - the T2 index: the blocks (wire namespace, block hash) whose
 * objects are on the SSD tier and not known to be in DRAM, with their
 * (kind, layer) tags. One cd_htab (htab.h) keyed by the block hash, its tag
 * the wire namespace's position in t->wires (namespaces are few and never
 * leave the list, so a position stays the namespace's). cd_tier_index_add
 * and cd_tier_index_remove take t->lock; the others run with it held
 * (cd_tier_index_destroy: alone).
 */
#include "tier_internal.h"

#include <stdlib.h>
#include <string.h>

/* The position of wire namespace ns in t->wires; with add, appended when
 * absent. Returns 0, or -1 (absent, or no memory to add it). */
static int t2_wire_pos(cd_tier_t *t, uint64_t ns, int add, uint32_t *pos_p)
{
    cd_tier_wires_t *w = &t->wires;

    for (uint32_t i = w->n; i > 0; i--) { /* the newest namespaces are the busy ones */
        if (w->w[i - 1] == ns) {
            *pos_p = i - 1;
            return 0;
        }
    }
    if (!add) {
        return -1;
    }
    if (w->n == w->cap) {
        uint32_t cap = w->cap ? w->cap * 2 : 16;
        uint64_t *nw = realloc(w->w, sizeof(*nw) * cap);

        if (nw == NULL) {
            return -1;
        }
        w->w = nw;
        w->cap = cap;
    }
    w->w[w->n] = ns;
    *pos_p = w->n++;
    return 0;
}

uint16_t cd_tier_tag_of(const ssd_key_t *k)
{
    unsigned kind = k->kind == SSD_KV ? CD_KIND_KV : k->kind == SSD_IDX ? CD_KIND_IDX : CD_KIND_KDA;

    return (uint16_t)(kind << 8 | (k->layer & 0xff));
}

cd_tier_block_t *cd_tier_index_find(cd_tier_t *t, uint64_t ns, const st_hash_t *h)
{
    uint32_t pos;

    if (t2_wire_pos(t, ns, 0, &pos) != 0) {
        return NULL;
    }
    return cd_htab_find(&t->index, h, pos);
}

/* Finds or creates the block's entry. NULL: no memory. */
static cd_tier_block_t *t2_get(cd_tier_t *t, uint64_t ns, const st_hash_t *h)
{
    cd_tier_block_t *e;
    uint32_t pos;

    if (t2_wire_pos(t, ns, 1, &pos) != 0) {
        return NULL;
    }
    e = cd_htab_find(&t->index, h, pos);
    if (e != NULL) {
        return e;
    }
    if (cd_htab_reserve(&t->index, 1) != ST_OK) {
        return NULL;
    }
    e = calloc(1, sizeof(*e));
    if (e == NULL) {
        return NULL;
    }
    e->tags = e->inl;
    e->cap = 4;
    (void)cd_htab_insert(&t->index, h, pos, e); /* reserved: cannot fail */
    t->nblocks++;
    return e;
}

static void t2_free_block(cd_tier_block_t *e)
{
    if (e->tags != e->inl) {
        free(e->tags);
    }
    free(e);
}

void cd_tier_index_maybe_free(cd_tier_t *t, uint64_t ns, const st_hash_t *h, cd_tier_block_t *e)
{
    uint32_t pos;

    if (e->n != 0 || e->pending != 0 || e->promoting || t2_wire_pos(t, ns, 0, &pos) != 0) {
        return;
    }
    (void)cd_htab_remove(&t->index, h, pos);
    t->nblocks--;
    t2_free_block(e);
}

static int t2_add_tag(cd_tier_t *t, cd_tier_block_t *e, uint16_t tag)
{
    for (uint32_t i = 0; i < e->n; i++) {
        if (e->tags[i] == tag) {
            return 0;
        }
    }
    if (e->n == e->cap) {
        uint32_t cap = e->cap * 2;
        uint16_t *nt = malloc(sizeof(*nt) * cap);

        if (nt == NULL) {
            return -1;
        }
        memcpy(nt, e->tags, sizeof(*nt) * e->n);
        if (e->tags != e->inl) {
            free(e->tags);
        }
        e->tags = nt;
        e->cap = cap;
    }
    e->tags[e->n++] = tag;
    t->nobjects++;
    return 0;
}

static void t2_del_tag(cd_tier_t *t, cd_tier_block_t *e, uint16_t tag)
{
    for (uint32_t i = 0; i < e->n; i++) {
        if (e->tags[i] == tag) {
            e->tags[i] = e->tags[--e->n];
            t->nobjects--;
            return;
        }
    }
}

int cd_tier_index_add_locked(cd_tier_t *t, uint64_t ns, const st_hash_t *h, uint16_t tag,
                             int pending)
{
    cd_tier_block_t *e = t2_get(t, ns, h);
    int rc;

    if (e == NULL) {
        return -1;
    }
    rc = t2_add_tag(t, e, tag);
    if (rc == 0 && pending) {
        e->pending++;
    }
    if (rc != 0) {
        cd_tier_index_maybe_free(t, ns, h, e);
    }
    return rc;
}

int cd_tier_index_add(cd_tier_t *t, uint64_t ns, const st_hash_t *h, uint16_t tag, int pending)
{
    int rc;

    pthread_mutex_lock(&t->lock);
    rc = cd_tier_index_add_locked(t, ns, h, tag, pending);
    pthread_mutex_unlock(&t->lock);
    return rc;
}

void cd_tier_index_remove(cd_tier_t *t, uint64_t ns, const st_hash_t *h, uint16_t tag,
                          int remove_tag, int pending)
{
    cd_tier_block_t *e;

    pthread_mutex_lock(&t->lock);
    e = cd_tier_index_find(t, ns, h);
    if (e != NULL) {
        if (remove_tag) {
            t2_del_tag(t, e, tag);
        }
        if (pending && e->pending > 0) {
            e->pending--;
        }
        cd_tier_index_maybe_free(t, ns, h, e);
    }
    pthread_mutex_unlock(&t->lock);
}

void cd_tier_index_destroy(cd_tier_t *t)
{
    for (size_t i = 0; i < t->index.ht_cap; i++) {
        if (t->index.ht_slots[i].used) {
            t2_free_block(t->index.ht_slots[i].value);
        }
    }
    cd_htab_destroy(&t->index);
    free(t->wires.w);
    t->wires = (cd_tier_wires_t){NULL, 0, 0};
}
