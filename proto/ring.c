/*
 * ring.c - consistent hashing with virtual nodes; see ring.h.
 */
#include "ring.h"

#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static int st_ring_point_cmp(const void *a, const void *b)
{
    const st_ring_point_t *x = a, *y = b;

    if (x->point != y->point) {
        return x->point < y->point ? -1 : 1;
    }
    return (x->node > y->node) - (x->node < y->node);
}

st_status_t st_ring_init(st_ring_t *ring, const char *const *names, uint32_t n_nodes,
                         uint32_t vnodes)
{
    size_t k = 0;

    memset(ring, 0, sizeof(*ring));
    if (n_nodes == 0 || n_nodes > ST_RING_MAX_NODES || vnodes == 0 || vnodes > 4096) {
        return ST_ERR_INVALID;
    }
    for (uint32_t i = 0; i < n_nodes; i++) {
        for (uint32_t j = 0; j < i; j++) {
            if (strcmp(names[i], names[j]) == 0) {
                return ST_ERR_INVALID;
            }
        }
    }
    ring->points = malloc(sizeof(*ring->points) * (size_t)n_nodes * vnodes);
    ring->up = malloc(sizeof(*ring->up) * n_nodes);
    if (ring->points == NULL || ring->up == NULL) {
        free(ring->points);
        free(ring->up);
        return ST_ERR_NOMEM;
    }
    for (uint32_t i = 0; i < n_nodes; i++) {
        size_t len = strlen(names[i]);
        uint8_t buf[512];

        if (len > sizeof(buf) - 4) {
            len = sizeof(buf) - 4;
        }
        memcpy(buf, names[i], len);
        for (uint32_t v = 0; v < vnodes; v++) {
            buf[len] = (uint8_t)v;
            buf[len + 1] = (uint8_t)(v >> 8);
            buf[len + 2] = (uint8_t)(v >> 16);
            buf[len + 3] = (uint8_t)(v >> 24);
            ring->points[k].point = XXH3_64bits(buf, len + 4);
            ring->points[k].node = i;
            k++;
        }
        ring->up[i] = 1;
    }
    qsort(ring->points, k, sizeof(*ring->points), st_ring_point_cmp);
    ring->n_points = k;
    ring->n_nodes = n_nodes;
    ring->vnodes = vnodes;
    return ST_OK;
}

void st_ring_destroy(st_ring_t *ring)
{
    free(ring->points);
    free(ring->up);
    memset(ring, 0, sizeof(*ring));
}

void st_ring_set_up(st_ring_t *ring, uint32_t node, int up)
{
    if (node < ring->n_nodes) {
        __atomic_store_n(&ring->up[node], up ? 1 : 0, __ATOMIC_RELEASE);
    }
}

int st_ring_is_up(const st_ring_t *ring, uint32_t node)
{
    return node < ring->n_nodes && __atomic_load_n(&ring->up[node], __ATOMIC_ACQUIRE);
}

uint64_t st_ring_segment_point(const st_hash_t *first)
{
    return XXH3_64bits(first->b, ST_HASH_BYTES);
}

/* Index of the first point at or after p, wrapping to 0. */
static size_t st_ring_search(const st_ring_t *ring, uint64_t p)
{
    size_t lo = 0, hi = ring->n_points;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;

        if (ring->points[mid].point < p) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo == ring->n_points ? 0 : lo;
}

uint32_t st_ring_home(const st_ring_t *ring, const st_hash_t *first)
{
    return ring->points[st_ring_search(ring, st_ring_segment_point(first))].node;
}

size_t st_ring_place(const st_ring_t *ring, const st_hash_t *first, uint32_t *nodes,
                     size_t max_nodes)
{
    size_t start = st_ring_search(ring, st_ring_segment_point(first));
    size_t n = 0;

    for (size_t step = 0; step < ring->n_points && n < max_nodes; step++) {
        uint32_t node = ring->points[(start + step) % ring->n_points].node;
        size_t j;

        if (!st_ring_is_up(ring, node)) {
            continue;
        }
        for (j = 0; j < n && nodes[j] != node; j++) {
        }
        if (j == n) {
            nodes[n++] = node;
        }
        if (n == ring->n_nodes) {
            break;
        }
    }
    return n;
}
