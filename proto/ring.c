/*
 * ring.c - consistent hashing with virtual nodes; see ring.h.
 *
 * The points live in a table that ring_rebuild() replaces with one atomic
 * store; replaced tables are chained behind the new one and freed with the
 * ring, so a lookup that loaded the old pointer keeps reading valid memory.
 */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

struct ring_table {
    size_t n_points;
    uint32_t n_named;      /* distinct nodes with points */
    ring_table_t *retired; /* the table this one replaced */
    ring_point_t points[]; /* n_points, sorted */
};

static int ring_point_cmp(const void *a, const void *b)
{
    const ring_point_t *x = a, *y = b;

    if (x->point != y->point) {
        return x->point < y->point ? -1 : 1;
    }
    return (x->node > y->node) - (x->node < y->node);
}

/* A sorted table of the points of names[0..n) (NULL: none); NULL on ENOMEM. */
static ring_table_t *ring_table_build(const char *const *names, uint32_t n, uint32_t vnodes)
{
    ring_table_t *t;
    uint32_t named = 0;
    size_t k = 0;

    for (uint32_t i = 0; i < n; i++) {
        named += names[i] != NULL;
    }
    t = malloc(sizeof(*t) + sizeof(ring_point_t) * (size_t)named * vnodes);
    if (t == NULL) {
        return NULL;
    }
    for (uint32_t i = 0; i < n; i++) {
        size_t len;
        uint8_t buf[512];

        if (names[i] == NULL) {
            continue;
        }
        len = strlen(names[i]);
        if (len > sizeof(buf) - 4) {
            len = sizeof(buf) - 4;
        }
        memcpy(buf, names[i], len);
        for (uint32_t v = 0; v < vnodes; v++) {
            buf[len] = (uint8_t)v;
            buf[len + 1] = (uint8_t)(v >> 8);
            buf[len + 2] = (uint8_t)(v >> 16);
            buf[len + 3] = (uint8_t)(v >> 24);
            t->points[k].point = XXH3_64bits(buf, len + 4);
            t->points[k].node = i;
            k++;
        }
    }
    qsort(t->points, k, sizeof(t->points[0]), ring_point_cmp);
    t->n_points = k;
    t->n_named = named;
    t->retired = NULL;
    return t;
}

/* ST_ERR_INVALID for a duplicate among the non-NULL names; the count of named ones. */
static st_status_t ring_check_names(const char *const *names, uint32_t n, uint32_t *named_p)
{
    uint32_t named = 0;

    for (uint32_t i = 0; i < n; i++) {
        if (names[i] == NULL) {
            continue;
        }
        named++;
        for (uint32_t j = 0; j < i; j++) {
            if (names[j] != NULL && strcmp(names[i], names[j]) == 0) {
                return ST_ERR_INVALID;
            }
        }
    }
    *named_p = named;
    return ST_OK;
}

st_status_t ring_init(ring_t *ring, const char *const *names, uint32_t n_nodes, uint32_t vnodes)
{
    uint32_t named;

    memset(ring, 0, sizeof(*ring));
    if (n_nodes == 0 || n_nodes > RING_MAX_NODES || vnodes == 0 || vnodes > 4096) {
        return ST_ERR_INVALID;
    }
    for (uint32_t i = 0; i < n_nodes; i++) {
        if (names[i] == NULL) {
            return ST_ERR_INVALID;
        }
    }
    if (ring_check_names(names, n_nodes, &named) != ST_OK) {
        return ST_ERR_INVALID;
    }
    ring->table = ring_table_build(names, n_nodes, vnodes);
    ring->up = malloc(sizeof(*ring->up) * RING_MAX_NODES);
    if (ring->table == NULL || ring->up == NULL) {
        free(ring->table);
        free(ring->up);
        memset(ring, 0, sizeof(*ring));
        return ST_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < RING_MAX_NODES; i++) {
        ring->up[i] = 1;
    }
    ring->n_nodes = n_nodes;
    ring->vnodes = vnodes;
    return ST_OK;
}

st_status_t ring_rebuild(ring_t *ring, const char *const *names, uint32_t n_nodes)
{
    ring_table_t *t;
    uint32_t named;

    if (ring->table == NULL || n_nodes > RING_MAX_NODES || n_nodes < ring_n_nodes(ring) ||
        ring_check_names(names, n_nodes, &named) != ST_OK || named == 0) {
        return ST_ERR_INVALID;
    }
    t = ring_table_build(names, n_nodes, ring->vnodes);
    if (t == NULL) {
        return ST_ERR_NOMEM;
    }
    t->retired = ring->table;
    __atomic_store_n(&ring->n_nodes, n_nodes, __ATOMIC_RELEASE);
    __atomic_store_n(&ring->table, t, __ATOMIC_RELEASE);
    return ST_OK;
}

uint32_t ring_n_nodes(const ring_t *ring)
{
    return __atomic_load_n(&ring->n_nodes, __ATOMIC_ACQUIRE);
}

void ring_destroy(ring_t *ring)
{
    ring_table_t *t = ring->table;

    while (t != NULL) {
        ring_table_t *next = t->retired;

        free(t);
        t = next;
    }
    free(ring->up);
    memset(ring, 0, sizeof(*ring));
}

void ring_set_up(ring_t *ring, uint32_t node, int up)
{
    if (node < RING_MAX_NODES && ring->up != NULL) {
        __atomic_store_n(&ring->up[node], up ? 1 : 0, __ATOMIC_RELEASE);
    }
}

int ring_is_up(const ring_t *ring, uint32_t node)
{
    return node < ring_n_nodes(ring) && __atomic_load_n(&ring->up[node], __ATOMIC_ACQUIRE);
}

uint64_t ring_segment_point(const st_hash_t *first)
{
    return XXH3_64bits(first->b, ST_HASH_BYTES);
}

/* Index of the first point of t at or after p, wrapping to 0. */
static size_t ring_search(const ring_table_t *t, uint64_t p)
{
    size_t lo = 0, hi = t->n_points;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (t->points[mid].point < p) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo == t->n_points ? 0 : lo;
}

uint32_t ring_home(const ring_t *ring, const st_hash_t *first)
{
    const ring_table_t *t = __atomic_load_n(&ring->table, __ATOMIC_ACQUIRE);

    return t->points[ring_search(t, ring_segment_point(first))].node;
}

size_t ring_place(const ring_t *ring, const st_hash_t *first, uint32_t *nodes, size_t max_nodes)
{
    const ring_table_t *t = __atomic_load_n(&ring->table, __ATOMIC_ACQUIRE);
    size_t start = ring_search(t, ring_segment_point(first));
    size_t n = 0;

    for (size_t step = 0; step < t->n_points && n < max_nodes; step++) {
        uint32_t node = t->points[(start + step) % t->n_points].node;
        size_t j;

        if (!ring_is_up(ring, node)) {
            continue;
        }
        for (j = 0; j < n && nodes[j] != node; j++) {
        }
        if (j == n) {
            nodes[n++] = node;
        }
        if (n == t->n_named) {
            break;
        }
    }
    return n;
}
