/* arena.c - the memory budget, the reserved mapping and its chunks. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "log.h"
#include "arena.h"

#define AR_HUGE_2M (2u << 20)

void cd_budget_init(cd_budget_t *b, uint64_t limit, uint64_t meta_reserve)
{
    memset(b, 0, sizeof(*b));
    pthread_mutex_init(&b->bg_lock, NULL);
    b->bg_limit = limit;
    b->bg_meta_reserve = meta_reserve < limit ? meta_reserve : limit;
}

void cd_budget_destroy(cd_budget_t *b)
{
    pthread_mutex_destroy(&b->bg_lock);
}

/* Charges bytes to the budget's arena (arena) or metadata share, or
 * refuses with ST_ERR_EXHAUSTED past the limit; the arena may not take the
 * room kept for metadata (bg_meta_reserve). */
static st_status_t budget_charge(cd_budget_t *b, int arena, uint64_t bytes)
{
    st_status_t st = ST_OK;

    pthread_mutex_lock(&b->bg_lock);
    if (b->bg_arena + b->bg_meta + bytes > b->bg_limit ||
        (arena && b->bg_arena + bytes > b->bg_limit - b->bg_meta_reserve)) {
        st = ST_ERR_EXHAUSTED;
    } else if (arena) {
        b->bg_arena += bytes;
    } else {
        b->bg_meta += bytes;
    }
    pthread_mutex_unlock(&b->bg_lock);
    return st;
}

/* Gives back bytes of *used (the arena's or the metadata's share), at most all of it. */
static void budget_release(cd_budget_t *b, uint64_t *used, uint64_t bytes)
{
    pthread_mutex_lock(&b->bg_lock);
    *used -= bytes < *used ? bytes : *used;
    pthread_mutex_unlock(&b->bg_lock);
}

st_status_t cd_budget_charge_meta(cd_budget_t *b, uint64_t bytes)
{
    return budget_charge(b, 0, bytes);
}

void cd_budget_release_meta(cd_budget_t *b, uint64_t bytes)
{
    budget_release(b, &b->bg_meta, bytes);
}

st_status_t cd_budget_charge_arena(cd_budget_t *b, uint64_t bytes)
{
    return budget_charge(b, 1, bytes);
}

void cd_budget_release_arena(cd_budget_t *b, uint64_t bytes)
{
    budget_release(b, &b->bg_arena, bytes);
}

void cd_budget_read(cd_budget_t *b, uint64_t *arena_p, uint64_t *meta_p, uint64_t *limit_p)
{
    pthread_mutex_lock(&b->bg_lock);
    if (arena_p != NULL) {
        *arena_p = b->bg_arena;
    }
    if (meta_p != NULL) {
        *meta_p = b->bg_meta;
    }
    if (limit_p != NULL) {
        *limit_p = b->bg_limit;
    }
    pthread_mutex_unlock(&b->bg_lock);
}

static st_status_t ar_map(cd_arena_t *a, size_t len)
{
    size_t align = a->ar_huge == CD_HUGE_OFF ? (size_t)sysconf(_SC_PAGESIZE) : AR_HUGE_2M;
    uint8_t *p;

    if (a->ar_huge == CD_HUGE_HUGETLB && a->ar_chunk_bytes % AR_HUGE_2M == 0) {
        /* No MAP_NORESERVE here: the kernel then reserves the huge pages
         * now, and a later fault cannot die of SIGBUS for want of one. */
        p = mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);
        if (p != MAP_FAILED) {
            a->ar_map = p;
            a->ar_map_len = len;
            a->ar_base = p;
            a->ar_hugetlb = 1;
            return ST_OK;
        }
    }
    if (a->ar_huge == CD_HUGE_HUGETLB) {
        lg_warn("arena: no hugetlb pages for the reservation (or chunk not a multiple of 2 MiB), "
                "using transparent huge pages bytes=%zu chunk_bytes=%zu errno=%d",
                len, a->ar_chunk_bytes, errno);
        a->ar_huge = CD_HUGE_THP;
    }
    /* Over-reserve by one alignment unit so that chunk 0 starts on a huge
     * page boundary. */
    p = mmap(NULL, len + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) {
        lg_error("arena: cannot reserve address space bytes=%zu errno=%d", len, errno);
        return ST_ERR_IO;
    }
    a->ar_map = p;
    a->ar_map_len = len + align;
    a->ar_base = (uint8_t *)(((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1));
    return ST_OK;
}

/* Frees the chunk tables, gives their metadata back and clears a. */
static void ar_tables_free(cd_arena_t *a)
{
    free(a->ar_chunk_base);
    free(a->ar_active);
    free(a->ar_free);
    free(a->ar_page_free);
    cd_budget_release_meta(a->ar_budget, a->ar_meta_bytes);
    memset(a, 0, sizeof(*a));
}

st_status_t cd_arena_init(cd_arena_t *a, const cd_arena_config_t *cfg)
{
    size_t n_chunks, n_pages;
    st_status_t st;

    memset(a, 0, sizeof(*a));
    if (cfg->budget == NULL || cfg->page_bytes < 4096 || cfg->page_bytes % 4096 != 0 ||
        cfg->chunk_bytes < cfg->page_bytes || cfg->chunk_bytes % cfg->page_bytes != 0 ||
        cfg->chunk_bytes / cfg->page_bytes > UINT32_MAX || cfg->reserve_bytes == 0) {
        lg_error("arena: bad geometry page_bytes=%zu chunk_bytes=%zu reserve_bytes=%zu "
                 "(page a multiple of 4096, chunk a multiple of page)",
                 cfg->page_bytes, cfg->chunk_bytes, cfg->reserve_bytes);
        return ST_ERR_INVALID;
    }
    n_chunks = (cfg->reserve_bytes + cfg->chunk_bytes - 1) / cfg->chunk_bytes;
    n_pages = n_chunks * (cfg->chunk_bytes / cfg->page_bytes);
    a->ar_chunk_bytes = cfg->chunk_bytes;
    a->ar_page_bytes = cfg->page_bytes;
    a->ar_pages_per_chunk = (uint32_t)(cfg->chunk_bytes / cfg->page_bytes);
    a->ar_n_chunks = (uint32_t)n_chunks;
    a->ar_huge = cfg->huge;
    a->ar_budget = cfg->budget;
    a->ar_region_added = cfg->region_added;
    a->ar_region_removed = cfg->region_removed;
    a->ar_cb_ctx = cfg->cb_ctx;
    if ((cfg->chunk_alloc == NULL) != (cfg->chunk_free == NULL)) {
        lg_error("arena: chunk_alloc and chunk_free go together");
        return ST_ERR_INVALID;
    }
    a->ar_chunk_alloc = cfg->chunk_alloc;
    a->ar_chunk_free = cfg->chunk_free;
    a->ar_chunk_ctx = cfg->chunk_ctx;
    a->ar_meta_bytes = n_chunks * (1 + sizeof(uint32_t)) + n_pages +
                       (cfg->chunk_alloc != NULL ? n_chunks * sizeof(uint8_t *) : 0);

    st = cd_budget_charge_meta(a->ar_budget, a->ar_meta_bytes);
    if (st != ST_OK) {
        lg_error("arena: page tables do not fit in the memory budget bytes=%llu",
                 (unsigned long long)a->ar_meta_bytes);
        return st;
    }
    a->ar_active = calloc(n_chunks, 1);
    a->ar_free = calloc(n_chunks, sizeof(uint32_t));
    a->ar_page_free = calloc(n_pages, 1);
    if (a->ar_active == NULL || a->ar_free == NULL || a->ar_page_free == NULL) {
        st = ST_ERR_NOMEM;
        goto err_free_tables;
    }
    if (a->ar_chunk_alloc != NULL) {
        /* Chunks come from the allocator, one by one: no reservation. */
        a->ar_chunk_base = calloc(n_chunks, sizeof(*a->ar_chunk_base));
        if (a->ar_chunk_base == NULL) {
            st = ST_ERR_NOMEM;
            goto err_free_tables;
        }
        return ST_OK;
    }
    st = ar_map(a, n_chunks * cfg->chunk_bytes);
    if (st != ST_OK) {
        goto err_free_tables;
    }
    return ST_OK;

err_free_tables:
    ar_tables_free(a);
    return st;
}

static void ar_chunk_release(cd_arena_t *a, uint32_t c)
{
    uint8_t *base = cd_arena_chunk(a, c);

    if (a->ar_region_removed != NULL) {
        a->ar_region_removed(a->ar_cb_ctx, c, base, a->ar_chunk_bytes);
    }
    if (a->ar_chunk_free != NULL) {
        a->ar_chunk_free(a->ar_chunk_ctx, c, base, a->ar_chunk_bytes);
        a->ar_chunk_base[c] = NULL;
    } else if (mmap(base, a->ar_chunk_bytes, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED |
                        (a->ar_hugetlb ? MAP_HUGETLB : MAP_NORESERVE),
                    -1, 0) == MAP_FAILED) {
        /* Mapping fresh PROT_NONE pages over the chunk frees its memory,
         * huge pages included; madvise + mprotect is the fallback. */
        madvise(base, a->ar_chunk_bytes, MADV_DONTNEED);
        mprotect(base, a->ar_chunk_bytes, PROT_NONE);
    }
    memset(a->ar_page_free + (size_t)c * a->ar_pages_per_chunk, 0, a->ar_pages_per_chunk);
    a->ar_active[c] = 0;
    a->ar_free[c] = 0;
    a->ar_n_empty--;
    a->ar_n_active--;
    a->ar_trims++;
    cd_budget_release_arena(a->ar_budget, a->ar_chunk_bytes);
}

void cd_arena_destroy(cd_arena_t *a)
{
    if (a->ar_active == NULL) {
        return;
    }
    for (uint32_t c = 0; c < a->ar_n_chunks; c++) {
        if (a->ar_active[c]) {
            ar_chunk_release(a, c);
        }
    }
    if (a->ar_map != NULL) {
        munmap(a->ar_map, a->ar_map_len);
    }
    ar_tables_free(a);
}

/* Commits chunk slot c. */
static st_status_t ar_chunk_commit(cd_arena_t *a, uint32_t c)
{
    uint8_t *base = a->ar_base + (size_t)c * a->ar_chunk_bytes;
    st_status_t st = cd_budget_charge_arena(a->ar_budget, a->ar_chunk_bytes);

    if (st != ST_OK) {
        return st;
    }
    if (a->ar_chunk_alloc != NULL) {
        void *p = NULL;

        st = a->ar_chunk_alloc(a->ar_chunk_ctx, c, a->ar_chunk_bytes, &p);
        if (st != ST_OK) {
            lg_error("arena: chunk allocation failed chunk=%u bytes=%zu: %s", c, a->ar_chunk_bytes,
                     st_strerror(st));
            cd_budget_release_arena(a->ar_budget, a->ar_chunk_bytes);
            return st;
        }
        base = p;
        a->ar_chunk_base[c] = base;
    } else if (mprotect(base, a->ar_chunk_bytes, PROT_READ | PROT_WRITE) != 0) {
        lg_error("arena: mprotect failed chunk=%u bytes=%zu errno=%d", c, a->ar_chunk_bytes, errno);
        cd_budget_release_arena(a->ar_budget, a->ar_chunk_bytes);
        return ST_ERR_IO;
    }
    if (a->ar_huge == CD_HUGE_THP && a->ar_chunk_alloc == NULL) {
        (void)madvise(base, a->ar_chunk_bytes, MADV_HUGEPAGE); /* advice only */
    }
    memset(a->ar_page_free + (size_t)c * a->ar_pages_per_chunk, 1, a->ar_pages_per_chunk);
    a->ar_active[c] = 1;
    a->ar_free[c] = a->ar_pages_per_chunk;
    a->ar_n_empty++;
    a->ar_n_active++;
    a->ar_grows++;
    if (a->ar_region_added != NULL) {
        a->ar_region_added(a->ar_cb_ctx, c, base, a->ar_chunk_bytes);
    }
    return ST_OK;
}

/* First fit of npages free pages in chunk c; returns the run's first page
 * index inside the chunk, or -1. */
static int64_t ar_find_run(const cd_arena_t *a, uint32_t c, uint32_t npages)
{
    const uint8_t *pf = a->ar_page_free + (size_t)c * a->ar_pages_per_chunk;
    uint32_t run = 0;

    for (uint32_t p = 0; p < a->ar_pages_per_chunk; p++) {
        run = pf[p] ? run + 1 : 0;
        if (run == npages) {
            return (int64_t)(p + 1 - npages);
        }
    }
    return -1;
}

st_status_t cd_arena_pages_alloc(cd_arena_t *a, uint32_t npages, uint64_t *page_p)
{
    int64_t at = -1;
    uint32_t c;
    st_status_t st;

    if (npages == 0 || npages > a->ar_pages_per_chunk) {
        return ST_ERR_INVALID;
    }
    for (c = 0; c < a->ar_n_chunks; c++) {
        if (a->ar_active[c] && a->ar_free[c] >= npages) {
            at = ar_find_run(a, c, npages);
            if (at >= 0) {
                break;
            }
        }
    }
    if (at < 0) {
        for (c = 0; c < a->ar_n_chunks && a->ar_active[c]; c++) {
        }
        if (c == a->ar_n_chunks) {
            return ST_ERR_EXHAUSTED;
        }
        st = ar_chunk_commit(a, c);
        if (st != ST_OK) {
            return st;
        }
        at = 0;
    }
    memset(a->ar_page_free + (size_t)c * a->ar_pages_per_chunk + at, 0, npages);
    if (a->ar_free[c] == a->ar_pages_per_chunk) {
        a->ar_n_empty--;
    }
    a->ar_free[c] -= npages;
    *page_p = (uint64_t)c * a->ar_pages_per_chunk + (uint64_t)at;
    return ST_OK;
}

void cd_arena_pages_free(cd_arena_t *a, uint64_t page, uint32_t npages)
{
    uint32_t c = (uint32_t)(page / a->ar_pages_per_chunk);

    memset(a->ar_page_free + page, 1, npages);
    a->ar_free[c] += npages;
    if (a->ar_free[c] == a->ar_pages_per_chunk) {
        a->ar_n_empty++;
    }
}

size_t cd_arena_trim(cd_arena_t *a, uint32_t keep)
{
    size_t bytes = 0;
    uint32_t kept = 0;

    for (uint32_t c = 0; c < a->ar_n_chunks; c++) {
        if (a->ar_active[c] && a->ar_free[c] == a->ar_pages_per_chunk && kept++ >= keep) {
            ar_chunk_release(a, c);
            bytes += a->ar_chunk_bytes;
        }
    }
    return bytes;
}

uint64_t cd_arena_resident(const cd_arena_t *a)
{
    size_t os_page = (size_t)sysconf(_SC_PAGESIZE);
    size_t n = a->ar_chunk_bytes / os_page;
    unsigned char *vec = malloc(n);
    uint64_t resident = 0;

    if (vec == NULL) {
        return 0;
    }
    for (uint32_t c = 0; c < a->ar_n_chunks; c++) {
        if (!a->ar_active[c]) {
            continue;
        }
        if (mincore(cd_arena_chunk(a, c), a->ar_chunk_bytes, vec) != 0) {
            resident = 0;
            break;
        }
        for (size_t i = 0; i < n; i++) {
            resident += (vec[i] & 1) ? os_page : 0;
        }
    }
    free(vec);
    return resident;
}
