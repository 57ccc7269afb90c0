/*
 * slab.h - the slab allocator that carves a namespace's arena into extents.
 *
 * Size classes go from min_size (64 B) up to one page, each about `factor`
 * (1.25) times the last, rounded to 16 bytes. A page of the arena belongs to
 * one class while it holds any extent of it and returns to the arena's free
 * pages when its last extent is freed, so memory moves between classes.
 * An object larger than a page gets a large extent: a run of whole pages
 * inside one chunk (so it lies in one transport region); the largest extent
 * is therefore one chunk.
 *
 * The free slots of a page are a bitmap kept outside the arena: the arena
 * holds only object bytes, so a late one-sided write into a freed extent can
 * damage object bytes (caught by checksums) but never the allocator.
 *
 * Allocation order: a free slot of the class, then a fresh page (from free
 * pages, then by committing a new chunk within the budget), then eviction
 * through the evictor callback, one block at a time, retrying after each;
 * when nothing is left to evict it fails with ST_ERR_EXHAUSTED and a message
 * with the numbers (requested, used, limit, evictable).
 *
 * Every allocation carries a new generation number (a per-slab counter), so
 * an extent that was freed and reused never shows the same generation twice.
 *
 * Thread safety: none; the namespace lock serialises every call. The evictor
 * is called with that lock held and must not take it again.
 */
#ifndef STRATA_CACHED_SLAB_H
#define STRATA_CACHED_SLAB_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"

#define CD_SLAB_MAX_CLASSES 96
#define CD_SLAB_LARGE       0xFFu /* class of a large extent */
#define CD_SLAB_MSG_LEN     256

typedef struct cd_extent {
    uint64_t offset; /* arena-wide byte offset */
    uint64_t size;   /* bytes held: the class size, or the page run */
    uint64_t gen;    /* generation of this allocation */
    uint32_t region; /* chunk (transport region) that holds the extent */
    uint32_t cls;    /* size class, or CD_SLAB_LARGE */
} cd_extent_t;

/* The eviction hook: evict() frees the least recently used evictable block
 * and returns 1, or returns 0 when nothing can be evicted. evictable() gives
 * the bytes that eviction could still free (for error messages). */
typedef struct cd_slab_evictor {
    int (*evict)(void *ctx);
    uint64_t (*evictable)(void *ctx);
    void *ctx;
} cd_slab_evictor_t;

typedef struct cd_slab_page {
    uint32_t sp_cls;    /* class, CD_SLAB_LARGE (head of a run), or SP_* below */
    uint32_t sp_npages; /* pages in a large run (head only) */
    uint32_t sp_nfree;  /* free slots */
    uint32_t sp_hint;   /* bitmap word to search first */
    uint64_t *sp_bits;  /* 1 = slot free */
    struct cd_slab_page *sp_prev, *sp_next; /* the class's list of pages with free slots */
} cd_slab_page_t;

typedef struct cd_slab_class {
    uint32_t sc_size;
    uint32_t sc_slots; /* slots per page */
    cd_slab_page_t *sc_partial;
    uint64_t sc_pages;
    uint64_t sc_used; /* slots in use */
    uint64_t sc_allocs;
    uint64_t sc_frees;
} cd_slab_class_t;

typedef struct cd_slab_config {
    cd_arena_config_t arena;
    uint32_t min_size; /* smallest class, >= 16; 0 means 64 */
    double factor;     /* growth between classes, > 1; 0 means 1.25 */
} cd_slab_config_t;

typedef struct cd_slab {
    cd_arena_t sl_arena;
    cd_slab_class_t sl_classes[CD_SLAB_MAX_CLASSES];
    uint32_t sl_n_classes;
    cd_slab_page_t *sl_pages;
    uint64_t sl_n_pages;
    uint64_t sl_gen;
    cd_slab_evictor_t sl_evictor;
    uint64_t sl_large_extents;
    uint64_t sl_large_pages;
    uint64_t sl_used_bytes; /* bytes of live extents (sizes, not requests) */
    uint64_t sl_meta;       /* page table and bitmaps, charged as metadata */
    uint64_t sl_evictions;  /* evictor calls that freed something */
    uint64_t sl_exhausted;  /* allocations refused */
} cd_slab_t;

/*
 * Builds the classes and the arena. Returns ST_OK, or what cd_arena_init()
 * returns, or ST_ERR_INVALID when the classes do not fit in
 * CD_SLAB_MAX_CLASSES (logged with the values).
 */
st_status_t cd_slab_init(cd_slab_t *s, const cd_slab_config_t *cfg);

/* Frees everything; extents still in use are simply dropped. */
void cd_slab_destroy(cd_slab_t *s);

/* Installs the eviction hook (none by default: exhaustion fails at once). */
void cd_slab_set_evictor(cd_slab_t *s, const cd_slab_evictor_t *ev);

/*
 * Allocates an extent of at least len bytes (1 .. one chunk).
 * @param[out] ext_p  written only on success.
 * @param[out] msg    if not NULL, on ST_ERR_EXHAUSTED or ST_ERR_INVALID
 *                    receives a sentence for a person (CD_SLAB_MSG_LEN).
 * Returns ST_OK; ST_ERR_INVALID when len is 0 or above a chunk;
 * ST_ERR_EXHAUSTED when neither free space, growth nor eviction gives room;
 * ST_ERR_NOMEM when a page bitmap cannot be allocated; ST_ERR_IO.
 */
st_status_t cd_slab_alloc(cd_slab_t *s, uint64_t len, cd_extent_t *ext_p, char *msg);

/* Frees an extent returned by cd_slab_alloc(). A double free or a foreign
 * extent is logged and ignored (returns ST_ERR_INTERNAL). */
st_status_t cd_slab_free(cd_slab_t *s, const cd_extent_t *ext);

/* Class index that serves len bytes, or CD_SLAB_LARGE. */
uint32_t cd_slab_class_for(const cd_slab_t *s, uint64_t len);

/* Offset of an extent inside its region (chunk). */
static inline uint64_t cd_extent_region_offset(const cd_slab_t *s, const cd_extent_t *e)
{
    return e->offset - (uint64_t)e->region * s->sl_arena.ar_chunk_bytes;
}

/* Address of an extent. */
static inline void *cd_extent_ptr(const cd_slab_t *s, const cd_extent_t *e)
{
    return cd_arena_ptr(&s->sl_arena, e->offset);
}

#endif /* STRATA_CACHED_SLAB_H */
