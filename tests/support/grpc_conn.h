/*
 * grpc_conn.h - a raw gRPC connection to one stratad for the integration
 * tests that speak the protocol themselves (tests/integration/test_stratad.c,
 * test_tiers.c, test_stratad_tenants.c): the channel and Hello's namespace,
 * calls with one timeout, deterministic object bytes, Put requests of
 * chained blocks built from a list of hashes, one-segment Lookups and Stats
 * counters.
 *
 * Test code: a failure is a cmocka assertion, so these run only inside a
 * cmocka test.
 */
#ifndef STRATA_TEST_GRPC_CONN_H
#define STRATA_TEST_GRPC_CONN_H

#include <stddef.h>
#include <stdint.h>

#include "srpc.h"
#include "strata.pb-c.h"
#include "strata/hash.h"

typedef struct gc_conn {
    srpc_channel_t *ch;
    uint64_t ns;    /* Hello's namespace */
    st_hash_t seed; /* and its seed, the parent of every root block */
} gc_conn_t;

/* Calls method m (an SRPC_CACHE_* index) with a 30 s deadline. */
st_status_t gc_call(gc_conn_t *c, int m, const void *req, void **resp, srpc_error_t *err);

/* Opens the channel to addr (token: NULL for none) and says Hello as
 * (tenant, model), asserting both succeed; keeps the namespace and its seed.
 * Returns Hello's answer for the caller to check; the caller frees it. */
Strata__V1__HelloResponse *gc_hello(gc_conn_t *c, const char *addr, const char *tenant,
                                    const char *model, const char *token);

/* gc_hello as ("acme", "k3"), the answer dropped. */
void gc_open(gc_conn_t *c, const char *addr, const char *token);

void gc_close(gc_conn_t *c);

/* Deterministic bytes for (hash, salt): an LCG seeded by XXH3 of h. */
void gc_fill(uint8_t *buf, size_t len, const st_hash_t *h, uint64_t salt);

/* The key of layer 0 of h's object of kind. */
Strata__V1__ObjectKey gc_key(const st_hash_t *h, Strata__V1__ObjectKind kind);

/* *o: the inline object of len bytes at data under *k, with its checksum. */
void gc_inline(Strata__V1__InlineObject *o, Strata__V1__ObjectKey *k, const uint8_t *data,
               size_t len);

/* A Put request of n chained blocks, n_layers objects of len bytes each
 * (bytes gc_fill(block, layer), checksummed), and the memory behind it. */
typedef struct gc_put {
    Strata__V1__PutRequest req;
    uint8_t *data;
    Strata__V1__InlineObject *objs, **op;
    Strata__V1__ObjectKey *keys;
    Strata__V1__BlockLink *links, **lp;
} gc_put_t;

/*
 * Builds into p the Put of blocks[0..n) in namespace ns: block i's parent is
 * blocks[i-1], block 0's is *parent0; when first_index >= 0 block i's link
 * carries block_index first_index + i (else none). Free with gc_put_free.
 */
void gc_put_build(gc_put_t *p, uint64_t ns, const st_hash_t *blocks, const st_hash_t *parent0,
                  size_t n, uint32_t n_layers, Strata__V1__ObjectKind kind, size_t len,
                  int64_t first_index);

void gc_put_free(gc_put_t *p);

/* The value of counter name in the node's Stats over ch (30 s deadline);
 * asserts the call succeeds and the counter is there. */
uint64_t gc_stat(srpc_channel_t *ch, const char *name);

/* A Lookup of blocks[0..n) as one segment from block 0, KV layers 0 and 1,
 * in namespace ns; req points into the record. */
typedef struct gc_lookup {
    Strata__V1__LookupRequest req;
    Strata__V1__Segment seg, *sp;
    uint32_t layers[2];
} gc_lookup_t;

void gc_lookup_build(gc_lookup_t *l, uint64_t ns, const st_hash_t *blocks, size_t n);

#endif
