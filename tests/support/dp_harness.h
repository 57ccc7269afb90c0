/*
 * dp_harness.h - the set-up the data-plane integration tests share
 * (tests/integration/test_dataplane*.c): daemons started and checked to
 * serve a one-sided transport, chains of block hashes, deterministic
 * object bytes, and a raw UCX connection (gRPC channel, Hello's region keys,
 * this process's own transport) that reads and writes extents behind the
 * daemon's back.
 *
 * Test code: a failure is a cmocka assertion (or a skip), so these run only
 * inside a cmocka test.
 */
#ifndef STRATA_TEST_DP_HARNESS_H
#define STRATA_TEST_DP_HARNESS_H

#include <stddef.h>
#include <stdint.h>

#include "cluster.h"
#include "srpc.h"
#include "transport.h"
#include "strata.pb-c.h"
#include "strata/strata.h"

/*
 * Starts n daemons with "args more" and checks over Hello that node 0
 * really serves a one-sided transport; when it does not (this machine
 * cannot run it: the daemon then falls back to inline) the daemons are
 * stopped and the test is skipped.
 */
void dh_start(tc_cluster_t *cl, const char *stratad, int n, const char *args, const char *more);

/* The hashes of n blocks of tokens derived from stream (malloc'd). */
st_hash_t *dh_make_chain(st_client_t *c, uint32_t stream, size_t n);

/* Deterministic bytes of object (block, salt): a cheap generator. */
void dh_fill(uint8_t *p, size_t len, uint64_t block, uint64_t salt);

/* Waits for h (it must complete) and releases it. */
void dh_run(st_handle_t *h);

/* Puts op (one object) through c, chain being one block long, waits for it
 * and asserts that it was stored. */
void dh_put_one(st_client_t *c, const st_hash_t *chain, st_put_op_t *op);

/* One whole-object get of KV block 0 of chain through c into dst (len bytes,
 * zeroed first); returns the get's status, and in *length (when not NULL)
 * the bytes it wrote. */
st_status_t dh_get_block0(st_client_t *c, const st_hash_t *chain, uint8_t *dst, size_t len,
                          size_t *length);

/* A raw UCX connection: gRPC channel, namespace, transport, endpoint, keys. */
typedef struct dh_raw {
    srpc_channel_t *ch;
    uint64_t ns;
    tp_transport_t *tp;
    tp_ep_t *ep;
    tp_rkey_t *rkey[64];
    uint64_t base[64];
    tp_mem_t *mem;
    st_hash_t seed;   /* Hello's namespace_seed */
    int committed_ro; /* Hello's committed_read_only */
    uint8_t buf[1 << 16];
} dh_raw_t;

/* Opens the channel to addr, says Hello, connects over UCX and unpacks every region's key. */
void dh_raw_open(dh_raw_t *r, const char *addr);

/* dh_raw_open over the transport tc describes. */
void dh_raw_open_with(dh_raw_t *r, const char *addr, const tp_config_t *tc);

/* Says Hello (again): connects where r has no endpoint yet, unpacks the keys
 * of regions not seen yet. */
void dh_raw_hello(dh_raw_t *r);
void dh_raw_close(dh_raw_t *r);

/* A transport callback: stores st at *(st_status_t *)user. */
void dh_cb_done(void *user, st_status_t st);

/* The daemon's answer to a Locate of KV block 0 of chain (no lease), with
 * its row sums when want_row_sums; the caller frees it. */
Strata__V1__LocateResponse *dh_raw_locate_resp(dh_raw_t *r, const st_hash_t *chain,
                                               int want_row_sums);

/* Where the daemon holds KV block 0 of chain (no lease); 0 if it is not there. */
int dh_raw_locate(dh_raw_t *r, const st_hash_t *chain, uint32_t *region, uint64_t *off);

/* Writes bytes[0..len) at (region, off), behind the daemon's back. */
void dh_raw_scribble(dh_raw_t *r, uint32_t region, uint64_t off, const uint8_t *bytes, size_t len);

#endif
