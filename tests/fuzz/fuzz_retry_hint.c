/*
 * fuzz_retry_hint.c - the parser of admission control's retry hint
 * (srpc_retry_hint_parse, rpc/common.c), the value of the trailing metadata
 * strata-retry-after-ms that libstrata reads from a refused call (srpc.h).
 *
 * Inputs: hints as a daemon writes them (1 to 999999999, decimal), with
 * byte mutations (fuzz_util.c), and random bytes of 0 to 16 bytes. Each is
 * parsed from a buffer of exactly its length (the sanitizer build sees any
 * read past it).
 *
 * Oracle: a reading of the format of its own (1 to 9 ASCII digits, nothing
 * else, a value of at least 1): accepted exactly then, with that value;
 * a refusal leaves the output untouched.
 *
 * Bounds: STRATA_FUZZ_ITERS inputs (default 200,000). The seed is printed;
 * STRATA_TEST_SEED replays it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_util.h"
#include "srpc.h"

static uint64_t g_seed, g_iter;
static fz_log_t g_log;

static void __attribute__((noreturn, format(printf, 3, 4)))
fh_fail(const uint8_t *buf, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    fz_fail_one(g_seed, g_iter, &g_log, "hint", buf, len, fmt, ap);
}

/* The format read on its own: returns the value, or 0 for a refusal. */
static uint64_t fh_reference(const uint8_t *p, size_t len)
{
    uint64_t v = 0;

    if (len < 1 || len > 9 || strspn((const char *)p, "0123456789") < len) {
        return 0;
    }
    for (size_t i = 0; i < len; i++) {
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    return v;
}

/* Returns whether the input was accepted. */
static int fh_check(const uint8_t *in, size_t len)
{
    char *copy = malloc(len + 1); /* NUL after it for the reference's strspn only */
    char *exact = malloc(len ? len : 1);
    uint32_t ms = 0xdeadbeefu;
    uint64_t want;
    int got;

    if (copy == NULL || exact == NULL) {
        fh_fail(in, len, "out of memory");
    }
    memcpy(copy, in, len);
    copy[len] = '\0';
    memcpy(exact, in, len);
    want = memchr(in, '\0', len) != NULL ? 0 : fh_reference((const uint8_t *)copy, len);
    got = srpc_retry_hint_parse(exact, len, &ms);
    if (got != (want != 0)) {
        fh_fail(in, len, "parse says %d, the reference %s", got, want ? "accepts" : "refuses");
    }
    if (got && ms != want) {
        fh_fail(in, len, "value %u, the reference %llu", ms, (unsigned long long)want);
    }
    if (!got && ms != 0xdeadbeefu) {
        fh_fail(in, len, "a refusal wrote the output (%u)", ms);
    }
    free(copy);
    free(exact);
    return got;
}

int main(void)
{
    uint64_t iters = fz_env_u64("STRATA_FUZZ_ITERS", 200000);
    fz_rng_t r;
    uint64_t accepted = 0;

    g_seed = fz_seed("fuzz_retry_hint");
    fz_rng_init(&r, g_seed, 0);
    for (g_iter = 0; g_iter < iters; g_iter++) {
        char hint[16];
        uint8_t raw[16];
        const uint8_t *in;
        size_t len;

        fz_log_clear(&g_log);
        if (fz_chance(&r, 70)) {
            len = (size_t)snprintf(hint, sizeof(hint), "%llu",
                                   (unsigned long long)(1 + fz_below(&r, 999999999)));
            in = (const uint8_t *)hint;
            if (fz_chance(&r, 60)) {
                in = fz_mutate_bytes(&r, in, len, &len, &g_log);
            }
        } else {
            len = (size_t)fz_below(&r, sizeof(raw) + 1);
            fz_fill(&r, raw, len);
            fz_logf(&g_log, "random %zu bytes", len);
            in = raw;
        }
        accepted += (uint64_t)fh_check(in, len);
        fz_arena_reset();
    }
    printf("fuzz_retry_hint: %llu inputs, %llu accepted, seed %llu\n", (unsigned long long)iters,
           (unsigned long long)accepted, (unsigned long long)g_seed);
    return accepted > 0 && accepted < iters ? 0 : 1;
}
