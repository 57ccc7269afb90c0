/*
 * stats.c - per-method call counters: calls, status codes, latency histogram.
 * The metrics module reads them through srpc_server_stats().
 */
#include "server_internal.h"

void srpc_stats_record(srpc_counters_t *c, int code, uint64_t latency_us)
{
    unsigned code_idx = code >= 0 && code < SRPC_GRPC_CODES ? (unsigned)code : 2; /* UNKNOWN */

    atomic_fetch_add_explicit(&c->calls, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->by_code[code_idx], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&c->latency[srpc_latency_bucket(latency_us)], 1,
                              memory_order_relaxed);
    atomic_fetch_add_explicit(&c->latency_sum_us, latency_us, memory_order_relaxed);
}

void srpc_stats_snapshot(const srpc_counters_t *c, const char *path, srpc_method_stats_t *out)
{
    srpc_counters_t *m = (srpc_counters_t *)c;

    out->path = path;
    out->calls = atomic_load_explicit(&m->calls, memory_order_relaxed);
    for (unsigned i = 0; i < SRPC_GRPC_CODES; i++) {
        out->by_code[i] = atomic_load_explicit(&m->by_code[i], memory_order_relaxed);
    }
    for (unsigned i = 0; i < SRPC_LATENCY_BUCKETS; i++) {
        out->latency[i] = atomic_load_explicit(&m->latency[i], memory_order_relaxed);
    }
    out->latency_sum_us = atomic_load_explicit(&m->latency_sum_us, memory_order_relaxed);
    out->overloaded = atomic_load_explicit(&m->overloaded, memory_order_relaxed);
}
