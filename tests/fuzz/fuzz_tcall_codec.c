/*
 * fuzz_tcall_codec.c - the frame codec of calls over the transport
 * (proto/tcall.c) alone, held to an independent parser of the layout in
 * docs/protocol.md "Calls over the transport".
 *
 * Inputs, requests and responses alike: random bytes of 0 to 2,100 bytes;
 * frames written by tcall_head() (any method or code, any call id, texts
 * of 0 to 1,100 bytes, bodies) and parsed back (round trip); those frames
 * with bit flips, truncations, inserts and appends (fuzz_util.c), with their
 * length field past the end, at the limit, just over it, at 2^16 and huge,
 * with reserved bytes set (a request's; a response's retry hint: 0, or 1 to
 * 60000 with code 8 only, written by tcall_set_hint()), the other direction's
 * magic, codes and methods out of range; every prefix of some of them. Each input is parsed from a
 * buffer of exactly its size (the sanitizer build sees any read past it).
 *
 * Oracle: tcall_parse() accepts exactly what the reference accepts and
 * gives the same method or code, call id, text and body (as pointers into
 * the input); a refusal has a reason that fits the buffer given for it
 * (also of 0, 1 and 7 bytes: nothing is written past it) and the call id
 * whenever the header holds one. tcall_head() writes exactly the header
 * and the (cut) text, nothing past them; tcall_path() names methods 1-4
 * and no other.
 *
 * Bounds: STRATA_FUZZ_ITERS inputs (default 200,000). The seed is printed;
 * STRATA_TEST_SEED replays it. A failure prints the input's iteration,
 * mutations and bytes.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "tcall.h"

#define FC_ITERS  200000
#define FC_HDR    24u
#define FC_MAXLEN 2100
#define FC_CANARY 0xa5

static uint64_t g_seed, g_iter;
static fz_log_t g_log;

/* What the reference reads from a frame. */
typedef struct fc_ref {
    int ok;
    int has_id;
    uint32_t v;    /* method or code */
    uint32_t hint; /* response: the retry hint */
    uint64_t id;
    size_t text_off, text_len, body_off, body_len;
} fc_ref_t;

static void __attribute__((noreturn, format(printf, 3, 4)))
fc_fail(const uint8_t *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fz_fail_one(g_seed, g_iter, &g_log, "input", buf, len, fmt, ap);
}

/* The layout of docs/protocol.md, read on its own. */
static fc_ref_t fc_reference(const uint8_t *p, size_t len, int resp)
{
    fc_ref_t r = {0};
    uint32_t tl;

    if (len < FC_HDR) {
        return r;
    }
    r.has_id = 1;
    r.id = (uint64_t)fz_get32(p + 8) | (uint64_t)fz_get32(p + 12) << 32;
    r.v = fz_get32(p + 4);
    tl = fz_get32(p + 16);
    if (fz_get32(p) != (resp ? 0x31504353u : 0x31514353u) || (!resp && fz_get32(p + 20) != 0)) {
        return r;
    }
    r.hint = resp ? fz_get32(p + 20) : 0;
    if (r.hint != 0 && (r.v != 8 || r.hint > 60000)) {
        return r; /* a hint comes with RESOURCE_EXHAUSTED only, 1 to 60000 ms */
    }
    if (tl > 1024 || tl > len - FC_HDR) {
        return r;
    }
    if (resp ? r.v > 16 : (r.v < 1 || r.v > 4)) {
        return r;
    }
    r.text_off = FC_HDR;
    r.text_len = tl;
    r.body_off = FC_HDR + tl;
    r.body_len = len - FC_HDR - tl;
    if (resp && r.v != 0 && r.body_len != 0) {
        return r; /* an error response carries no message */
    }
    r.ok = 1;
    return r;
}

/* Parses input[0..len) from an exact-size copy and checks it against the reference. */
static void fc_check(const uint8_t *input, size_t len, int resp)
{
    uint8_t *buf = malloc(len ? len : 1);
    static const size_t caps[] = {0, 1, 7, 64, TCALL_MSG_MAX};
    size_t cap = caps[g_iter % (sizeof(caps) / sizeof(caps[0]))];
    char *why = malloc(cap + 16);
    tcall_frame_t f;
    fc_ref_t r = fc_reference(input, len, resp);
    st_status_t st;

    if (buf == NULL || why == NULL) {
        fc_fail(input, len, "out of memory");
    }
    memcpy(buf, input, len);
    memset(why, FC_CANARY, cap + 16);
    st = tcall_parse(buf, len, resp, &f, why, cap);
    for (size_t i = cap; i < cap + 16; i++) {
        if ((uint8_t)why[i] != FC_CANARY) {
            fc_fail(input, len, "the reason was written past its %zu-byte buffer", cap);
        }
    }
    if ((st == ST_OK) != r.ok) {
        fc_fail(input, len, "%s: tcall_parse says %s, the reference %s",
                resp ? "response" : "request", st_strerror(st), r.ok ? "accepts" : "refuses");
    }
    if (st != ST_OK) {
        if (st != ST_ERR_INVALID) {
            fc_fail(input, len, "a refusal is %s, not ST_ERR_INVALID", st_strerror(st));
        }
        if (cap > 1 && (why[0] == '\0' || memchr(why, '\0', cap) == NULL)) {
            fc_fail(input, len, "a refusal without a reason");
        }
        if (r.has_id && f.id != r.id) {
            fc_fail(input, len, "a refusal lost the call id");
        }
        free(buf);
        free(why);
        return;
    }
    if ((resp ? f.code : f.method) != r.v || f.id != r.id || f.hint_ms != r.hint ||
        (const uint8_t *)f.text != buf + r.text_off || f.text_len != r.text_len ||
        f.body != buf + r.body_off || f.body_len != r.body_len) {
        fc_fail(input, len,
                "parsed v=%u id=%llu text=+%td/%zu body=+%td/%zu, the reference v=%u "
                "text=+%zu/%zu body=+%zu/%zu",
                resp ? f.code : f.method, (unsigned long long)f.id, (const uint8_t *)f.text - buf,
                f.text_len, f.body - buf, f.body_len, r.v, r.text_off, r.text_len, r.body_off,
                r.body_len);
    }
    free(buf);
    free(why);
}

/* A frame written by tcall_head() into an exact buffer, checked, then parsed back. */
static uint8_t *fc_written(fz_rng_t *r, int resp, size_t *len_p)
{
    static const size_t tlens[] = {0, 1, 15, 16, 17, 1023, 1024, 1025, 1100};
    size_t max = resp ? TCALL_MSG_MAX : TCALL_TOKEN_MAX;
    size_t tl =
        fz_chance(r, 50) ? tlens[fz_below(r, sizeof(tlens) / sizeof(tlens[0]))] : fz_below(r, 1101);
    size_t cut = tl < max ? tl : max, bl;
    uint32_t v;
    uint64_t id = fz_chance(r, 20) ? UINT64_MAX - fz_below(r, 3) : fz_next(r);
    char *text = fz_alloc(tl + 1);
    uint8_t *out;
    size_t n;

    if (resp) {
        v = (uint32_t)fz_below(r, 17);
        bl = v == 0 ? fz_below(r, 300) : 0;
    } else {
        v = 1 + (uint32_t)fz_below(r, 4);
        bl = fz_below(r, 300);
    }
    fz_fill(r, text, tl);
    out = fz_alloc(FC_HDR + cut + bl + 16);
    memset(out, FC_CANARY, FC_HDR + cut + bl + 16);
    n = tcall_head(out, resp, v, id, text, tl);
    if (n != FC_HDR + cut) {
        fc_fail(out, n, "tcall_head wrote %zu bytes for a %zu-byte text (want %zu)", n, tl,
                (size_t)FC_HDR + cut);
    }
    for (size_t i = n; i < n + bl + 16; i++) {
        if (out[i] != FC_CANARY) {
            fc_fail(out, n, "tcall_head wrote past the header and text");
        }
    }
    fz_fill(r, out + n, bl);
    *len_p = n + bl;
    uint32_t hint = 0;

    if (resp && v == 8 && fz_chance(r, 50)) {
        static const uint32_t hints[] = {0, 1, 2, 59999, 60000, 60001, 0xffffffffu};

        hint = hints[fz_below(r, sizeof(hints) / sizeof(hints[0]))];
        tcall_set_hint(out, hint);
        hint = hint < 1 ? 1 : hint > 60000 ? 60000 : hint; /* clamped */
        if (fz_get32(out + 20) != hint) {
            fc_fail(out, *len_p, "tcall_set_hint wrote %u, want %u", fz_get32(out + 20), hint);
        }
    }
    {
        tcall_frame_t f;
        char why[128];

        if (tcall_parse(out, *len_p, resp, &f, why, sizeof(why)) != ST_OK) {
            fc_fail(out, *len_p, "a frame tcall_head wrote does not parse: %s", why);
        }
        if ((resp ? f.code : f.method) != v || f.id != id || f.hint_ms != hint ||
            f.text_len != cut || memcmp(f.text, text, cut) != 0 || f.body_len != bl) {
            fc_fail(out, *len_p, "a written frame parses back differently");
        }
    }
    return out;
}

/* The header fields the parser checks, one set to an edge. */
static void fc_edge(fz_rng_t *r, uint8_t *p, size_t len, int resp)
{
    static const uint32_t odd[] = {0,    1,      16,      17,      1023,        1024,
                                   1025, 0xffff, 0x10000, 0x10001, 0x7fffffffu, 0xffffffffu};
    uint32_t v = odd[fz_below(r, sizeof(odd) / sizeof(odd[0]))];

    if (len < FC_HDR) {
        return;
    }
    switch (fz_below(r, 6)) {
    case 0:
        fz_put32(p, resp ? 0x31514353u : 0x31504353u);
        fz_logf(&g_log, "the other direction's magic");
        break;
    case 1: {
        uint32_t tl = (uint32_t)(len - FC_HDR) + (uint32_t)fz_below(r, 3);

        fz_put32(p + 16, fz_chance(r, 50) ? v : tl - 1);
        fz_logf(&g_log, "length %u in a %zu-byte frame", fz_get32(p + 16), len);
        break;
    }
    case 2:
        p[20 + fz_below(r, 4)] ^= (uint8_t)(1u << fz_below(r, 8));
        fz_logf(&g_log, "reserved bytes 0x%08x", fz_get32(p + 20));
        break;
    case 3:
        fz_put32(p + 4, fz_chance(r, 50) ? v : (uint32_t)fz_below(r, 20));
        fz_logf(&g_log, "%s %u", resp ? "code" : "method", fz_get32(p + 4));
        break;
    case 4:
        p[18 + fz_below(r, 2)] = (uint8_t)fz_next(r);
        fz_logf(&g_log, "length high bytes 0x%08x", fz_get32(p + 16));
        break;
    default:
        p[fz_below(r, 4)] ^= (uint8_t)(1u << fz_below(r, 8));
        fz_logf(&g_log, "magic bit flipped");
        break;
    }
}

int main(void)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", FC_ITERS), accepted = 0, prefixes = 0;
    double start = fz_now();
    fz_rng_t r;

    g_seed = fz_seed("test_fuzz_tcall_codec");
    fz_rng_init(&r, g_seed, 1);
    for (uint32_t m = 0; m < 64; m++) {
        if ((tcall_path(m) != NULL) != (m >= 1 && m <= 4)) {
            fc_fail(NULL, 0, "tcall_path(%u) is %s", m, tcall_path(m) ? "set" : "NULL");
        }
    }
    if (tcall_path(UINT32_MAX) != NULL || tcall_path(0x80000001u) != NULL) {
        fc_fail(NULL, 0, "tcall_path names a method number past 4");
    }
    for (g_iter = 0; g_iter < iters; g_iter++) {
        int resp = (int)fz_below(&r, 2);
        size_t len;
        uint8_t *in;

        fz_log_clear(&g_log);
        switch (fz_below(&r, 5)) {
        case 0:
            len = fz_below(&r, FC_MAXLEN + 1);
            in = fz_alloc(len + 1);
            fz_fill(&r, in, len);
            if (len >= 4 && fz_chance(&r, 50)) {
                fz_put32(in, fz_chance(&r, 80) == resp ? 0x31504353u : 0x31514353u);
                if (len >= FC_HDR && fz_chance(&r, 70)) {
                    fz_put32(in + 20, 0);
                    fz_put32(in + 16, (uint32_t)fz_below(&r, len - FC_HDR + 2));
                }
            }
            fz_logf(&g_log, "%zu random bytes", len);
            break;
        case 1: in = fc_written(&r, resp, &len); break;
        case 2:
            in = fc_written(&r, resp, &len);
            in = fz_mutate_bytes(&r, in, len, &len, &g_log);
            break;
        case 3:
            in = fc_written(&r, resp, &len);
            fc_edge(&r, in, len, resp);
            if (fz_chance(&r, 30)) {
                fc_edge(&r, in, len, resp);
            }
            break;
        default:
            in = fc_written(&r, resp, &len);
            if (fz_chance(&r, 5)) {
                /* Every prefix of it. */
                for (size_t k = 0; k < len; k++) {
                    fc_check(in, k, resp);
                }
                prefixes++;
            } else {
                size_t k = fz_below(&r, len + 1);

                fz_logf(&g_log, "cut %zu -> %zu", len, k);
                len = k;
            }
            break;
        }
        fc_check(in, len, resp);
        accepted += fc_reference(in, len, resp).ok;
        if (g_iter % 1024 == 1023) {
            fz_arena_reset();
        }
    }
    fz_arena_reset();
    printf("test_fuzz_tcall_codec: %llu inputs in %.1f s (%llu accepted, %llu with every "
           "prefix)\n",
           (unsigned long long)iters, fz_now() - start, (unsigned long long)accepted,
           (unsigned long long)prefixes);
    return 0;
}
