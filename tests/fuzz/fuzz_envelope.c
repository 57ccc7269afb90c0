/*
 * fuzz_envelope.c - the address and remote-key blobs of the transport
 * (transport/transport.c, docs/transport.md): what tp_connect()
 * and tp_rkey_unpack() do with bytes that came over the control
 * plane, held to an independent reader of the documented header (magic,
 * version, backend, payload length, for keys the region's base and length,
 * and the XXH3-64 checksum of header and payload).
 *
 * A real UCX transport of this process gives its own address and the key of
 * a region it allocated; those blobs are then
 *   - mutated byte by byte (bit flips, truncations, appends, inserts, fresh
 *     random bytes, fields claiming more than follows: fuzz_util.c) and
 *     offered as they are: the stale checksum must refuse every one that
 *     differs from the original;
 *   - changed in one header field (magic, also the other blob's; version;
 *     backend; payload length; spare bytes; a key's base and length: zero,
 *     huge, wrapping past 2^64) with the checksum written anew, so that the
 *     checks behind the checksum are reached: accepted exactly when the
 *     reference accepts; an accepted key reports the bounds its header
 *     says, and gets outside them are refused before anything is posted;
 *   - offered to the other call (an address as a key, a key as an address),
 *     as random bytes, NULL and empty.
 * Every refusal is ST_ERR_INVALID (logged; the log goes to /dev/null while
 * fuzzing). At the end the original key still reads the region. A payload
 * whose checksum holds is the backend's own bytes to this layer (UCX's
 * unpack takes no length): forged payloads are the control plane's to keep
 * out (authenticated peers, TLS), and are not fed here.
 *
 * Bounds: STRATA_FUZZ_ITERS inputs (default 50,000). The seed is printed;
 * STRATA_TEST_SEED replays it.
 */
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "fuzz_util.h"
#include "log.h"
#include "transport.h"

#define FE_ITERS      50000
#define FE_ADDR_HDR   24
#define FE_RKEY_HDR   40
#define FE_ADDR_MAGIC 0x41545453u /* "STTA" */
#define FE_RKEY_MAGIC 0x4b545453u /* "STTK" */
#define FE_REGION     (64u << 10)

static uint64_t g_seed, g_iter;
static fz_log_t g_log;
static int g_log_fd = -1;

static void __attribute__((noreturn, format(printf, 3, 4)))
fe_fail(const uint8_t *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    if (g_log_fd >= 0) {
        lg_set_fd(g_log_fd);
    }
    va_start(ap, fmt);
    fz_fail_one(g_seed, g_iter, &g_log, "blob", buf, len, fmt, ap);
}

/* The checksum as docs/transport.md gives it: header less its last 8 bytes, then the payload. */
static uint64_t fe_sum(const uint8_t *b, size_t len, size_t hdr)
{
    uint8_t *tmp = fz_alloc(len);

    memcpy(tmp, b, hdr - 8);
    memcpy(tmp + hdr - 8, b + hdr, len - hdr);
    return XXH3_64bits(tmp, len - 8);
}

/* Whether the reference reader accepts b[0..len) as a blob of this magic. */
static int fe_reference(const uint8_t *b, size_t len, uint32_t magic)
{
    size_t hdr = magic == FE_RKEY_MAGIC ? FE_RKEY_HDR : FE_ADDR_HDR;

    if (b == NULL || len < hdr || fz_get32(b) != magic || b[4] != 1 || b[5] != (uint8_t)TP_UCX ||
        fz_get32(b + 8) != len - hdr || fe_sum(b, len, hdr) != fz_get64(b + hdr - 8)) {
        return 0;
    }
    if (magic == FE_RKEY_MAGIC) {
        uint64_t base = fz_get64(b + 16), rlen = fz_get64(b + 24);

        if (rlen == 0 || base + rlen < base) {
            return 0;
        }
    }
    return 1;
}

/* One header field set to an edge, the checksum written anew. */
static void fe_edit(fz_rng_t *r, uint8_t *b, size_t len, uint32_t magic)
{
    static const uint64_t big[] = {0,
                                   1,
                                   8,
                                   FE_REGION - 1,
                                   FE_REGION,
                                   FE_REGION + 1,
                                   0xffffffffull,
                                   1ull << 47,
                                   UINT64_MAX / 2,
                                   UINT64_MAX - FE_REGION,
                                   UINT64_MAX - 1,
                                   UINT64_MAX};
    size_t hdr = magic == FE_RKEY_MAGIC ? FE_RKEY_HDR : FE_ADDR_HDR;
    unsigned n = magic == FE_RKEY_MAGIC ? 8 : 6;

    switch (fz_below(r, n)) {
    case 0:
        fz_put32(b, fz_chance(r, 50) ? (magic == FE_RKEY_MAGIC ? FE_ADDR_MAGIC : FE_RKEY_MAGIC)
                                     : (uint32_t)fz_next(r));
        fz_logf(&g_log, "magic 0x%08x", fz_get32(b));
        break;
    case 1:
        b[4] = (uint8_t)(fz_chance(r, 50) ? fz_below(r, 3) : fz_next(r));
        fz_logf(&g_log, "version %u", b[4]);
        break;
    case 2:
        b[5] = (uint8_t)(fz_chance(r, 50) ? fz_below(r, 4) : fz_next(r));
        fz_logf(&g_log, "backend %u", b[5]);
        break;
    case 3:
        fz_put32(b + 8, fz_chance(r, 50) ? (uint32_t)(len - hdr) + (uint32_t)fz_below(r, 3) - 1
                                         : (uint32_t)fz_next(r));
        fz_logf(&g_log, "payload length %u of %zu", fz_get32(b + 8), len - hdr);
        break;
    case 4:
    case 5: {
        size_t at = fz_chance(r, 50) ? 6 + fz_below(r, 2) : 12 + fz_below(r, 4);

        b[at] = (uint8_t)fz_next(r);
        fz_logf(&g_log, "spare byte %zu = %u", at, b[at]);
        break;
    }
    case 6: {
        uint64_t base = fz_get64(b + 16);
        uint64_t v = fz_chance(r, 50) ? big[fz_below(r, sizeof(big) / sizeof(big[0]))]
                                      : base + fz_below(r, 2 * FE_REGION) - FE_REGION;

        fz_put64(b + 16, v);
        fz_logf(&g_log, "base 0x%llx", (unsigned long long)v);
        break;
    }
    default: {
        uint64_t v = big[fz_below(r, sizeof(big) / sizeof(big[0]))];

        fz_put64(b + 24, v);
        fz_logf(&g_log, "region length %llu", (unsigned long long)v);
        break;
    }
    }
    if (len >= hdr) {
        fz_put64(b + hdr - 8, fe_sum(b, len, hdr));
    }
}

/* Gets outside an accepted key's bounds are refused before they are posted. */
static void fe_probe(tp_ep_t *ep, tp_rkey_t *rkey, tp_mem_t *local, const uint8_t *b, size_t len)
{
    uint64_t base, hbase = fz_get64(b + 16), hlen = fz_get64(b + 24);
    size_t rlen;
    uint8_t *dst = tp_mem_addr(local);
    st_status_t st;

    tp_rkey_bounds(rkey, &base, &rlen);
    if (base != hbase || rlen != (size_t)hlen) {
        fe_fail(b, len, "key bounds 0x%llx/%zu, its header says 0x%llx/%llu",
                (unsigned long long)base, rlen, (unsigned long long)hbase,
                (unsigned long long)hlen);
    }
    if (base > 0) {
        st = tp_get(ep, dst, 1, local, base - 1, rkey, NULL, NULL);
        if (st != ST_ERR_INVALID) {
            fe_fail(b, len, "a get before the region: %s", st_strerror(st));
        }
    }
    st = tp_get(ep, dst, 64, local, base + rlen - (rlen < 32 ? rlen : 32), rkey, NULL, NULL);
    if (rlen >= 32 && st != ST_ERR_INVALID) {
        fe_fail(b, len, "a get across the region's end: %s", st_strerror(st));
    }
    if (rlen < 64 && st != ST_ERR_INVALID) {
        fe_fail(b, len, "a get longer than the region: %s", st_strerror(st));
    }
    st = tp_get_now(ep, dst, 1, local, base + rlen, rkey);
    if (st != ST_ERR_INVALID && base + rlen != 0) {
        fe_fail(b, len, "a get_now past the region's end: %s", st_strerror(st));
    }
}

/* The blob of one iteration, made from the transport's own address (addr0)
 * or key (key0); *ref is the reference reader's verdict on it. */
static uint8_t *fe_make_blob(fz_rng_t *r, int is_key, const uint8_t *addr0, size_t addr_len,
                             const uint8_t *key0, size_t key_len, size_t *len_p, int *ref_p)
{
    uint32_t magic = is_key ? FE_RKEY_MAGIC : FE_ADDR_MAGIC;
    const uint8_t *orig = is_key ? key0 : addr0;
    size_t olen = is_key ? key_len : addr_len, len;
    uint8_t *b;
    int ref;
    unsigned mode = (unsigned)fz_below(r, 10);

    if (mode < 4) { /* bytes mutated, checksum stale */
        b = fz_mutate_bytes(r, orig, olen, &len, &g_log);
        ref = len == olen && memcmp(b, orig, olen) == 0;
    } else if (mode < 8) { /* one field, checksum anew */
        b = fz_dup(orig, olen);
        len = olen;
        fe_edit(r, b, len, magic);
        if (fz_chance(r, 25)) {
            fe_edit(r, b, len, magic);
        }
        ref = fe_reference(b, len, magic);
    } else if (mode == 8) { /* the other blob */
        const uint8_t *other = is_key ? addr0 : key0;

        len = is_key ? addr_len : key_len;
        b = fz_dup(other, len);
        fz_logf(&g_log, "the %s offered as %s", is_key ? "address" : "key",
                is_key ? "a key" : "an address");
        ref = 0;
    } else { /* random bytes, sometimes behind a real magic */
        len = fz_below(r, 600);
        b = fz_alloc(len + 1);
        fz_fill(r, b, len);
        if (len >= 4 && fz_chance(r, 50)) {
            fz_put32(b, magic);
        }
        fz_logf(&g_log, "%zu random bytes", len);
        ref = fe_reference(b, len, magic);
    }
    *len_p = len;
    *ref_p = ref;
    return b;
}

/* Offers b (len bytes) as a remote key on ep, or as an address to tp, from
 * an exact-size copy (the sanitizer build sees a read past it); fails when
 * the transport and the reference (ref) disagree. */
static void fe_offer(tp_transport_t *tp, tp_ep_t *ep, tp_mem_t *local, int is_key, const uint8_t *b,
                     size_t len, int ref)
{
    uint8_t *exact = malloc(len ? len : 1);
    tp_rkey_t *rkey = NULL;
    tp_ep_t *e2 = NULL;
    st_status_t st;

    if (exact == NULL) {
        fe_fail(b, len, "out of memory");
    }
    memcpy(exact, b, len);
    st = is_key ? tp_rkey_unpack(ep, len ? exact : NULL, len, &rkey)
                : tp_connect(tp, len ? exact : NULL, len, &e2);
    if ((st == ST_OK) != ref) {
        fe_fail(b, len, "%s says %s, the reference %s",
                is_key ? "remote key: tp_rkey_unpack" : "address: tp_connect", st_strerror(st),
                ref ? "accepts" : "refuses");
    }
    if (st == ST_OK && is_key) {
        fe_probe(ep, rkey, local, b, len);
        tp_rkey_destroy(rkey);
    } else if (st == ST_OK) {
        tp_ep_close(e2);
    }
    if (st != ST_OK && st != ST_ERR_INVALID) {
        fe_fail(b, len, "a refusal is %s, not ST_ERR_INVALID", st_strerror(st));
    }
    free(exact);
}

/* The original key (key0) still reads the region. */
static void fe_check_original(tp_ep_t *ep, tp_mem_t *local, const void *key0, size_t key_len)
{
    tp_rkey_t *rkey = NULL;
    uint64_t base;
    size_t rlen;
    uint8_t *dst = tp_mem_addr(local);
    st_status_t st;

    if (tp_rkey_unpack(ep, key0, key_len, &rkey) != ST_OK) {
        fe_fail(key0, key_len, "the original key no longer unpacks");
    }
    tp_rkey_bounds(rkey, &base, &rlen);
    memset(dst, 0, 256);
    st = tp_get_now(ep, dst, 256, local, base + 1024, rkey);
    if (st == ST_ERR_UNSUPPORTED) {
        st = tp_get(ep, dst, 256, local, base + 1024, rkey, NULL, NULL);
        if (st == ST_OK) {
            st = tp_ep_flush(ep, 10000);
        }
    }
    if (st != ST_OK || dst[0] != 0x5a || dst[255] != 0x5a) {
        fe_fail(key0, key_len, "a get with the original key: %s", st_strerror(st));
    }
    tp_rkey_destroy(rkey);
}

int main(void)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FE_ITERS), accepted = 0;
    tp_config_t cfg = {.backend = TP_UCX};
    tp_transport_t *tp = NULL;
    tp_mem_t *region = NULL, *local = NULL;
    tp_ep_t *ep = NULL;
    const void *addr0, *key0;
    size_t addr_len, key_len;
    double start = fz_now();
    fz_rng_t r;
    int devnull;

    g_seed = fz_seed("test_fuzz_envelope");
    fz_rng_init(&r, g_seed, 1);
    if (tp_create(&cfg, &tp) != ST_OK) {
        printf("test_fuzz_envelope: no UCX transport here: skipped\n");
        return 77;
    }
    if (tp_mem_alloc(tp, FE_REGION, &region) != ST_OK ||
        tp_mem_alloc(tp, FE_REGION, &local) != ST_OK) {
        fe_fail(NULL, 0, "cannot allocate the regions");
    }
    memset(tp_mem_addr(region), 0x5a, FE_REGION);
    tp_address(tp, &addr0, &addr_len);
    tp_mem_rkey(region, &key0, &key_len);
    if (tp_connect(tp, addr0, addr_len, &ep) != ST_OK) {
        fe_fail(addr0, addr_len, "cannot connect to this transport's own address");
    }
    if (!fe_reference(addr0, addr_len, FE_ADDR_MAGIC) ||
        !fe_reference(key0, key_len, FE_RKEY_MAGIC)) {
        fe_fail(key0, key_len, "the reference refuses the transport's own blobs");
    }
    devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    g_log_fd = lg_set_fd(devnull);

    for (g_iter = 0; g_iter < iters; g_iter++) {
        int is_key = fz_chance(&r, 70), ref;
        size_t len;
        uint8_t *b;

        fz_log_clear(&g_log);
        b = fe_make_blob(&r, is_key, addr0, addr_len, key0, key_len, &len, &ref);
        fe_offer(tp, ep, local, is_key, b, len, ref);
        accepted += ref;
        if (g_iter % 512 == 511) {
            fz_arena_reset();
        }
    }
    lg_set_fd(g_log_fd);
    close(devnull);
    g_log_fd = -1;
    fz_arena_reset();

    fe_check_original(ep, local, key0, key_len);
    tp_ep_close(ep);
    tp_mem_deregister(tp, local);
    tp_mem_deregister(tp, region);
    tp_destroy(tp);
    printf("test_fuzz_envelope: %llu blobs in %.1f s (%llu accepted)\n", (unsigned long long)iters,
           fz_now() - start, (unsigned long long)accepted);
    return 0;
}
