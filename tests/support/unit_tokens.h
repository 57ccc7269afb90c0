/*
 * unit_tokens.h - the engine unit tests' prompts: n token ids below vocab, a fixed function of
 * (i, salt), allocated (the caller frees them; a failed allocation fails the cmocka test).
 */
#ifndef STRATA_TESTS_UNIT_TOKENS_H
#define STRATA_TESTS_UNIT_TOKENS_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

static inline uint32_t *make_tokens(size_t n, uint32_t vocab, uint32_t salt)
{
    uint32_t *t = malloc(sizeof(uint32_t) * n);

    assert_non_null(t);
    for (size_t i = 0; i < n; i++) {
        t[i] = (uint32_t)((i * 2654435761u + salt * 40503u) >> 7) % vocab;
    }
    return t;
}

#endif
