/* slab.c - size classes, page bitmaps, large extents and the eviction loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "dlist.h"
#include "slab.h"

#define SP_FREE       0xFEu /* page not in use */
#define SP_LARGE_TAIL 0xFDu /* page inside a large run, not its head */

st_status_t cd_slab_init(cd_slab_t *s, const cd_slab_config_t *cfg)
{
    uint32_t min = cfg->min_size ? cfg->min_size : 64;
    double factor = cfg->factor > 0 ? cfg->factor : 1.25;
    uint64_t size = min, page = cfg->arena.page_bytes;
    st_status_t st;

    memset(s, 0, sizeof(*s));
    if (min < 16 || factor <= 1.0 || min > page) {
        lg_error("slab: bad classes min_size=%u factor=%.3f page_bytes=%llu", min, factor,
                 (unsigned long long)page);
        return ST_ERR_INVALID;
    }
    for (;;) {
        uint64_t next;

        if (s->sl_n_classes == CD_SLAB_MAX_CLASSES) {
            lg_error("slab: too many classes min_size=%u factor=%.3f page_bytes=%llu max=%d", min,
                     factor, (unsigned long long)page, CD_SLAB_MAX_CLASSES);
            return ST_ERR_INVALID;
        }
        s->sl_classes[s->sl_n_classes].sc_size = (uint32_t)size;
        s->sl_classes[s->sl_n_classes].sc_slots = (uint32_t)(page / size);
        s->sl_n_classes++;
        if (size == page) {
            break;
        }
        next = ((uint64_t)(size * factor) + 15) & ~(uint64_t)15;
        if (next < size + 16) {
            next = size + 16;
        }
        size = next < page ? next : page;
    }
    st = cd_arena_init(&s->sl_arena, &cfg->arena);
    if (st != ST_OK) {
        return st;
    }
    s->sl_n_pages = (uint64_t)s->sl_arena.ar_n_chunks * s->sl_arena.ar_pages_per_chunk;
    s->sl_meta = s->sl_n_pages * sizeof(cd_slab_page_t);
    st = cd_budget_charge_meta(cfg->arena.budget, s->sl_meta);
    if (st != ST_OK) {
        lg_error("slab: page table does not fit in the memory budget bytes=%llu",
                 (unsigned long long)s->sl_meta);
        goto err_arena;
    }
    s->sl_pages = calloc(s->sl_n_pages, sizeof(cd_slab_page_t));
    if (s->sl_pages == NULL) {
        st = ST_ERR_NOMEM;
        cd_budget_release_meta(cfg->arena.budget, s->sl_meta);
        goto err_arena;
    }
    for (uint64_t i = 0; i < s->sl_n_pages; i++) {
        s->sl_pages[i].sp_cls = SP_FREE;
    }
    return ST_OK;

err_arena:
    cd_arena_destroy(&s->sl_arena);
    return st;
}

void cd_slab_destroy(cd_slab_t *s)
{
    cd_budget_t *b = s->sl_arena.ar_budget;

    if (s->sl_pages == NULL) {
        return;
    }
    for (uint64_t i = 0; i < s->sl_n_pages; i++) {
        free(s->sl_pages[i].sp_bits);
    }
    free(s->sl_pages);
    cd_budget_release_meta(b, s->sl_meta);
    cd_arena_destroy(&s->sl_arena);
    memset(s, 0, sizeof(*s));
}

void cd_slab_set_evictor(cd_slab_t *s, const cd_slab_evictor_t *ev)
{
    s->sl_evictor = *ev;
}

uint32_t cd_slab_class_for(const cd_slab_t *s, uint64_t len)
{
    uint32_t lo = 0, hi = s->sl_n_classes;

    if (len > s->sl_classes[s->sl_n_classes - 1].sc_size) {
        return CD_SLAB_LARGE;
    }
    while (lo < hi) { /* first class with size >= len */
        uint32_t mid = (lo + hi) / 2;

        if (s->sl_classes[mid].sc_size >= len) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

static void sp_list_remove(cd_slab_class_t *c, cd_slab_page_t *p)
{
    CD_LIST_REMOVE(c->sc_partial, p, sp_prev, sp_next);
    p->sp_prev = p->sp_next = NULL;
}

static void sp_list_push(cd_slab_class_t *c, cd_slab_page_t *p)
{
    CD_LIST_PUSH(c->sc_partial, p, sp_prev, sp_next);
}

/* Gives class ci a fresh page. */
static st_status_t sl_new_page(cd_slab_t *s, uint32_t ci)
{
    cd_slab_class_t *c = &s->sl_classes[ci];
    size_t words = (c->sc_slots + 63) / 64;
    uint64_t pi;
    cd_slab_page_t *p;
    st_status_t st;

    st = cd_budget_charge_meta(s->sl_arena.ar_budget, words * 8);
    if (st != ST_OK) {
        return st;
    }
    st = cd_arena_pages_alloc(&s->sl_arena, 1, &pi);
    if (st != ST_OK) {
        cd_budget_release_meta(s->sl_arena.ar_budget, words * 8);
        return st;
    }
    p = &s->sl_pages[pi];
    p->sp_bits = malloc(words * 8);
    if (p->sp_bits == NULL) {
        cd_arena_pages_free(&s->sl_arena, pi, 1);
        cd_budget_release_meta(s->sl_arena.ar_budget, words * 8);
        return ST_ERR_NOMEM;
    }
    memset(p->sp_bits, 0xff, words * 8);
    if (c->sc_slots % 64 != 0) {
        p->sp_bits[words - 1] = (1ull << (c->sc_slots % 64)) - 1;
    }
    p->sp_cls = ci;
    p->sp_nfree = c->sc_slots;
    p->sp_hint = 0;
    c->sc_pages++;
    sp_list_push(c, p);
    return ST_OK;
}

static void sl_fill(cd_slab_t *s, cd_extent_t *e, uint64_t offset, uint64_t size, uint32_t cls)
{
    e->offset = offset;
    e->size = size;
    e->gen = ++s->sl_gen;
    e->region = (uint32_t)(offset / s->sl_arena.ar_chunk_bytes);
    e->cls = cls;
    s->sl_used_bytes += size;
}

/* One attempt without eviction. */
static st_status_t sl_try_alloc(cd_slab_t *s, uint64_t len, uint32_t ci, cd_extent_t *e)
{
    uint64_t page_bytes = s->sl_arena.ar_page_bytes;
    st_status_t st;

    if (ci == CD_SLAB_LARGE) {
        uint32_t np = (uint32_t)((len + page_bytes - 1) / page_bytes);
        uint64_t pi;

        st = cd_arena_pages_alloc(&s->sl_arena, np, &pi);
        if (st != ST_OK) {
            return st;
        }
        s->sl_pages[pi].sp_cls = CD_SLAB_LARGE;
        s->sl_pages[pi].sp_npages = np;
        for (uint32_t i = 1; i < np; i++) {
            s->sl_pages[pi + i].sp_cls = SP_LARGE_TAIL;
        }
        s->sl_large_extents++;
        s->sl_large_pages += np;
        sl_fill(s, e, pi * page_bytes, (uint64_t)np * page_bytes, CD_SLAB_LARGE);
        return ST_OK;
    }

    cd_slab_class_t *c = &s->sl_classes[ci];
    cd_slab_page_t *p;
    uint32_t w, slot;

    if (c->sc_partial == NULL) {
        st = sl_new_page(s, ci);
        if (st != ST_OK) {
            return st;
        }
    }
    p = c->sc_partial;
    for (w = p->sp_hint; p->sp_bits[w] == 0; w = (w + 1) % ((c->sc_slots + 63) / 64)) {
    }
    slot = w * 64 + (uint32_t)__builtin_ctzll(p->sp_bits[w]);
    p->sp_bits[w] &= p->sp_bits[w] - 1;
    p->sp_hint = w;
    if (--p->sp_nfree == 0) {
        sp_list_remove(c, p);
    }
    c->sc_used++;
    c->sc_allocs++;
    sl_fill(s, e, (uint64_t)(p - s->sl_pages) * page_bytes + (uint64_t)slot * c->sc_size,
            c->sc_size, ci);
    return ST_OK;
}

st_status_t cd_slab_alloc(cd_slab_t *s, uint64_t len, cd_extent_t *ext_p, char *msg)
{
    uint32_t ci;
    st_status_t st;
    uint64_t arena, meta, limit, evictable;

    if (len == 0 || len > s->sl_arena.ar_chunk_bytes) {
        if (msg != NULL) {
            snprintf(msg, CD_SLAB_MSG_LEN, "extent of %llu bytes refused: sizes go from 1 to %zu",
                     (unsigned long long)len, s->sl_arena.ar_chunk_bytes);
        }
        return ST_ERR_INVALID;
    }
    ci = cd_slab_class_for(s, len);
    for (;;) {
        st = sl_try_alloc(s, len, ci, ext_p);
        if (st != ST_ERR_EXHAUSTED) {
            return st;
        }
        if (s->sl_evictor.evict == NULL || !s->sl_evictor.evict(s->sl_evictor.ctx)) {
            break;
        }
        s->sl_evictions++;
    }
    s->sl_exhausted++;
    cd_budget_read(s->sl_arena.ar_budget, &arena, &meta, &limit);
    evictable = s->sl_evictor.evictable != NULL ? s->sl_evictor.evictable(s->sl_evictor.ctx) : 0;
    if (msg != NULL) {
        snprintf(msg, CD_SLAB_MSG_LEN,
                 "memory exhausted: requested=%llu used=%llu (arena %llu + index %llu) "
                 "limit=%llu evictable=%llu; everything else is leased, pinned or reserved",
                 (unsigned long long)len, (unsigned long long)(arena + meta),
                 (unsigned long long)arena, (unsigned long long)meta, (unsigned long long)limit,
                 (unsigned long long)evictable);
    }
    lg_warn_ratelimited("arena exhausted requested=%llu used=%llu limit=%llu evictable=%llu",
                        (unsigned long long)len, (unsigned long long)(arena + meta),
                        (unsigned long long)limit, (unsigned long long)evictable);
    return ST_ERR_EXHAUSTED;
}

st_status_t cd_slab_free(cd_slab_t *s, const cd_extent_t *e)
{
    uint64_t page_bytes = s->sl_arena.ar_page_bytes;
    uint64_t pi = e->offset / page_bytes;
    cd_slab_page_t *p;

    if (pi >= s->sl_n_pages) {
        goto err_foreign;
    }
    p = &s->sl_pages[pi];
    if (e->cls == CD_SLAB_LARGE) {
        if (p->sp_cls != CD_SLAB_LARGE || e->offset % page_bytes != 0) {
            goto err_foreign;
        }
        for (uint32_t i = 0; i < p->sp_npages; i++) {
            s->sl_pages[pi + i].sp_cls = SP_FREE;
        }
        cd_arena_pages_free(&s->sl_arena, pi, p->sp_npages);
        s->sl_large_extents--;
        s->sl_large_pages -= p->sp_npages;
        s->sl_used_bytes -= (uint64_t)p->sp_npages * page_bytes;
        p->sp_npages = 0;
        return ST_OK;
    }
    if (e->cls >= s->sl_n_classes || p->sp_cls != e->cls) {
        goto err_foreign;
    }

    cd_slab_class_t *c = &s->sl_classes[e->cls];
    uint64_t in_page = e->offset % page_bytes;
    uint32_t slot = (uint32_t)(in_page / c->sc_size);

    if (in_page % c->sc_size != 0 || slot >= c->sc_slots ||
        (p->sp_bits[slot / 64] >> (slot % 64)) & 1) {
        goto err_foreign;
    }
    p->sp_bits[slot / 64] |= 1ull << (slot % 64);
    if (p->sp_nfree++ == 0) {
        sp_list_push(c, p);
    }
    c->sc_used--;
    c->sc_frees++;
    s->sl_used_bytes -= c->sc_size;
    if (p->sp_nfree == c->sc_slots) {
        /* The page is empty: it goes back to the arena for any class. */
        sp_list_remove(c, p);
        free(p->sp_bits);
        p->sp_bits = NULL;
        p->sp_cls = SP_FREE;
        c->sc_pages--;
        cd_budget_release_meta(s->sl_arena.ar_budget, ((c->sc_slots + 63) / 64) * 8);
        cd_arena_pages_free(&s->sl_arena, pi, 1);
    }
    return ST_OK;

err_foreign:
    lg_error("slab: free of an extent that is not allocated offset=%llu cls=%u gen=%llu",
             (unsigned long long)e->offset, e->cls, (unsigned long long)e->gen);
    return ST_ERR_INTERNAL;
}
