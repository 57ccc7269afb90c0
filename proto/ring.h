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
 * Thread safety: build the ring before sharing it; ring_set_up() may then
 * run concurrently with lookups (health is an atomic flag per node), and so
 * may ring_rebuild() (a new table of points is swapped in atomically; the
 * old ones are kept until ring_destroy(), so a lookup in flight never reads
 * freed memory). ring_rebuild() calls are serialised by the caller.
 */
#ifndef STRATA_PROTO_RING_H
#define STRATA_PROTO_RING_H

#include <stddef.h>
#include <stdint.h>

#include "strata/hash.h"
#include "strata/status.h"

#define RING_VNODES_DEFAULT 128
#define RING_MAX_NODES      1024

typedef struct ring_point {
    uint64_t point;
    uint32_t node;
} ring_point_t;

/* One version of the ring's points (ring.c). */
typedef struct ring_table ring_table_t;

typedef struct ring {
    ring_table_t *table; /* the points, sorted (atomic access: swapped by ring_rebuild) */
    uint32_t n_nodes;    /* node indices in use (atomic access; only grows) */
    uint32_t vnodes;
    int *up; /* per node index, RING_MAX_NODES of them: 1 healthy, 0 down (atomic access) */
} ring_t;

/*
 * Builds a ring over n_nodes nodes named by names[] (unique, for example
 * "127.0.0.1:7001"), each with vnodes points. Returns ST_OK, ST_ERR_INVALID
 * (no nodes, too many, vnodes 0, a duplicate name) or ST_ERR_NOMEM. Every
 * node starts up.
 */
st_status_t ring_init(ring_t *ring, const char *const *names, uint32_t n_nodes, uint32_t vnodes);

void ring_destroy(ring_t *ring);

/*
 * Replaces the ring's points by those of names[0..n_nodes) (node i keeps
 * index i; a NULL name is a node with no points: it has left, and nothing
 * is placed on it), while lookups run. n_nodes may grow (new nodes start
 * up) but not shrink. Returns ST_OK; ST_ERR_INVALID (no named node, too
 * many, fewer than before, a duplicate name) or ST_ERR_NOMEM (the old
 * points stay then).
 */
st_status_t ring_rebuild(ring_t *ring, const char *const *names, uint32_t n_nodes);

/* Node indices in use (named or left). */
uint32_t ring_n_nodes(const ring_t *ring);

/* Marks node up (1) or down (0). */
void ring_set_up(ring_t *ring, uint32_t node, int up);

int ring_is_up(const ring_t *ring, uint32_t node);

/* The ring position of a segment whose first block hash is first. */
uint64_t ring_segment_point(const st_hash_t *first);

/*
 * Writes up to max_nodes distinct healthy nodes for a segment, owner first,
 * then replicas clockwise. Returns how many were written (0 when every node
 * is down).
 */
size_t ring_place(const ring_t *ring, const st_hash_t *first, uint32_t *nodes, size_t max_nodes);

/* The owner alone, ignoring health (where the data would live if all are up). */
uint32_t ring_home(const ring_t *ring, const st_hash_t *first);

#endif /* STRATA_PROTO_RING_H */
