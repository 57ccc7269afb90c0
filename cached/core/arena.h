/*
 * arena.h - the process memory budget and the per-namespace arena.
 *
 * The budget is global to the process: one limit, and what every namespace
 * holds against it, in two parts:
 *   - arena bytes: chunks of the arenas that are committed (readable and
 *     writable, registered with the transport);
 *   - metadata bytes: the index structures (blocks, tree nodes, object
 *     descriptors, hash tables, leases, sessions, page tables of the slab),
 *     charged when allocated and released when freed.
 * The sum never exceeds the limit: every charge that would pass it is refused
 * with ST_ERR_EXHAUSTED. Arena growth must in addition leave meta_reserve
 * bytes of the limit free, so that the index can still grow (or be evicted
 * into shape) when the arenas have taken everything else.
 *
 * An arena is one mapping per namespace, reserved up front (PROT_NONE,
 * MAP_NORESERVE: address space only) and committed in chunks of chunk_bytes.
 * Each chunk is one transport region, announced through region_added() when
 * it is committed and region_removed() before it is given back; a region is
 * registered once, never per request. A chunk is carved into pages of
 * page_bytes; the slab allocator (slab.h) owns what a page holds.
 *
 * Huge pages: CD_HUGE_THP asks for transparent huge pages with
 * madvise(MADV_HUGEPAGE) on each chunk (the default); CD_HUGE_HUGETLB maps
 * the reservation with MAP_HUGETLB (without MAP_NORESERVE, so the kernel
 * reserves the huge pages up front and a fault can never SIGBUS) and falls
 * back to THP with a warning when the kernel has too few huge pages or the
 * chunk is not a multiple of 2 MiB.
 *
 * Thread safety: the budget functions may be called from any thread. An
 * arena is not thread-safe; its namespace's lock serialises every call.
 */
#ifndef STRATA_CACHED_ARENA_H
#define STRATA_CACHED_ARENA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "strata/status.h"

typedef struct cd_budget {
    pthread_mutex_t bg_lock;
    uint64_t bg_limit;        /* bytes, the process-wide limit */
    uint64_t bg_meta_reserve; /* arena growth leaves this much unused */
    uint64_t bg_arena;        /* committed arena bytes, all namespaces */
    uint64_t bg_meta;         /* metadata bytes, all namespaces */
} cd_budget_t;

/* Sets up a budget. meta_reserve must be below limit (it is capped). */
void cd_budget_init(cd_budget_t *b, uint64_t limit, uint64_t meta_reserve);
void cd_budget_destroy(cd_budget_t *b);

/*
 * Charges bytes of metadata. Returns ST_OK, or ST_ERR_EXHAUSTED (nothing
 * charged) when arena + meta + bytes would pass the limit.
 */
st_status_t cd_budget_charge_meta(cd_budget_t *b, uint64_t bytes);
void cd_budget_release_meta(cd_budget_t *b, uint64_t bytes);

/*
 * Charges bytes of arena. Returns ST_OK, or ST_ERR_EXHAUSTED when the total
 * would pass the limit or the arenas would eat into the metadata reserve.
 */
st_status_t cd_budget_charge_arena(cd_budget_t *b, uint64_t bytes);
void cd_budget_release_arena(cd_budget_t *b, uint64_t bytes);

/* Reads the three numbers consistently. Any pointer may be NULL. */
void cd_budget_read(cd_budget_t *b, uint64_t *arena_p, uint64_t *meta_p, uint64_t *limit_p);

typedef enum cd_huge_mode {
    CD_HUGE_OFF = 0,
    CD_HUGE_THP = 1,
    CD_HUGE_HUGETLB = 2,
} cd_huge_mode_t;

/* A transport region: one committed chunk of an arena. */
typedef void (*cd_region_fn)(void *ctx, uint32_t region, void *base, size_t len);

/*
 * Where chunks come from when the arena does not map them itself: the
 * daemon's transport allocates registered memory for each (UCX then places it
 * where peers on the host read it directly). alloc returns len bytes in
 * *base_p (ST_OK) or an error, which the allocation that needed the chunk
 * returns; free gives them back. With these, chunks are not contiguous and
 * the arena keeps a table of their addresses.
 */
typedef st_status_t (*cd_chunk_alloc_fn)(void *ctx, uint32_t chunk, size_t len, void **base_p);
typedef void (*cd_chunk_free_fn)(void *ctx, uint32_t chunk, void *base, size_t len);

typedef struct cd_arena_config {
    size_t reserve_bytes;        /* address space to reserve; rounded up to chunks */
    size_t chunk_bytes;          /* commit unit = region size; a multiple of page_bytes */
    size_t page_bytes;           /* slab page; a multiple of 4096 */
    cd_huge_mode_t huge;         /* see above */
    cd_budget_t *budget;         /* required */
    cd_region_fn region_added;   /* may be NULL */
    cd_region_fn region_removed; /* may be NULL; called before the chunk goes */
    void *cb_ctx;
    cd_chunk_alloc_fn chunk_alloc; /* NULL (both): the arena maps its chunks */
    cd_chunk_free_fn chunk_free;
    void *chunk_ctx;
} cd_arena_config_t;

typedef struct cd_arena {
    uint8_t *ar_base;        /* start of the reservation (chunk 0); NULL with chunk_alloc */
    uint8_t **ar_chunk_base; /* with chunk_alloc: each committed chunk's address */
    void *ar_map;            /* what mmap returned, for munmap */
    size_t ar_map_len;
    size_t ar_chunk_bytes;
    size_t ar_page_bytes;
    uint32_t ar_pages_per_chunk;
    uint32_t ar_n_chunks; /* chunk slots in the reservation */
    uint32_t ar_n_active;
    uint32_t ar_n_empty;    /* committed chunks whose pages are all free */
    uint8_t *ar_active;     /* per chunk: 1 committed, 0 not */
    uint32_t *ar_free;      /* per chunk: free pages */
    uint8_t *ar_page_free;  /* per page: 1 free (in an active chunk), 0 otherwise */
    uint64_t ar_meta_bytes; /* the three arrays above, charged as metadata */
    int ar_hugetlb;
    cd_huge_mode_t ar_huge;
    cd_budget_t *ar_budget;
    cd_region_fn ar_region_added;
    cd_region_fn ar_region_removed;
    void *ar_cb_ctx;
    cd_chunk_alloc_fn ar_chunk_alloc;
    cd_chunk_free_fn ar_chunk_free;
    void *ar_chunk_ctx;
    uint64_t ar_grows; /* chunks committed over the arena's life */
    uint64_t ar_trims; /* chunks given back */
} cd_arena_t;

/*
 * Reserves the address space and the page tables. Commits nothing yet.
 * Returns ST_OK; ST_ERR_INVALID for sizes that do not fit together (logged,
 * with the values); ST_ERR_EXHAUSTED when the page tables do not fit in the
 * budget; ST_ERR_NOMEM; ST_ERR_IO when mmap fails.
 */
st_status_t cd_arena_init(cd_arena_t *a, const cd_arena_config_t *cfg);

/* Announces region_removed() for each committed chunk, unmaps everything and
 * returns all charges to the budget. */
void cd_arena_destroy(cd_arena_t *a);

/*
 * Allocates a run of npages contiguous pages inside one chunk: first from
 * free pages of committed chunks, then by committing a new chunk (budget
 * permitting). *page_p receives the index of the first page (arena-wide).
 * Returns ST_OK; ST_ERR_INVALID if npages is 0 or above a chunk;
 * ST_ERR_EXHAUSTED when no run is free and no chunk can be committed
 * (budget or reservation full); ST_ERR_IO if mprotect fails.
 */
st_status_t cd_arena_pages_alloc(cd_arena_t *a, uint32_t npages, uint64_t *page_p);

/* Returns npages pages starting at page to the free pool. */
void cd_arena_pages_free(cd_arena_t *a, uint64_t page, uint32_t npages);

/* Gives back the committed chunks whose pages are all free, keeping `keep`
 * of them committed (to avoid giving back and re-registering a chunk at
 * every swing): region_removed, MADV_DONTNEED, PROT_NONE, budget released.
 * Returns the bytes given back. */
size_t cd_arena_trim(cd_arena_t *a, uint32_t keep);

/* Committed bytes of this arena. */
static inline uint64_t cd_arena_committed(const cd_arena_t *a)
{
    return (uint64_t)a->ar_n_active * a->ar_chunk_bytes;
}

/* Address of an arena-wide byte offset (an extent never spans chunks). */
static inline void *cd_arena_ptr(const cd_arena_t *a, uint64_t offset)
{
    if (a->ar_chunk_base != NULL) {
        return a->ar_chunk_base[offset / a->ar_chunk_bytes] + offset % a->ar_chunk_bytes;
    }
    return a->ar_base + offset;
}

/* Address of committed chunk c. */
static inline void *cd_arena_chunk(const cd_arena_t *a, uint32_t c)
{
    return a->ar_chunk_base != NULL ? (void *)a->ar_chunk_base[c]
                                    : (void *)(a->ar_base + (size_t)c * a->ar_chunk_bytes);
}

/* Bytes of the arena's committed chunks that are resident in RAM, measured
 * with mincore(). Returns 0 if mincore fails. */
uint64_t cd_arena_resident(const cd_arena_t *a);

#endif /* STRATA_CACHED_ARENA_H */
