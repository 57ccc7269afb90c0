/*
 * bench_transport_loop.h - the bare transport loop, reusable: a target
 * process that registers a region and serves it, and a loop that streams
 * one-sided gets from it, many in flight, next to a memcpy loop of the same
 * shape as the hardware reference. The "transport limit" that the daemon's
 * read path is compared against: a daemon benchmark connects to a real
 * daemon instead of bench_tp_spawn_target() and calls the same
 * bench_tp_stream_gets().
 */
#ifndef STRATA_BENCH_TRANSPORT_LOOP_H
#define STRATA_BENCH_TRANSPORT_LOOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "transport.h"

/* A peer as the control plane would describe it. */
typedef struct bench_tp_peer {
    pid_t pid; /* the target process (0 when not spawned here) */
    int sock;  /* closing it stops the target */
    uint8_t *addr;
    size_t addr_len;
    uint8_t *rkey;
    size_t rkey_len;
    uint64_t base;
    size_t len;
} bench_tp_peer_t;

/*
 * Forks a target process (call before creating any transport in this one):
 * it creates a transport from cfg, allocates region_bytes of registered
 * memory (tp_mem_alloc(), as the daemon's arenas), touches it, and
 * progresses until bench_tp_stop_target(): busy, never sleeping, or like a
 * daemon's progress thread, sleeping on the event fd (at most 1 ms) when
 * there is one. Fills *peer. Returns ST_OK or the status of what failed
 * (the target's failure shows as ST_ERR_IO).
 */
st_status_t bench_tp_spawn_target(const tp_config_t *cfg, size_t region_bytes, bool busy,
                                  bench_tp_peer_t *peer);

/* Stops the target and frees peer's buffers. */
void bench_tp_stop_target(bench_tp_peer_t *peer);

/* The initiator's side of the loop. */
typedef struct bench_tp_loop {
    tp_transport_t *tp;
    tp_ep_t *ep;
    tp_rkey_t *rkey;
    tp_mem_t *local_mem;
    uint8_t *local; /* at least inflight x op_bytes, inside local_mem */
    size_t local_len;
    uint64_t remote_base;
    size_t remote_len;
} bench_tp_loop_t;

/*
 * Streams gets of op_bytes each, walking the remote region in order (and
 * wrapping), with up to inflight in flight, until total_bytes have landed.
 * Writes the elapsed seconds to *seconds_p. Returns ST_OK or the first
 * failure.
 */
st_status_t bench_tp_stream_gets(const bench_tp_loop_t *loop, size_t op_bytes, unsigned inflight,
                                 size_t total_bytes, double *seconds_p);

/*
 * Like bench_tp_stream_gets(), but each get reads a random whole op_bytes
 * slot of the region (row-granular reads: row r at r x op_bytes), from a
 * sequence fixed by seed.
 */
st_status_t bench_tp_random_gets(const bench_tp_loop_t *loop, size_t op_bytes, unsigned inflight,
                                 size_t total_bytes, uint64_t seed, double *seconds_p);

/* memcpy of the same random slots as bench_tp_random_gets() with seed. */
double bench_memcpy_random(uint8_t *dst, const uint8_t *src, size_t src_len, size_t op_bytes,
                           unsigned inflight, size_t total_bytes, uint64_t seed);

/*
 * The reference of the same shape: memcpy of op_bytes from src (walking it
 * in order, wrapping) into inflight slots of dst, total_bytes in all.
 * Returns the elapsed seconds.
 */
double bench_memcpy_stream(uint8_t *dst, const uint8_t *src, size_t src_len, size_t op_bytes,
                           unsigned inflight, size_t total_bytes);

#endif
