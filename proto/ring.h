/*
 * ring.h - the consistent-hash ring that places segments on nodes
 * (ARCHITECTURE §6).
 *
 * Each node contributes vnodes points: XXH3_64(node name || u32 index LE).
 * A segment is placed by XXH3_64 of its first block hash (16 bytes): its
 * owner is the first healthy node at or after that point, clockwise, and its
 * replicas are the next distinct healthy nodes. A node marked down is routed
 * around and used again as soon as it is marked up.
 *
 * Thread safety: build the ring before sharing it; st_ring_set_up() may then
 * run concurrently with lookups (health is an atomic flag per node).
 */
#ifndef STRATA_PROTO_RING_H
#define STRATA_PROTO_RING_H

#include <stddef.h>
#include <stdint.h>

#include "strata/hash.h"
#include "strata/status.h"

#define ST_RING_VNODES_DEFAULT 128
#define ST_RING_MAX_NODES      1024

typedef struct st_ring_point {
    uint64_t point;
    uint32_t node;
} st_ring_point_t;

typedef struct st_ring {
    st_ring_point_t *points; /* sorted by point */
    size_t n_points;
    uint32_t n_nodes;
    uint32_t vnodes;
    int *up; /* per node: 1 healthy, 0 down (atomic access) */
} st_ring_t;

/*
 * Builds a ring over n_nodes nodes named by names[] (unique, for example
 * "127.0.0.1:7001"), each with vnodes points. Returns ST_OK, ST_ERR_INVALID
 * (no nodes, too many, vnodes 0, a duplicate name) or ST_ERR_NOMEM. Every
 * node starts up.
 */
st_status_t st_ring_init(st_ring_t *ring, const char *const *names, uint32_t n_nodes,
                         uint32_t vnodes);

void st_ring_destroy(st_ring_t *ring);

/* Marks node up (1) or down (0). */
void st_ring_set_up(st_ring_t *ring, uint32_t node, int up);

int st_ring_is_up(const st_ring_t *ring, uint32_t node);

/* The ring position of a segment whose first block hash is first. */
uint64_t st_ring_segment_point(const st_hash_t *first);

/*
 * Writes up to max_nodes distinct healthy nodes for a segment, owner first,
 * then replicas clockwise. Returns how many were written (0 when every node
 * is down).
 */
size_t st_ring_place(const st_ring_t *ring, const st_hash_t *first, uint32_t *nodes,
                     size_t max_nodes);

/* The owner alone, ignoring health (where the data would live if all are up). */
uint32_t st_ring_home(const st_ring_t *ring, const st_hash_t *first);

#endif /* STRATA_PROTO_RING_H */
