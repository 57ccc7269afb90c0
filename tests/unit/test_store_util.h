/* test_store_util.h - a small store on a fake clock for the cached tests. */
#ifndef STRATA_TEST_STORE_UTIL_H
#define STRATA_TEST_STORE_UTIL_H

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

#define KiB 1024ull
#define MiB (1024ull * 1024ull)

static _Atomic uint64_t t_now = 1000; /* the fake clock; threads read it */
static void *t_region_base[8][256];
static int t_regions_added, t_regions_removed;

static uint64_t t_clock(void *ctx)
{
    (void)ctx;
    return t_now;
}

static void t_region_added(void *ctx, uint32_t ns, uint32_t region, void *base, size_t len)
{
    (void)ctx;
    (void)len;
    if (ns < 8 && region < 256) {
        t_region_base[ns][region] = base;
    }
    t_regions_added++;
}

static void t_region_removed(void *ctx, uint32_t ns, uint32_t region, void *base, size_t len)
{
    (void)ctx;
    (void)base;
    (void)len;
    if (ns < 8 && region < 256) {
        t_region_base[ns][region] = NULL;
    }
    t_regions_removed++;
}

static const uint8_t t_secret[32] = "0123456789abcdef0123456789abcdef";

static void t_config(cd_store_config_t *c, uint64_t limit)
{
    cd_store_config_defaults(c);
    c->memory_limit = limit;
    c->chunk_bytes = 2 * MiB;
    c->page_bytes = 64 * KiB;
    c->huge = CD_HUGE_OFF;
    c->limits.max_object_bytes = 2 * MiB;
    c->cluster_secret = t_secret;
    c->cluster_secret_len = sizeof(t_secret);
    c->clock_ms = t_clock;
    c->region_added = t_region_added;
    c->region_removed = t_region_removed;
}

/* Moves the fake clock on by ms and reaps s at the new time: what went. */
static inline cd_reaped_t t_reap_after(cd_store_t *s, uint64_t ms)
{
    cd_reaped_t r;

    t_now += ms;
    cd_store_reap(s, t_now, &r);
    return r;
}

/* Block hash of (chain, i): distinct for every pair. */
static inline st_hash_t t_hash(uint32_t chain, uint32_t i)
{
    st_hash_t h = {{0}};

    memcpy(h.b, &chain, 4);
    memcpy(h.b + 4, &i, 4);
    h.b[12] = 0xc3;
    return h;
}

static inline cd_key_t t_key(uint32_t chain, uint32_t i, uint32_t kind, uint32_t layer)
{
    cd_key_t k;

    memset(&k, 0, sizeof(k));
    k.hash = t_hash(chain, i);
    k.kind = kind;
    k.layer = layer;
    return k;
}

/* Fills buf with bytes that depend on (chain, i, kind, layer). */
static inline void t_fill(uint8_t *buf, size_t len, const cd_key_t *k)
{
    uint32_t x = 2166136261u;

    for (size_t j = 0; j < sizeof(*k); j++) {
        x = (x ^ ((const uint8_t *)k)[j]) * 16777619u;
    }
    for (size_t j = 0; j < len; j++) {
        x = x * 1103515245u + 12345u;
        buf[j] = (uint8_t)(x >> 16);
    }
}

#endif
